"""nvtx_plugins_tf.testing.capture() with the `nvtx` package and the native recorder."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading

import pytest

# Attach the recorder to this process before its first NVTX call (what the pytest11
# entry point does once the package is installed), and take the plugin's fixture.
import nvtx_plugins_tf.testing.pytest_plugin  # noqa: F401,E402
from nvtx_plugins_tf.testing import RecorderNotAttached, capture, recorder_library  # noqa: E402
from nvtx_plugins_tf.testing.pytest_plugin import nvtx_capture  # noqa: F401,E402

nvtx = pytest.importorskip("nvtx")


@pytest.fixture
def attached():
    try:
        lib = recorder_library()
    except RecorderNotAttached as exc:
        pytest.skip(str(exc))
    nvtx.mark("attach probe")  # first NVTX call of this client, if not done yet
    if lib.nvtx_recorder_attached() == 0:
        pytest.skip("NVTX was initialized in this process before the recorder was attached")
    return lib


def test_capture_in_process(attached):
    nvtx.mark("before")
    with capture() as cap:
        with nvtx.annotate("Dense 1", color="blue", domain="tf", category="layers", payload=3):
            nvtx.push_range("inner", payload=1.5)
            nvtx.pop_range()
        rid = nvtx.start_range("async", domain="tf")
        nvtx.mark("checkpoint", payload=7)
        nvtx.end_range(rid)
        still_open = nvtx.start_range("left open")
        t = threading.Thread(target=lambda: nvtx.mark("from thread"))
        t.start()
        t.join()
    nvtx.mark("after")
    nvtx.end_range(still_open)
    assert sorted(r.message for r in cap.ranges) == ["Dense 1", "async", "inner"]
    dense = cap.find(message="Dense 1", domain="tf")[0]
    assert dense.kind == "push-pop" and dense.payload == 3 and dense.category_name == "layers"
    assert dense.color & 0xFFFFFF == 0x0000FF and dense.duration_ns > 0
    inner = cap.find(message="inner")[0]
    assert inner.payload == 1.5 and dense.start_ns <= inner.start_ns and inner.end_ns <= dense.end_ns
    assert cap.find(message="async")[0].kind == "start-end"
    assert [r.message for r in cap.open_ranges] == ["left open"]
    assert sorted(r.message for r in cap.marks) == ["checkpoint", "from thread"]
    assert cap.count(message="checkpoint") == 1 and cap.count(domain="tf") == 2
    assert cap.count(message="before") == 0 and cap.count(message="after") == 0
    main_tid = dense.tid
    assert cap.find(message="from thread")[0].tid != main_tid
    assert cap.find(message="checkpoint")[0].payload == 7


def test_consecutive_captures_are_separate(attached):
    with capture() as first:
        nvtx.mark("one")
    with capture() as second:
        nvtx.mark("two")
        with nvtx.annotate("range two"):
            pass
    assert [r.message for r in first.events] == ["one"]
    assert sorted(r.message for r in second.events) == ["range two", "two"]


def test_fixture_stops_on_first_access(attached, nvtx_capture):  # noqa: F811 (the plugin's fixture)
    with nvtx.annotate("in test", domain="fixture"):
        pass
    assert nvtx_capture.count(message="in test", domain="fixture") == 1
    nvtx.mark("after access")  # capture already stopped
    assert nvtx_capture.count(message="after access") == 0


def test_capture_in_fresh_process(child_env):
    """The same in an interpreter whose first NVTX call comes after the plugin import."""
    code = textwrap.dedent("""
        import nvtx_plugins_tf.testing.pytest_plugin
        import nvtx
        from nvtx_plugins_tf.testing import capture
        with capture() as cap:
            for i in range(3):
                with nvtx.annotate(f"step {i}", domain="d"):
                    nvtx.mark("m")
        print(sorted(r.message for r in cap.ranges), cap.count(message="m"), len(cap.open_ranges))
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=child_env(), timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "['step 0', 'step 1', 'step 2'] 3 0"


def test_not_attached_raises_runtime_error(child_env):
    code = textwrap.dedent("""
        import nvtx
        from nvtx_plugins_tf.testing import capture
        nvtx.mark("x")
        try:
            with capture():
                pass
        except RuntimeError as exc:
            print("RuntimeError", "NVTX_INJECTION64_PATH" in str(exc))
    """)
    env = child_env(NVTX_TF_NO_AUTO_RECORD="1")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert proc.stdout.strip() == "RuntimeError True", proc.stderr


def test_pytest_plugin_records_session_and_subprocesses(tmp_path, child_env):
    (tmp_path / "test_inner.py").write_text(
        textwrap.dedent("""
        import os, subprocess, sys
        import nvtx

        def test_fixture(nvtx_capture):
            with nvtx.annotate("inner test range"):
                pass
            assert nvtx_capture.count(message="inner test range") == 1

        def test_env_for_subprocesses():
            assert os.environ["NVTX_INJECTION64_PATH"].endswith("libnvtx_recorder.so")
            rec = os.environ["NVTX_TF_RECORD_DIR"]
            subprocess.run([sys.executable, "-c", "import nvtx; nvtx.mark('child mark')"], check=True)
            from nvtx_plugins_tf.recorder import load
            assert any(r.message == "child mark" for r in load(rec).marks)
    """)
    )
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path / "test_inner.py")],
        capture_output=True,
        text=True,
        env=child_env(),
        cwd=tmp_path,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "2 passed" in proc.stdout


def test_injection_path_without_a_record_dir_is_refused_not_silent(child_env):
    """Without NVTX_TF_RECORD_DIR the recorder declines NVTX's initialization: capture()
    says so (it used to hold nothing, silently)."""
    from nvtx_plugins_tf import recorder

    code = (
        "import nvtx\n"
        "from nvtx_plugins_tf.testing import RecorderNotAttached, capture\n"
        "nvtx.mark('first call')\n"
        "try:\n"
        "    with capture():\n"
        "        nvtx.mark('inside')\n"
        "except RecorderNotAttached as exc:\n"
        "    print('REFUSED', exc)\n"
    )
    env = child_env(**{recorder.INJECTION_ENV: str(recorder.library_path())})
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert "REFUSED" in proc.stdout and recorder.RECORD_DIR_ENV in proc.stdout, proc.stdout + proc.stderr
