"""Nsight Systems 2022.4's NVTX reports, from a recording or an SQLite file (ours or ``nsys export``'s).

``report --type`` names them after ``nsys stats --report``:

* ``pushpop_trace`` = ``nvtx_pushpop_trace`` (``nvtxpptrace``): every push/pop range with
  its start, end, duration, the time of its direct children (``DurChild``) and its own
  exclusive time (``DurNonChild`` = duration - DurChild), its stack level (0 = outermost),
  number of children, id, parent id, the stack of ids (``:outer:...:self``) and the name
  indented by ``--`` per level. Nesting is per thread, across domains, as nsys computes it:
  the parent of a range is the shortest push/pop range of the same thread that contains it
  (start <= start, end >= end). Rows in id order (= start order). Ids are the rows of
  ``NVTX_EVENTS`` (``rowid``); for a recording folder, the rows our SQLite export writes.
* ``pushpop_sum`` = ``nvtx_pushpop_sum`` (``nvtxppsum``), ``startend_sum`` =
  ``nvtx_startend_sum`` (``nvtxsesum``): per name, Time (%) of the total of the listed
  rows, total, instances, average, median, min, max and sample standard deviation, most
  total time first. Names are whole (no ``batch *`` grouping: nsys does not group).
* ``sum`` = ``nvtx_sum``: :mod:`.summary` (which lists ranges still open apart).

Column names, order and units are nsys's (``Start (ns)`` ...); in CSV the values are written
as nsys writes them (averages, medians, deviations and percentages rounded to one decimal by
SQLite's ``round()``, as nsys's SQL does; a root's ``ParentId`` is empty, as in nsys
2023.4; 2022.4 printed ``None``), so that
:meth:`Report.to_csv` on a file equals ``nsys stats --report X --format csv`` on it. As in
nsys, a range still open when the recording ended (``end`` NULL) counts until the last
timestamp of the file; the table says how many there were. Names are ``domain:message``.

``domains`` keeps the ranges of some domains (``"default"`` = NVTX's default domain) before
anything is computed: the report is the one of a capture of those domains only (nsys's
``--nvtx-domain-include``); ``top`` keeps the first N rows of a summary.
"""

from __future__ import annotations

import csv
import io
import sqlite3
from dataclasses import dataclass, field

import numpy as np

from ._table import format_table
from .names import shorten
from .ranges import Ranges, load_ranges

__all__ = [
    "REPORT_TYPES",
    "NSYS_REPORTS",
    "TRACE_COLUMNS",
    "SUM_COLUMNS",
    "Report",
    "pushpop_trace",
    "range_summary",
    "nsys_report",
]

#: ``report --type`` values; ``sum`` is :func:`.summary.summarize`.
REPORT_TYPES = ("sum", "pushpop_trace", "pushpop_sum", "startend_sum")
#: ``--type`` -> the name of nsys 2022.4's report script (``nsys stats --report``).
NSYS_REPORTS = {
    "sum": "nvtx_sum",
    "pushpop_trace": "nvtx_pushpop_trace",
    "pushpop_sum": "nvtx_pushpop_sum",
    "startend_sum": "nvtx_startend_sum",
}

TRACE_COLUMNS = (
    "Start (ns)",
    "End (ns)",
    "Duration (ns)",
    "DurChild (ns)",
    "DurNonChild (ns)",
    "Name",
    "PID",
    "TID",
    "Lvl",
    "NumChild",
    "RangeId",
    "ParentId",
    "RangeStack",
    "NameTree",
)
SUM_COLUMNS = (
    "Time (%)",
    "Total Time (ns)",
    "Instances",
    "Avg (ns)",
    "Med (ns)",
    "Min (ns)",
    "Max (ns)",
    "StdDev (ns)",
    "Range",
)


