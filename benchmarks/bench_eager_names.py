"""An eager loop naming each step ``f"step {i}"`` against one fixed name (issue 37, row 2).

Two eager custom loops in one process, interleaved in blocks, with ``ops.range`` around
each step: one names every step ``"step"`` (the step number as payload), the other
``f"step {i}"`` (a new name per step). Before the texts of eagerly run ops became inputs,
the second built one kernel per name in TensorFlow's eager kernel cache (~78 KB each, never
freed: +111 MiB and 2.6x the step time per 3000 steps). Prints per block the step time of
each loop and the process's RSS; the target is flat RSS and a time ratio of about 1.

    python benchmarks/bench_eager_names.py [--steps 3000] [--blocks 5]
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import tensorflow as tf  # noqa: E402
from _table import print_table  # noqa: E402

import nvtx_plugins_tf as nvtx_tf  # noqa: E402


def rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def loop(w, x, first: int, steps: int, name) -> float:
    """Mean seconds per step of ``steps`` eager steps named ``name(i)``."""
    t0 = time.perf_counter()
    for i in range(first, first + steps):
        with nvtx_tf.ops.range(name(i), payload=i):
            w.assign_add(tf.matmul(x, w)[:1, :1] * 0.0 + tf.zeros([4, 4]))
    return (time.perf_counter() - t0) / steps


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3000, help="steps per block and loop")
    parser.add_argument("--blocks", type=int, default=5)
    args = parser.parse_args(argv)
    w, x = tf.Variable(tf.ones([4, 4])), tf.ones([2, 4])
    loop(w, x, 0, 200, lambda i: "warm")
    rows = []
    start_rss = rss_mib()
    for block in range(args.blocks):
        first = block * args.steps
        fixed = loop(w, x, first, args.steps, lambda i: "step")
        named = loop(w, x, first, args.steps, lambda i: f"step {i}")
        rows.append(
            (
                block,
                f"{fixed * 1e6:.1f}",
                f"{named * 1e6:.1f}",
                f"{named / fixed:.2f}",
                f"{rss_mib():.0f}",
            )
        )
    print(
        f"{args.blocks} blocks of {args.steps} eager steps per loop, RSS {start_rss:.0f} MiB after warm-up "
        "(target: ratio ~1, RSS flat)"
    )
    print_table(("block", "us/step fixed name", "us/step f'step {i}'", "ratio", "RSS MiB"), rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
