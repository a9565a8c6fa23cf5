"""The push/pop and start/end ranges nsys's reports (:mod:`.nsys_reports`) are computed from,
as arrays (:class:`Ranges`): read from a recording -- with the row ids and session-relative
times our SQLite export writes, so that a recording and its export give the same report --
or from an export in nsys's schema, ours or ``nsys export``'s: an SQLite file, or a parquetdir
(:mod:`..nsys_inputs.ranges`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..exports.nsys_tables import anchor_process, session_start_utc
from ..nsys_inputs.parquetdir import is_parquetdir
from ..nsys_inputs.ranges import parquetdir_columns, sqlite_columns, unique_inverse
from ..nsys_inputs.sqlite import is_sqlite, open_nsys_sqlite
from ..recording._decoder import FLAG_UNCLOSED, KIND_MARK, KIND_PUSH_POP, KIND_START_END
from ..recording.clocks import Clocks
from ..recording.model import range_label
from .names import DEFAULT_DOMAIN, selects_domain

__all__ = ["Ranges", "load_ranges", "sqlite_domain_names", "session_times", "merged_domains", "key_labels"]


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
    epoch_ns: int | None = None  #: wall-clock time (ns since the Unix epoch) of time 0; None: unknown
    #: a recording's: its CLOCK_MONOTONIC time of time 0 (None: an export, whose times are its
    #: session's only)
    origin_ns: int | None = None
    #: pid -> ns to add to that process's times besides ``epoch_ns``: a process of the recording
    #: on another monotonic clock than the first (another host, a time namespace), by the
    #: processes' realtime anchors (as ``merge`` aligns them); absent: on the first's clock
    clock_shift: dict[int, int] = field(default_factory=dict)

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
            epoch_ns=self.epoch_ns,
            origin_ns=self.origin_ns,
            clock_shift=self.clock_shift,
        )

    def only_domains(self, domains) -> "Ranges":
        """The ranges of the domains named in ``domains`` (``"default"``: NVTX's default domain)."""
        wanted = set(domains)
        keep = np.array([selects_domain(wanted, d) for d in self.domains] + [False], dtype=bool)
        return self.select(keep[np.minimum(self.domain, len(self.domains))])


def load_ranges(source, *, reader=None, row_ids: bool = True) -> Ranges:
    """The ranges of a recording (folder or segment; ``reader``: an open
    :class:`~..recording.reader.RecordingReader` of it, read here) or of an export in nsys's
    schema (an SQLite file; a parquetdir, whose row ids are the rows' places in its
    ``NVTX_EVENTS.parquet``). Raises ValueError for an SQLite file without ``NVTX_EVENTS``.
    ``row_ids`` False: a recording's ranges are numbered in the order they are read, not as
    the export's rows (what needs no row ids saves sorting every row)."""
    if reader is None and Path(source).is_file() and is_sqlite(source):
        return Ranges(**sqlite_columns(Path(source)))
    if reader is None and Path(source).is_dir() and is_parquetdir(source):
        return Ranges(**parquetdir_columns(Path(source)))
    from ..recording.reader import reading

    with reading(source, reader) as reader:
        return _from_recording(reader, row_ids)


def sqlite_domain_names(path) -> list[str]:
    """The names of the domains of an SQLite file in nsys's schema (``''`` = the default
    domain, always there): each domain id's first creation in its process, as nsys names it."""
    with open_nsys_sqlite(path) as db:
        names = set(db.domain_names().values())
    return [""] + sorted(n for n in names if n)


def _from_recording(reader, row_ids: bool = True) -> Ranges:
    """Ranges with the times and row ids our SQLite export (:mod:`..exports.sqlite`) writes:
    session-relative times, every row (marks and definitions too) numbered in (start, end
    descending, open last) order (``row_ids`` False: in the order read)."""
    fields = ("start_ns", "end_ns", "flags", "kind", "pid", "tid", "message", "domain")
    columns: dict[str, list] = {f: [] for f in fields}  # of the range rows, each its own compact array
    indexes = []
    all_start, all_end = [], []  # every row of the export, for its row numbers (row_ids)
    none = np.iinfo(np.int64).min
    lowest, highest = np.iinfo(np.int64).max, none  # over every row: the first start, the last time
    offset = 0
    for rows in reader.batches():
        closed = ((rows["flags"] & FLAG_UNCLOSED) == 0) & (rows["kind"] != KIND_MARK)
        ends = np.where(closed, rows["end_ns"], none)
        if len(rows):
            lowest = min(lowest, int(rows["start_ns"].min()))
            highest = max(highest, int(rows["start_ns"].max()), int(ends.max()))
        if row_ids:
            all_start.append(rows["start_ns"])
            all_end.append(ends)
        picked = np.flatnonzero((rows["kind"] == KIND_PUSH_POP) | (rows["kind"] == KIND_START_END))
        indexes.append(picked + offset)
        offset += len(rows)
        for f in fields:
            columns[f].append(rows[f][picked])
        del rows, closed, ends
    origin = reader.origin_ns
    strings = reader.strings()
    defs, shift, last = session_times(reader, lowest, highest, offset)
    if row_ids:  # row number = rank in the export's ORDER BY start, end DESC (NULL ends last)
        starts = np.concatenate(all_start + [np.array(defs, dtype=np.int64)]).astype(np.int64)
        ends = np.concatenate(all_end + [np.full(len(defs), none, dtype=np.int64)])
        order = np.lexsort((np.where(ends != none, -ends, np.iinfo(np.int64).max), starts))
        del starts, ends
        rank = np.empty(len(order), dtype=np.int64)
        rank[order] = np.arange(1, len(order) + 1)
    else:
        rank = np.arange(1, offset + len(defs) + 1)

    index = np.concatenate(indexes) if indexes else np.zeros(0, dtype=np.int64)
    r = {f: np.concatenate(columns.pop(f)) for f in fields} if indexes else None  # (one field's parts at a time)
    n = len(index)
    if n == 0:
        empty = np.zeros(0, dtype=np.int64)
        return Ranges(
            empty, empty, empty, empty.astype(bool), empty.astype(bool), empty, empty, empty, empty, [], [""], last,
            session_start_utc(reader, origin + shift),
        )  # fmt: skip
    is_open = (r["flags"] & FLAG_UNCLOSED) != 0
    start = r["start_ns"].astype(np.int64) - origin - shift
    end = np.where(is_open, last, r["end_ns"].astype(np.int64) - origin - shift)
    dom_map, dom_list = merged_domains(reader)
    dom = dom_map[np.minimum(r["domain"].astype(np.int64), len(dom_map) - 1)]
    msg = r["message"].astype(np.int64)
    key = dom * (len(strings) + 1) + msg
    uniq, name = unique_inverse(key)
    names = key_labels(uniq, dom_list, strings)
    row_id = rank[index]
    order = np.argsort(row_id, kind="stable") if row_ids else slice(None)  # (else: already in order)
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
        epoch_ns=session_start_utc(reader, origin + shift),
        origin_ns=origin + shift,
        clock_shift=_clock_shifts(reader),
    )


