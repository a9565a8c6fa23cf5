"""The stateful-identity floor op (``floor_op.cc``), built against the installed TensorFlow,
and a call timer: shared by the op benchmarks."""

from __future__ import annotations

import statistics
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


def slope_ns(short, long_, arg, reps: int, ops: int) -> float:
    """ns per op between two chains ``ops`` ops apart: the median call time of ``long_``
    minus that of ``short``, calls alternating, ``reps`` each. Medians, not means: on a
    shared machine one preempted call would otherwise move the whole round (ratio quartiles
    over rounds in bench_ops: 1.1-1.5 with means, 1.2-1.3 with medians, same code)."""
    longs, shorts = [], []
    for _ in range(reps):
        longs.append(call_time(long_, arg, 1))
        shorts.append(call_time(short, arg, 1))
    return (statistics.median(longs) - statistics.median(shorts)) / ops * 1e9


def call_time(fn, arg, reps: int) -> float:
    t0 = time.perf_counter()
    for _ in range(reps):
        fn(arg)
    return (time.perf_counter() - t0) / reps
