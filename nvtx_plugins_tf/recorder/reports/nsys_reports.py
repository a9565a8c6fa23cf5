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
SQLite's ``round()``, as nsys's SQL does; a root's ``ParentId`` is ``None``), so that
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
from pathlib import Path

import numpy as np

from ._decoder import FLAG_UNCLOSED, KIND_MARK, KIND_PUSH_POP, KIND_START_END
from ._nsys_sqlite import open_nsys_sqlite, split_gtid
from ._table import format_table
from .recording import EVENT_PUSH_POP, EVENT_START_END
from .summary import DEFAULT_DOMAIN, _shorten, is_sqlite, range_label, selects_domain

__all__ = [
    "REPORT_TYPES",
    "NSYS_REPORTS",
    "TRACE_COLUMNS",
    "SUM_COLUMNS",
    "DEFAULT_DOMAIN",
    "Ranges",
    "Report",
    "load_ranges",
    "sqlite_domain_names",
    "pushpop_trace",
    "range_summary",
    "nsys_report",
]

#: ``report --type`` values; ``sum`` is :func:`nvtx_plugins_tf.recorder.summary.summarize`.
REPORT_TYPES = ("sum", "pushpop_trace", "pushpop_sum", "startend_sum")
#: ``--type`` -> the name of nsys 2022.4's report script (``nsys stats --report``).
NSYS_REPORTS = {
    "sum": "nvtxsum",
    "pushpop_trace": "nvtxpptrace",
    "pushpop_sum": "nvtxppsum",
    "startend_sum": "nvtxsesum",
}

# nsys's NVTXT event types (ranges imported from NVTXT files), read like 59/60.
_EVENT_NVTXT_PUSH_POP, _EVENT_NVTXT_START_END = 70, 71

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
class Ranges:
    """The push/pop and start/end ranges of a file as arrays, one element per range, in
    row-id order. ``end`` of a range still open (``open``) is :attr:`last_ns`, as in nsys."""

    row_id: np.ndarray
    start: np.ndarray
    end: np.ndarray
    open: np.ndarray
    push_pop: np.ndarray
    pid: np.ndarray
    tid: np.ndarray
    name: np.ndarray  #: index into :attr:`names`
    domain: np.ndarray  #: index into :attr:`domains`
    names: list[str]  #: ``domain:message`` (or the message in the default domain)
    domains: list[str]  #: '' = NVTX's default domain
    last_ns: int = 0  #: the last timestamp of the file (where open ranges end)

    def __len__(self) -> int:
        return len(self.row_id)

    def domain_names(self) -> list[str]:
        """The domains of the file as ``--domain`` names them (``default`` first)."""
        return [DEFAULT_DOMAIN] + sorted({d for d in self.domains if d} - {DEFAULT_DOMAIN})

    def select(self, mask: np.ndarray) -> "Ranges":
        """The ranges where ``mask`` is true."""
        arrays = {k: getattr(self, k)[mask] for k in ("row_id", "start", "end", "open", "push_pop", "pid", "tid")}
        return Ranges(
            **arrays,
            name=self.name[mask],
            domain=self.domain[mask],
            names=self.names,
            domains=self.domains,
            last_ns=self.last_ns,
        )

    def only_domains(self, domains) -> "Ranges":
        """The ranges of the domains named in ``domains`` (``"default"``: NVTX's default domain)."""
        wanted = set(domains)
        keep = np.array([selects_domain(wanted, d) for d in self.domains] + [False], dtype=bool)
        return self.select(keep[np.minimum(self.domain, len(self.domains))])


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
        writer.writerows(tuple("None" if v is None else v for v in row) for row in self.rows)  # as nsys
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
                    cells.append(_shorten(str(value)))
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


# ----------------------------------------------------------------------------- loading
def load_ranges(source, *, reader=None) -> Ranges:
    """The ranges of a recording (folder or segment; ``reader``: an open
    :class:`~.reader.RecordingReader` of it, read here) or of an SQLite file in nsys's
    export schema. Raises ValueError for an SQLite file without ``NVTX_EVENTS``."""
    if reader is None and Path(source).is_file() and is_sqlite(source):
        return _from_sqlite(Path(source))
    from .reader import reading

    with reading(source, reader) as reader:
        return _from_recording(reader)


def sqlite_domain_names(path) -> list[str]:
    """The names of the domains of an SQLite file in nsys's schema (``''`` = the default
    domain, always there): each domain id's first creation in its process, as nsys names it."""
    with open_nsys_sqlite(path) as db:
        names = set(db.domain_names().values())
    return [""] + sorted(n for n in names if n)


def _from_sqlite(path: Path) -> Ranges:
    with open_nsys_sqlite(path) as db:
        domain_of = db.domain_names()
        (last,) = db.con.execute("SELECT max(max(start), coalesce(max(end), max(start))) FROM NVTX_EVENTS").fetchone()
        types = (EVENT_PUSH_POP, EVENT_START_END, _EVENT_NVTXT_PUSH_POP, _EVENT_NVTXT_START_END)
        rows = db.con.execute(
            f"SELECT e.rowid, e.start, e.end, e.eventType, e.globalTid, {db.text}, e.domainId FROM NVTX_EVENTS e "
            f"{db.join} WHERE e.eventType IN {types} ORDER BY e.rowid"
        ).fetchall()
    last = int(last or 0)
    names: dict[str, int] = {}
    domains: dict[str, int] = {"": 0}
    for dname in sorted(set(domain_of.values()) - {None}):  # every domain of the file, used or not
        domains.setdefault(dname, len(domains))
    n = len(rows)
    out = {k: np.zeros(n, dtype=np.int64) for k in ("row_id", "start", "end", "pid", "tid", "name", "domain")}
    is_open = np.zeros(n, dtype=bool)
    push_pop = np.zeros(n, dtype=bool)
    for i, (rowid, start, end, etype, gtid, message, dom_id) in enumerate(rows):
        pid, tid = split_gtid(gtid)
        dname = domain_of.of(dom_id, pid) or ""
        out["row_id"][i] = rowid
        out["start"][i] = start
        out["end"][i] = last if end is None else end
        is_open[i] = end is None
        push_pop[i] = etype in (EVENT_PUSH_POP, _EVENT_NVTXT_PUSH_POP)
        out["pid"][i] = pid
        out["tid"][i] = tid
        out["name"][i] = names.setdefault(range_label(dname, message), len(names))
        out["domain"][i] = domains.setdefault(dname, len(domains))
    return Ranges(open=is_open, push_pop=push_pop, names=list(names), domains=list(domains), last_ns=last, **out)


