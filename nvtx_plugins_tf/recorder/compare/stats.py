"""The effect of the change on each range and on the step, with a confidence interval that
resamples at the level the data are replicated at.

Steps and ranks of one run are not independent replicates (a slow node, a run's drift), so:

* two runs a side or more: a range's value on a side is the mean over its runs and ranks of
  each rank's median time per step, its within-run variation bootstrapped by resampling the
  ranks of each run with replacement (a rank is the cluster of its steps); the step's value is
  the mean over the runs of their median step time (the slowest rank's per step), each run's
  median resampled by its ranks and by blocks of steps (below) at once.
* :data:`MIN_RUNS` runs a side or more (``"runs"``): besides, the runs of each side are
  resampled with replacement (a cluster bootstrap); what that variance has beyond the
  within-run part (corrected by k / (k - 1)) is the runs' own variation (drift, a slow
  machine), added to it and counted with k - 1 degrees of freedom (Satterthwaite), so that
  few runs give wide intervals. With two runs a side (``"ranks of two runs"``) it is not
  estimated for the ranges: their result holds for the ranks and steps the runs have, and is
  labelled so. The step's is, even from two runs (one degree of freedom a side): the step
  time is the slowest rank's, an extreme that its ranks do not replicate. A run of fewer than
  :data:`MIN_RANKS` ranks has too few to resample: its steps are, by blocks, as below (two
  runs a side of them: ``"within the runs"``).
* one run on either side (``"within one run"``): a moving-block bootstrap of the steps (blocks
  of about n^(1/3) steps keep their autocorrelation); a range's value is the median over steps
  of its time averaged over the ranks. Such a result says nothing of run-to-run variation,
  and is labelled so.

The ratio candidate / baseline of those values is the effect; its interval and p-value are the
Student t ones on the logarithm of the ratio with the bootstrap's standard error, so that a few
hundred resamples give stable tails (fewer on runs of very many steps: :data:`WORK`). The
p-values of the ranges are adjusted together by Benjamini-Hochberg
(as :func:`scipy.stats.false_discovery_control`): their q-values. Student's t comes from
:mod:`scipy.special` (``stdtr``, ``stdtrit``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .data import Run

__all__ = ["MIN_RANKS", "MIN_RUNS", "RANKS", "RUNS", "WITHIN_ONE_RUN", "WITHIN_RUNS", "Effects", "effects", "bh"]

RUNS = "runs"
RANKS = "ranks of two runs"
WITHIN_RUNS = "within the runs"
WITHIN_ONE_RUN = "within one run"
#: ranks a run needs for its ranks to be resampled (fewer: blocks of its steps are)
MIN_RANKS = 4
#: runs a side from which the runs' own variation is estimated (fewer: not)
MIN_RUNS = 3
_PIECE = 1 << 23  # values gathered at a time by a resampling (64 MiB of float64)
#: values resampled in all (resamples x steps x (ranks + columns)) before fewer resamples are
#: drawn (never below :data:`MIN_RESAMPLES`): bounds the time on runs of very many steps
WORK = 4e8
MIN_RESAMPLES = 50


@dataclass
class Effects:
    """Per row (the step first, then the ranges): ``baseline`` and ``candidate`` (ns, each
    side's value, see the module docstring), ``ratio``, ``low``/``high`` (its interval at
    1 - alpha), ``p`` (two-sided, ratio 1), ``se`` and ``df``; ``level``: :data:`RUNS`, :data:`RANKS`,
    :data:`WITHIN_RUNS` or :data:`WITHIN_ONE_RUN`."""

    baseline: np.ndarray
    candidate: np.ndarray
    ratio: np.ndarray
    low: np.ndarray
    high: np.ndarray
    p: np.ndarray
    level: str
    se: np.ndarray  #: the standard error of log(ratio)
    df: np.ndarray  #: its degrees of freedom (inf: the normal's)

    def interval(self, confidence: float) -> tuple[np.ndarray, np.ndarray]:
        """The ratio's interval at ``confidence`` (0.98: the 98 % one)."""
        from scipy.special import stdtrit

        z = stdtrit(self.df, 0.5 + confidence / 2)
        with np.errstate(invalid="ignore", over="ignore"):
            return self.ratio * np.exp(-z * self.se), self.ratio * np.exp(z * self.se)


