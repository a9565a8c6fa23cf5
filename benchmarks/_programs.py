"""What the recorder benchmarks share: building their C programs against NVTX's headers,
starting ranks that say when they are up, and the quartiles they report."""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "build_tools"))

import build_native  # noqa: E402


def build_program(source: str, output: Path, *flags: str) -> Path:
    """``benchmarks/SOURCE`` compiled (-O2, NVTX's headers, libdl and pthreads) into ``output``."""
    subprocess.run(
        ["gcc", "-O2", f"-I{build_native.nvtx_include_dir()}", *flags, str(HERE / source), "-o", str(output),
         "-ldl", "-pthread"],
        check=True,
    )  # fmt: skip
    return output


def start_ranks(commands: list[list], ready: Path) -> list[subprocess.Popen]:
    """Each command started (its stdout dropped), then waited for until each rank has made its
    file in ``ready`` (RuntimeError if one ends before)."""
    procs = [subprocess.Popen(command, stdout=subprocess.DEVNULL) for command in commands]
    while len(os.listdir(ready)) < len(commands):
        if any(p.poll() is not None for p in procs):
            raise RuntimeError(f"a rank ended before it started: {[p.returncode for p in procs]}")
        time.sleep(0.05)
    return procs


def quartiles(values: list[float]) -> tuple[float, float, float]:
    """(first quartile, median, third quartile); one value is all three."""
    if len(values) < 2:
        return values[0], values[0], values[0]
    q1, q2, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return q1, q2, q3
