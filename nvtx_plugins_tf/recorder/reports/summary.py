"""Range statistics like ``nsys stats --report nvtx_sum``.

Works from a recording (directory or segment file) or from an SQLite file in Nsight
Systems' schema (ours or a real ``nsys export``). Push/pop and start/end ranges that
closed are grouped by (domain, message, style) -- and by process with
``by_process=True`` -- and the range is shown as ``domain:message`` when a domain is
set. Time (%) is the share of the total time of all rows (of the same process when
grouping by process). StdDev is the sample standard deviation (0 for one instance).

Ranges still open when the recording ended (the process was killed, or never closed
them) have no duration and are not in the table; :attr:`Summary.open_ranges` counts them
by the same grouping and :meth:`Summary.format` lists them under the table.

Names are grouped by default (``group_names=False`` keeps them apart): a family of at
least GROUP_MIN names that differ only in a trailing number ('batch 0' ... 'batch 99') is
one row, 'batch *'; TensorFlow's TraceMe-style names with metadata ('XlaPass:#name=...#', up
to ~200 characters under XLA) are grouped by what precedes the metadata and its ':'
('XlaPass'). In the table, names longer than NAME_WIDTH are shortened in the middle;
:meth:`Summary.to_csv` has them whole.
"""

from __future__ import annotations

import csv
import dataclasses
import io
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..._printable import printable
from ..nsys_inputs.sqlite import is_sqlite, open_nsys_sqlite, pid_sql
from ..recording._decoder import FLAG_UNCLOSED, KIND_PUSH_POP, KIND_START_END
from ..recording.model import EVENT_PUSH_POP, EVENT_START_END, range_label
from ._table import format_table
from .names import group_names, selects_domain, shorten

__all__ = ["SummaryRow", "OpenRanges", "Summary", "RecordingSummary", "summarize", "summarize_arrays"]

STYLE_NAMES = {0: "PushPop", 1: "StartEnd"}


@dataclass(frozen=True)
class SummaryRow:
    time_percent: float
    total_ns: int
    instances: int
    avg_ns: float
    med_ns: float
    min_ns: int
    max_ns: int
    stddev_ns: float
    style: str
    range: str
    pid: int | None = None


@dataclass(frozen=True)
class OpenRanges:
    """Ranges of one group that were still open when the recording ended."""

    count: int
    style: str
    range: str
    pid: int | None = None


@dataclass
class Summary:
    rows: list[SummaryRow]
    by_process: bool = False
    #: Groups of ranges still open at the end of the recording, most numerous first.
    open_ranges: list[OpenRanges] = field(default_factory=list)
    #: Command line of each process (by pid), where the source has it.
    processes: dict[int, str] = field(default_factory=dict)

    @property
    def open_count(self) -> int:
        return sum(o.count for o in self.open_ranges)

    COLUMNS = (
        "Time (%)",
        "Total Time (ns)",
        "Instances",
        "Avg (ns)",
        "Med (ns)",
        "Min (ns)",
        "Max (ns)",
        "StdDev (ns)",
        "Style",
        "Range",
    )

    def top(self, n: int) -> Summary:
        """The first ``n`` rows (of each process with ``by_process``): the most total time;
        the ranges left open stay listed."""
        kept, seen = [], Counter()
        for row in self.rows:
            seen[row.pid] += 1
            if seen[row.pid] <= n:
                kept.append(row)
        return dataclasses.replace(self, rows=kept)

    def format(self) -> str:
        """The table as text, nsys style, then the ranges left open (if any)."""
        text = self._format_table() if self.rows else "(no closed ranges)"
        if self.open_ranges:
            n = self.open_count
            lines = [
                f"{n:,} range{'s' if n != 1 else ''} still open when the recording ended (not in the table above):"
            ]
            width = max(len(f"{o.count:,}") for o in self.open_ranges)
            for o in self.open_ranges:
                pid = f"  PID {self._process(o.pid)}" if self.by_process else ""
                lines.append(printable(f"  {o.count:>{width},}  {o.style:<8}{pid}  {shorten(o.range)}"))
            text += "\n\n" + "\n".join(lines)
        return text

    def _format_table(self) -> str:
        header = list(self.COLUMNS)
        if self.by_process:
            header.insert(-1, "PID")
        lines = []
        for r in self.rows:
            cells = [
                f"{r.time_percent:.1f}",
                f"{r.total_ns:,}",
                f"{r.instances:,}",
                f"{r.avg_ns:,.1f}",
                f"{r.med_ns:,.1f}",
                f"{r.min_ns:,}",
                f"{r.max_ns:,}",
                f"{r.stddev_ns:,.1f}",
                r.style,
            ]
            if self.by_process:
                cells.append(self._process(r.pid))
            cells.append(shorten(r.range))
            lines.append(cells)
        return format_table(tuple(header), [tuple(c) for c in lines], left=("Style", "PID"))

    def _process(self, pid) -> str:
        """'pid (command line)', the command line shortened, or the pid alone."""
        cmdline = self.processes.get(pid, "")
        return f"{pid} ({shorten(cmdline, 40)})" if cmdline else str(pid)

    def to_csv(self) -> str:
        """The table as CSV, names whole (open ranges as rows with 'open' instances)."""
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        header = list(self.COLUMNS) + (["PID", "Command"] if self.by_process else [])
        writer.writerow(header)
        for r in self.rows:
            row = [
                f"{r.time_percent:.3f}",
                r.total_ns,
                r.instances,
                f"{r.avg_ns:.1f}",
                f"{r.med_ns:.1f}",
                r.min_ns,
                r.max_ns,
                f"{r.stddev_ns:.1f}",
                r.style,
                r.range,
            ]
            writer.writerow(row + ([r.pid, self.processes.get(r.pid, "")] if self.by_process else []))
        return out.getvalue()

    def __str__(self) -> str:
        return self.format()