def _from_recording(reader) -> Ranges:
    """Ranges with the times and row ids our SQLite export (:mod:`.export_sqlite`) writes:
    session-relative times, every row (marks and definitions too) numbered in (start, end
    descending, open last) order."""
    parts = []
    all_start, all_end = [], []  # every row of the export, for its row numbers
    offset = 0
    for rows in reader.batches():
        all_start.append(rows["start_ns"])
        closed = ((rows["flags"] & FLAG_UNCLOSED) == 0) & (rows["kind"] != KIND_MARK)
        all_end.append(np.where(closed, rows["end_ns"], np.iinfo(np.int64).min))
        is_range = (rows["kind"] == KIND_PUSH_POP) | (rows["kind"] == KIND_START_END)
        index = np.flatnonzero(is_range) + offset
        offset += len(rows)
        r = rows[is_range]
        parts.append((index, r[["start_ns", "end_ns", "flags", "kind", "pid", "tid", "message", "domain"]]))
    origin = reader.origin_ns
    strings = reader.strings()
    domain_names = reader.domain_names()
    table = reader.domain_table()

    def process_start(pid):
        return reader.processes[pid].start_ns if pid in reader.processes else origin

    # Definition rows of the export: domains, category names, thread names (all without an end).
    defs = [(d.create_ns or process_start(d.pid)) for d in table[1:]]
    for dom, _ in reader.category_names():
        defs.append(process_start(table[dom].pid if dom else next(iter(reader.processes), 0)))
    defs += [process_start(t.pid) for t in reader._decoder.thread_names() if t.override]
    none = np.iinfo(np.int64).min
    starts = np.concatenate(all_start + [np.array(defs, dtype=np.int64)]) if all_start or defs else np.zeros(0, int)
    ends = np.concatenate(all_end + [np.full(len(defs), none, dtype=np.int64)]) if all_start or defs else starts
    starts = starts.astype(np.int64) - origin
    shift = min(0, int(starts.min())) if len(starts) else 0  # the export moves a time before 0 to 0
    closed = ends != none
    ends = np.where(closed, ends - origin - shift, none)
    starts -= shift
    last = int(max(starts.max(), ends[closed].max() if closed.any() else 0)) if len(starts) else 0
    # Row number = rank in the export's ORDER BY start, end DESC (NULL ends last).
    order = np.lexsort((np.where(closed, -ends, np.iinfo(np.int64).max), starts))
    rank = np.empty(len(order), dtype=np.int64)
    rank[order] = np.arange(1, len(order) + 1)

    index = np.concatenate([p[0] for p in parts]) if parts else np.zeros(0, dtype=np.int64)
    r = np.concatenate([p[1] for p in parts]) if parts else None
    n = len(index)
    if n == 0:
        empty = np.zeros(0, dtype=np.int64)
        return Ranges(
            empty, empty, empty, empty.astype(bool), empty.astype(bool), empty, empty, empty, empty, [], [""], last
        )
    is_open = (r["flags"] & FLAG_UNCLOSED) != 0
    start = r["start_ns"].astype(np.int64) - origin - shift
    end = np.where(is_open, last, r["end_ns"].astype(np.int64) - origin - shift)
    # Labels: unique (domain name, message); domains of equal name merge (as in the summary).
    dom_ids: dict[str, int] = {}
    dom_map = np.array([dom_ids.setdefault(d, len(dom_ids)) for d in domain_names] or [0], dtype=np.int64)
    dom = dom_map[np.minimum(r["domain"].astype(np.int64), len(dom_map) - 1)]
    msg = r["message"].astype(np.int64)
    key = dom * (len(strings) + 1) + msg
    uniq, name = np.unique(key, return_inverse=True)
    dom_list = list(dom_ids)
    messages = strings + [""]  # (an unknown string: an empty message, as the summary has it)
    names = [range_label(dom_list[int(k) // (len(strings) + 1)], messages[int(k) % (len(strings) + 1)]) for k in uniq]
    row_id = rank[index]
    order = np.argsort(row_id, kind="stable")
    return Ranges(
        row_id=row_id[order],
        start=start[order],
        end=end[order],
        open=is_open[order],
        push_pop=(r["kind"] == KIND_PUSH_POP)[order],
        pid=r["pid"].astype(np.int64)[order],
        tid=r["tid"].astype(np.int64)[order],
        name=name.astype(np.int64)[order],
        domain=dom[order],
        names=names,
        domains=dom_list or [""],
        last_ns=last,
    )


# ----------------------------------------------------------------------------- reports
def pushpop_trace(ranges: Ranges) -> Report:
    """nsys's ``nvtx_pushpop_trace`` of the push/pop ranges of ``ranges``."""
    pp = ranges.select(ranges.push_pop)
    n = len(pp)
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
    return Report("pushpop_trace", TRACE_COLUMNS, rows, int(pp.open.sum()), ranges.last_ns)


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
