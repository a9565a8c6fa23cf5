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

import subprocess

import pytest
from conftest import TSAN_OPTIONS


@pytest.mark.parametrize("args", [["stress", "4", "20000"], ["basic"], ["strings"]])
def test_recorder_is_race_free_under_tsan(tsan_build, recorder_env, tmp_path, args):
    lib, exe = tsan_build  # conftest.py: both built with -fsanitize=thread
    env = recorder_env(tmp_path / "rec", library=lib, TSAN_OPTIONS=TSAN_OPTIONS)
    proc = subprocess.run([str(exe), *args], env=env, capture_output=True, text=True, timeout=300)
    assert "ThreadSanitizer" not in proc.stderr, proc.stderr[-4000:]
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert list((tmp_path / "rec").glob("*.nvtxseg"))