def _blocks(rng: np.random.Generator, n: int, size: int) -> np.ndarray:
    """``size`` moving-block resamples of ``n`` step indexes, (size, n)."""
    length = max(1, int(round(n ** (1 / 3))))
    count = -(-n // length)
    starts = rng.integers(0, n - length + 1, size=(size, count), dtype=np.int32)
    return (starts[:, :, None] + np.arange(length, dtype=np.int32)).astype(np.int32).reshape(size, -1)[:, :n]


def _median_reps(values: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """Per resample (rows of ``idx``), the median over the resampled steps of each column of
    ``values`` (steps x columns): (resamples, columns), in pieces of at most :data:`_PIECE`
    values (memory bounded whatever the steps and columns)."""
    size, n = idx.shape
    out = np.empty((size, values.shape[1]))
    cols = max(1, min(values.shape[1], _PIECE // max(1, n * size)))
    rows = max(1, min(size, _PIECE // max(1, n * cols)))
    for a in range(0, values.shape[1], cols):
        part = values[:, a : a + cols]
        for b in range(0, size, rows):
            # (the gathered copy is ours: partitioned in place, not copied again)
            out[b : b + rows, a : a + cols] = np.median(part[idx[b : b + rows]], axis=1, overwrite_input=True)
    return out


def _slowest_reps(rng: np.random.Generator, step: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """Per resample, the median over the resampled steps (``idx``) of the slowest of the ranks
    resampled with replacement, from ``step`` (ranks x steps): (resamples, 1)."""
    size, n = idx.shape[0], step.shape[0]
    out = np.empty((size, 1))
    rows = max(1, min(size, _PIECE // max(1, n * idx.shape[1])))
    for a in range(0, size, rows):
        ranks = rng.integers(n, size=(min(rows, size - a), n))
        slowest = step[ranks[:, :, None], idx[a : a + rows, None, :]].max(axis=1)
        out[a : a + rows, 0] = np.median(slowest, axis=1, overwrite_input=True)
    return out


def _rank_reps(rng: np.random.Generator, medians: np.ndarray, size: int) -> np.ndarray:
    """Per resample, the mean over the ranks resampled with replacement of ``medians`` (ranks x
    ranges): (size, ranges), by multinomial weights (no copy of the data per resample)."""
    n = medians.shape[0]
    weights = rng.multinomial(n, np.full(n, 1.0 / n), size=size) / n
    return weights @ medians


def _run_reps(rng: np.random.Generator, points: np.ndarray, size: int) -> np.ndarray:
    """The cluster bootstrap of the runs: ``points`` (runs, columns), per resample the mean
    over the runs resampled with replacement (size, columns)."""
    k = points.shape[0]
    return points[rng.integers(k, size=(size, k))].mean(axis=1)


def _side(
    rng: np.random.Generator, runs: list[Run], level: str, size: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(the side's values, step then ranges; their resamples within the runs, the runs kept
    (size, 1 + ranges); each run's values (runs, 1 + ranges))."""
    points, reps = [], []
    for run in runs:
        slowest = run.slowest().astype(np.float64)[:, None]
        idx = _blocks(rng, run.n_steps, size)
        if level in (RUNS, RANKS) and run.n_ranks >= MIN_RANKS:
            medians = np.median(run.work, axis=1).astype(np.float64)  # (ranks, ranges)
            range_point, range_reps = medians.mean(axis=0), _rank_reps(rng, medians, size)
        else:
            per_step = run.work.mean(axis=0)  # (steps, ranges): the ranks' mean
            range_point, range_reps = np.median(per_step, axis=0), _median_reps(per_step, idx)
        if level in (RUNS, RANKS):  # (the ranks resampled too: which one is slowest varies)
            step_reps = _slowest_reps(rng, run.step.astype(np.float64), idx)
        else:
            step_reps = _median_reps(slowest, idx)
        points.append(np.concatenate([np.median(slowest, axis=0), range_point]))
        reps.append(np.concatenate([step_reps, range_reps], axis=1))
    points_ = np.stack(points)
    return points_.mean(axis=0), np.mean(reps, axis=0), points_


def _variance(rng: np.random.Generator, value, reps, points, size: int) -> tuple[np.ndarray, np.ndarray]:
    """(the variance of log ``value``, the part of it estimated from the runs alone): the
    within-run part (ranks, blocks of steps: the resamples ``reps``) and, with several runs,
    what the runs' cluster bootstrap finds beyond it (corrected by k / (k - 1): few clusters
    understate it), never below 0 (a method-of-moments estimate of the run component)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        within = np.nanvar(np.log(reps), axis=0, ddof=1)
        k = points.shape[0]
        if k < 2:
            return within, np.zeros_like(within)
        between = np.nanvar(np.log(_run_reps(rng, points, size)), axis=0, ddof=1) * k / (k - 1)
    run_part = np.maximum(0.0, between - within)
    return within + run_part, run_part


def _level(baseline: list[Run], candidate: list[Run]) -> str:
    fewest = min(len(baseline), len(candidate))
    if fewest >= MIN_RUNS:
        return RUNS
    if fewest == 2:
        return RANKS if min(r.n_ranks for r in (*baseline, *candidate)) >= MIN_RANKS else WITHIN_RUNS
    return WITHIN_ONE_RUN


def effects(
    baseline: list[Run], candidate: list[Run], *, alpha: float = 0.01, resamples: int = 400, seed: int = 0
) -> Effects:
    """The effects of the step and of each range (the runs' ``ranges``, aligned: :func:`.data.align`),
    at the level the runs allow (see the module docstring); ``seed``: the same seed, the same
    result. The reference distribution is Student's t with Satterthwaite's degrees of freedom:
    the run components count k - 1 each, the within-run parts as many as the normal's."""
    from scipy.special import stdtr, stdtrit

    level = _level(baseline, candidate)
    rng = np.random.default_rng(seed)
    work = max(r.n_steps * (r.n_ranks + len(r.ranges) + 1) for r in (*baseline, *candidate))
    resamples = int(min(resamples, max(MIN_RESAMPLES, WORK // max(1, work))))
    b, b_reps, b_points = _side(rng, baseline, level, resamples)
    c, c_reps, c_points = _side(rng, candidate, level, resamples)
    vb, rb = _variance(rng, b, b_reps, b_points, resamples)
    vc, rc = _variance(rng, c, c_reps, c_points, resamples)
    if level != RUNS:  # (the ranges' run component is not estimated from two runs; the step's is)
        vb[1:], vc[1:] = vb[1:] - rb[1:], vc[1:] - rc[1:]
        rb[1:], rc[1:] = 0.0, 0.0
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = c / b
        var = vb + vc
        se = np.sqrt(var)
        parts = (rb**2 / max(len(baseline) - 1, 1)) + (rc**2 / max(len(candidate) - 1, 1))
        df = np.where(parts > 0, var**2 / np.where(parts > 0, parts, 1.0), np.inf)
        known = (b > 0) & (c > 0) & np.isfinite(se)
        d = np.where(known, np.log(np.where(known, ratio, 1.0)), np.nan)
        z = stdtrit(df, 1 - alpha / 2)
        low, high = np.exp(d - z * se), np.exp(d + z * se)
        p = np.where(se > 0, 2 * stdtr(df, -np.abs(d) / np.where(se > 0, se, 1.0)), np.where(d == 0, 1.0, 0.0))
    # (a side of one step in all has nothing to resample: no interval, no test)
    replicated = min(sum(r.n_steps for r in side) for side in (baseline, candidate)) >= 2
    known &= replicated
    low, high = np.where(known, low, np.nan), np.where(known, high, np.nan)
    p = np.where(known, p, np.nan)
    return Effects(b, c, ratio, low, high, p, level, se, df)


def bh(p: np.ndarray) -> np.ndarray:
    """Benjamini-Hochberg q-values of ``p`` (NaN stays NaN, not counted among the tests): those
    of :func:`scipy.stats.false_discovery_control` (``method="bh"``; tests/test_compare_stats.py
    holds them equal), in numpy: scipy.stats' import alone costs a second, a third of a
    1M-range comparison's time."""
    q = np.full(len(p), np.nan)
    tested = np.flatnonzero(np.isfinite(p))
    if len(tested):
        order = np.argsort(p[tested])
        m = len(tested)
        adjusted = p[tested][order] * m / np.arange(1, m + 1)
        adjusted = np.minimum.accumulate(adjusted[::-1])[::-1]
        q[tested[order]] = np.clip(adjusted, 0.0, 1.0)
    return q
