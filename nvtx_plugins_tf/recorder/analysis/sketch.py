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

__all__ = ["ALPHA", "GAMMA", "sketch", "sketch_groups", "merged_quantiles", "merge", "quantile", "bucket_bounds"]

ALPHA = 0.01  #: relative error bound of a bucket's value
GAMMA = (1 + ALPHA) / (1 - ALPHA)
_LOG_GAMMA = LOG_GAMMA = math.log(GAMMA)
ZERO = -(2**31)  #: the bucket of durations <= 0 (value 0)
_BOUNDS: np.ndarray | None = None


def _keys(durations: np.ndarray) -> np.ndarray:
    """The buckets of positive ``durations`` (float64)."""
    return np.ceil(np.log(durations) / _LOG_GAMMA).astype(np.int64)


def bucket_bounds() -> np.ndarray:
    """``[k]``: the least duration (integer ns) in bucket k or above, k = 0 (1 ns) up to
    the bucket of the largest int64: by numpy's log, as :func:`sketch_groups` buckets them,
    for the native mapper (cc_ops/reader/rank_stats.h), which estimates with libm's float log and
    settles the bucket by these bounds.

    Below about 50 ns many buckets hold no integer: those share their bound with the next one
    (checked below up to 2**53 ns, where float64 still tells d - 1 from d).

    >>> b = bucket_bounds()
    >>> int(b[0]), int(b[1]), int(b[35]), int(b[36])  # 1 ns is bucket 0, 2 ns bucket 35
    (1, 2, 2, 3)
    >>> exact = [k for k in range(1, len(b)) if b[k] < 2**53]
    >>> all(_keys(np.array([b[k] - 1.0]))[0] < k <= _keys(np.array([float(b[k])]))[0] for k in exact)
    True
    """
    global _BOUNDS
    if _BOUNDS is None:
        top = np.iinfo(np.int64).max
        k = np.arange(int(_keys(np.array([float(top)]))[0]) + 1)
        lo, hi = np.ones(len(k), dtype=np.int64), np.full(len(k), top, dtype=np.int64)
        while (lo < hi).any():  # the least d with key(d) >= k, by bisection
            mid = lo + (hi - lo) // 2
            up = _keys(mid.astype(np.float64)) >= k
            hi, lo = np.where(up, mid, hi), np.where(up, lo, mid + 1)
        _BOUNDS = lo
    return _BOUNDS


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


def sketch_groups(durations: np.ndarray, starts: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The sketches of groups of ``durations`` (sorted ascending within each group; group g is
    ``durations[starts[g]:starts[g + 1]]``) as rows (group, bucket, count), by group then bucket.

    >>> g, k, n = sketch_groups(np.array([0, 5, 5, 7, 1]), np.array([0, 4]))
    >>> [dict(zip(k[g == i].tolist(), n[g == i].tolist())) for i in (0, 1)] == [sketch([0, 5, 5, 7]), sketch([1])]
    True
    """
    d = np.asarray(durations, dtype=np.float64)
    group = np.repeat(np.arange(len(starts)), np.diff(np.append(starts, len(d))))
    keys = np.full(len(d), ZERO, dtype=np.int64)
    positive = d > 0
    keys[positive] = _keys(d[positive])
    # sorted within each group, so a bucket is a run of equal (group, key)
    change = np.flatnonzero((np.diff(keys) != 0) | (np.diff(group) != 0)) + 1
    run_start = np.concatenate([[0], change]).astype(np.int64) if len(d) else change
    return group[run_start], keys[run_start], np.diff(np.append(run_start, len(d)))


def merged_quantiles(group, key, count, groups: int, qs) -> np.ndarray:
    """``[g, i]``: quantile ``qs[i]`` of the sum of the sketches given as rows (``group``,
    bucket ``key``, ``count``: several rows of one bucket add up) for each of ``groups``
    groups, as :func:`quantile` of each (NaN for a group with no row).

    >>> s1, s2 = sketch(np.arange(1, 501)), sketch(np.arange(501, 1001))
    >>> rows = [(0, k, n) for s in (s1, s2) for k, n in s.items()]
    >>> g, k, n = (np.array(c) for c in zip(*rows))
    >>> float(merged_quantiles(g, k, n, 1, [0.5])[0, 0]) == quantile(merge([s1, s2]), 0.5)
    True
    """
    out = np.full((groups, len(qs)), np.nan)
    if not len(group):
        return out
    order = np.lexsort((key, group))
    group, key, count = group[order], key[order], count[order]
    cum = np.cumsum(count)
    totals = np.bincount(group, weights=count, minlength=groups).astype(np.int64)
    before = np.concatenate([[0], np.cumsum(totals)[:-1]])  # counts of the groups before each
    values = np.where(key == ZERO, 0.0, 2 * GAMMA ** key.astype(np.float64) / (GAMMA + 1))
    present = np.flatnonzero(totals)
    for i, q in enumerate(qs):
        rank = before[present] + np.floor(q * (totals[present] - 1)).astype(np.int64)
        out[present, i] = values[np.searchsorted(cum, rank, side="right")]
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
