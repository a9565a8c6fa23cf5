"""The user guide's structure (issue 22): mkdocs.yml's nav and docs/*.md are the same pages,
every relative link of the README and of the guide resolves (file and anchor, as both GitHub
and MkDocs name headings), and the CLI page names every command and flag the real parsers
have. (Its code blocks run in tests/test_readme.py; `make docs` builds it with --strict.)"""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PAGES = [ROOT / "README.md", ROOT / "CHANGELOG.md", *sorted(DOCS.glob("*.md"))]


def _nav_pages() -> list[str]:
    """The .md files mkdocs.yml's nav names (its YAML read as text: `Title: page.md` lines)."""
    text = (ROOT / "mkdocs.yml").read_text()
    nav = text[text.index("\nnav:") :]
    return re.findall(r":\s*([\w/.-]+\.md)\s*$", nav, re.M)


def test_nav_and_docs_folder_hold_the_same_pages():
    nav = _nav_pages()
    assert len(nav) == len(set(nav)), "a page twice in the nav"
    on_disk = sorted(p.name for p in DOCS.glob("*.md"))
    assert sorted(nav) == on_disk, {"not in the nav": set(on_disk) - set(nav), "missing": set(nav) - set(on_disk)}


def test_the_home_page_table_links_every_page_of_the_nav():
    """docs/index.md's table of the guide names every page the nav has (a page added to the
    nav but not to the home page's table is found only by a reader who looks at the side)."""
    index = (DOCS / "index.md").read_text()
    linked = set(re.findall(r"^\|[^|]*\]\(([\w/.-]+\.md)\)", index, re.M))
    linked |= set(re.findall(r"\]\(([\w/.-]+\.md)\)", "".join(re.findall(r"^\|[^|]*\|", index, re.M))))
    assert set(_nav_pages()) - {"index.md"} <= linked, set(_nav_pages()) - {"index.md"} - linked


def test_mkdocs_builds_from_docs_with_the_material_theme_and_mkdocstrings():
    text = (ROOT / "mkdocs.yml").read_text()
    assert re.search(r"^docs_dir: docs$", text, re.M) and re.search(r"^\s+name: material$", text, re.M)
    assert "mkdocstrings:" in text
    reference = (DOCS / "reference.md").read_text()
    for module in ("nvtx_plugins_tf", ".ops", ".keras", ".hooks", ".testing", ".recorder"):
        name = module if module == "nvtx_plugins_tf" else f"nvtx_plugins_tf{module}"
        assert re.search(rf"^::: {re.escape(name)}$", reference, re.M), name


# Links ----------------------------------------------------------------------------------------

_LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
_FENCE = re.compile(r"```.*?```", re.S)


def _headings(text: str) -> list[str]:
    return [m.group(1) for m in re.finditer(r"^#{1,6} (.+?)\s*$", _FENCE.sub("", text), re.M)]


def _plain(heading: str) -> str:
    heading = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text
    return heading.replace("`", "")


def _mkdocs_slug(heading: str) -> str:
    """Python-Markdown's toc slugify (MkDocs)."""
    value = unicodedata.normalize("NFKD", _plain(heading)).encode("ascii", "ignore").decode()
    value = re.sub(r"[^\w\s-]", "", value).strip().lower()
    return re.sub(r"[-\s]+", "-", value)


def _github_slug(heading: str) -> str:
    """GitHub's heading anchors: lower case, punctuation dropped, each space a hyphen."""
    value = re.sub(r"[^\w\- ]", "", _plain(heading).strip().lower())
    return value.replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    """Anchors that work on GitHub AND in the MkDocs site."""
    headings = _headings(path.read_text())
    return {_mkdocs_slug(h) for h in headings} & {_github_slug(h) for h in headings}


