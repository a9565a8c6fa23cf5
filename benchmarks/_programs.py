"""What the recorder benchmarks share: building their C programs against NVTX's headers,
and the quartiles they report."""

from __future__ import annotations

import statistics
import subprocess
import sys
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


def quartiles(values: list[float]) -> tuple[float, float, float]:
    """(first quartile, median, third quartile); one value is all three."""
    if len(values) < 2:
        return values[0], values[0], values[0]
    q1, q2, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return q1, q2, q3
