"""The guide's ``pip install .`` (docs/install.md), for real: a wheel built from this checkout, installed
into a fresh folder and used from outside the checkout (make installs editable, which
skips the wheel's build path, setup.py's ``BuildPyWithSources``).

The wheel is built once per session (module-scoped fixtures), the way ``pip install .``
builds it: in pip's isolated build environment, which has no TensorFlow, so the wheel holds
the recorder, the reader and the host library, and the op library is built on first use
(here into a temporary ``XDG_CACHE_HOME``, so the user's cache is neither used nor
touched). The build works on a copy of the working tree: the checkout's own ``build/`` and
``_native`` folders are shared with the other tests and stay untouched.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest
from conftest import _child_env

from nvtx_plugins_tf import _native_libs

ROOT = Path(__file__).resolve().parents[1]
BUILT_HERE = ("recorder", "reader", "host")  # the targets a wheel built without TensorFlow holds
NO_COMPILER = "no C++ compiler: g++ was not found on PATH"


def _pip(*args: str, cwd: Path, path: str | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    if path is not None:
        env["PATH"] = path
    return subprocess.run(
        [sys.executable, "-m", "pip", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=900
    )


def copy_checkout(copy: Path) -> Path:
    """A copy of the working tree at ``copy`` without anything built (no .so, no build/, no .venv)."""
    junk = shutil.ignore_patterns(
        ".git", ".venv", "build", "dist", "out", "*.egg-info", "__pycache__", ".*_cache", ".hypothesis"
    )

    def ignore(folder: str, names: list[str]) -> set[str]:
        if Path(folder) == _native_libs.NATIVE_DIR:  # the libraries built in this checkout
            return {name for name in names if name != ".gitkeep"}
        return junk(folder, names)

    shutil.copytree(ROOT, copy, ignore=ignore, symlinks=True)
    return copy


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> Path:
    """A copy of the working tree without anything built (no .so, no build/, no .venv)."""
    return copy_checkout(tmp_path_factory.mktemp("install") / "nvtx_plugins_tf_src")


@pytest.fixture(scope="module")
def wheel(source) -> Path:
    out = source.parent / "wheels"
    proc = _pip("wheel", "--no-deps", "-q", "-w", str(out), ".", cwd=source)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (found,) = out.glob("nvtx_plugins_tf-*.whl")
    return found


@pytest.fixture(scope="module")
def installed(wheel) -> dict:
    """The wheel installed into a fresh folder: ``site``, ``env`` and ``cwd`` (outside both copies)."""
    top = wheel.parent.parent
    site = top / "site"
    proc = _pip("install", "--no-deps", "-q", "--target", str(site), str(wheel), cwd=top)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (top / "elsewhere").mkdir()
    env = _child_env(PYTHONPATH=site, XDG_CACHE_HOME=top / "cache", TF_CPP_MIN_LOG_LEVEL=3)
    env.pop("NVTX_TF_NO_AUTO_BUILD", None)
    return {"site": site, "env": env, "cwd": top / "elsewhere"}


def _run(args: list, installed: dict, cwd: Path | None = None) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        [sys.executable, *map(str, args)],
        cwd=cwd or installed["cwd"],
        env=installed["env"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


def _doctor(installed: dict, cwd: Path | None = None) -> dict:
    lines = _run(["-m", "nvtx_plugins_tf", "doctor"], installed, cwd).stdout.splitlines()
    return dict(line.split(": ", 1) for line in lines if ": " in line)


def test_wheel_holds_the_native_libraries_and_the_build_sources(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    for target in BUILT_HERE:
        assert f"nvtx_plugins_tf/_native/{_native_libs.LIBRARY_NAMES[target]}" in names, sorted(names)
    assert "nvtx_plugins_tf/_build/build_native.py" in names  # BuildPyWithSources: rebuilds from a wheel
    assert any(n.startswith("nvtx_plugins_tf/_build/cc_ops/tf_ops/") and n.endswith(".cc") for n in names)


def test_doctor_reports_the_installed_copy_and_its_libraries(installed):
    package = installed["site"] / "nvtx_plugins_tf"
    report = _doctor(installed)
    assert report.get("nvtx_plugins_tf", "").endswith(f"imported from {package}"), report
    for target in BUILT_HERE:
        assert report[f"{target} library"] == str(package / "_native" / _native_libs.LIBRARY_NAMES[target])
    op_library = Path(report["op library"])  # built on first use, into the (temporary) user cache
    assert op_library.is_file() and op_library.is_relative_to(installed["env"]["XDG_CACHE_HOME"]), report


def test_installed_copy_records_a_tf_function_range(installed):
    script = installed["cwd"] / "step.py"
    script.write_text(
        textwrap.dedent(
            """
            import tensorflow as tf
            import nvtx_plugins_tf as nvtx_tf

            @tf.function
            def step(x):
                x, ctx = nvtx_tf.ops.start(x, message="installed step", domain_name="install")
                return nvtx_tf.ops.end(x * 2.0, ctx)

            print("imported from", nvtx_tf.__file__, step(tf.ones([2])).numpy().tolist())
            """
        )
    )
    out = installed["cwd"] / "rec"
    proc = _run(["-m", "nvtx_plugins_tf", "record", "-o", out, "--", sys.executable, script], installed)
    assert f"imported from {installed['site']}" in proc.stdout and "[2.0, 2.0]" in proc.stdout, proc.stdout
    read = textwrap.dedent(
        """
        import json, sys
        from nvtx_plugins_tf.recorder import load
        ranges = load(sys.argv[1]).ranges
        print(json.dumps([[r.domain, r.end_ns > r.start_ns] for r in ranges if r.message == "installed step"]))
        """
    )
    found = _run(["-c", read, out.with_suffix(".nvtxrec")], installed).stdout  # read by the installed reader
    assert json.loads(found.splitlines()[-1]) == [["install", True]], found
    assert "installed step" in out.with_suffix(".json").read_text()  # and the exports


def test_doctor_in_an_unbuilt_checkout_names_it_and_says_not_built(installed, source):
    """The issue's case: run inside a checkout copy without built libraries while another
    copy is installed. ``python -m`` imports the checkout's copy (the current folder comes
    first on sys.path); doctor must say so and print only paths that exist."""
    report = _doctor(installed, cwd=source)
    assert report.get("nvtx_plugins_tf", "").endswith(f"imported from {source / 'nvtx_plugins_tf'}"), report
    for target in BUILT_HERE:
        assert report[f"{target} library"] == f"not built (run: {_native_libs.BUILD_COMMAND})", report
    for key, value in report.items():
        if key.endswith("library") and not value.startswith("not built"):
            assert Path(value).is_file(), (key, value)


def test_pip_install_without_a_compiler_says_install_g_plus_plus(source, tmp_path):
    """setup.py stops before building, with one message and no traceback (pip's own
    "subprocess-exited-with-error" frame around it is pip's)."""
    no_compiler = tmp_path / "bin"  # pip runs the build with this interpreter: PATH needs no tools
    no_compiler.mkdir()
    proc = _pip("wheel", "--no-deps", "-w", str(tmp_path / "wheels"), ".", cwd=source, path=str(no_compiler))
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0, output
    assert "Traceback" not in output and "Errno 2" not in output, output
    assert output.count(NO_COMPILER) == 1 and "apt-get install g++" in output, output
    assert "then run: pip install .\n" in output, output  # not "python -m nvtx_plugins_tf build": nothing installed


@pytest.mark.parametrize(
    "load, names, code",
    [
        ("from nvtx_plugins_tf import _native_libs; _native_libs.native_library('reader')", "libnvtx_reader.so", 1),
        ("import nvtx_plugins_tf.ops", "the op library", 0),  # a warning at import; the ops fail when used
    ],
    ids=["reader", "op library"],
)
def test_library_built_on_first_use_without_a_compiler_names_one_way_out(source, tmp_path, load, names, code):
    """An unbuilt copy whose first use has to build a library, on a machine without g++: the
    error says what is missing and one command to run then (before, the loader added its own
    `run: ...` after the compiler message's, two commands in one line)."""
    no_tools = tmp_path / "bin"
    no_tools.mkdir()
    env = _child_env(PATH=no_tools, XDG_CACHE_HOME=tmp_path / "cache", TF_CPP_MIN_LOG_LEVEL=3)
    env.pop("NVTX_TF_NO_AUTO_BUILD", None)
    proc = subprocess.run(
        [sys.executable, "-c", load], cwd=source, env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == code, proc.stderr[-3000:]
    (line,) = [x for x in proc.stderr.splitlines() if NO_COMPILER in x]
    assert names in line and line.count("run: ") == 1, line
    assert line.endswith(f"then run: {_native_libs.BUILD_COMMAND}"), line