def _links(page: Path):
    for match in _LINK.finditer(_FENCE.sub("", page.read_text())):
        target = match.group(1)
        if not re.match(r"[a-z]+:", target):  # not http:, https:, mailto:
            yield target


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_relative_link_resolves(page):
    broken = []
    for target in _links(page):
        file, _, anchor = target.partition("#")
        path = (page.parent / file).resolve() if file else page
        if not path.exists():
            broken.append(f"{target}: no file {path}")
        elif ROOT not in path.parents and path != ROOT:
            broken.append(f"{target}: outside the repository")
        elif anchor and path.suffix == ".md" and anchor not in _anchors(path):
            broken.append(f"{target}: no heading of {path.name} gives #{anchor} on GitHub and in MkDocs")
    assert broken == []


def test_the_link_check_finds_a_broken_link_and_anchor(tmp_path):
    """The checker itself: a missing file, a missing anchor and a GitHub-only anchor fail."""
    (tmp_path / "a.md").write_text("# A\n\n## Run `record --png`\n\n## Exit codes\n")
    assert _anchors(tmp_path / "a.md") == {"a", "exit-codes"}  # '--' differs: record---png vs record-png
    page = tmp_path / "b.md"
    page.write_text("[x](a.md#exit-codes) [y](nope.md) `[z](ignored.md)`\n```\n[w](fenced.md)\n```\n")
    assert list(_links(page)) == ["a.md#exit-codes", "nope.md", "ignored.md"]


# The CLI page names every command and flag ------------------------------------------------------


def test_cli_page_names_every_command_and_flag_of_the_parsers():
    from nvtx_plugins_tf.cli import build_parser

    text = (DOCS / "cli.md").read_text()
    sections = dict(re.findall(r"^## (\w+)\n(.*?)(?=^## |\Z)", text, re.M | re.S))
    parser = build_parser()
    subparsers = next(a for a in parser._actions if a.dest == "subcommand").choices
    missing = []
    for command, sub in subparsers.items():
        if command not in sections:
            missing.append(f"no '## {command}' section")
            continue
        for action in sub._actions:
            for flag in action.option_strings:
                if flag not in ("-h", "--help") and f"`{flag}" not in sections[command]:
                    missing.append(f"{command} {flag}")
    top = {f for a in parser._actions for f in a.option_strings} - {"-h", "--help"}
    missing += [f"nvtx-tf {f}" for f in sorted(top) if f"nvtx-tf {f}" not in text]
    assert missing == []


def test_readme_stays_a_front_page():
    """About 150 lines: the two commands, three quick starts, the benchmark headline, the guide."""
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 200
    head = readme[: readme.index("## Quick start 1")]
    assert "make demo" in head and "make test" in head
    assert readme.count("## Quick start") == 3


def test_docstrings_read_as_markdown_with_doctests_fenced_and_roles_as_code():
    """build_tools/mkdocs_docstrings.py: what `make docs` does to each docstring."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("mkdocs_docstrings", ROOT / "build_tools" / "mkdocs_docstrings.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    text = "See :class:`Capture` and :func:`~x.load`:\n\n>>> f()\n[('a', 1)]\n\nafter\n>>> g()"
    assert module.markdown(text) == (
        "See `Capture` and `x.load`:\n\n```pycon\n>>> f()\n[('a', 1)]\n```\n\nafter\n```pycon\n>>> g()\n```"
    )


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_no_escaped_pipe(page):
    """`\\|` in a table's code span: GitHub shows `|`, MkDocs `\\|`; write it another way."""
    assert "\\|" not in page.read_text()


# The CLI page's tables against --help (issue 45, row 5: record --export's row left out
# arrowdir, which --help names and record writes) ------------------------------------------------


def _flag_rows(command: str) -> dict[str, str]:
    """The flag table of cli.md's ``## command`` section: first cell -> the row."""
    text = (DOCS / "cli.md").read_text()
    section = re.search(rf"^## {command}\n(.*?)(?=^## |\Z)", text, re.M | re.S).group(1)
    return {m.group(1): m.group(0) for m in re.finditer(r"^\| (`[^|]*?) \|.*$", section, re.M)}


