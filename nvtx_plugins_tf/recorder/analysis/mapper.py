"""One input of ``analyze`` (a recording, or an export: ours or nsys's) to its ranks' partial
results: the mapper of the map/reduce, as NVIDIA's recipes have one per report. It runs where
the input is read (this process, or a Dask worker) and returns small, picklable results:
per rank (a process of the input) and per range (domain, message) the count, sum, min, max,
sum of squared deviations, exact quartiles and a quantile sketch (:mod:`.sketch`) of the closed
ranges' durations; and the rank's steps (the ranges named by the step) on the wall clock.

Memory: one input's ranges at a time (about 80 bytes a range), never all ranks'.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..reports.ranges import Ranges, load_ranges
from . import sketch

__all__ = ["StepSpec", "RangeStats", "RankResult", "map_input", "DEFAULT_STEPS"]

#: the step ranges our Keras callback and session hooks emit, tried in this order
DEFAULT_STEPS = ("batch@Keras", "step@Keras", "step", "batch")


@dataclass(frozen=True)
class StepSpec:
    """Which ranges are steps: message ``name`` or ``name N`` (a number), in ``domain``
    (None: any; ``""``: the default domain)."""

    name: str
    domain: str | None = None

    @classmethod
    def parse(cls, text: str) -> "StepSpec":
        name, _, domain = text.partition("@")
        return cls(name.strip(), (domain.strip() if domain.strip() != "default" else "") if _ else None)

    def matches(self, domain: str, message: str) -> bool:
        if self.domain is not None and domain != self.domain:
            return False
        return message == self.name or bool(re.fullmatch(re.escape(self.name) + r" \d+", message))

    def __str__(self) -> str:
        return self.name if self.domain is None else f"{self.name}@{self.domain or 'default'}"


@dataclass
class RangeStats:
    domain: str
    message: str
    count: int
    sum: int
    min: int
    max: int
    m2: float  # sum of squared deviations from the mean (merged exactly: Chan et al.)
    q1: float
    median: float
    q3: float
    sketch: dict[int, int]


@dataclass
class RankResult:
    """One rank: ``name`` (the input's name without its suffix, with :pid when it holds
    several processes), ``file`` (the input), its ranges' statistics and its steps
    (``steps``: rows of (step index, message, start, end) in wall-clock ns, or session ns
    when the input has no wall-clock anchor: ``aligned`` False)."""

    name: str
    file: str
    pid: int
    events: int
    open_ranges: int
    stats: list[RangeStats] = field(default_factory=list)
    steps: list[tuple[int, str, int, int]] = field(default_factory=list)
    step_name: str = ""
    aligned: bool = True
    #: per step (as ``steps``): (domain, message) -> ns of the step that the ranges of that
    #: name cover on this rank, any thread (their overlap with the step: a read that began
    #: before the step counts for the part the step waited; the step ranges and the ranges
    #: around the whole step, as the epoch's, left out)
    step_work: list[dict[tuple[str, str], int]] = field(default_factory=list)


def _split(label: str, domain: str) -> str:
    return label[len(domain) + 1 :] if domain and label.startswith(domain + ":") else label


def _choose_step(ranges: Ranges, domains: list[str], messages: list[str], step: StepSpec | None) -> StepSpec | None:
    if step is not None:
        return step
    present = set(zip(domains, messages))
    for text in DEFAULT_STEPS:
        spec = StepSpec.parse(text)
        if any(spec.matches(d, m) for d, m in present):
            return spec
    return None


def map_input(path, step: StepSpec | None = None) -> list[RankResult]:
    """The rank results of one input (see the module docstring). Raises OSError or ValueError
    (naming the input) when it cannot be read."""
    path = Path(path)
    ranges = load_ranges(path, row_ids=False)
    label_domain = [ranges.domains[d] for d in range(len(ranges.domains))]
    # per name index: its domain and message
    name_domain = [""] * len(ranges.names)
    first = np.unique(ranges.name, return_index=True)[1]
    for n, d in zip(ranges.name[first].tolist(), ranges.domain[first].tolist()):
        name_domain[n] = label_domain[d]
    name_message = [_split(label, name_domain[i]) for i, label in enumerate(ranges.names)]
    chosen = _choose_step(ranges, name_domain, name_message, step)
    is_step = np.array(
        [chosen is not None and chosen.matches(name_domain[i], name_message[i]) for i in range(len(ranges.names))]
        + [False],
        dtype=bool,
    )
    pids = sorted(set(ranges.pid.tolist()))
    stem = path.name[: -len(".nvtxrec")] if path.name.endswith(".nvtxrec") else path.stem
    out = []
    for pid in pids:
        mine = ranges.pid == pid if len(pids) > 1 else np.ones(len(ranges), dtype=bool)
        # the input's name (a recording's names its rank: rank3.nvtxrec), with the pid when it
        # holds several processes
        name = stem if len(pids) == 1 else f"{stem}:{pid}"
        closed = mine & ~ranges.open
        result = RankResult(name, str(path), pid, int(mine.sum()), int((mine & ranges.open).sum()))
        result.stats = _range_stats(ranges.name[closed], (ranges.end - ranges.start)[closed], name_domain, name_message)
        if chosen is not None:
            steps = closed & is_step[np.minimum(ranges.name, len(ranges.names))]
            base = ranges.epoch_ns if ranges.epoch_ns is not None else 0
            result.aligned = ranges.epoch_ns is not None
            result.step_name = str(chosen)
            order = np.argsort(ranges.start[steps], kind="stable")
            starts, ends, ns = ranges.start[steps][order], ranges.end[steps][order], ranges.name[steps][order]
            inner = closed & ~steps
            result.steps = [
                (i, name_message[n], s + base, e + base)
                for i, (n, s, e) in enumerate(zip(ns.tolist(), starts.tolist(), ends.tolist()))
            ]
            result.step_work = _step_work(
                starts, ends, ranges.start[inner], ranges.end[inner], ranges.name[inner], name_domain, name_message
            )
        out.append(result)
    return out


def _range_stats(names: np.ndarray, durations: np.ndarray, name_domain, name_message) -> list[RangeStats]:
    """Per name (ascending index): the statistics of its ``durations``; quartiles as
    ``np.percentile``'s linear interpolation."""
    if not len(names):
        return []
    order = np.lexsort((durations, names))
    names, d = names[order], durations[order].astype(np.int64)
    starts = np.concatenate([[0], np.flatnonzero(np.diff(names)) + 1])
    counts = np.diff(np.append(starts, len(d)))
    sums = np.add.reduceat(d, starts)
    means = sums / counts
    m2 = np.add.reduceat(np.square(d - np.repeat(means, counts)), starts)
    quartiles = []
    for q in (0.25, 0.5, 0.75):
        pos = q * (counts - 1)
        lo = np.floor(pos).astype(np.int64)
        hi = np.minimum(lo + 1, counts - 1)
        a, b = d[starts + lo].astype(np.float64), d[starts + hi].astype(np.float64)
        quartiles.append(a + (b - a) * (pos - lo))
    sketches = sketch.sketch_groups(d, starts)
    mins, maxs = d[starts], d[starts + counts - 1]
    return [
        RangeStats(
            name_domain[n],
            name_message[n],
            int(c),
            int(s),
            int(lo),
            int(hi),
            float(v),
            float(q1),
            float(q2),
            float(q3),
            sk,
        )  # fmt: skip
        for n, c, s, lo, hi, v, q1, q2, q3, sk in zip(
            names[starts].tolist(),
            counts.tolist(),
            sums.tolist(),
            mins.tolist(),
            maxs.tolist(),
            m2.tolist(),
            *(q.tolist() for q in quartiles),
            sketches,
        )  # fmt: skip
    ]