def summarize_arrays(durations, labels, label_ids, styles, pids=None, group: bool = True) -> Summary:
    """Summary from flat arrays: duration (ns), label index into ``labels``, style (0/1), pid;
    ``group``: see :func:`group_names`."""
    dur = np.asarray(durations, dtype=np.int64)
    lab = np.asarray(label_ids, dtype=np.int64)
    if group and len(labels):
        labels, remap = np.unique(np.array(group_names(list(labels)), dtype=object), return_inverse=True)
        labels = labels.tolist()
        lab = remap[lab]
    sty = np.asarray(styles, dtype=np.int64)
    by_process = pids is not None
    pid = np.asarray(pids, dtype=np.int64) if by_process else np.zeros(len(dur), dtype=np.int64)
    if len(dur) == 0:
        return Summary([], by_process)
    order = np.lexsort((dur, sty, lab, pid))
    dur, lab, sty, pid = dur[order], lab[order], sty[order], pid[order]
    change = np.ones(len(dur), dtype=bool)
    change[1:] = (lab[1:] != lab[:-1]) | (sty[1:] != sty[:-1]) | (pid[1:] != pid[:-1])
    starts = np.flatnonzero(change)
    counts = np.diff(np.append(starts, len(dur)))
    dur_f = dur.astype(np.float64)
    totals = np.add.reduceat(dur, starts)
    means = totals / counts
    mins = dur[starts]
    maxs = dur[starts + counts - 1]
    meds = (dur_f[starts + (counts - 1) // 2] + dur_f[starts + counts // 2]) / 2
    dev = dur_f - np.repeat(means, counts)
    sq = np.add.reduceat(dev * dev, starts)
    std = np.where(counts > 1, np.sqrt(sq / np.maximum(counts - 1, 1)), 0.0)
    gpid = pid[starts]
    if by_process:
        uniq, inv = np.unique(gpid, return_inverse=True)
        per = np.zeros(len(uniq))
        np.add.at(per, inv, totals)
        denom = per[inv]
    else:
        denom = np.full(len(totals), float(totals.sum()))
    pct = np.where(denom > 0, 100.0 * totals / np.maximum(denom, 1), 0.0)
    rank = np.lexsort((lab[starts], -totals, gpid)) if by_process else np.lexsort((lab[starts], -totals))
    rows = [
        SummaryRow(
            time_percent=float(pct[i]),
            total_ns=int(totals[i]),
            instances=int(counts[i]),
            avg_ns=float(means[i]),
            med_ns=float(meds[i]),
            min_ns=int(mins[i]),
            max_ns=int(maxs[i]),
            stddev_ns=float(std[i]),
            style=STYLE_NAMES.get(int(sty[starts[i]]), "?"),
            range=labels[int(lab[starts[i]])],
            pid=int(gpid[i]) if by_process else None,
        )
        for i in rank.tolist()
    ]
    return Summary(rows, by_process)


def _from_recording(path, by_process: bool, reader=None, group: bool = True, domains=None) -> Summary:
    from ..exports.one_pass import feed
    from ..recording.reader import reading

    with reading(path, reader) as reader:
        sink = RecordingSummary(reader, by_process=by_process, group=group, domains=domains)
        feed(reader, [sink])
        return sink.finish()


class RecordingSummary:
    """:func:`summarize` of a recording batch by batch (a sink of :mod:`..exports.one_pass`):
    ``add(rows)`` per batch, ``finish()`` -> :class:`Summary` once the reader is read;
    ``domains``: only the ranges of these domains (see :func:`selects_domain`)."""

    def __init__(self, reader, *, by_process: bool = False, group: bool = True, domains=None):
        self.reader, self.by_process, self.group = reader, by_process, group
        self.domains = None if domains is None else set(domains)
        self._lists = ([], [], [], [], [], [])  # durations, messages, domains, kinds, pids, open rows

    def add(self, rows) -> None:
        by_process = self.by_process
        durs, msgs, doms, kinds, pids, open_rows = self._lists
        is_range = (rows["kind"] == KIND_PUSH_POP) | (rows["kind"] == KIND_START_END)
        if self.domains is not None:
            names = self.reader.domain_names()
            kept = np.array([selects_domain(self.domains, n) for n in names] + [False], dtype=bool)
            is_range &= kept[np.minimum(rows["domain"].astype(np.int64), len(names))]
        unclosed = (rows["flags"] & FLAG_UNCLOSED) != 0
        if (is_range & unclosed).any():
            open_rows.append(rows[is_range & unclosed][["message", "domain", "kind", "pid"]])
        keep = is_range & ~unclosed
        r = rows[keep]
        durs.append(r["end_ns"] - r["start_ns"])
        msgs.append(r["message"].astype(np.int64))
        doms.append(r["domain"].astype(np.int64))
        kinds.append((r["kind"] == KIND_START_END).astype(np.int64))
        if by_process:
            pids.append(r["pid"])

    def abort(self) -> None:
        pass

    def finish(self) -> Summary:
        reader, by_process, group = self.reader, self.by_process, self.group
        durs, msgs, doms, kinds, pids, open_rows = self._lists
        strings = reader.strings()
        domain_names = reader.domain_names()
        open_groups = Counter()
        for r in open_rows:
            for msg_i, dom_i, kind, pid in zip(
                r["message"].tolist(), r["domain"].tolist(), r["kind"].tolist(), r["pid"].tolist()
            ):
                dname = domain_names[dom_i] if dom_i < len(domain_names) else ""
                open_groups[
                    (
                        range_label(dname, strings[msg_i] if msg_i < len(strings) else ""),
                        int(kind == KIND_START_END),
                        pid if by_process else None,
                    )
                ] += 1
        open_ranges = _open_list(open_groups, group)
        processes = {pid: info.cmdline for pid, info in dict(reader.processes).items()}
        if not durs or not sum(len(d) for d in durs):
            return Summary([], by_process, open_ranges, processes)
        msg = np.concatenate(msgs)
        dom = np.concatenate(doms)
        # Label id = unique (domain name, message) pair; domains of equal name merge.
        dom_name_ids = {}
        dom_map = np.array([dom_name_ids.setdefault(n, len(dom_name_ids)) for n in domain_names], dtype=np.int64)
        key = dom_map[dom] * (len(strings) + 1) + msg
        uniq, inv = np.unique(key, return_inverse=True)
        names_by_id = {v: k for k, v in dom_name_ids.items()}
        labels = [
            range_label(names_by_id[int(k) // (len(strings) + 1)], strings[int(k) % (len(strings) + 1)]) for k in uniq
        ]
        summary = summarize_arrays(
            np.concatenate(durs),
            labels,
            inv,
            np.concatenate(kinds),
            np.concatenate(pids) if by_process else None,
            group=group,
        )
        summary.open_ranges = open_ranges
        summary.processes = processes
        return summary


def _open_list(groups: Counter, group: bool = True) -> list[OpenRanges]:
    """(label, style, pid) -> count as a list, most numerous first, then by pid and name."""
    if group and groups:
        keys = list(groups)
        renamed = Counter()
        for (label, style, pid), name in zip(keys, group_names([k[0] for k in keys])):
            renamed[(name, style, pid)] += groups[(label, style, pid)]
        groups = renamed
    items = sorted(groups.items(), key=lambda kv: (-kv[1], kv[0][2] or 0, kv[0][0], kv[0][1]))
    return [OpenRanges(count=n, style=STYLE_NAMES[style], range=label, pid=pid) for (label, style, pid), n in items]


def _from_sqlite(path, by_process: bool, group: bool = True, domains=None) -> Summary:
    with open_nsys_sqlite(path) as db:
        con = db.con
        con.execute("PRAGMA temp_store=MEMORY")
        domain_names = db.domain_names()
        text_expr, join = db.text, db.join
        where = f"WHERE e.eventType IN ({EVENT_PUSH_POP}, {EVENT_START_END}) AND e.end IS NOT NULL"
        dpid_expr = pid_sql("e.globalTid")
        pid_expr = dpid_expr if by_process else "0"
        # SQLite factorizes (text, domain, pid, style) into group ids; Python only sees
        # one small tuple per range and one row per group.
        con.execute("CREATE TEMP TABLE grp (t TEXT, d INTEGER, p INTEGER, dp INTEGER, y INTEGER)")
        con.execute(
            f"INSERT INTO temp.grp SELECT DISTINCT {text_expr}, e.domainId, {pid_expr}, "
            f"{dpid_expr}, e.eventType FROM NVTX_EVENTS e {join} {where}"
        )
        con.execute("CREATE INDEX temp.grp_idx ON grp (t, d, p, dp, y)")
        groups = con.execute("SELECT rowid, t, d, p, dp, y FROM temp.grp").fetchall()
        cur = con.execute(
            f"SELECT e.end - e.start, g.rowid FROM NVTX_EVENTS e {join} JOIN temp.grp g "
            f"ON g.t IS {text_expr} AND g.d IS e.domainId AND g.p = {pid_expr} "
            f"AND g.dp = {dpid_expr} AND g.y = e.eventType {where}"
        )
        parts = []
        while True:
            batch = cur.fetchmany(500000)
            if not batch:
                break
            parts.append(np.array(batch, dtype=np.int64).reshape(-1, 2))
        data = np.concatenate(parts) if parts else np.zeros((0, 2), dtype=np.int64)
        # Group -> (label id, style, pid).
        label_ids: dict[str, int] = {}
        max_gid = max((g[0] for g in groups), default=0)
        g_label = np.zeros(max_gid + 1, dtype=np.int64)
        g_style = np.zeros(max_gid + 1, dtype=np.int64)
        g_pid = np.zeros(max_gid + 1, dtype=np.int64)
        g_kept = np.ones(max_gid + 1, dtype=bool)
        for gid, text, dom_id, pid, dpid, etype in groups:
            dname = domain_names.of(dom_id, dpid)
            g_kept[gid] = selects_domain(domains, dname)
            label = range_label(dname, text)
            g_label[gid] = label_ids.setdefault(label, len(label_ids))
            g_style[gid] = 0 if etype == EVENT_PUSH_POP else 1
            g_pid[gid] = pid
        gids = data[:, 1][g_kept[data[:, 1]]]
        data = data[g_kept[data[:, 1]]]
        summary = summarize_arrays(
            data[:, 0], list(label_ids), g_label[gids], g_style[gids], g_pid[gids] if by_process else None, group=group
        )
        if db.has_table("PROCESSES"):
            summary.processes = {pid: name or "" for pid, name in con.execute("SELECT pid, name FROM PROCESSES")}
        # Open ranges: a start but no end (how our export writes a range left open).
        open_groups = Counter()
        for text, dom_id, dpid, etype, n in con.execute(
            f"SELECT {text_expr}, e.domainId, {dpid_expr}, e.eventType, count(*) "
            f"FROM NVTX_EVENTS e {join} WHERE e.eventType IN ({EVENT_PUSH_POP}, {EVENT_START_END}) AND e.end IS NULL "
            "GROUP BY 1, 2, 3, 4"
        ):
            dname = domain_names.of(dom_id, dpid)
            if not selects_domain(domains, dname):
                continue
            open_groups[
                (range_label(dname, text), 0 if etype == EVENT_PUSH_POP else 1, dpid if by_process else None)
            ] += n
        summary.open_ranges = _open_list(open_groups, group)
        return summary


def summarize(source, *, by_process: bool = False, reader=None, group: bool = True, domains=None) -> Summary:
    """Summary of a recording dir/segment or an SQLite export (``.sqlite``); ``group``:
    numbered names and TraceMe metadata share rows (see :func:`group_names`); ``domains``:
    only the ranges of these domain names (``"default"``: NVTX's default domain; None: all)."""
    if reader is None and Path(source).is_file() and is_sqlite(source):
        return _from_sqlite(source, by_process, group, domains)
    return _from_recording(source, by_process, reader, group, domains)
