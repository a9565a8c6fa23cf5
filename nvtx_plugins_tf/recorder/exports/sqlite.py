"""Export a recording to SQLite in Nsight Systems' export schema (nsys 2022.4.2, schema 3.0.0).

The file has every table and column of ``nsys export --type sqlite`` of an NVTX-only
capture by Nsight Systems 2022.4.2 (``EXPORT_SCHEMA_VERSION`` 3.0.0), created with nsys's
own ``CREATE TABLE`` statements and ``ENUM_*`` rows (shipped in :mod:`._nsys_schema`,
generated from a real export). Tables we have no data for stay empty:
``ProcessStreams`` (we do not capture the program's output), ``PROFILER_OVERHEAD``,
``TARGET_INFO_SYSTEM_ENV``. Filled like nsys fills them:

* ``NVTX_EVENTS`` -- one row per event, **in start-time order** (nsys's order; reports
  such as ``nsys stats -r nvtxpptrace`` list rows in table order). ``eventType``: 34 mark,
  59 push/pop range, 60 start/end range, 75 domain creation (``text`` = domain name),
  33 category name (``text`` = name, ``category`` = number), 39 thread name set by
  ``nvtxNameOsThread`` (``text`` = name, ``globalTid`` = the named thread).
  Messages as nsys stores them: a plain (ASCII/Unicode) message in ``text`` with
  ``textId`` NULL, a registered string (``nvtxDomainRegisterString``) in ``textId``
  (-> ``StringIds``) with ``text`` NULL; read both with
  ``coalesce((SELECT value FROM StringIds WHERE id = textId), text)`` (nsys's order). ``endGlobalTid``
  is set only for a start/end range that ended on another thread than it started
  (NULL otherwise, as in nsys). Payloads in the column of their type (u64 payloads above
  2**63-1 are stored wrapped to int64: SQLite integers are signed).
* ``StringIds`` (every string of the recording), ``ThreadNames`` (priority 0),
  ``PROCESSES`` (name = the process name of the recording, where nsys writes the
  executable's path for the profiled process).
* ``TARGET_INFO_SESSION_START_TIME``, ``ANALYSIS_DETAILS`` and ``EXPORT_META_DATA`` (below).

**Times** are nanoseconds relative to the session start, as in nsys: 0 is the start of
the earliest segment of the recording (the first process that loaded the recorder), whose
wall-clock time is ``TARGET_INFO_SESSION_START_TIME.utcEpochNs`` (taken from the
CLOCK_REALTIME anchor each segment header holds next to its CLOCK_MONOTONIC start; NULL
when the recording has none). The recorder's CLOCK_MONOTONIC value of 0 is
``EXPORT_META_DATA`` ``timeOrigin_ns``. ``ANALYSIS_DETAILS``: ``startTime`` 0,
``stopTime`` = ``duration`` = the last timestamp of the file.

**Ids**: ``globalTid = (1 << 48) | (pid << 24) | tid`` and ``globalPid = (1 << 48) |
(pid << 24)`` as nsys writes them (bit 48: nsys's VM id 1); decode with
``(globalTid >> 24) & 0xFFFFFF`` and ``globalTid & 0xFFFFFF``. ``domainId`` is the
process's own domain handle number, so domain names are looked up per process (as nsys's
reports do: eventType 75 rows with the same ``domainId`` and pid).

**Metadata** (``EXPORT_META_DATA``): nsys's keys, with the values of the nsys whose schema
this is for the ones that describe nsys and its schema (``EXPORT_PRODUCT_NAME``,
``EXPORT_PRODUCT_VERSION`` 2022.4.2.1, ``EXPORT_SCHEMA_VERSION`` 3.0.0 and its
``_MAJOR``/``_MINOR``/``_MICRO``/``_CKSUM``: tools such as nsys2prv read them to know the
schema) and this export's values for the others (platform, time, host, user, input and
output files -- including nsys's own spelling ``EXPORT_OUTUPT_FILE``). Ours alongside:
``exporter`` (``nvtx_plugins_tf``: who really wrote the file), ``source``,
``timeOrigin_ns``, ``clock``, ``damagedChunks``, ``damagedSegments``.

**Ranges still open when the recording ended** (the process was killed or never closed
them) keep ``end`` NULL. nsys closes such ranges at the end of the capture instead; we do
not, so that a range's duration is never made up and the open ones can be told apart
(our ``summary``/``report`` list them apart). nsys's own reports cope: ``nsys stats``
(``nvtxsum``, ``nvtxpptrace`` ...) treat a NULL ``end`` as "until the last timestamp",
i.e. they show what nsys would have written.

What nsys writes and we cannot (the recording lacks it): one eventType 75 row per
``nvtxDomainCreate`` call (we write one per domain, at its first creation, on the
process's main thread), eventType 76 domain destruction rows, the time and thread of
category naming (33) and of ``nvtxNameOsThread`` (39) (we put them at the process's start
on its main thread, resp. the named thread), nsys's small per-session ``rangeId`` numbers
(ours are the recorder's ids), other processes of the system in ``PROCESSES``/
``ThreadNames``, thread priorities.
"""