def session_times(reader, lowest: int, highest: int, rows: int) -> tuple[list[int], int, int]:
    """(the definition rows' times, the shift, the last time) of our SQLite export of the
    recording ``reader`` has read, whose ``rows`` rows span ``lowest`` (first start) to
    ``highest`` (last time): the export's times are ``ns - origin - shift``."""
    origin = reader.origin_ns
    table = reader.domain_table()

    def process_start(pid):
        return reader.processes[pid].start_ns if pid in reader.processes else origin

    # Definition rows of the export: domains, category names, thread names (all without an end).
    defs = [(d.create_ns or process_start(d.pid)) for d in table[1:]]
    for category in reader.category_table():  # (not their names: a live read holds no list of every string)
        dom = category.domain
        defs.append(process_start(table[dom].pid if dom else next(iter(reader.processes), 0)))
    defs += [process_start(t.pid) for t in reader._decoder.thread_names() if t.override]
    if defs:
        lowest, highest = min(lowest, min(defs)), max(highest, max(defs))
    any_row = rows > 0 or bool(defs)
    shift = min(0, lowest - origin) if any_row else 0  # the export moves a time before 0 to 0
    last = max(highest - origin - shift, 0) if any_row else 0
    return defs, shift, last


def merged_domains(reader) -> tuple[np.ndarray, list[str]]:
    """(the decoder's domain index -> the merged domain's, the merged domains' names):
    domains of equal name merge (as in the summary)."""
    dom_ids: dict[str, int] = {}
    dom_map = np.array([dom_ids.setdefault(d, len(dom_ids)) for d in reader.domain_names()] or [0], dtype=np.int64)
    return dom_map, list(dom_ids)


def key_labels(keys, dom_list: list[str], strings: list[str]) -> list[str]:
    """The labels of name keys (merged domain * (strings + 1) + message): unique (domain
    name, message)."""
    messages = strings + [""]  # (an unknown string: an empty message, as the summary has it)
    return [range_label(dom_list[int(k) // (len(strings) + 1)], messages[int(k) % (len(strings) + 1)]) for k in keys]


def _clock_shifts(reader) -> dict[int, int]:
    """pid -> its clock's offset from the clock of the process the session start is read
    from (:func:`~..exports.nsys_tables.anchor_process`), for the processes on another clock,
    by merge's rule (:class:`~..recording.clocks.Clocks`: offsets within 1 ms are one clock)."""
    first = anchor_process(reader)
    if first is None:
        return {}
    clocks = Clocks()
    anchor = clocks.clock_of(first.clock_offset)
    anchored = sorted((p for p in reader.processes.values() if p.anchored), key=lambda p: p.start_ns)
    shifts = {p.pid: clocks.clock_of(p.clock_offset) - anchor for p in anchored}
    return {pid: d for pid, d in shifts.items() if d}
