"""Every native library is verified before it is mapped (issue 20, "Also"; issue 21.4 and 21.8).

The recorder, reader and host libraries carry a stamp (``libX.json``: target, size, sha256)
written by the build, as the op library always did; ``_native_libs.library_problem`` checks
it before any load. A damaged or foreign copy is passed over and rebuilt into the per-user
cache, or, when nothing can be built, refused with one line: ``record`` then exits 8 before
it launches the program (before: a truncated recorder killed the program with SIGBUS,
exit 135, when NVTX loaded it). ``doctor`` says the same, and checks the tool named by
NVTX_INJECTION64_PATH instead of trusting the variable.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from nvtx_plugins_tf import _native_libs

ROOT = Path(__file__).resolve().parents[1]
TARGETS = ("recorder", "reader", "host")


def _damage(library: Path, how: str) -> None:
    data = bytearray(library.read_bytes())
    if how == "truncated":
        library.write_bytes(bytes(data[: len(data) * 6 // 10]))
    elif how == "zeroed":
        library.write_bytes(bytes(len(data)))
    elif how == "bit flipped":
        data[len(data) // 2] ^= 0x10
        library.write_bytes(bytes(data))
    elif how == "foreign":
        other = "libnvtx_reader.so" if library.name != "libnvtx_reader.so" else "libnvtx_host.so"
        shutil.copy2(_native_libs.NATIVE_DIR / other, library)
    else:
        raise ValueError(how)


def _copy(library: Path, folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy2(library, folder / library.name)
    shutil.copy2(library.with_suffix(".json"), folder / library.with_suffix(".json").name)
    return folder / library.name


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("how", ["truncated", "zeroed", "bit flipped", "foreign"])
def test_damaged_library_is_refused_with_its_reason(tmp_path, target, how):
    good = Path(_native_libs.native_library(target))
    copy = _copy(good, tmp_path / "lib")
    assert _native_libs.library_problem(copy, {"target": target}) is None
    _damage(copy, how)
    why = _native_libs.library_problem(copy, {"target": target})
    expected = {"truncated": "truncated", "zeroed": "sha256", "bit flipped": "sha256", "foreign": "truncated"}
    assert why is not None and expected[how] in why, why


def test_foreign_library_with_its_own_stamp_is_refused(tmp_path):
    reader = _copy(Path(_native_libs.native_library("reader")), tmp_path / "a")
    as_recorder = tmp_path / "b" / "libnvtx_recorder.so"
    as_recorder.parent.mkdir()
    shutil.copy2(reader, as_recorder)
    shutil.copy2(reader.with_suffix(".json"), as_recorder.with_suffix(".json"))
    why = _native_libs.library_problem(as_recorder, {"target": "recorder"})
    assert why == "its stamp names 'reader', not 'recorder'"


def _package_copy(tmp_path: Path) -> Path:
    """A copy of the package (no sources to rebuild from unless given), on PYTHONPATH."""
    site = tmp_path / "site"
    shutil.copytree(
        ROOT / "nvtx_plugins_tf",
        site / "nvtx_plugins_tf",
        ignore=shutil.ignore_patterns("__pycache__", ".built", "*.tmp*", ".write_probe*"),
    )
    return site


def _env(child_env, site: Path, tmp_path: Path, **extra) -> dict:
    env = child_env(**extra)
    env["PYTHONPATH"] = str(site)
    env["XDG_CACHE_HOME"] = str(tmp_path / "cache")
    env["TF_CPP_MIN_LOG_LEVEL"] = "3"
    return env


def _record_marker(env: dict, tmp_path: Path) -> subprocess.CompletedProcess:
    marker = tmp_path / "ran"
    program = f"open({str(marker)!r}, 'w').close()"
    return subprocess.run(
        [sys.executable, "-m", "nvtx_plugins_tf", "record", "-o", str(tmp_path / "out"), "--", sys.executable, "-c",
         program],
        env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path,
    )  # fmt: skip


def test_record_refuses_a_truncated_recorder_it_cannot_rebuild(tmp_path, child_env):
    """No build script in the copy (an install without sources): one line, exit 8, and the
    program never ran. Before: the program was killed by SIGBUS (exit 135)."""
    site = _package_copy(tmp_path)
    _damage(site / "nvtx_plugins_tf" / "_native" / "libnvtx_recorder.so", "truncated")
    env = _env(child_env, site, tmp_path)
    proc = _record_marker(env, tmp_path)
    assert proc.returncode == 8, (proc.returncode, proc.stderr[-3000:])
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("nvtx-tf: error: "), proc.stderr
    assert "libnvtx_recorder.so cannot be used (truncated or damaged" in lines[0], lines[0]
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "ran").exists()


def test_record_rebuilds_a_damaged_recorder_when_it_can(tmp_path, child_env):
    """With the build script and sources at hand (a checkout, or an install that ships them),
    a damaged recorder is passed over and rebuilt into the cache; the program runs under it."""
    site = _package_copy(tmp_path)
    build = site / "nvtx_plugins_tf" / "_build"
    build.mkdir()
    (build / "__init__.py").write_text("")
    shutil.copy2(ROOT / "build_tools" / "build_native.py", build / "build_native.py")
    (build / "cc_ops").symlink_to(ROOT / "cc_ops")
    _damage(site / "nvtx_plugins_tf" / "_native" / "libnvtx_recorder.so", "bit flipped")
    env = _env(child_env, site, tmp_path)
    proc = _record_marker(env, tmp_path)
    assert (tmp_path / "ran").exists(), proc.stderr[-3000:]
    rebuilt = tmp_path / "cache" / "nvtx_plugins_tf" / "native" / "libnvtx_recorder.so"
    assert _native_libs.library_problem(rebuilt, {"target": "recorder"}) is None


def test_a_cache_copy_built_from_other_sources_is_not_used(tmp_path, child_env):
    """A per-user cache copy left by an older version verifies (size, sha256) but was built
    from other sources: with the package's copy damaged, it is passed over and rebuilt, not
    loaded. Before: the stale recorder was used silently (recordings without the chunk seal
    of issue 21.4)."""
    site = _package_copy(tmp_path)
    build = site / "nvtx_plugins_tf" / "_build"
    build.mkdir()
    (build / "__init__.py").write_text("")
    shutil.copy2(ROOT / "build_tools" / "build_native.py", build / "build_native.py")
    (build / "cc_ops").symlink_to(ROOT / "cc_ops")
    cached = tmp_path / "cache" / "nvtx_plugins_tf" / "native" / "libnvtx_recorder.so"
    cached.parent.mkdir(parents=True)
    shutil.copy2(ROOT / "nvtx_plugins_tf" / "_native" / "libnvtx_recorder.so", cached)
    stamp = json.loads((ROOT / "nvtx_plugins_tf" / "_native" / "libnvtx_recorder.json").read_text())
    stamp["sources"] = "0" * 64  # an older version's sources
    cached.with_suffix(".json").write_text(json.dumps(stamp))
    why = _native_libs.library_problem(cached, {"target": "recorder", **_native_libs.source_identity("recorder")})
    assert why == "built from other sources than this package's (an older version?)"
    _damage(site / "nvtx_plugins_tf" / "_native" / "libnvtx_recorder.so", "bit flipped")
    proc = _record_marker(_env(child_env, site, tmp_path), tmp_path)
    assert (tmp_path / "ran").exists(), proc.stderr[-3000:]
    rebuilt = json.loads(cached.with_suffix(".json").read_text())
    assert rebuilt["sources"] == _native_libs.source_identity("recorder")["sources"]  # rebuilt, not used


def _doctor_tool_line(child_env, **extra) -> str:
    env = child_env(**extra)
    proc = subprocess.run(
        [sys.executable, "-m", "nvtx_plugins_tf", "doctor"], env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    (line,) = [x for x in proc.stdout.splitlines() if x.startswith("nvtx tool attached:")]
    return line


def test_doctor_checks_the_tool_it_names(tmp_path, child_env):
    """Before: 'nvtx tool attached: yes' for any value of NVTX_INJECTION64_PATH."""
    truncated = _copy(Path(_native_libs.native_library("recorder")), tmp_path / "t")
    _damage(truncated, "truncated")
    bare = tmp_path / "bare" / "libtool.so"  # a damaged NVTX tool that is not ours: loaded in a child
    bare.parent.mkdir()
    bare.write_bytes((_native_libs.NATIVE_DIR / "libnvtx_recorder.so").read_bytes()[:5000])
    libc = "/lib/x86_64-linux-gnu/libc.so.6"
    cases = {
        str(tmp_path / "missing.so"): "NO: NVTX_INJECTION64_PATH=",
        str(truncated): "cannot be used (truncated or damaged",
        str(bare): "NO: ",
        str(_native_libs.NATIVE_DIR / "libnvtx_recorder.so"): "yes: ",
    }
    if os.path.exists(libc):
        cases[libc] = "does not export InitializeInjectionNvtx2"
    for path, expected in cases.items():
        line = _doctor_tool_line(child_env, NVTX_INJECTION64_PATH=path)
        assert expected in line, (path, line)
        assert ("yes" in line.split(":", 1)[1][:5]) == (expected == "yes: "), line


def test_doctor_refuses_a_damaged_library(tmp_path, child_env):
    site = _package_copy(tmp_path)
    _damage(site / "nvtx_plugins_tf" / "_native" / "libnvtx_reader.so", "zeroed")
    env = _env(child_env, site, tmp_path)
    proc = subprocess.run(
        [sys.executable, "-m", "nvtx_plugins_tf", "doctor"],
        env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path,
    )  # fmt: skip
    (line,) = [x for x in proc.stdout.splitlines() if x.startswith("reader library refused:")]
    assert "libnvtx_reader.so (damaged: its sha256 differs" in line, line
    (line,) = [x for x in proc.stdout.splitlines() if x.startswith("reader library:")]
    assert line == "reader library: not built (run: python -m nvtx_plugins_tf build)", line
    assert not [x for x in proc.stdout.splitlines() if x.startswith("recorder library refused:")]


def test_a_build_says_what_it_builds_and_where_its_log_is(tmp_path, capfd):
    """Issue 21.10: the first-use build was silent for up to a minute, and a failure did not say
    where the compiler's output was."""
    build = _native_libs.build_module()
    good = tmp_path / "ok.cc"
    good.write_text('extern "C" int f(void) { return 1; }\n')
    build._compile_and_link([good], tmp_path / "out" / "libok.so", ["-fPIC"], [])
    err = capfd.readouterr().err
    assert "nvtx_plugins_tf: building libok.so from 1 source(s)" in err and "nvtx_plugins_tf: built libok.so in" in err
    assert not (tmp_path / "out" / "libok.so.build.log").exists()  # no log left by a good build
    bad = tmp_path / "bad.cc"
    bad.write_text("int broken( {\n")
    with pytest.raises(build.BuildError) as info:
        build._compile_and_link([bad], tmp_path / "out" / "libbad.so", ["-fPIC"], [])
    first = str(info.value).splitlines()[0]
    log = tmp_path / "out" / "libbad.so.build.log"
    assert first == f"{build.COMPILER} failed (the compiler's output: {log})", first
    assert "bad.cc" in log.read_text() and "error" in log.read_text()