from __future__ import annotations

import datetime
import os
import platform
import socket
import sqlite3
import time
from pathlib import Path

import numpy as np

from ..recording._decoder import (
    FLAG_HAS_CATEGORY,
    FLAG_HAS_COLOR,
    FLAG_REGISTERED,
    FLAG_UNCLOSED,
    KIND_MARK,
    KIND_START_END,
    PAYLOAD_EXT,
)
from ..recording.model import (
    EVENT_CATEGORY,
    EVENT_DOMAIN_CREATE,
    EVENT_MARK,
    EVENT_PUSH_POP,
    EVENT_START_END,
    EVENT_THREAD_NAME,
    EVENT_TYPE_OF_KIND,
    PAYLOAD_DOUBLE,
    PAYLOAD_FLOAT,
    PAYLOAD_I32,
    PAYLOAD_I64,
    PAYLOAD_U32,
    PAYLOAD_U64,
    DamageReport,
    payload_array,
)
from ..recording.reader import RecordingReader, reading
from . import _nsys_schema
from .one_pass import OutputFile, Sink, feed

__all__ = [
    "export_sqlite",
    "SqliteSink",
    "global_tid",
    "global_pid",
    "EVENT_MARK",
    "EVENT_PUSH_POP",
    "EVENT_START_END",
    "EVENT_DOMAIN_CREATE",
    "EVENT_CATEGORY",
    "EVENT_THREAD_NAME",
    "SCHEMA_VERSION",
    "NSYS_VERSION",
]


SCHEMA_VERSION = _nsys_schema.SCHEMA_META["EXPORT_SCHEMA_VERSION"]
NSYS_VERSION = _nsys_schema.SCHEMA_META["EXPORT_PRODUCT_VERSION"]

#: nsys's VM id 1 in bits 48+ of every globalTid/globalPid/globalVid it writes.
GLOBAL_VID = 1 << 48

_COLUMNS = (
    "start",
    "end",
    "eventType",
    "rangeId",
    "category",
    "color",
    "text",
    "globalTid",
    "endGlobalTid",
    "textId",
    "domainId",
    "uint64Value",
    "int64Value",
    "doubleValue",
    "uint32Value",
    "int32Value",
    "floatValue",
    "jsonTextId",
    "jsonText",
)


def global_tid(pid, tid):
    """nsys's globalTid: ``(1 << 48) | (pid << 24) | tid``, 24 bits each (numpy or int)."""
    return GLOBAL_VID | ((pid & 0xFFFFFF) << 24) | (tid & 0xFFFFFF)


def global_pid(pid):
    """nsys's globalPid: ``(1 << 48) | (pid << 24)``."""
    return GLOBAL_VID | ((pid & 0xFFFFFF) << 24)


_PAYLOAD_COLUMNS = {
    PAYLOAD_U64: "uint64Value",
    PAYLOAD_I64: "int64Value",
    PAYLOAD_DOUBLE: "doubleValue",
    PAYLOAD_U32: "uint32Value",
    PAYLOAD_I32: "int32Value",
    PAYLOAD_FLOAT: "floatValue",
}


