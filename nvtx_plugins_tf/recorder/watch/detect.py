"""Which rank lags chronically, and the range behind it: a CUSUM over each rank's step excess.

Step N is judged once every rank that was followed when step N first ended somewhere has
ended it too (a rank whose writer is gone is not waited for), or once WINDOW newer steps have
ended somewhere (a rank that joined late, numbering its steps from 0, holds no one back: its
steps already judged are left out). Against the median of the
ranks at step N:

* the rank's excess ``x`` is the larger of its step time above the median step time and its
  work (its ranges' time, summed) above the median of the ranks' work (signed: under synchronous
  data parallelism every rank's step lasts as long as the slowest one's, and only the work tells
  the ranks apart). Not the sum of its ranges' work above each range's median (the ``stragglers``
  table's TopRanges): those medians need not add up to any rank's, and when ranks are held up
  in different ranges (a loaded host) each one looks slow in its own;
* ``z = clip(x / median step time, -CAP, +CAP)``; ``S = max(0, S + z - SLACK)``;
* the rank is named when ``S`` exceeds ``THRESHOLD``, once until ``S`` is back at 0.

With SLACK 0.05, CAP 0.2 and THRESHOLD 0.32: a rank 20 % slower is named at its 3rd slow step
(0.15 + 0.15 + 0.15), and so is one whose 3 steps measure 15.7 % above the median on average (a
rank slowed 20 % whose peers' steps run a little long on a loaded host), one 10 % slower at its
7th, one under 5 % never; one stall, however long, adds at most 0.15, and two in a row 0.3: not
named (a third in a row is chronic; so are two and then a step 7 % long). The range named is
the one whose work above the ranks' median, added up over the steps since ``S`` left 0, is the
largest; ``excess_ns`` is the mean step excess over those steps.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from .steps import StepRecord

__all__ = ["CAP", "SLACK", "THRESHOLD", "WINDOW", "Detector", "Straggler"]

WINDOW = 64
SLACK = 0.05
CAP = 0.2
THRESHOLD = 0.32


@dataclass(frozen=True)
class Straggler:
    """A rank named: at its step ``step``, its lag since ``first_step`` (mean ``excess_ns`` a
    step), and the ``range`` that accounts for most of it."""

    rank: str
    range: str
    step: int
    first_step: int
    excess_ns: int


@dataclass
class _Lag:
    cusum: float = 0.0
    first: int = -1
    steps: int = 0
    excess: int = 0
    ranges: dict[str, int] = field(default_factory=dict)
    named: bool = False


class Detector:
    """Feed it every :class:`StepRecord` (:meth:`add`) and the ranks met and gone (:meth:`join`,
    :meth:`leave`); :meth:`add` returns the :class:`Straggler` lines its steps complete."""

    def __init__(self, slack: float = SLACK, cap: float = CAP, threshold: float = THRESHOLD):
        self.slack, self.cap, self.threshold = slack, cap, threshold
        self._active: set[str] = set()
        self._pending: dict[int, dict[str, StepRecord]] = {}  # step -> rank -> its record
        self._awaited: dict[int, set[str]] = {}  # step -> the ranks it waits for
        self._lag: dict[str, _Lag] = {}
        self._judged: set[int] = set()
        self._newest = -1

    def join(self, rank: str) -> None:
        """A rank is followed from now on (its steps are awaited from the next step met)."""
        self._active.add(rank)

    def leave(self, rank: str) -> list[Straggler]:
        """A rank's writer is gone: it is awaited no more (the steps only it held back are judged)."""
        self._active.discard(rank)
        for awaited in self._awaited.values():
            awaited.discard(rank)
        return self._judge_ready()

    def add(self, record: StepRecord) -> list[Straggler]:
        """A rank's step ended; returns the ranks named by the steps now complete."""
        self._active.add(record.rank)
        step = record.step
        if step in self._judged:
            return []
        self._newest = max(self._newest, step)
        if step not in self._pending:
            self._pending[step] = {}
            self._awaited[step] = set(self._active)
        self._pending[step][record.rank] = record
        return self._judge_ready()

    def _judge_ready(self) -> list[Straggler]:
        out: list[Straggler] = []
        for step in sorted(self._pending):
            records = self._pending[step]
            if not self._awaited[step] <= records.keys() and step + WINDOW > self._newest:
                continue
            del self._pending[step], self._awaited[step]
            self._judged.add(step)
            out.extend(self._judge(step, list(records.values())))
        return out

    def _judge(self, step: int, records: list[StepRecord]) -> list[Straggler]:
        if len(records) < 2:
            return []
        median = statistics.median(r.duration_ns for r in records)
        if median <= 0:
            return []
        names = set().union(*(r.ranges for r in records))
        medians = {n: statistics.median(r.ranges.get(n, 0) for r in records) for n in names}
        work = statistics.median(sum(r.ranges.values()) for r in records)
        out = []
        for r in records:
            above = {n: r.ranges.get(n, 0) - m for n, m in medians.items()}
            excess = max(r.duration_ns - median, sum(r.ranges.values()) - work)
            z = min(max(excess / median, -self.cap), self.cap)
            lag = self._lag.setdefault(r.rank, _Lag())
            lag.cusum = max(0.0, lag.cusum + z - self.slack)
            if lag.cusum == 0.0:
                self._lag[r.rank] = _Lag()
                continue
            if lag.first < 0:
                lag.first = step
            lag.steps += 1
            lag.excess += int(excess)
            for n, ns in above.items():
                lag.ranges[n] = lag.ranges.get(n, 0) + int(ns)
            if lag.cusum > self.threshold and not lag.named:
                lag.named = True
                behind = max(sorted(lag.ranges), key=lambda n: lag.ranges[n], default="")
                out.append(Straggler(r.rank, behind, step, lag.first, lag.excess // lag.steps))
        return out
