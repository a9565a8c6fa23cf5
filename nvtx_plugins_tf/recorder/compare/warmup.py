"""The warm-up of a run: the first steps, slower than the rest (compiling, caches, autotuning),
cut before anything is compared.

The rule (``--warmup auto``, one change point by least squares, as ruptures' ``Binseg`` with
an ``l2`` cost and one breakpoint, in one pass over cumulative sums): on the logarithm of the
step time (the slowest rank's per step), the split ``k`` that minimizes the two segments'
summed squared deviations from their means, ``k`` in the first half of the run. It is a warm-up
only if the steps before ``k`` are slower, their median at least :data:`MIN_SLOWDOWN` above the
median of the steps after it; else nothing is cut. ``--warmup N`` cuts N steps."""

from __future__ import annotations

import numpy as np

from .data import Run

__all__ = ["MIN_SLOWDOWN", "change_point", "warmup_steps"]

#: how much slower (relative) the steps before the change point must be to be a warm-up
MIN_SLOWDOWN = 0.10


def change_point(series: np.ndarray) -> int:
    """The number of leading steps of ``series`` (step times, ns) that are a warm-up by the rule
    above (0: none)."""
    x = np.log(np.maximum(np.asarray(series, dtype=np.float64), 1.0))
    n = len(x)
    if n < 4:
        return 0
    c1, c2 = np.cumsum(x), np.cumsum(x * x)
    k = np.arange(1, n // 2 + 1)  # (the first k steps against the rest)
    left = c2[k - 1] - c1[k - 1] ** 2 / k
    right = (c2[-1] - c2[k - 1]) - (c1[-1] - c1[k - 1]) ** 2 / (n - k)
    best = int(k[np.argmin(left + right)])
    before, after = np.median(series[:best]), np.median(series[best:])
    return best if before >= after * (1 + MIN_SLOWDOWN) else 0


def warmup_steps(run: Run, warmup: int | str = "auto") -> int:
    """The steps to cut from ``run``: ``warmup`` itself (a number, at most all but 2 steps), or by
    :func:`change_point` on its step time (``"auto"``)."""
    if warmup == "auto":
        return change_point(run.slowest())
    return max(0, min(int(warmup), run.n_steps - 2))