def _statements(rows: np.ndarray, text_table: np.ndarray, domain_local: np.ndarray, origin: int, table: str):
    """(sql, parameter iterator) per group of rows with the same non-NULL columns.

    Binding None through sqlite3 is slow (it goes through the adapter protocol), so each
    group inserts only its non-NULL columns; constants are SQL literals.
    """
    kind = rows["kind"].astype(np.int64)
    flags = rows["flags"].astype(np.int64)
    ptype = rows["payload_type"].astype(np.int64)
    msg = rows["message"]
    closed = ((flags & FLAG_UNCLOSED) == 0) & (kind != KIND_MARK)
    has_color = (flags & FLAG_HAS_COLOR) != 0
    has_cat = (flags & FLAG_HAS_CATEGORY) != 0
    has_msg = msg != 0
    registered = ((flags & FLAG_REGISTERED) != 0) & has_msg
    cross = (kind == KIND_START_END) & closed & (rows["end_tid"] != rows["tid"])
    shape = (
        kind | closed << 3 | has_color << 4 | has_cat << 5 | has_msg << 6 | registered << 7 | cross << 8 | ptype << 9
    )
    pid = rows["pid"]
    payload = rows["payload"]
    for code in np.unique(shape).tolist():
        idx = np.flatnonzero(shape == code)
        r = rows[idx]
        k = code & 7
        event_type = EVENT_TYPE_OF_KIND[k]
        names = ["start", "globalTid", "domainId"]
        cols = [
            (r["start_ns"] - origin).tolist(),
            global_tid(pid[idx], r["tid"]).tolist(),
            domain_local[r["domain"]].tolist(),
        ]
        if code & (1 << 3):
            names.append("end")
            cols.append((r["end_ns"] - origin).tolist())
        if k == KIND_START_END:
            names.append("rangeId")
            cols.append(r["range_id"].view(np.int64).tolist())
        if code & (1 << 8):
            names.append("endGlobalTid")
            cols.append(global_tid(pid[idx], r["end_tid"]).tolist())
        if code & (1 << 4):
            names.append("color")
            cols.append(r["color"].tolist())
        if code & (1 << 5):
            names.append("category")
            cols.append(r["category"].tolist())
        if code & (1 << 7):  # registered string: textId only (nsys leaves text NULL)
            names.append("textId")
            cols.append(r["message"].tolist())
        elif code & (1 << 6):  # plain message: text only
            names.append("text")
            cols.append(text_table[r["message"]].tolist())
        pt = code >> 9
        if pt == PAYLOAD_EXT:  # extended payloads: their JSON text, as nsys
            names.append("jsonText")
            cols.append(text_table[payload[idx].astype(np.int64)].tolist())
        elif pt:
            values = payload_array(pt, payload[idx])
            if values.dtype == np.uint64:  # SQLite stores integers as signed 64-bit
                values = values.view(np.int64)
            names.append(_PAYLOAD_COLUMNS[pt])
            cols.append(values.tolist())
        sql = (
            f"INSERT INTO {table} (eventType, {', '.join(names)}) VALUES ({event_type}, {', '.join('?' * len(names))})"
        )
        yield sql, zip(*cols)


def _session_start_utc(reader: RecordingReader, origin: int) -> int | None:
    """CLOCK_REALTIME (ns since the epoch) of the session start ``origin`` (CLOCK_MONOTONIC),
    from the anchor of the earliest segment that has one."""
    anchored = [p for p in reader.processes.values() if p.start_realtime_ns]
    if not anchored:
        return None
    first = min(anchored, key=lambda p: p.start_ns)
    return first.start_realtime_ns - (first.start_ns - origin)


def _iso(ns: int, tz) -> str:
    return datetime.datetime.fromtimestamp(ns / 1e9, tz).strftime("%Y-%m-%dT%H:%M:%S")


