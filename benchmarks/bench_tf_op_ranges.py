"""Cost of TensorFlow's own per-op NVTX ranges (``nvtx_tf.tf_op_ranges``, ``record --tf-ops``).

A chain of stateful identity ops (``floor_op.cc``, which Grappler cannot prune) runs in a
``tf.function`` with TensorFlow's per-op ranges off and on, in interleaved rounds; the
per-op cost is the slope (median call time of a chain of 550 ops minus that of a chain of
50, per op: ``_floor.slope_ns``), so the call overhead cancels. Measured twice: with no
NVTX tool attached (TensorFlow still builds each op's range name) and under our recorder
(a child process with the recorder attached, which writes every range to disk). Medians of the rounds, with quartiles.

    python benchmarks/bench_tf_op_ranges.py
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))
from _floor import build_floor, slope_ns  # noqa: E402
from _table import print_table  # noqa: E402

import nvtx_plugins_tf as nvtx_tf  # noqa: E402

ROUNDS = 15
REPS = 60


def chain(floor_lib, n: int):
    @tf.function
    def f(x):
        for _ in range(n):
            (x,) = floor_lib.floor_identity([x])
        return x

    return f


def slopes(rounds: int = ROUNDS) -> dict[str, list[float]]:
    """ns per op, per round, with TensorFlow's per-op ranges off and on."""
    floor_lib = tf.load_op_library(str(build_floor()))
    short, long_ = chain(floor_lib, 50), chain(floor_lib, 550)
    x = tf.constant(1.0)
    for f in (short, long_, short, long_):
        f(x)
    samples = {"off": [], "on": []}
    for i in range(rounds):
        order = ("off", "on") if i % 2 == 0 else ("on", "off")
        for state in order:
            with nvtx_tf.tf_op_ranges(state == "on"):
                samples[state].append(slope_ns(short, long_, x, REPS, ops=500))
    return samples


def _summary(samples: dict[str, list[float]]) -> tuple:
    extra = sorted(on - off for on, off in zip(samples["on"][1:], samples["off"][1:]))  # first round dropped
    q = len(extra) // 4
    return (
        f"{np.median(samples['off'][1:]):.0f}",
        f"{np.median(samples['on'][1:]):.0f}",
        f"{np.median(extra):.0f} ({extra[q]:.0f}..{extra[-q - 1]:.0f})",
    )


def main() -> int:
    if os.environ.get("NVTX_TF_BENCH_CHILD"):
        samples = slopes()
        print(" ".join(f"{k}={','.join(f'{v:.1f}' for v in vals)}" for k, vals in samples.items()))
        return 0
    rows = [("no NVTX tool", *_summary(slopes()))]
    from nvtx_plugins_tf import recorder

    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, NVTX_TF_BENCH_CHILD="1", **recorder.environment(Path(tmp) / "rec.nvtxrec"))
        proc = subprocess.run([sys.executable, __file__], env=env, capture_output=True, text=True, check=True)
        line = proc.stdout.strip().splitlines()[-1]
        child = {k: [float(v) for v in vals.split(",")] for k, vals in (part.split("=") for part in line.split())}
    rows.append(("under our recorder", *_summary(child)))
    print("## TensorFlow's per-op NVTX ranges: ns per executed op (medians of interleaved rounds)")
    print_table(("attached", "ranges off", "ranges on", "extra per op range (quartiles)"), rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
