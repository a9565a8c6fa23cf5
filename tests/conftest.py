"""Fixtures shared by the test files.

* ``child_env``: the environment for a child Python process: this checkout first on
  PYTHONPATH, none of the test session's recorder settings unless a recording is asked for.
* ``recorder_env``: the same with the recorder attached: ``recorder_env(record_dir,
  library=None, **variables)`` (``library``: another build of libnvtx_recorder.so).
* ``venv_python``: the project's virtualenv interpreter (this one when there is none).
* ``recorder_build``: libnvtx_recorder.so built afresh from cc_ops/recorder, once a session.
* ``c_sample``: ``c_sample(name, *flags) -> Path``: tests/native/NAME.c (or the C file
  ``name`` when it is a Path) compiled with gcc against NVTX's headers, once a session per
  (name, flags).
* ``nvtx_tf_ok(*args)`` (a function): runs ``nvtx-tf ARGS`` in a child, asserting it succeeds.
* ``needs_time_namespaces()`` (a function): skips a test where ``unshare --time`` fails.
* ``tsan_build``: (recorder, nvtx_sample) both built with -fsanitize=thread (skips without
  a working ThreadSanitizer runtime).
* ``capture_steps``: call a step once outside the capture (tracing), then record N calls.
* ``functions_eagerly``: run a test with ``tf.function`` traced and again run eagerly
  (as tensorflow/addons' ``maybe_run_functions_eagerly``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NATIVE = ROOT / "tests" / "native"
VENV_PYTHON = str(ROOT / ".venv" / "bin" / "python") if (ROOT / ".venv" / "bin" / "python").exists() else sys.executable
TSAN_OPTIONS = f"halt_on_error=0 exitcode=66 suppressions={NATIVE / 'tsan.supp'}"


# A preamble for a test's Python process (issue 49): ``signal_elsewhere(signal.SIGTERM)`` sends the
# signal to another thread, which runs the signal's arrival (the C handler) before the caller
# goes on: a signal landing on another thread at a point the code reaches, not a timing.
SIGNAL_ELSEWHERE = """
import signal, threading
def signal_elsewhere(signo):
    arrived = threading.Event()
    def send():
        signal.pthread_kill(threading.get_ident(), signo)  # (delivered before it returns)
        arrived.set()
    threading.Thread(target=send, daemon=True).start()
    arrived.wait()
