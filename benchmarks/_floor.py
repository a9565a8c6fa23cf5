"""The stateful-identity floor op (``floor_op.cc``), built against the installed TensorFlow,
and a call timer: shared by the op benchmarks."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from nvtx_plugins_tf import _native_libs

HERE = Path(__file__).resolve().parent


def build_floor() -> Path:
    build = _native_libs.build_module()
    out = Path(tempfile.mkdtemp(prefix="nvtx_floor_")) / "libfloor.so"
    info = build.tf_build_info()
    build._run(
        [
            "g++",
            "-shared",
            "-std=c++17",
            "-O2",
            "-fPIC",
            *info["compile_flags"],
            "-w",
            str(HERE / "floor_op.cc"),
            "-o",
            str(out),
            *info["link_flags"],
        ]
    )
    return out


def call_time(fn, arg, reps: int) -> float:
    t0 = time.perf_counter()
    for _ in range(reps):
        fn(arg)
    return (time.perf_counter() - t0) / reps
