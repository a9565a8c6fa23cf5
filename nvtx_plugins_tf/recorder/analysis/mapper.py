"""One input of ``analyze`` (a recording, or an export: ours or nsys's) to its ranks' partial
results: the mapper of the map/reduce, as NVIDIA's recipes have one per report. It runs where
the input is read (this process, or a Dask worker) and returns small, picklable results
(:class:`RankResult`): per rank (a process of the input) and per range (domain, message) the count, sum, min, max,
sum of squared deviations, exact quartiles and a quantile sketch (:mod:`.sketch`) of the closed
ranges' durations; and the rank's steps (the ranges named by the step) on the wall clock.

Two implementations of the same rules: a recording is decoded and mapped natively in one
pass (:mod:`.native_mapper` over :mod:`._native`, cc_ops/reader/rank_stats.h: about 0.1 s
of a core per 1M ranges, a third of the numpy code's), and so is an export in nsys's schema, its NVTX_EVENTS streamed
into the same native columns batch by batch (nsys_inputs/batches.py: a parquetdir's Arrow
buffers in place); with ``NVTX_TF_ANALYZE_NATIVE=0`` both go through the numpy code here
(:func:`map_ranges`), the reference. tests/test_analyze_native.py and
tests/test_analyze_exports.py hold them to the same values.

Memory: one input's ranges at a time (at most about 200 bytes a range while the numpy code
reads it; about 110 natively, kept by the thread for its next input, plus a batch of an
export's rows), never all ranks'; a rank's result is columns of a few hundred KB (per range
name and per step).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..nsys_inputs.parquetdir import is_parquetdir
from ..nsys_inputs.sqlite import is_sqlite
from ..reports.ranges import Ranges, load_ranges
from . import _native, native_mapper, sketch
from .rank_result import (  # noqa: F401  (DEFAULT_STEPS, StepSpec, RankResult: named here too)
    DEFAULT_STEPS,
    RankResult,
    StepSpec,
    _check_readable,
    _choose_step,
    _damage,
    _release_arrow_memory,
    _split,
    _stem,
)

__all__ = ["StepSpec", "RankResult", "map_input", "DEFAULT_STEPS"]


def _is_export(path: Path) -> bool:
    return (path.is_file() and is_sqlite(path)) or (path.is_dir() and is_parquetdir(path))


def map_input(
    path, step: StepSpec | None = None, *, inclusive: bool = False, name_stats: bool = True
) -> list[RankResult]:
    """The rank results of one input (see the module docstring). Raises OSError or ValueError
    (naming the input) when it cannot be read. A recording is mapped natively
    (:mod:`.native_mapper`, unless ``NVTX_TF_ANALYZE_NATIVE=0``), an export (and a recording
    without it) by the numpy code below: the same values. ``inclusive``: with each step's
    inclusive work (``step_incl``, compare's); else it is left empty (0 x 0). ``name_stats``
    False (watch's reads): a recording mapped natively without the per-name statistics
    (``count`` to ``sketch_count`` left empty; ``names``, the steps and their work the same);
    the numpy code and an export's mapping compute them anyway."""
    path = Path(path)
    export = _is_export(path)  # (once: a few stat calls and reads of the file's head)
    if export and _native.enabled():
        out = native_mapper.map_export(path, step, inclusive)
        if out is not None:
            return out
    if export:
        ranges = load_ranges(path, row_ids=False)
        _release_arrow_memory()
        return map_ranges(path, ranges, step, inclusive)
    if _native.enabled():
        return native_mapper.map_recording(path, step, inclusive, name_stats)
    from ..recording.reader import reading

    with reading(path) as reader:
        ranges = load_ranges(path, reader=reader, row_ids=False)
        _check_readable(reader)
        damage = _damage(reader)
    out = map_ranges(path, ranges, step, inclusive)
    for result in out:
        result.damage = damage
    return out


def map_ranges(path: Path, ranges: Ranges, step: StepSpec | None = None, inclusive: bool = False) -> list[RankResult]:
    """The rank results of the ranges of the input ``path``, by numpy (``inclusive``: with
    ``step_incl``)."""
    label_domain = [ranges.domains[d] for d in range(len(ranges.domains))]
    # per name index: its domain and message
    name_domain = [""] * len(ranges.names)
    first = np.full(len(ranges.names), -1, dtype=np.int64)  # a range of each name (no sort)
    first[ranges.name[::-1]] = np.arange(len(ranges) - 1, -1, -1)
    for n, i in enumerate(first.tolist()):
        if i >= 0:
            name_domain[n] = label_domain[int(ranges.domain[i])]
    name_message = [_split(label, name_domain[i]) for i, label in enumerate(ranges.names)]
    chosen = _choose_step(ranges, name_domain, name_message, step)
    hits = chosen.mask(name_domain, name_message) if chosen is not None else np.zeros(len(ranges.names), dtype=bool)
    is_step = np.append(hits, False)
    pids = np.unique(ranges.pid).tolist()
    stem = _stem(path)
    out = []
    if chosen is not None:
        threads = ranges.pid.astype(np.int64) * (1 << 24) + ranges.tid
        parents = _parents(ranges.start, ranges.end, threads, ranges.push_pop & ~ranges.open)
    for pid in pids:
        mine = ranges.pid == pid if len(pids) > 1 else np.ones(len(ranges), dtype=bool)
        # the input's name (a recording's names its rank: rank3.nvtxrec), with the pid when it
        # holds several processes
        name = stem if len(pids) == 1 else f"{stem}:{pid}"
        closed = mine & ~ranges.open
        result = RankResult(name, str(path), pid, int(mine.sum()), int((mine & ranges.open).sum()))
        rows = _range_stats(result, ranges.name[closed], (ranges.end - ranges.start)[closed])
        result.names = [(name_domain[n], name_message[n]) for n in rows.tolist()]
        if chosen is not None:
            steps = closed & is_step[np.minimum(ranges.name, len(ranges.names))]
            # on one wall clock: the input's anchor, and this process's clock's (merge's rule)
            base = (ranges.epoch_ns if ranges.epoch_ns is not None else 0) + ranges.clock_shift.get(pid, 0)
            result.aligned = ranges.epoch_ns is not None
            if result.aligned and ranges.origin_ns is not None:  # (a recording: its monotonic time 0)
                result.clock_offset = base - ranges.origin_ns
            result.step_name = str(chosen)
            order = np.argsort(ranges.start[steps], kind="stable")
            starts, ends = ranges.start[steps][order], ranges.end[steps][order]
            result.step_row = np.searchsorted(rows, ranges.name[steps][order])
            result.step_start, result.step_end = starts + base, ends + base
            inner = np.flatnonzero(closed & ~steps)
            # a range's work is its exclusive time: less its children's (push/pop, same thread)
            at = np.full(len(ranges), -1, dtype=np.int64)
            at[inner] = np.arange(len(inner))
            parent = parents[inner]
            work_names, result.step_work, incl = _step_work(
                starts, ends, ranges.start[inner], ranges.end[inner], ranges.name[inner], len(ranges.names),
                np.where(parent >= 0, at[np.maximum(parent, 0)], -1),
            )  # fmt: skip
            if inclusive:
                result.step_incl = incl
            result.work_rows = np.searchsorted(rows, work_names)
        out.append(result)
    return out


def _range_stats(result: RankResult, names: np.ndarray, durations: np.ndarray) -> np.ndarray:
    """Fill ``result``'s per-name columns from the closed ranges' ``names`` (indexes) and
    ``durations``; returns the name indexes of its rows (ascending)."""
    if not len(names):
        return np.zeros(0, dtype=np.int64)
    order = np.lexsort((durations, names))
    names, d = names[order], durations[order].astype(np.int64)
    starts = np.concatenate([[0], np.flatnonzero(np.diff(names)) + 1])
    counts = np.diff(np.append(starts, len(d)))
    result.count = counts
    result.sum = np.add.reduceat(d, starts)
    means = result.sum / counts
    result.m2 = np.add.reduceat(np.square(d - np.repeat(means, counts)), starts)
    result.min, result.max = d[starts], d[starts + counts - 1]
    quartiles = []
    for q in (0.25, 0.5, 0.75):
        pos = q * (counts - 1)
        lo = np.floor(pos).astype(np.int64)
        hi = np.minimum(lo + 1, counts - 1)
        a, b = d[starts + lo].astype(np.float64), d[starts + hi].astype(np.float64)
        quartiles.append(a + (b - a) * (pos - lo))
    result.q1, result.median, result.q3 = quartiles
    result.sketch_row, result.sketch_key, result.sketch_count = sketch.sketch_groups(d, starts)
    return names[starts]


def _parents(start, end, thread, nested) -> np.ndarray:
    """Each range's parent (index; -1: none): the innermost range of its thread still open
    when it opened, among the ``nested`` ones (push/pop: nested on their thread by NVTX's
    rules; the others have none and are none's). At equal starts the longer is the outer.

    >>> start, end, nested = np.array([0, 1, 2, 5, 0]), np.array([9, 4, 3, 6, 9]), np.array([1, 1, 1, 1, 0]) > 0
    >>> _parents(start, end, np.zeros(5, int), nested).tolist()
    [-1, 0, 1, 0, -1]
    """
    parent = np.full(len(start), -1, dtype=np.int64)
    eligible = np.flatnonzero(nested)
    order = eligible[np.lexsort((-end[eligible], start[eligible], thread[eligible]))]
    for group in np.split(order, np.flatnonzero(np.diff(thread[order])) + 1) if len(order) else []:
        s, e = start[group], end[group]
        # depth = ranges opened before it (its place) - those closed by its start; a 0 ns range
        # at its start sorted after it (or itself) has not closed before it opened
        here = np.arange(len(group))
        depth = here - np.searchsorted(np.sort(e), s, side="right")
        if (s == e).any():
            zero = np.concatenate([[0], np.cumsum(s == e)])
            depth += zero[np.searchsorted(s, s, side="right")] - zero[here]
        for d in range(1, int(depth.max()) + 1):
            up, child = np.flatnonzero(depth == d - 1), np.flatnonzero(depth == d)
            k = np.searchsorted(up, child) - 1  # the last one a level up opened before it
            parent[group[child[k >= 0]]] = group[up[k[k >= 0]]]
    return parent


def _step_work(
    starts, ends, inner_start, inner_end, inner_name, n_names: int, inner_parent=None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(the names that cover any step, ``work[step, j]``: the ns of step ``step`` (``starts``/
    ``ends``, in start order) that the ranges named ``names[j]`` cover, exclusive of their
    children's: ``inner_parent``, each range's parent among them, -1 for none; ``incl[step,
    j]``: the same inclusive of the children's). A range
    longer than every step that covers a whole step (the epoch's) is not work inside it (nor
    is its time less its children's)."""
    n_steps = len(starts)
    if not n_steps:
        return np.zeros(0, dtype=np.int64), np.zeros((0, 0), dtype=np.int64), np.zeros((0, 0), dtype=np.int64)
    longest_step = int((ends - starts).max())
    covered = np.zeros(n_steps * n_names, dtype=np.int64)  # step * n_names + name -> ns
    inclusive = np.zeros(n_steps * n_names, dtype=np.int64)  # (the children's time kept)
    long = (inner_end - inner_start) > longest_step
    if inner_parent is None:
        inner_parent = np.full(len(inner_start), -1, dtype=np.int64)
    # the name a range's time is taken from: its parent's (not one longer than every step)
    parent_name = np.where((inner_parent >= 0) & ~long[np.maximum(inner_parent, 0)],
                           inner_name[np.maximum(inner_parent, 0)], -1)  # fmt: skip

    def add(step_index, range_index, around_excluded):
        s, e = starts[step_index], ends[step_index]
        rs, re_ = inner_start[range_index], inner_end[range_index]
        cover = np.minimum(re_, e) - np.maximum(rs, s)
        if around_excluded:
            cover = np.where((rs <= s) & (re_ >= e), 0, cover)
        keep = cover > 0
        up = keep & (parent_name[range_index] >= 0)
        cells = np.concatenate([step_index[keep] * n_names + inner_name[range_index][keep],
                                step_index[up] * n_names + parent_name[range_index][up]])  # fmt: skip
        ns = np.concatenate([cover[keep], -cover[up]]).astype(np.float64)  # (exact below 2**53 ns)
        covered[:] += np.rint(np.bincount(cells, weights=ns, minlength=len(covered))).astype(np.int64)
        own = cells[: int(keep.sum())]
        inclusive[:] += np.rint(np.bincount(own, weights=ns[: len(own)], minlength=len(covered))).astype(np.int64)

    # the few ranges longer than any step (the epoch around them ...): against every step
    for r in np.flatnonzero(long).tolist():
        add(np.arange(n_steps), np.full(n_steps, r), True)
    # the others: from the last step starting at or before the range, forward while any
    # still overlaps, and backward while an earlier step may still reach into the range
    short = np.flatnonzero(~long)
    base = np.searchsorted(starts, inner_start[short], side="right") - 1
    reach = np.maximum.accumulate(ends)  # the latest end of the steps up to each one
    for direction in (1, -1):
        k = np.maximum(base, 0) if direction == 1 else base - 1
        rows = short
        while len(rows):
            valid = (k >= 0) & (k < n_steps)
            if direction == 1:
                valid &= starts[np.clip(k, 0, n_steps - 1)] < inner_end[rows]
            else:
                valid &= reach[np.clip(k, 0, n_steps - 1)] > inner_start[rows]
            rows, k = rows[valid], k[valid]
            if len(rows):
                add(k, rows, False)
            k = k + direction
    work, incl = covered.reshape(n_steps, n_names), inclusive.reshape(n_steps, n_names)
    used = np.flatnonzero(incl.any(axis=0))  # (a name's exclusive time is 0 where its inclusive is)
    return used, work[:, used], incl[:, used]
