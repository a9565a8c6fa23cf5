"""Steps as ``watch`` reports them: each rank's steps that ended since the last poll, on one
wall clock across ranks as ``analyze`` places them (:func:`..analysis.ranks.on_one_clock`'s
rule, over the ranks in the order met), with the work of each range inside the step (the
``stragglers`` table's: the part of the step the range covers, less its children's)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..analysis.mapper import RankResult
from ..recording.clocks import Clocks
from ..recording.model import range_label

__all__ = ["StepRecord", "StepAssembler"]


@dataclass(frozen=True)
class StepRecord:
    """One step of one rank: ``step`` (0 for its first, as ``pace``'s Step), ``start_ns`` and
    ``end_ns`` (wall clock, epoch ns: ``pace``'s StartEpochNs and StartEpochNs + Duration),
    ``duration_ns`` (``pace``'s Duration), ``ranges``: range -> ns of the step it covers (exclusive
    of its children), the range named as the ``stragglers`` table's TopRanges name it
    (``DOMAIN:MESSAGE``, ``MESSAGE`` in the default domain). The fields are the ``step`` JSON
    object's, in its order (:func:`.jsonl.step_object` relies on it)."""

    rank: str
    step: int
    start_ns: int
    end_ns: int
    duration_ns: int
    ranges: dict[str, int] = field(default_factory=dict)


def _rank_name(result: RankResult, taken: dict[str, str]) -> str:
    """The rank's name: its recording's (``rank3``; ``rank3:PID`` for one of several processes),
    with its folder in front when another recording has the same name (``hostB/rank3``)."""
    from pathlib import Path

    name = result.name
    if taken.get(name, result.file) != result.file:
        name = f"{Path(result.file).parent.name}/{name}"
    taken.setdefault(name, result.file)
    return name


class StepAssembler:
    """Turns the ranks' mapped results, poll after poll, into the :class:`StepRecord` of each
    step not reported yet (each exactly once, in step order per rank)."""

    def __init__(self) -> None:
        self._clocks = Clocks()
        self._moves: dict[tuple[str, int], int] = {}  # (file, pid) -> ns added to its times
        self._last: dict[tuple[str, int], int] = {}  # (file, pid) -> start of its last step reported
        self._names: dict[tuple[str, int], str] = {}
        self._taken: dict[str, str] = {}

    def name_of(self, result) -> str:
        """The name the rank of ``result`` (a :class:`RankResult`, or anything with its
        ``file``, ``pid`` and ``name``) is reported by (fixed once met)."""
        key = (result.file, result.pid)
        if key not in self._names:
            self._names[key] = _rank_name(result, self._taken)
        return self._names[key]

    def new_steps(self, result: RankResult) -> list[StepRecord]:
        """The steps of ``result`` not reported yet (the last poll's read of its rank)."""
        return self.placed(result, self.raw_steps(result))

    def raw_steps(self, result: RankResult) -> list[StepRecord]:
        """The steps of ``result`` not taken yet, on its own clock (``rank`` left empty): what a
        host's reader sends (:mod:`.hosts`), placed by the client's :meth:`placed`."""
        key = (result.file, result.pid)
        # the steps after the last one taken, by time, not by count: a read of a live
        # recording may miss a step that a later read has (an event read before the string
        # that names it), and the steps after it are numbered as analyze will number them
        done = int(np.searchsorted(result.step_start, self._last[key], side="right")) if key in self._last else 0
        if result.n_steps <= done:
            return []
        labels = [range_label(*result.names[int(row)]) for row in result.work_rows.tolist()]
        out = []
        starts, ends = result.step_start.tolist(), result.step_end.tolist()
        for i in range(done, result.n_steps):
            ranges: dict[str, int] = {}
            if result.step_work.size:
                for label, ns in zip(labels, result.step_work[i].tolist()):
                    if ns:
                        ranges[label] = ranges.get(label, 0) + int(ns)
            start, end = int(starts[i]), int(ends[i])
            # (a live read's window holds the steps from result.first_step on)
            out.append(StepRecord("", result.first_step + i, start, end, end - start, ranges))
        self._last[key] = int(starts[-1])
        return out

    def placed(self, rank, records: list[StepRecord]) -> list[StepRecord]:
        """``records`` (:meth:`raw_steps` of ``rank``: a :class:`RankResult`, or anything with
        its ``file``, ``pid``, ``name`` and ``clock_offset``) named and on the one clock."""
        key = (rank.file, rank.pid)
        name = self.name_of(rank)
        if key not in self._moves and rank.clock_offset is not None and records:
            self._moves[key] = self._clocks.clock_of(rank.clock_offset) - rank.clock_offset
        move = self._moves.get(key, 0)
        return [StepRecord(name, r.step, r.start_ns + move, r.end_ns + move, r.duration_ns, r.ranges) for r in records]