@pytest.mark.parametrize("command, flag", [("record", "--export"), ("export", "--type")])
def test_cli_page_names_every_export_type_that_help_names(command, flag):
    from nvtx_plugins_tf._export_types import TYPES
    from nvtx_plugins_tf.cli import build_parser

    subparsers = next(a for a in build_parser()._actions if a.dest == "subcommand").choices
    action = subparsers[command]._option_string_actions[flag]
    in_help = {name for name in TYPES if re.search(rf"\b{name}\b(?!_)", action.help)}
    assert in_help == set(TYPES), action.help  # --help names every type the command takes
    row = next(r for first, r in _flag_rows(command).items() if f"`{flag} " in first or first.startswith(f"`{flag}"))
    documented = dict(re.findall(r"`(\w+)` \(`(PREFIX[\w./]*)`", row))
    expected = {t.name: f"PREFIX{t.suffix}" + ("/" if t.suffix.startswith("_") else "") for t in TYPES.values()}
    assert documented == expected, row
    default = re.search(r"default:? (\w+(?:,\w+)*)", action.help).group(1)
    assert f"default `{default}`" in row, (default, row)


def test_the_type_check_reads_the_types_of_a_row():
    row = "| `--export TYPES` | (default `json,sqlite`): `sqlite` (`PREFIX.sqlite`), `json` (`PREFIX.json`) |"
    assert dict(re.findall(r"`(\w+)` \(`(PREFIX[\w./]*)`", row)) == {"sqlite": "PREFIX.sqlite", "json": "PREFIX.json"}


# Each page: a table of contents, the extras it names --------------------------------------------


@pytest.mark.parametrize("page", sorted(DOCS.glob("*.md")), ids=lambda p: p.name)
def test_a_long_page_has_headings(page):
    """A page of more than 60 lines has a section (the site's table of contents); a guarantee
    is a section of guarantees.md, not a bullet (issue 45, row 11: its table was empty)."""
    text = page.read_text()
    if len(text.splitlines()) > 60:
        assert re.search(r"^##+ ", _FENCE.sub("", text), re.M), f"{page.name}: no section"
    if page.name == "guarantees.md":
        assert not re.search(r"^\* \*\*", text, re.M), "a guarantee as a bullet: give it a '## ' heading"


def test_layout_and_install_name_every_extra():
    """docs/layout.md and docs/install.md list the extras pyproject.toml defines, all of them."""
    text = (ROOT / "pyproject.toml").read_text()
    block = text[text.index("[project.optional-dependencies]") :]
    block = block[: block.index("\n[", 1)]
    extras = set(re.findall(r"^([\w-]+) = \[", block, re.M))
    assert len(extras) >= 8, extras
    for page in ("layout.md", "install.md"):
        named = set(re.findall(r"`([\w-]+)`", (DOCS / page).read_text()))
        assert extras <= named, (page, extras - named)


def test_the_built_site_works_opened_from_disk(tmp_path):
    """`use_directory_urls: false` (issue 45, row 6): the site opened as files
    (file://.../site/index.html) links page.html, not page/ (a folder: the browser shows a
    directory listing). Every relative link of every built page is a file."""
    pytest.importorskip("mkdocs", reason="the 'docs' extra")
    import subprocess
    import sys

    site = tmp_path / "site"
    env = {**__import__("os").environ, "NO_MKDOCS_2_WARNING": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(site)],
        cwd=ROOT, capture_output=True, text=True, env=env, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    pages = sorted(p for p in site.glob("*.html") if p.name != "404.html")  # (404.html: served only)
    assert {p.stem for p in pages} == {p.stem for p in DOCS.glob("*.md")}
    broken = []
    for page in pages:
        for href in re.findall(r'href="([^"#?]+)', page.read_text()):
            if re.match(r"[a-z]+:", href):
                continue
            target = (page.parent / href).resolve()
            if not target.is_file():
                broken.append(f"{page.name}: {href}")
    assert broken == []