"""


def _session_settings() -> tuple[str, ...]:
    """What a child must not inherit from the test session: the recorder's settings (the
    pytest plugin's, or a session run under record --capture-range ...) and record's
    start-up switches. The recorder's clock (and chunk size) pass through on purpose: the
    suite run with NVTX_TF_RECORDER_CLOCK=monotonic tests the clock_gettime fallback in
    every child too."""
    from nvtx_plugins_tf import _native_libs as libs

    return (
        libs.INJECTION_ENV,
        libs.RECORD_DIR_ENV,
        libs.CAPTURE_RANGE_ENV,
        libs.CAPTURE_RANGE_END_ENV,
        libs.DOMAIN_INCLUDE_ENV,
        libs.DOMAIN_EXCLUDE_ENV,
        libs.KERAS_LAYERS_ENV,
        libs.TF_OP_RANGES_ENV,
    )


def _child_env(recording=None, **extra) -> dict:
    from nvtx_plugins_tf import recorder

    env = dict(os.environ)
    for name in _session_settings():
        env.pop(name, None)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    if recording is not None:
        env.update(recorder.environment(recording))
    env.update({k: str(v) for k, v in extra.items()})
    return env


def _time_namespaces() -> str | None:
    """None when ``unshare --time`` works here, else why not."""
    if shutil.which("unshare") is None:
        return "no unshare command"
    try:
        proc = subprocess.run(
            ["unshare", "--time", "--fork", "--monotonic=1", "true"], capture_output=True, text=True, timeout=30
        )
    except OSError as exc:
        return f"unshare: {exc}"
    if proc.returncode != 0:
        return f"unshare --time fails (root and Linux >= 5.6 needed): {proc.stderr.strip()}"
    return None


def needs_time_namespaces() -> None:
    """Skips the test (fails it on CI, which runs as root on a recent kernel) when Linux
    time namespaces (``unshare --time``) cannot be made here."""
    reason = _time_namespaces()
    if reason is not None:
        if os.environ.get("CI") == "true":  # CI runs as root on a recent kernel: this must work there
            pytest.fail(reason)
        pytest.skip(reason)


def nvtx_tf_ok(*args) -> subprocess.CompletedProcess:
    """``python -m nvtx_plugins_tf ARGS`` in a child (``_child_env()``), which must succeed
    (its output in the assertion's message otherwise)."""
    proc = subprocess.run(
        [sys.executable, "-m", "nvtx_plugins_tf", *map(str, args)],
        env=_child_env(), capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def _recorder_env(record_dir, library=None, **extra) -> dict:
    from nvtx_plugins_tf import recorder

    env = _child_env(record_dir, **extra)
    if library is not None:
        env[recorder.INJECTION_ENV] = str(library)
    return env


@pytest.fixture(scope="session")
def child_env():
    """``child_env(recording=None, **variables) -> dict`` (see the module docstring)."""
    return _child_env


@pytest.fixture(scope="session")
def recorder_env():
    """``recorder_env(record_dir, library=None, **variables) -> dict`` (see the module docstring)."""
    return _recorder_env


@pytest.fixture(scope="session")
def venv_python() -> str:
    return VENV_PYTHON


def _build_module():
    from nvtx_plugins_tf import _native_libs

    return _native_libs.build_module()


@pytest.fixture(scope="session")
def recorder_build(tmp_path_factory) -> Path:
    """A fresh build of libnvtx_recorder.so (into a temporary folder): the sources as they are,
    not the library the package ships."""
    return _build_module().build_recorder(tmp_path_factory.mktemp("recorder_build"))


@pytest.fixture(scope="session")
def c_sample(tmp_path_factory):
    """``c_sample(name, *flags) -> Path`` (see the module docstring). ``-shared`` makes a library."""
    built: dict[tuple, Path] = {}

    def build(name: str | Path, *flags: str) -> Path:
        source = name if isinstance(name, Path) else NATIVE / f"{name}.c"
        key = (str(source), flags)
        if key not in built:
            folder = tmp_path_factory.mktemp(source.stem)
            out = folder / (f"lib{source.stem}.so" if "-shared" in flags else source.stem)
            include = _build_module().nvtx_include_dir()
            cmd = ["gcc", "-O2", "-Wall", "-Werror", *flags, f"-I{include}", str(source)]
            proc = subprocess.run([*cmd, "-o", str(out), "-ldl", "-pthread"], capture_output=True, text=True)
            assert proc.returncode == 0, proc.stderr
            built[key] = out
        return built[key]

    return build


def _tsan_available(folder: Path) -> bool:
    probe = folder / "probe.c"
    probe.write_text("int main(void){return 0;}\n")
    proc = subprocess.run(["gcc", "-fsanitize=thread", str(probe), "-o", str(folder / "probe")], capture_output=True)
    return proc.returncode == 0 and subprocess.run([str(folder / "probe")], capture_output=True).returncode == 0


@pytest.fixture(scope="session")
def tsan_build(tmp_path_factory, c_sample) -> tuple[Path, Path]:
    """(libnvtx_recorder_tsan.so, nvtx_sample), both with -fsanitize=thread."""
    tmp = tmp_path_factory.mktemp("tsan")
    if not _tsan_available(tmp):
        pytest.skip("this compiler has no working ThreadSanitizer runtime")
    build = _build_module()
    lib = tmp / "libnvtx_recorder_tsan.so"
    sources = [str(s) for s in sorted((build.sources_root() / "recorder").glob("*.cc"))]
    flags = ["-std=c++17", "-O1", "-g", "-fPIC", "-shared", "-pthread", "-fsanitize=thread", "-fvisibility=hidden"]
    includes = [f"-I{build.nvtx_include_dir()}", f"-I{build.sources_root()}"]
    subprocess.run(["g++", *flags, *includes, *sources, "-o", str(lib), "-ldl"], check=True)
    return lib, c_sample("nvtx_sample", "-O1", "-g", "-fsanitize=thread")


def _capture_steps(step, *args, steps: int = 1, **kwargs):
    from nvtx_plugins_tf.testing import capture

    step(*args, **kwargs)  # traced outside the capture
    with capture() as rec:
        for _ in range(steps):
            step(*args, **kwargs)
    return rec


@pytest.fixture
def capture_steps():
    """``capture_steps(step, *args, steps=1, **kwargs) -> Capture`` (see the module docstring)."""
    return _capture_steps


@pytest.fixture(params=[False, True], ids=["traced", "eager"])
def functions_eagerly(request):
    """Runs the test twice: ``tf.function`` traced, then run eagerly."""
    import tensorflow as tf

    tf.config.run_functions_eagerly(request.param)
    try:
        yield request.param
    finally:
        tf.config.run_functions_eagerly(False)
