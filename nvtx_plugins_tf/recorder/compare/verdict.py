"""Verdicts and attribution: what :func:`compare_runs` makes of two sides' runs.

Per range and for the step, with ``threshold`` t and ``alpha``:

* **slower**: q (the step: p) below alpha and the ratio at least 1 + t;
* **faster**: q below alpha and the ratio at most 1 - t;
* **equivalent**: the interval at 1 - 2 alpha inside [1 - t, 1 + t] (two one-sided tests at
  alpha each: TOST);
* **inconclusive**: anything else (a range on one side only, too few steps, an interval wider
  than the threshold allows).

Each range is judged on two measures: its exclusive time (``work``: less the ranges nested in
it, so a slowdown shows in the range that has it) and its inclusive time (``incl``: with them,
the time a reader of a profile calls the range's). Where no range is nested in it, on any
run, they are one measure: judged once, the inclusive row a copy. The q-values adjust the
ranges' exclusive tests and the nested ranges' inclusive tests together (one family). A range
slower on either measure is a regression.

Attribution: per step and rank, the step's time is the sum of its ranges' exclusive times plus
what no range covers (under synchronous training: the wait for the slowest rank too); averaged
over the ranks, the steps (the central 80 % by step time) and the runs of each side, the step's
change is the sum of the ranges' changes plus the uncovered part's, exactly. (The slowest
rank's own breakdown was tried first: which rank is slowest is chosen by the noise, and its
ranges' times are biased upwards by that choice.)
``share``: each one's part of the step's change (they add up to 1).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .data import Run, align
from .stats import Effects, bh, effects
from .warmup import warmup_steps

__all__ = ["SLOWER", "FASTER", "EQUIVALENT", "INCONCLUSIVE", "STEP", "UNCOVERED", "Comparison", "compare_runs"]

SLOWER, FASTER, EQUIVALENT, INCONCLUSIVE = "slower", "faster", "equivalent", "inconclusive"
STEP = "(step)"  #: the step's row
UNCOVERED = "(uncovered)"  #: the attribution's row of the step time no range covers


@dataclass
class Comparison:
    """The rows (``names``: :data:`STEP`, then the ranges), their :class:`~.stats.Effects` on
    the exclusive time, ``q`` (the ranges' Benjamini-Hochberg q-values; the step's is its
    p-value), ``verdict``; the same on the inclusive time (``inclusive``, ``q_incl``,
    ``verdict_incl``; ``nested``: the rows with a range nested in them, the others' inclusive
    values copies of the exclusive; the step's row the step's); ``share`` (of the step's
    change, by the exclusive times, :data:`UNCOVERED`'s in ``uncovered_share``), and the steps
    cut as warm-up per run (``warmup``: {"baseline": [...], "candidate": [...]})."""

    names: list[str]
    effects: Effects
    q: np.ndarray
    verdict: list[str]
    share: np.ndarray
    uncovered_share: float
    step_change_ns: float
    threshold: float
    alpha: float
    warmup: dict[str, list[int]] = field(default_factory=dict)
    inclusive: Effects | None = None
    q_incl: np.ndarray | None = None
    verdict_incl: list[str] = field(default_factory=list)
    nested: np.ndarray | None = None

    @property
    def level(self) -> str:
        return self.effects.level

    def order(self) -> list[int]:
        """The ranges' rows (indexes into ``names``), the largest change (ns) first."""
        e = self.effects
        change = np.nan_to_num(np.abs(e.candidate - e.baseline), nan=0.0)
        return sorted(range(1, len(self.names)), key=lambda i: (-change[i], self.names[i]))

    def verdicts(self, i: int) -> tuple[str, str]:
        """Row ``i``'s verdicts: (exclusive, inclusive)."""
        return self.verdict[i], (self.verdict_incl[i] if self.verdict_incl else self.verdict[i])

    def regression(self) -> bool:
        """A row slower, on either measure."""
        return SLOWER in self.verdict or SLOWER in self.verdict_incl

    def inconclusive(self) -> bool:
        return INCONCLUSIVE in self.verdict or INCONCLUSIVE in self.verdict_incl


def _verdicts(e: Effects, q: np.ndarray, threshold: float, alpha: float) -> list[str]:
    out = []
    eq_low, eq_high = e.interval(1 - 2 * alpha)
    for i in range(len(e.ratio)):
        r, lo, hi = e.ratio[i], eq_low[i], eq_high[i]
        if not np.isfinite(q[i]) or not np.isfinite(r):
            out.append(INCONCLUSIVE)
        elif q[i] < alpha and r >= 1 + threshold:
            out.append(SLOWER)
        elif q[i] < alpha and r <= 1 - threshold:
            out.append(FASTER)
        elif lo >= 1 - threshold and hi <= 1 + threshold:
            out.append(EQUIVALENT)
        else:
            out.append(INCONCLUSIVE)
    return out


def _measured(runs: list[Run], nested: np.ndarray) -> list[Run]:
    """The runs with the ``nested`` ranges' inclusive times as columns after the exclusive ones
    (one resampling for both: the same ranks, steps and runs drawn)."""
    return [
        Run(
            r.name,
            r.step,
            np.concatenate([r.work, r.incl[:, :, nested]], axis=2),
            [*r.ranges, *np.array(r.ranges)[nested]],
        )
        for r in runs
    ]


def _split(e: Effects, q: np.ndarray, nested: np.ndarray) -> tuple[Effects, Effects, np.ndarray, np.ndarray]:
    """The effects of the measured columns (:func:`_measured`: the step, the ranges' exclusive,
    the nested ranges' inclusive) as (exclusive rows, inclusive rows, their q-values): an
    inclusive row without a range nested in it is the exclusive one's copy."""
    m = 1 + len(nested)
    source = np.arange(m)
    source[1:][nested] = m + np.arange(int(nested.sum()))

    def rows(index):
        return Effects(
            e.baseline[index], e.candidate[index], e.ratio[index], e.low[index], e.high[index], e.p[index], e.level,
            e.se[index], e.df[index],
        )  # fmt: skip

    return rows(np.arange(m)), rows(source), q[:m], q[source]


def _attributed(runs: list[Run]) -> np.ndarray:
    """Per side: (step time, each range's time, uncovered), each averaged over the ranks per
    step, then over the steps whose step time is between its 10th and 90th percentiles in the
    run (a robust mean that stays additive: one stalled step moves no share), then the runs."""
    rows = []
    for run in runs:
        total = run.step.mean(axis=0).astype(np.float64)  # (steps,)
        work = run.work.mean(axis=0).astype(np.float64)  # (steps, ranges)
        low, high = np.percentile(total, [10, 90])
        kept = (total >= low) & (total <= high)
        kept |= not kept.any()  # (two steps: neither lies between the percentiles; all kept)
        total, work = total[kept], work[kept]
        rows.append(np.concatenate([[total.mean()], work.mean(axis=0), [(total - work.sum(axis=1)).mean()]]))
    return np.mean(rows, axis=0)


def compare_runs(
    baseline: list[Run],
    candidate: list[Run],
    *,
    warmup: int | str = "auto",
    threshold: float = 0.02,
    alpha: float = 0.01,
    seed: int = 0,
    resamples: int = 400,
) -> Comparison:
    """Compare the runs of two sides: the warm-up cut per run (:mod:`.warmup`), the effects
    (:mod:`.stats`), q-values across the ranges, verdicts and attribution (the module
    docstring). The same ``seed``, the same result."""
    names, b_side, c_side = align(baseline, candidate)
    cuts = {"baseline": [], "candidate": []}
    sides = []
    for label, side in (("baseline", b_side), ("candidate", c_side)):
        runs = []
        for run in side.runs:
            cut = warmup_steps(run, warmup)
            cuts[label].append(cut)
            runs.append(run.cut(cut))
        sides.append(runs)
    # the ranges with a range nested in them, on any run: their inclusive time is another measure
    nested = np.zeros(len(names), dtype=bool)
    for run in (*sides[0], *sides[1]):
        if run.incl is not run.work:
            nested |= (run.incl != run.work).any(axis=(0, 1))
    both = effects(
        _measured(sides[0], nested), _measured(sides[1], nested), alpha=alpha, resamples=resamples, seed=seed
    )
    q_all = np.concatenate([both.p[:1], bh(both.p[1:])])
    e, incl, q, q_incl = _split(both, q_all, nested)
    b, c = _attributed(sides[0]), _attributed(sides[1])
    change = c - b
    with np.errstate(divide="ignore", invalid="ignore"):
        share = change / change[0] if change[0] != 0 else np.full(len(change), np.nan)
    return Comparison(
        [STEP, *names], e, q, _verdicts(e, q, threshold, alpha),
        np.concatenate([[1.0], share[1:-1]]), float(share[-1]), float(change[0]), threshold, alpha, cuts,
        incl, q_incl, _verdicts(incl, q_incl, threshold, alpha), np.concatenate([[False], nested]),
    )  # fmt: skip