def _platform() -> tuple[str, str]:
    machine = platform.machine().lower()
    arch = {"x86_64": "x64", "amd64": "x64", "aarch64": "arm64", "arm64": "arm64"}.get(machine, machine)
    system = platform.system().lower()
    return (f"{system}-desktop" if arch == "x64" else f"{system}-{arch}"), arch


def _metadata(reader: RecordingReader, output: Path, damage: DamageReport, seconds: float, origin: int) -> list:
    from ... import __version__ as version

    now = time.time_ns()
    plat, arch = _platform()
    source = Path(reader.path)
    values = dict(_nsys_schema.SCHEMA_META)
    values.update(
        {
            "EXPORT_PLATFORM": plat,
            "EXPORT_ARCH": arch,
            "EXPORT_TIME": f"{seconds:.2f}",
            "EXPORT_TIME_UTC": _iso(now, datetime.timezone.utc),
            "EXPORT_TIME_LOCAL": _iso(now, None),
            "EXPORT_HOST": socket.gethostname(),
            "EXPORT_USER": os.environ.get("USER", ""),
            "EXPORT_INPUT_FILE": source.name,
            "EXPORT_OUTUPT_FILE": output.name,
            "EXPORT_INPUT_PATH": str(source),
            "EXPORT_OUTUPT_PATH": str(output),
            "EXPORT_INPUT_PATH_ABS": str(source.absolute()),
            "EXPORT_OUTUPT_PATH_ABS": str(output.absolute()),
            "EXPORT_OVERWRITE": "true",
            "EXPORT_LAZY": "true",
        }
    )
    meta = [(k, values[k]) for k in _nsys_schema.META_KEYS if k in values]
    meta += [
        ("exporter", f"nvtx_plugins_tf {version}".strip()),
        ("source", str(source)),
        ("timeOrigin_ns", str(origin)),
        ("clock", "CLOCK_MONOTONIC"),
        ("damagedChunks", str(damage.damaged_chunks)),
        ("damagedSegments", str(damage.damaged_segments)),
    ]
    return meta


def export_sqlite(recording, output, *, reader: RecordingReader | None = None) -> DamageReport:
    """Write ``recording`` to the SQLite file ``output`` (replaced if it exists)."""
    with reading(recording, reader) as reader, SqliteSink(reader, output) as sink:
        feed(reader, [sink])
        return sink.finish()


