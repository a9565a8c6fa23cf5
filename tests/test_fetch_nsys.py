"""build_tools/fetch_nsys.py without the network: which Debian archive it takes (the one the
machine's own apt configuration names, or $NVTX_TF_DEBIAN_ARCHIVE), that no archive host is
written in it, and the releases it knows (issue 35). The fetch itself and the fetched nsys
are tested in tests/test_nsys_oracle.py (test_fetch_is_pinned_and_idempotent)."""

from __future__ import annotations

import re

import pytest
from nsys_oracle import REPO, fetch_nsys

SECURITY = """Types: deb
URIs: http://mirror.example/debian-security
Suites: bookworm-security
Components: main
"""
MAIN = """# a comment
Types: deb deb-src
URIs: http://mirror.example/debian/
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
"""


@pytest.fixture
def etc(tmp_path, monkeypatch):
    (tmp_path / "sources.list.d").mkdir()
    monkeypatch.delenv(fetch_nsys.ENV_ARCHIVE, raising=False)
    return tmp_path


def test_the_archive_is_the_first_deb822_source_of_a_release_suite(etc):
    (etc / "sources.list.d" / "debian.sources").write_text(SECURITY + "\n" + MAIN)
    (etc / "sources.list").write_text("deb http://other.example/debian trixie main\n")
    assert fetch_nsys.apt_archive(etc) == ("http://mirror.example/debian", "bookworm")


def test_without_deb822_sources_the_one_line_sources_list_is_read(etc):
    (etc / "sources.list").write_text(
        "# deb http://commented.example/debian sid main\n"
        "deb-src http://src.example/debian bookworm main\n"
        "deb http://sec.example/debian-security bookworm-security main\n"
        "deb [arch=amd64 signed-by=/k.gpg] http://list.example/debian trixie main non-free\n"
    )
    assert fetch_nsys.apt_archive(etc) == ("http://list.example/debian", "trixie")


def test_disabled_and_source_only_stanzas_are_skipped(etc):
    (etc / "sources.list.d" / "a.sources").write_text(
        "Types: deb-src\nURIs: http://src.example/debian\nSuites: bookworm\n\n"
        "Enabled: no\nTypes: deb\nURIs: http://off.example/debian\nSuites: bookworm\n"
    )
    assert fetch_nsys.apt_archive(etc) is None


def test_the_environment_variable_overrides_apt(etc, monkeypatch):
    monkeypatch.setattr(fetch_nsys, "APT_SOURCES", etc)
    (etc / "sources.list.d" / "debian.sources").write_text(MAIN)
    assert fetch_nsys.debian_archive() == ("http://mirror.example/debian", "bookworm")
    monkeypatch.setenv(fetch_nsys.ENV_ARCHIVE, "http://proxy.example:3142/debian/")
    assert fetch_nsys.debian_archive() == ("http://proxy.example:3142/debian", fetch_nsys.FALLBACK_SUITE)


def test_no_archive_anywhere_is_one_clear_error(etc, monkeypatch):
    monkeypatch.setattr(fetch_nsys, "APT_SOURCES", etc)
    with pytest.raises(fetch_nsys.FetchError, match=fetch_nsys.ENV_ARCHIVE):
        fetch_nsys.debian_archive()


def test_source_lines_take_libssh_from_the_machine_suite(etc, monkeypatch):
    monkeypatch.setattr(fetch_nsys, "APT_SOURCES", etc)
    (etc / "sources.list.d" / "debian.sources").write_text(MAIN.replace("bookworm bookworm-updates", "trixie"))
    lines = fetch_nsys.RELEASES["2024.2.3"].source_lines()
    assert [line.split()[-3:] for line in lines] == [
        ["http://mirror.example/debian", "experimental", "non-free"],
        ["http://mirror.example/debian", "trixie", "main"],
    ]


def test_no_archive_host_is_written_in_the_fetcher_or_the_docs():
    for path in (REPO / "build_tools" / "fetch_nsys.py", REPO / "docs" / "nsys.md", REPO / "Makefile"):
        text = path.read_text()
        assert not re.search(r"\b(https?|ftp)://", text), path
        assert "debian.org" not in text, path


def test_2024_2_is_the_judge_and_the_older_releases_remain():
    assert fetch_nsys.DEFAULT == fetch_nsys.CURRENT == "2024.2.3"
    assert {fetch_nsys.PREVIOUS, fetch_nsys.LEGACY} == {"2023.4.4", "2022.4.2"} <= set(fetch_nsys.RELEASES)
    current = fetch_nsys.RELEASES["2024.2.3"]
    assert {d.name for d in current.packages} == {
        "nsight-systems",
        "nsight-systems-target",
        "libarrow500",
        "libparquet500",
        "libssh-4",
    }
    assert current.recipe_venv and not fetch_nsys.RELEASES["2023.4.4"].recipe_venv
    assert any(r.startswith("numpy") and "<2" in r for r in fetch_nsys.RECIPE_REQUIREMENTS)
