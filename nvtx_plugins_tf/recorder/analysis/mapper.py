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
import tempfile
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


def _ranges_of(path: Path) -> Ranges:
    from ..reports._nsys_parquet import is_parquetdir, parquetdir_to_sqlite

    if path.is_dir() and is_parquetdir(path):
        with tempfile.TemporaryDirectory(prefix="nvtx-tf-analyze-") as tmp:
            return load_ranges(parquetdir_to_sqlite(path, Path(tmp) / "export.sqlite"))
    return load_ranges(path)


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
    ranges = _ranges_of(path)
    label_domain = [ranges.domains[d] for d in range(len(ranges.domains))]
    # per name index: its domain and message
    name_domain = [""] * len(ranges.names)
    for n, d in zip(ranges.name.tolist(), ranges.domain.tolist()):
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
        mine = ranges.pid == pid
        # the input's name (a recording's names its rank: rank3.nvtxrec), with the pid when it
        # holds several processes
        name = stem if len(pids) == 1 else f"{stem}:{pid}"
        closed = mine & ~ranges.open
        result = RankResult(name, str(path), pid, int(mine.sum()), int((mine & ranges.open).sum()))
        dur = ranges.end - ranges.start
        names = ranges.name[closed]
        durations = dur[closed]
        order = np.argsort(names, kind="stable")
        names, durations = names[order], durations[order]
        bounds = np.flatnonzero(np.diff(names)) + 1
        for group in np.split(np.arange(len(names)), bounds) if len(names) else []:
            d = durations[group]
            n = int(names[group[0]])
            q1, median, q3 = np.percentile(d, [25, 50, 75]) if len(d) else (np.nan,) * 3
            result.stats.append(
                RangeStats(
                    name_domain[n],
                    name_message[n],
                    len(d),
                    int(d.sum()),
                    int(d.min()),
                    int(d.max()),
                    float(np.square(d - d.mean()).sum()),
                    float(q1),
                    float(median),
                    float(q3),
                    sketch.sketch(d),
                )  # fmt: skip
            )
        if chosen is not None:
            steps = closed & is_step[np.minimum(ranges.name, len(ranges.names))]
            base = ranges.epoch_ns if ranges.epoch_ns is not None else 0
            result.aligned = ranges.epoch_ns is not None
            result.step_name = str(chosen)
            starts, ends, ns = ranges.start[steps], ranges.end[steps], ranges.name[steps]
            inner = closed & ~steps
            inner_start, inner_end, inner_name = ranges.start[inner], ranges.end[inner], ranges.name[inner]
            longest_step = int((ends - starts).max()) if len(starts) else 0
            # Ranges longer than any step (the epoch around them ...) are few: checked one by one;
            # the others overlap a step [s, e) only if they start in [s - longest_step, e).
            long = (inner_end - inner_start) > longest_step
            long_start, long_end, long_name = inner_start[long], inner_end[long], inner_name[long]
            inner_start, inner_end, inner_name = inner_start[~long], inner_end[~long], inner_name[~long]
            by_start = np.argsort(inner_start, kind="stable")
            inner_start, inner_end, inner_name = inner_start[by_start], inner_end[by_start], inner_name[by_start]
            for i, k in enumerate(np.argsort(starts, kind="stable").tolist()):
                s, e = int(starts[k]), int(ends[k])
                result.steps.append((i, name_message[int(ns[k])], s + base, e + base))
                lo, hi = np.searchsorted(inner_start, [s - longest_step, e], side="left")
                cover = np.minimum(inner_end[lo:hi], e) - np.maximum(inner_start[lo:hi], s)
                names = inner_name[lo:hi]
                # (a range around the whole step, the epoch's, is not work inside it)
                long_cover = np.where(
                    (long_start <= s) & (long_end >= e), 0, np.minimum(long_end, e) - np.maximum(long_start, s)
                )
                work: dict[tuple[str, str], int] = {}
                for n, d in zip(
                    np.concatenate([names, long_name]).tolist(), np.concatenate([cover, long_cover]).tolist()
                ):
                    if d > 0:
                        key = (name_domain[n], name_message[n])
                        work[key] = work.get(key, 0) + d
                result.step_work.append(work)
        out.append(result)
    return out