class SqliteSink(Sink):
    """:func:`export_sqlite` batch by batch (see :mod:`.one_pass`): the events go to a
    staging table, sorted into ``NVTX_EVENTS`` by ``finish()``, which returns the
    :class:`DamageReport`."""

    def __init__(self, reader: RecordingReader, output):
        self._t0 = time.monotonic()
        self.reader = reader
        self.output = Path(output)
        self._file = OutputFile(self.output)
        try:
            self._con = con = sqlite3.connect(str(self._file.tmp), isolation_level=None)
        except BaseException:
            self._file.discard()
            raise
        try:
            con.execute("PRAGMA journal_mode=OFF")
            con.execute("PRAGMA synchronous=OFF")
            con.execute("PRAGMA cache_size=-65536")
            con.execute("PRAGMA temp.cache_size=-65536")
            for _, ddl in _nsys_schema.TABLES:
                con.execute(ddl)
            con.execute("BEGIN")
            for name, rows in _nsys_schema.ENUMS.items():
                con.executemany(f'INSERT INTO "{name}" (id, name, label) VALUES (?, ?, ?)', rows)
            # Events go to a staging table first, then into NVTX_EVENTS in start order.
            con.execute("CREATE TEMP TABLE stage AS SELECT * FROM main.NVTX_EVENTS WHERE 0")
        except BaseException:
            self._abort()
            raise
        self._text_table = np.empty(0, dtype=object)
        self._domain_local = np.zeros(1, dtype=np.int64)

    def add(self, rows) -> None:
        reader, con = self.reader, self._con
        strings = reader.strings()
        if len(self._text_table) < len(strings):
            self._text_table = np.array(strings, dtype=object)
        domains = reader.domain_table()
        if len(self._domain_local) < len(domains):
            self._domain_local = np.array([d.local_id for d in domains], dtype=np.int64)
        for sql, params in _statements(rows, self._text_table, self._domain_local, reader.origin_ns, "temp.stage"):
            con.executemany(sql, params)

    def _abort(self) -> None:
        try:
            self._con.close()
        finally:
            self._file.discard()

    def _finish(self) -> DamageReport:
        reader, con, output = self.reader, self._con, self.output
        origin = reader.origin_ns
        # Definitions: domains, categories, thread names (times: see the module doc).
        strings = reader.strings()
        domain_names = reader.domain_names()
        domains = reader.domain_table()

        def process_start(pid):
            return (reader.processes[pid].start_ns - origin) if pid in reader.processes else 0

        extra = []
        for index, d in enumerate(domains):
            if index == 0:
                continue
            start = (d.create_ns - origin) if d.create_ns else process_start(d.pid)
            extra.append((start, EVENT_DOMAIN_CREATE, None, domain_names[index], global_tid(d.pid, d.pid), d.local_id))
        for (dom, category), name in reader.category_names().items():
            d = domains[dom]
            pid = d.pid if dom else next(iter(reader.processes), 0)
            extra.append((process_start(pid), EVENT_CATEGORY, category, name, global_tid(pid, pid), d.local_id))
        names = {}
        overrides = set()
        for t in reader.thread_name_records():
            names[(t.pid, t.tid)] = t.name
            if t.override:
                overrides.add((t.pid, t.tid))
        for pid, tid in sorted(overrides):
            extra.append(
                (process_start(pid), EVENT_THREAD_NAME, None, strings[names[(pid, tid)]], global_tid(pid, tid), 0)
            )
        con.executemany(
            "INSERT INTO temp.stage (start, eventType, category, text, globalTid, domainId) VALUES (?,?,?,?,?,?)", extra
        )
        # No time before 0, as in nsys: a definition replayed into a segment keeps its first
        # timestamp, and an event can precede the header of the segment it lands in.
        (earliest,) = con.execute("SELECT min(start) FROM temp.stage").fetchone()
        if earliest is not None and earliest < 0:
            con.execute("UPDATE temp.stage SET start = start - ?, end = end - ?", (earliest, earliest))
            origin += earliest
        # Ties: the enclosing range (later end) first; marks and open ranges (end NULL) last.
        con.execute("INSERT INTO main.NVTX_EVENTS SELECT * FROM temp.stage ORDER BY start, end DESC")
        con.execute("DROP TABLE temp.stage")
        con.executemany("INSERT INTO StringIds (id, value) VALUES (?, ?)", enumerate(strings))
        con.executemany(
            "INSERT INTO ThreadNames (nameId, priority, globalTid) VALUES (?, 0, ?)",
            [(name, global_tid(pid, tid)) for (pid, tid), name in sorted(names.items())],
        )
        con.executemany(
            "INSERT INTO PROCESSES (globalPid, pid, name) VALUES (?, ?, ?)",
            [(global_pid(pid), pid, info.name) for pid, info in sorted(reader.processes.items())],
        )
        last = con.execute("SELECT max(coalesce(max(start), 0), coalesce(max(end), 0)) FROM NVTX_EVENTS").fetchone()
        duration = max(0, last[0] or 0)
        con.execute(
            "INSERT INTO ANALYSIS_DETAILS (globalVid, duration, startTime, stopTime) VALUES (?, ?, 0, ?)",
            (GLOBAL_VID, duration, duration),
        )
        utc = _session_start_utc(reader, origin)
        con.execute(
            "INSERT INTO TARGET_INFO_SESSION_START_TIME (utcEpochNs, utcTime, localTime) VALUES (?, ?, ?)",
            (utc, None if utc is None else _iso(utc, datetime.timezone.utc), None if utc is None else _iso(utc, None)),
        )
        damage = reader.damage()
        con.executemany(
            "INSERT INTO EXPORT_META_DATA (name, value) VALUES (?, ?)",
            _metadata(reader, output, damage, time.monotonic() - self._t0, origin),
        )
        con.execute("COMMIT")
        con.close()
        self._file.commit()
        return damage