@dataclass
class Report:
    """One report: nsys's ``columns`` and ``rows`` (tuples of values as nsys's CSV writes
    them); ``open_ranges`` counts the ranges still open that it includes."""

    type: str
    columns: tuple[str, ...]
    rows: list[tuple] = field(default_factory=list)
    open_ranges: int = 0
    last_ns: int = 0

    def to_csv(self) -> str:
        """``nsys stats --format csv``'s text: the header, then one line per row."""
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(self.columns)
        writer.writerows(self.rows)  # None as an empty field, as nsys 2023.4
        return out.getvalue()

    def format(self) -> str:
        """Aligned text (names longer than 100 characters shortened in the middle, numbers
        with thousands separators), then a line on the ranges still open, if any."""
        if not self.rows:
            return "(no ranges)"
        names = {"Name", "Range", "NameTree"}
        lines = []
        for row in self.rows:
            cells = []
            for col, value in zip(self.columns, row):
                if value is None:
                    cells.append("-")
                elif col in names:
                    cells.append(shorten(str(value)))
                elif isinstance(value, float):
                    cells.append(f"{value:,.1f}")
                elif isinstance(value, int) and col not in ("PID", "TID", "RangeId", "ParentId"):
                    cells.append(f"{value:,}")
                else:
                    cells.append(str(value))
            lines.append(tuple(cells))
        text = format_table(self.columns, lines, left=("Name", "RangeStack", "NameTree"))
        if self.open_ranges:
            n = self.open_ranges
            text += (
                f"\n\n{n:,} range{'s' if n != 1 else ''} still open when the recording ended: "
                f"counted until the last timestamp ({self.last_ns:,} ns), as nsys does"
            )
        return text

    def top(self, n: int) -> "Report":
        """The first ``n`` rows (a summary's rows are sorted by total time)."""
        return Report(self.type, self.columns, self.rows[:n], self.open_ranges, self.last_ns)

    def __str__(self) -> str:
        return self.format()


# ----------------------------------------------------------------------------- reports
def pushpop_trace(ranges: Ranges) -> Report:
    """nsys's ``nvtx_pushpop_trace`` of the push/pop ranges of ``ranges``."""
    pp = ranges.select(ranges.push_pop)
    n = len(pp)
    # A range still open ends at the last timestamp of the push/pop ranges (nsys 2023.4's
    # nvtx_pushpop_trace; its summaries, and 2022.4's trace, take the file's last one).
    closed = ~pp.open
    last = max(int(pp.start.max()), int(pp.end[closed].max()) if closed.any() else 0) if n else 0
    pp.end = np.where(pp.open, last, pp.end)
    parent = np.full(n, -1, dtype=np.int64)
    dur = pp.end - pp.start
    # Per thread, in (start, end descending, id) order: the ranges that may still contain
    # the next one are those not yet ended; its parent is the shortest that contains it.
    order = np.lexsort((pp.row_id, -pp.end, pp.start, pp.tid, pp.pid))
    start, end, pid, tid = pp.start.tolist(), pp.end.tolist(), pp.pid.tolist(), pp.tid.tolist()
    durations = dur.tolist()
    thread = None
    active: list[int] = []
    for i in order.tolist():
        if (pid[i], tid[i]) != thread:
            thread, active = (pid[i], tid[i]), []
        s, e = start[i], end[i]
        active = [a for a in active if end[a] >= s]
        best = -1
        for a in active:  # earlier first: a tie keeps the earlier (outer) range
            if end[a] >= e and (best < 0 or durations[a] < durations[best]):
                best = a
        parent[i] = best
        active.append(i)
    has_parent = parent >= 0
    child_dur = np.zeros(n, dtype=np.int64)
    np.add.at(child_dur, parent[has_parent], dur[has_parent])
    num_child = np.bincount(parent[has_parent], minlength=n) if n else np.zeros(0, dtype=np.int64)
    # Levels and stacks: a parent comes before its children in the order above.
    level = [0] * n
    stack = [""] * n
    ids = pp.row_id.tolist()
    parents = parent.tolist()
    for i in order.tolist():
        p = parents[i]
        level[i] = level[p] + 1 if p >= 0 else 0
        stack[i] = f"{stack[p] if p >= 0 else ''}:{ids[i]}"
    names = pp.names
    rows = []
    for i in range(n):  # row-id order
        name = names[pp.name[i]]
        p = parents[i]
        rows.append(
            (
                start[i],
                end[i],
                durations[i],
                int(child_dur[i]),
                durations[i] - int(child_dur[i]),
                name,
                pid[i],
                tid[i],
                level[i],
                int(num_child[i]),
                ids[i],
                ids[p] if p >= 0 else None,
                stack[i],
                "--" * level[i] + name,
            )
        )
    return Report("pushpop_trace", TRACE_COLUMNS, rows, int(pp.open.sum()), last)


