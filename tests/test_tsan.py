"""The recorder under ThreadSanitizer: 4 threads pushing/popping concurrently, domains,
registered and long strings, with no data race reported (NVTX's own documented benign
init race suppressed in tests/native/tsan.supp).

The recorder and the sample program are compiled with -fsanitize=thread here. The
TensorFlow op library is not: TensorFlow's own wheel is not built with TSan, so its
thread pool would be invisible to the sanitizer; the ops' shared state (the domain and
registered-string cache, nvtx_handles.cc) is one mutex-guarded map, exercised
concurrently through the recorder by tests/test_scale.py.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from nvtx_plugins_tf import _native_libs

REPO = Path(__file__).resolve().parents[1]


def _tsan_available(tmp_path: Path) -> bool:
    probe = tmp_path / "probe.c"
    probe.write_text("int main(void){return 0;}\n")
    proc = subprocess.run(["gcc", "-fsanitize=thread", str(probe), "-o", str(tmp_path / "probe")], capture_output=True)
    return proc.returncode == 0 and subprocess.run([str(tmp_path / "probe")], capture_output=True).returncode == 0


@pytest.fixture(scope="module")
def tsan_build(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("tsan")
    if not _tsan_available(tmp):
        pytest.skip("this compiler has no working ThreadSanitizer runtime")
    build = _native_libs.build_module()
    include = build.nvtx_include_dir()
    lib = tmp / "libnvtx_recorder_tsan.so"
    sources = [str(s) for s in sorted((build.sources_root() / "recorder").glob("*.cc"))]
    subprocess.run(
        [
            "g++",
            "-std=c++17",
            "-O1",
            "-g",
            "-fPIC",
            "-shared",
            "-pthread",
            "-fsanitize=thread",
            "-fvisibility=hidden",
            f"-I{include}",
            f"-I{build.sources_root()}",
            *sources,
            "-o",
            str(lib),
            "-ldl",
        ],
        check=True,
    )
    exe = tmp / "nvtx_sample_tsan"
    subprocess.run(
        [
            "gcc",
            "-O1",
            "-g",
            "-pthread",
            "-fsanitize=thread",
            f"-I{include}",
            str(REPO / "tests" / "native" / "nvtx_sample.c"),
            "-o",
            str(exe),
            "-ldl",
        ],
        check=True,
    )
    return lib, exe


@pytest.mark.parametrize("args", [["stress", "4", "20000"], ["basic"], ["strings"]])
def test_recorder_is_race_free_under_tsan(tsan_build, tmp_path, args):
    lib, exe = tsan_build
    env = dict(
        os.environ,
        NVTX_INJECTION64_PATH=str(lib),
        NVTX_TF_RECORD_DIR=str(tmp_path / "rec"),
        TSAN_OPTIONS=f"halt_on_error=0 exitcode=66 suppressions={REPO / 'tests' / 'native' / 'tsan.supp'}",
    )
    proc = subprocess.run([str(exe), *args], env=env, capture_output=True, text=True, timeout=300)
    assert "ThreadSanitizer" not in proc.stderr, proc.stderr[-4000:]
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert list((tmp_path / "rec").glob("*.nvtxseg"))
