"""Quantiles of many ranks' durations without holding them all: a log-bucket sketch (the
scheme of DDSketch). A positive duration d falls in bucket ``ceil(log(d) / log(GAMMA))``;
the bucket's value is ``2 * GAMMA**k / (GAMMA + 1)``, within ``ALPHA`` (1 %) of every
duration in it. Sketches merge exactly (bucket counts add up), so a rank's sketch can be
made where its data is (a Dask worker) and the run's quartiles computed from the sum.

A quantile q of n durations is estimated as the value of the bucket holding the order
statistic pandas' linear interpolation starts from (``floor(q * (n - 1))``): within 1 % of
that order statistic.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["ALPHA", "GAMMA", "sketch", "sketch_groups", "merge", "quantile"]

ALPHA = 0.01  #: relative error bound of a bucket's value
GAMMA = (1 + ALPHA) / (1 - ALPHA)
_LOG_GAMMA = math.log(GAMMA)
ZERO = -(2**31)  #: the bucket of durations <= 0 (value 0)


def sketch(durations: np.ndarray) -> dict[int, int]:
    """Bucket -> count of ``durations`` (ns)."""
    d = np.asarray(durations, dtype=np.float64)
    positive = d > 0
    keys = np.ceil(np.log(d[positive]) / _LOG_GAMMA).astype(np.int64)
    k, n = np.unique(keys, return_counts=True)
    out = dict(zip(k.tolist(), n.tolist()))
    zeros = int((~positive).sum())
    if zeros:
        out[ZERO] = zeros
    return out


def sketch_groups(durations: np.ndarray, starts: np.ndarray) -> list[dict[int, int]]:
    """The sketch of each group of ``durations`` (sorted ascending within each group; group g
    is ``durations[starts[g]:starts[g + 1]]``), as :func:`sketch` of each.

    >>> sketch_groups(np.array([0, 5, 5, 7, 1]), np.array([0, 4])) == [sketch([0, 5, 5, 7]), sketch([1])]
    True
    """
    d = np.asarray(durations, dtype=np.float64)
    group = np.repeat(np.arange(len(starts)), np.diff(np.append(starts, len(d))))
    keys = np.full(len(d), ZERO, dtype=np.int64)
    positive = d > 0
    keys[positive] = np.ceil(np.log(d[positive]) / _LOG_GAMMA).astype(np.int64)
    # sorted within each group, so a bucket is a run of equal (group, key)
    change = np.flatnonzero((np.diff(keys) != 0) | (np.diff(group) != 0)) + 1
    run_start = np.concatenate([[0], change]) if len(d) else change
    run_count = np.diff(np.append(run_start, len(d)))
    out: list[dict[int, int]] = [{} for _ in starts]
    for g, k, n in zip(group[run_start].tolist(), keys[run_start].tolist(), run_count.tolist()):
        out[g][k] = n
    return out


def merge(sketches) -> dict[int, int]:
    """The sum of several sketches."""
    out: dict[int, int] = {}
    for s in sketches:
        for k, n in s.items():
            out[k] = out.get(k, 0) + n
    return out


def _value(key: int) -> float:
    return 0.0 if key == ZERO else 2 * GAMMA**key / (GAMMA + 1)


def quantile(s: dict[int, int], q: float) -> float:
    """The value of quantile ``q`` (0..1) of the durations in sketch ``s`` (NaN if empty).

    >>> s = sketch(np.arange(1, 1001))
    >>> abs(quantile(s, 0.5) - 500) / 500 <= ALPHA
    True
    """
    total = sum(s.values())
    if total == 0:
        return math.nan
    rank = math.floor(q * (total - 1))
    seen = 0
    for key in sorted(s):
        seen += s[key]
        if seen > rank:
            return _value(key)
    return _value(max(s))
