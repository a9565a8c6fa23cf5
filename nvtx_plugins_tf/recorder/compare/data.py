"""What ``compare`` compares: runs of per-step, per-rank, per-range times (:class:`Run`) and
the two sides made of them (:class:`Side`), the ranges of both sides on one list."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

__all__ = ["Run", "Side", "align"]


@dataclass
class Run:
    """One run: ``step[rank, step]``, each rank's step durations (ns), and
    ``work[rank, step, j]``: the ns of that step that the ranges named ``ranges[j]`` cover on
    that rank, exclusive of their children's (analyze's ``step_work``); ``incl``: the same
    inclusive of them (``step_incl``; None: ``work``'s, no range nested in another). Every
    rank has the same steps (the first ``n_steps`` of each)."""

    name: str
    step: np.ndarray
    work: np.ndarray
    ranges: list[str]
    incl: np.ndarray | None = None

    def __post_init__(self) -> None:
        if self.incl is None:
            self.incl = self.work

    @property
    def n_ranks(self) -> int:
        return int(self.step.shape[0])

    @property
    def n_steps(self) -> int:
        return int(self.step.shape[1])

    def cut(self, first: int) -> "Run":
        """This run without its first ``first`` steps (the warm-up)."""
        return Run(self.name, self.step[:, first:], self.work[:, first:, :], self.ranges, self.incl[:, first:, :])

    def slowest(self) -> np.ndarray:
        """The step time: per step, the slowest rank's (the others wait for it)."""
        return self.step.max(axis=0)


@dataclass
class Side:
    """The runs of one side (baseline or candidate), on the ranges list they share."""

    runs: list[Run] = field(default_factory=list)


def align(baseline: list[Run], candidate: list[Run]) -> tuple[list[str], Side, Side]:
    """(every range name of both sides, sorted; the two sides with each run's ``work`` on that
    list: a range a run lacks takes 0 ns there)."""
    names = sorted({n for run in (*baseline, *candidate) for n in run.ranges})
    where = {n: i for i, n in enumerate(names)}

    def on_list(run: Run) -> Run:
        if run.ranges == names:
            return run
        columns = [where[n] for n in run.ranges]
        work = np.zeros((run.n_ranks, run.n_steps, len(names)), dtype=run.work.dtype)
        work[:, :, columns] = run.work
        if run.incl is run.work:
            return Run(run.name, run.step, work, names)
        incl = np.zeros_like(work)
        incl[:, :, columns] = run.incl
        return Run(run.name, run.step, work, names, incl)

    return names, Side([on_list(r) for r in baseline]), Side([on_list(r) for r in candidate])
