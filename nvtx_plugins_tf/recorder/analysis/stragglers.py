"""The stragglers table of ``analyze`` (:mod:`.reduce` describes its columns), column by
column: numpy over the steps that have the same ranks at once, no Python work per step (a
long job has 100,000 of them)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from .._arrays import array, take_strings, unicode_strings
from ..recording.model import range_label
from .mapper import RankResult

__all__ = ["STRAGGLER_COLUMNS", "Named", "named_steps", "straggler_columns"]

_I64 = np.zeros(0, dtype=np.int64)


def _distinct(values: np.ndarray) -> np.ndarray:
    """``np.unique(values)`` (sorted), which imports numpy.ma to rule out a masked array (10 ms
    of the serial reduce, for numpy >= 2.3)."""
    ordered = np.sort(values)
    return ordered[np.concatenate(([True], ordered[1:] != ordered[:-1]))] if len(ordered) else ordered


def _median0(values: np.ndarray) -> np.ndarray:
    """``np.median(values, axis=0)``, equal to it (the middle value, or the mean of the two
    middle ones, as float64), by a sort along the ranks: half the time of numpy's copy and
    partition on [rank, step, name] (a handful of ranks, a million lanes)."""
    ordered = np.sort(values, axis=0)
    half = len(ordered) // 2
    return (ordered[half - 1] + ordered[half]) / 2 if len(ordered) % 2 == 0 else ordered[half].astype(np.float64)


#: The stragglers table's columns.
STRAGGLER_COLUMNS = ("Step", "Ranks", "Rank", "RankName", "StepDuration", "MedianStepDuration", "Excess", "TopRanges")


@dataclass
class Named:
    """The stragglers' rows (one per step two ranks or more have, by step) as columns: ``rank``
    (-1: nobody named), ``top``/``top_ns`` the three columns of ``labels`` (the range names)
    that account for most of the rank's excess and their ns above the median (those not
    above it: not among them)."""

    step: np.ndarray
    ranks: np.ndarray
    rank: np.ndarray
    duration: np.ndarray
    median: np.ndarray
    excess: np.ndarray
    top: np.ndarray
    top_ns: np.ndarray
    labels: list[str]


def _stragglers(ranks: list[RankResult], gid: list[np.ndarray], keys: list[tuple[str, str]]) -> dict[str, pa.Array]:
    """The stragglers table's columns (:data:`STRAGGLER_COLUMNS`), column by column: numpy over
    the steps that have the same ranks at once, no Python work per step."""
    return straggler_columns(ranks, named_steps(ranks, gid, keys))


def named_steps(ranks: list[RankResult], gid: list[np.ndarray], keys: list[tuple[str, str]]) -> Named:
    steps = max((r.n_steps for r in ranks), default=0)
    # work[rank, step, key]: the ranges' names any rank's work has, as columns
    used = _I64
    if steps:
        used = _distinct(np.concatenate([gid[i][r.work_rows] for i, r in enumerate(ranks)]).astype(np.int64))
    labels = [range_label(*keys[int(u)]) for u in used.tolist()]
    column = np.zeros(len(keys) + 1, dtype=np.int64)
    column[used] = np.arange(len(used))
    work = np.zeros((len(ranks), steps, len(used)), dtype=np.int64)
    durations = np.zeros((len(ranks), steps), dtype=np.int64)
    has = np.zeros((len(ranks), steps), dtype=bool)
    for i, r in enumerate(ranks):
        if len(r.work_rows):
            at = column[gid[i][r.work_rows]]
            if len(at) == len(used) and (at == np.arange(len(used))).all():  # (mostly: a slice, 3x faster)
                work[i, : len(r.step_work)] = r.step_work
            else:
                work[i, : len(r.step_work)][:, at] = r.step_work
        durations[i, : r.n_steps] = r.step_end - r.step_start
        has[i, : min(r.n_steps, len(r.step_work))] = True
    # a tie of two names' ns is broken as sorted((ns, (domain, message)), reverse=True) would
    key_rank = np.zeros(len(used), dtype=np.int64)
    key_rank[sorted(range(len(used)), key=lambda j: keys[int(used[j])])] = np.arange(len(used))
    parts: list[tuple] = []
    # the steps' medians over the ranks that have them, the steps grouped by those ranks (all
    # of them, mostly): numpy's reductions over a group at once, not a call each step
    for present, at in _groups(has):
        if len(present) < 2:
            continue  # (a step fewer than two ranks have: no row)
        whole = len(present) == len(ranks) and len(at) == steps
        w = work if whole else work[present][:, at, :]  # [rank, step, name] (no copy of the whole)
        median = _median0(w)
        above = w - median
        excess = np.maximum(above, 0, out=above).sum(axis=2)  # (in place: one [rank, step, name] fewer)
        del above
        best = np.argmax(excess, axis=0)
        most = excess[best, np.arange(len(at))]
        # no rank above the others (identical ranks), or a tie: nobody is named
        named = (most > 0) & (np.count_nonzero(excess == most, axis=0) == 1)
        mine = w[best, np.arange(len(at))] - median  # [step, name]: the named rank's ns above the median
        order = np.lexsort((np.broadcast_to(-key_rank[: mine.shape[1]], mine.shape), -mine), axis=-1)[:, :3]
        top_ns = np.take_along_axis(mine, order, axis=1)
        index = present[best]
        parts.append((
            at, np.full(len(at), len(present)), np.where(named, index, -1), durations[index, at],
            _median0(durations[present][:, at]).astype(np.int64), most, order, top_ns,
        ))  # fmt: skip
    cols = [np.concatenate(c) for c in zip(*parts)] if parts else [_I64] * 6 + [np.zeros((0, 3), np.int64)] * 2
    by_step = np.argsort(cols[0], kind="stable")
    step, n, rank, duration, median, most, top, top_ns = (c[by_step] for c in cols)
    return Named(step, n, rank, duration, median, most.astype(np.int64), top, top_ns, labels)


def _groups(has: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
    """The steps grouped by the ranks that have them (``has[rank, step]``): (those ranks,
    those steps) for each group; the steps every rank has first (mostly all), found without
    sorting the others' patterns (``np.unique(axis=0)`` sorts rows as bytes: 0.16 s at
    83,000 steps)."""
    if not has.shape[1]:
        return []
    everyone = has.all(axis=0)
    groups = [(np.arange(has.shape[0]), np.flatnonzero(everyone))] if everyone.any() else []
    rest = np.flatnonzero(~everyone)
    if len(rest):
        patterns, group_of = np.unique(has[:, rest].T, axis=0, return_inverse=True)
        group_of = group_of.reshape(-1)
        groups += [(np.flatnonzero(p), rest[group_of == g]) for g, p in enumerate(patterns)]
    return groups


#: rows from which TopRanges is joined by Arrow's string kernels (importing pyarrow.compute
#: costs 40 ms of CPU, which a small job does not spend: test_analyze_imports)
ARROW_TEXT_ROWS = 10_000


def _top_ranges(s: Named, nobody: np.ndarray, arrow_from: int = ARROW_TEXT_ROWS) -> pa.Array:
    """TopRanges: up to three ``NAME +NS`` joined by ``"; "``, those of a rank named and above
    the median (their ns ordered largest first: a part left out is never followed by one
    kept). From ``arrow_from`` rows by Arrow's string kernels (0.02 s at 83,000 steps, numpy's
    ``U`` arrays 0.16 s); the same text either way."""
    rows, parts = len(s.step), min(3, s.top.shape[1])
    if not (s.labels and rows and parts):
        return unicode_strings(np.zeros(rows, dtype=str))
    keep = [(s.top_ns[:, j] > 0) & ~nobody for j in range(parts)]
    if rows >= arrow_from:
        import pyarrow.compute as pc

        # (no null among the parts: pyarrow 25.0.1's binary_join_element_wise with
        # null_handling="skip" returns fewer rows than it is given where every part is null)
        # (the texts as Arrow scalars taken from an array: a Python str given to a kernel is
        # converted by pyarrow's scalar code, which imports pandas: 0.3-0.5 s of CPU)
        names = unicode_strings(np.array(s.labels, dtype=str))
        plus, semicolon, empty = unicode_strings(np.array([" +", "; ", ""], dtype=str))
        text = None
        for j in range(parts):
            ns = pc.cast(array(s.top_ns[:, j].astype(np.int64), pa.int64()), pa.string())
            part = pc.binary_join_element_wise(pc.take(names, array(s.top[:, j], pa.int64())), ns, plus)
            kept = array(keep[j], pa.bool_())
            text = (
                pc.if_else(kept, part, empty)
                if j == 0
                else pc.if_else(kept, pc.binary_join_element_wise(text, part, semicolon), text)
            )
        return text
    text = np.zeros(rows, dtype=str)
    names = np.array(s.labels, dtype=str)
    for j in range(parts):
        part = np.char.add(np.char.add(names[s.top[:, j]], " +"), s.top_ns[:, j].astype(np.int64).astype(str))
        text = np.where(keep[j], np.char.add(np.char.add(text, "; "), part) if j else part, text)
    return unicode_strings(text)


def straggler_columns(ranks: list[RankResult], s: Named) -> dict[str, pa.Array]:
    nobody = s.rank < 0
    return {
        "Step": array(s.step, pa.int64()),
        "Ranks": array(s.ranks, pa.int64()),
        "Rank": array(s.rank, pa.int64(), nobody),
        "RankName": take_strings([r.name for r in ranks], np.maximum(s.rank, 0), nobody),
        "StepDuration": array(s.duration, pa.int64(), nobody),
        "MedianStepDuration": array(s.median, pa.int64()),
        "Excess": array(s.excess, pa.int64(), nobody),
        "TopRanges": _top_ranges(s, nobody),
    }
