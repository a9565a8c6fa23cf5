"""The summary ``analyze`` prints: at most ten lines on the run, its steps, the rank the
others waited for and the ranges behind it (from the stragglers' numbers, :class:`~.stragglers.Named`)."""

from __future__ import annotations

import statistics

import numpy as np

from .mapper import RankResult
from .reduce import Tables

__all__ = ["summary_lines"]


def _median(values: np.ndarray) -> float:
    """``statistics.median(values.tolist())`` of integers, the same value and type (the middle
    one, or the two middle ones' exact mean), by a partition: no Python int per step."""
    n = len(values)
    if n % 2:
        return int(np.partition(values, n // 2)[n // 2])
    low, high = np.partition(values, (n // 2 - 1, n // 2))[n // 2 - 1 : n // 2 + 1].tolist()
    return (low + high) / 2


def _ms(ns: float) -> str:
    return f"{ns / 1e6:,.2f} ms"


def _clock_lines(stepped: list[RankResult]) -> list[str]:
    """A line when the recordings' ranks ran on several clocks (hosts, time namespaces): how
    many, and each one's offset (realtime - monotonic) against the first rank's (up to three);
    one naming the ranks without a wall-clock anchor among others that have one."""
    first: dict[int, str] = {}
    for rank in stepped:
        if rank.clock_offset is not None:
            first.setdefault(rank.clock_offset, rank.name)
    lines = []
    if len(first) >= 2:
        (base, base_name), *others = first.items()
        apart = ", ".join(f"{name} {(offset - base) / 1e9:+,.6f} s" for offset, name in others[:3])
        more = f" and {len(others) - 3} more" if len(others) > 3 else ""
        lines.append(
            f"clocks: {len(first)}, on one wall clock by their realtime anchors as merge aligns them "
            f"(pace's ClockOffsetNs); against {base_name}'s: {apart}{more}"
        )
    lost = [r.name for r in stepped if not r.aligned]
    if lost and len(lost) < len(stepped):
        more = f" and {len(lost) - 3} more" if len(lost) > 3 else ""
        lines.append(
            f"no wall-clock anchor (an older recorder, or a garbled header): {', '.join(lost[:3])}{more}; "
            "their pace times are their own sessions', not on the others' timeline"
        )
    return lines


def summary_lines(tables: Tables) -> list[str]:
    """At most ten lines: the run, its steps, the slowest rank and the ranges behind it."""
    ranks = tables.ranks
    events = sum(r.events for r in ranks)
    files = len({r.file for r in ranks})
    lines = [f"{len(ranks)} rank(s) in {files} input(s), {events:,} ranges" + (
        f"; {len(tables.left_out)} input(s) left out (first: {tables.left_out[0]})" if tables.left_out else ""
    )]  # fmt: skip
    stepped = [r for r in ranks if r.n_steps]
    if not stepped:
        lines.append("no step ranges (--step NAME[@DOMAIN] names them): no pace")
        return lines
    medians = {r.name: _median(r.step_end - r.step_start) for r in stepped}
    overall = statistics.median(medians.values())
    steps = max(r.n_steps for r in stepped)
    lines.append(f"steps: {stepped[0].step_name!r}, up to {steps} per rank; median step {_ms(overall)}")
    lines += _clock_lines(stepped)
    named = tables.named
    if named is None or not len(named.step):
        lines.append("one rank with steps: no straggler to name")
        return lines
    total = len(named.step)
    rows = np.flatnonzero(named.rank >= 0)
    if not len(rows):
        lines.append(f"no straggler: in none of {total} steps was one rank's work above the others'")
        return lines
    counts = np.bincount(named.rank[rows], minlength=len(ranks))
    first = np.full(len(ranks), total)  # (the step each rank is first named in: ties in that order)
    np.minimum.at(first, named.rank[rows], rows)
    most = int(counts.max())
    tied = np.flatnonzero(counts == most)
    tied = tied[np.argsort(first[tied], kind="stable")]
    if len(tied) > 1:
        names = ", ".join(ranks[int(rank)].name for rank in tied.tolist())
        lines.append(f"no single straggler: {names} each the rank the others waited for in {most} of {total} steps")
        return lines
    worst = int(tied[0])
    mine = named.rank == worst
    lines.append(
        f"straggler: {ranks[worst].name}, the rank the others waited for in {most} of {total} steps "
        f"(median excess {_ms(_median(named.excess[mine]))} a step)"
    )
    # the ns of each range above the median, summed over the rank's steps by the label shown
    # (first met first among equal sums, as a dictionary fills)
    above = named.top_ns[mine]
    shown = above > 0
    if shown.any():
        label_of: dict[str, int] = {}
        ids = np.array([label_of.setdefault(label, len(label_of)) for label in named.labels], dtype=np.int64)
        labels = list(label_of)
        which = ids[named.top[mine][shown]]
        sums = np.bincount(which, weights=above[shown].astype(np.int64), minlength=len(labels))
        met = np.full(len(labels), len(which))
        np.minimum.at(met, which, np.arange(len(which)))
        top = [i for i in np.lexsort((met, -sums)).tolist() if met[i] < len(which)][:3]
        lines.append(
            "its ranges above the median rank, per step: "
            + ", ".join(f"{labels[i]} +{_ms(int(sums[i]) / int(mine.sum()))}" for i in top)
        )
    return lines