def range_summary(ranges: Ranges, style: str) -> Report:
    """nsys's ``nvtx_pushpop_sum`` (``style="pushpop"``) or ``nvtx_startend_sum``
    (``style="startend"``) of ``ranges``: per name, most total time first."""
    if style not in ("pushpop", "startend"):
        raise ValueError(f"style must be 'pushpop' or 'startend', not {style!r}")
    sel = ranges.select(ranges.push_pop if style == "pushpop" else ~ranges.push_pop)
    kind = "pushpop_sum" if style == "pushpop" else "startend_sum"
    if not len(sel):
        return Report(kind, SUM_COLUMNS, [], 0, ranges.last_ns)
    dur = sel.end - sel.start
    order = np.lexsort((dur, sel.name))
    dur, name = dur[order], sel.name[order]
    first = np.flatnonzero(np.r_[True, name[1:] != name[:-1]])
    counts = np.diff(np.r_[first, len(dur)])
    totals = np.add.reduceat(dur, first)
    grand = float(totals.sum())
    means = totals.astype(np.float64) / counts
    dur_f = dur.astype(np.float64)
    meds = (dur_f[first + (counts - 1) // 2] + dur_f[first + counts // 2]) / 2
    dev = dur_f - np.repeat(means, counts)
    std = np.where(counts > 1, np.sqrt(np.add.reduceat(dev * dev, first) / np.maximum(counts - 1, 1)), 0.0)
    labels = [sel.names[int(k)] for k in name[first]]
    rank = sorted(range(len(first)), key=lambda g: (-int(totals[g]), labels[g]))
    rounding = sqlite3.connect(":memory:")  # nsys rounds in SQL: SQLite's round(), not Python's
    try:
        rows = []
        for g in rank:
            pct = totals[g] * 100.0 / grand if grand else 0.0
            pct, avg, med, sd = rounding.execute(
                "SELECT round(?, 1), round(?, 1), round(?, 1), round(?, 1)",
                (float(pct), float(means[g]), float(meds[g]), float(std[g])),
            ).fetchone()
            rows.append(
                (
                    pct,
                    int(totals[g]),
                    int(counts[g]),
                    avg,
                    med,
                    int(dur[first[g]]),
                    int(dur[first[g] + counts[g] - 1]),
                    sd,
                    labels[g],
                )
            )
    finally:
        rounding.close()
    return Report(kind, SUM_COLUMNS, rows, int(sel.open.sum()), ranges.last_ns)


def nsys_report(source, report_type: str, *, domains=None, top: int | None = None, reader=None) -> Report:
    """The report ``report_type`` (``pushpop_trace``, ``pushpop_sum`` or ``startend_sum``)
    of a recording or SQLite file; ``domains``: only these domains' ranges (names;
    ``"default"``: NVTX's default domain); ``top``: the first N rows of a summary."""
    ranges = load_ranges(source, reader=reader)
    if domains is not None:
        ranges = ranges.only_domains(domains)
    if report_type == "pushpop_trace":
        report = pushpop_trace(ranges)
    elif report_type in ("pushpop_sum", "startend_sum"):
        report = range_summary(ranges, report_type.split("_")[0])
    else:
        raise ValueError(f"report type must be one of pushpop_trace, pushpop_sum, startend_sum, not {report_type!r}")
    return report.top(top) if top is not None else report