def _step_work(starts, ends, inner_start, inner_end, inner_name, name_domain, name_message) -> list[dict]:
    """Per step (``starts``/``ends``, in start order): (domain, message) -> the ns of the step
    that the ranges of that name cover. A range longer than every step that covers a whole
    step (the epoch's) is not work inside it."""
    n_steps = len(starts)
    if not n_steps:
        return []
    longest_step = int((ends - starts).max())
    n_names = len(name_domain)
    covered = np.zeros(n_steps * n_names, dtype=np.int64)  # step * n_names + name -> ns

    def add(step_index, range_index, around_excluded):
        s, e = starts[step_index], ends[step_index]
        rs, re_ = inner_start[range_index], inner_end[range_index]
        cover = np.minimum(re_, e) - np.maximum(rs, s)
        if around_excluded:
            cover = np.where((rs <= s) & (re_ >= e), 0, cover)
        keep = cover > 0
        np.add.at(covered, step_index[keep] * n_names + inner_name[range_index][keep], cover[keep])
        return cover

    long = (inner_end - inner_start) > longest_step
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
    work: list[dict[tuple[str, str], int]] = [{} for _ in range(n_steps)]
    for flat in np.flatnonzero(covered).tolist():
        step, n = divmod(flat, n_names)
        work[step][(name_domain[n], name_message[n])] = int(covered[flat])
    return work
