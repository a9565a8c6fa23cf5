"""The ranks of ``analyze`` once each and by names that tell them apart, and the step names
an unmatched ``--step`` could have meant.

* A rank met twice (one file by two paths, a symlink, a recording and its own SQLite or
  parquetdir export wherever that lies) counts once: two ranks are the same when they have
  the same process id, the same ranges (name, count and total ns of each) and the same
  steps on the wall clock; two real processes never match to the nanosecond.
* Ranks of one name from different inputs (``hostA/rank0.nvtxrec``, ``hostB/rank0.nvtxrec``)
  are named with as many of their folders as tell them apart (``hostA/rank0``).
* The recordings' ranks on one timeline by merge's rule (:class:`~..recording.clocks.Clocks`,
  over every input): ranks whose clock offsets agree within 1 ms share one (the ranks of one
  host keep their exact order), the others are placed by their own realtime anchors.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

from ..recording.clocks import Clocks
from .mapper import RankResult, StepSpec

__all__ = ["once_each", "distinct_names", "on_one_clock", "step_candidates"]


def _identity(rank: RankResult) -> tuple:
    ranges = sorted(zip(rank.names, rank.count.tolist(), rank.sum.tolist()))
    return rank.pid, rank.open_ranges, tuple(ranges), rank.step_start.tobytes(), rank.step_end.tobytes()


def _sketch(rank: RankResult) -> tuple:
    """What any two equal ranks share, cheap to take (no Python work per range name): the
    whole :func:`_identity` is taken only of ranks that share this."""
    return (
        rank.pid, rank.open_ranges, len(rank.names), int(rank.count.sum()), int(rank.sum.sum()),
        rank.step_start.tobytes(), rank.step_end.tobytes(),
    )  # fmt: skip


def once_each(ranks: list[RankResult]) -> tuple[list[RankResult], list[str]]:
    """(``ranks`` without those equal to an earlier one, a line for each one left out)."""
    alike: dict[tuple, list[RankResult]] = {}  # (the whole identity taken only of a rank met twice)
    kept, lines = [], []
    for rank in ranks:
        earlier = alike.setdefault(_sketch(rank), [])
        first = next((e for e in earlier if _identity(e) == _identity(rank)), None)
        if first is None:
            earlier.append(rank)
            kept.append(rank)
        else:
            lines.append(f"{rank.file}: the same rank as {first.file} (process {rank.pid}): counted once")
    return kept, lines


def distinct_names(ranks: list[RankResult]) -> None:
    """Name each rank whose name another input's rank has too by its folders as well, as
    few as tell them apart (in place)."""
    by_name: dict[str, list[RankResult]] = {}
    for rank in ranks:
        by_name.setdefault(rank.name, []).append(rank)
    for name, same in by_name.items():
        if len({r.file for r in same}) < 2:
            continue
        folders = {r.file: Path(r.file).parent.parts for r in same}
        for depth in range(1, max(len(p) for p in folders.values()) + 1):
            labels = {f: "/".join(p[-depth:]).lstrip("/") + "/" for f, p in folders.items()}
            if len(set(labels.values())) == len(labels):
                break
        else:  # (one folder: a recording and an export of another run named alike)
            labels = {f: Path(f).name + ":" for f in folders}
        for rank in same:
            rank.name = labels[rank.file] + name


def on_one_clock(ranks: list[RankResult]) -> None:
    """Every recording's rank on one wall clock as ``merge`` would put it (in place): in
    (input, pid) order, a rank's ``clock_offset`` becomes its clock's (:class:`Clocks`:
    the first offset met within 1 ms of it) and its steps move by the difference. Exports'
    ranks (no monotonic clock known: ``clock_offset`` None) stay at their session's start."""
    clocks = Clocks()
    for rank in sorted(ranks, key=lambda r: (r.file, r.pid)):
        if rank.clock_offset is None:
            continue
        move = clocks.clock_of(rank.clock_offset) - rank.clock_offset
        if move:
            rank.step_start, rank.step_end = rank.step_start + move, rank.step_end + move
            rank.clock_offset += move


def step_candidates(step: StepSpec, ranks: list[RankResult]) -> str:
    """Why ``step`` matched nothing, with what it could have been: the numbered ranges
    (``NAME N``) as ``NAME@DOMAIN``, most frequent first, else the most frequent names."""
    numbered: Counter = Counter()
    plain: Counter = Counter()
    for rank in ranks:
        for (domain, message), count in zip(rank.names, rank.count.tolist()):
            match = re.fullmatch(r"(.*\S) \d+", message)
            label = f"{match[1] if match else message}@{domain or 'default'}"
            (numbered if match else plain)[label] += count
    where = f"no range named {step.name!r} or '{step.name} N'" + (
        f" in domain {step.domain or 'default'!r}" if step.domain is not None else ""
    )
    if numbered:
        names = ", ".join(name for name, _ in numbered.most_common(8))
        return f"{where} in the inputs; their numbered ranges (NAME N): {names}"
    names = ", ".join(name for name, _ in plain.most_common(8))
    return f"{where} in the inputs, and no numbered range (NAME N); their most frequent ranges: {names}"
