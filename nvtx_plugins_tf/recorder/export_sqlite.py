"""Export a recording to SQLite in the NVTX part of Nsight Systems' export schema.

Tables (same names and columns as ``nsys export --type sqlite``):

* ``NVTX_EVENTS(start, end, eventType, rangeId, category, color, text, globalTid,
  endGlobalTid, textId, domainId, uint64Value, int64Value, doubleValue, uint32Value,
  int32Value, floatValue, jsonTextId, jsonText)`` with eventType 34 mark, 59 push/pop
  range, 60 start/end range, 75 domain creation (text = domain name), 33 category name.
  ``text`` always holds the message (also for registered strings, whose ``textId``
  is set as nsys does). ``end`` is NULL for marks and for ranges never closed.
* ``StringIds(id, value)``, ``ThreadNames(nameId, priority, globalTid)``,
  ``PROCESSES(globalPid, pid, name)``, ``ENUM_NSYS_EVENT_TYPE(id, name, label)``,
  ``META_DATA_EXPORT(name, value)``.

Times are CLOCK_MONOTONIC nanoseconds (nsys stores them relative to the session start;
``META_DATA_EXPORT`` has the origin). ``globalTid = (pid << 24) | tid`` (24 bits each),
``globalPid = pid << 24``: decode with ``(globalTid >> 24) & 0xFFFFFF`` and
``globalTid & 0xFFFFFF`` as for nsys. u64 payloads above 2**63-1 are stored wrapped
to int64 (SQLite integers are signed).
"""

from __future__ import annotations

import contextlib
import sqlite3

import numpy as np

from ._decoder import (
    FLAG_HAS_CATEGORY,
    FLAG_HAS_COLOR,
    FLAG_REGISTERED,
    FLAG_UNCLOSED,
    KIND_MARK,
    KIND_PUSH_POP,
    KIND_START_END,
)
from ._output import atomic_output
from .reader import DamageReport, RecordingReader, reading

__all__ = ["export_sqlite", "global_tid", "EVENT_MARK", "EVENT_PUSH_POP", "EVENT_START_END", "EVENT_DOMAIN_CREATE"]

EVENT_CATEGORY = 33
EVENT_MARK = 34
EVENT_PUSH_POP = 59
EVENT_START_END = 60
EVENT_DOMAIN_CREATE = 75
_EVENT_TYPES = [
    (EVENT_CATEGORY, "NvtxCategory", "NVTX Category"),
    (EVENT_MARK, "NvtxMark", "NVTX Mark"),
    (EVENT_PUSH_POP, "NvtxPushPopRange", "NVTX PushPop Range"),
    (EVENT_START_END, "NvtxStartEndRange", "NVTX StartEnd Range"),
    (EVENT_DOMAIN_CREATE, "NvtxDomainCreate", "NVTX Domain Create"),
]

SCHEMA = """
CREATE TABLE StringIds (id INTEGER NOT NULL PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE ThreadNames (nameId INTEGER NOT NULL REFERENCES StringIds(id), priority INTEGER, globalTid INTEGER);
CREATE TABLE PROCESSES (globalPid INTEGER, pid INTEGER, name TEXT);
CREATE TABLE ENUM_NSYS_EVENT_TYPE (id INTEGER NOT NULL PRIMARY KEY, name TEXT NOT NULL, label TEXT);
CREATE TABLE META_DATA_EXPORT (name TEXT NOT NULL, value TEXT);
CREATE TABLE NVTX_EVENTS (
    start INTEGER NOT NULL,
    end INTEGER,
    eventType INTEGER NOT NULL,
    rangeId INTEGER,
    category INTEGER,
    color INTEGER,
    text TEXT,
    globalTid INTEGER,
    endGlobalTid INTEGER,
    textId INTEGER REFERENCES StringIds(id),
    domainId INTEGER,
    uint64Value INTEGER,
    int64Value INTEGER,
    doubleValue REAL,
    uint32Value INTEGER,
    int32Value INTEGER,
    floatValue REAL,
    jsonTextId INTEGER,
    jsonText TEXT
);
"""

def global_tid(pid, tid):
    """nsys-style globalTid: ``(pid << 24) | tid`` with 24 bits each (numpy or int)."""
    return ((pid & 0xFFFFFF) << 24) | (tid & 0xFFFFFF)


_PAYLOAD_COLUMNS = {1: "uint64Value", 2: "int64Value", 3: "doubleValue", 4: "uint32Value", 5: "int32Value",
                    6: "floatValue"}


def _statements(rows: np.ndarray, text_table: np.ndarray, domain_local: np.ndarray):
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
    shape = (kind | closed << 3 | has_color << 4 | has_cat << 5 | has_msg << 6 | registered << 7
             | ptype << 8)
    pid = rows["pid"]
    payload = rows["payload"]
    for code in np.unique(shape).tolist():
        idx = np.flatnonzero(shape == code)
        r = rows[idx]
        k = code & 7
        event_type = {KIND_PUSH_POP: EVENT_PUSH_POP, KIND_MARK: EVENT_MARK}.get(k, EVENT_START_END)
        names = ["start", "globalTid", "domainId"]
        cols = [r["start_ns"].tolist(), global_tid(pid[idx], r["tid"]).tolist(), domain_local[r["domain"]].tolist()]
        if code & (1 << 3):
            names.append("end")
            cols.append(r["end_ns"].tolist())
        if k == KIND_START_END:
            names += ["rangeId", "endGlobalTid"]
            cols += [r["range_id"].view(np.int64).tolist(), global_tid(pid[idx], r["end_tid"]).tolist()]
        if code & (1 << 4):
            names.append("color")
            cols.append(r["color"].tolist())
        if code & (1 << 5):
            names.append("category")
            cols.append(r["category"].tolist())
        if code & (1 << 6):
            names.append("text")
            cols.append(text_table[r["message"]].tolist())
        if code & (1 << 7):
            names.append("textId")
            cols.append(r["message"].tolist())
        pt = code >> 8
        if pt:
            raw = payload[idx]
            low32 = (raw & np.uint64(0xFFFFFFFF)).astype(np.uint32)
            values = {
                1: raw.view(np.int64),
                2: raw.view(np.int64),
                3: raw.view(np.float64),
                4: low32,
                5: low32.view(np.int32),
                6: low32.view(np.float32).astype(np.float64),
            }[pt]
            names.append(_PAYLOAD_COLUMNS[pt])
            cols.append(values.tolist())
        sql = (f"INSERT INTO NVTX_EVENTS (eventType, {', '.join(names)}) "
               f"VALUES ({event_type}, {', '.join('?' * len(names))})")
        yield sql, zip(*cols)


def export_sqlite(recording, output, *, reader: RecordingReader | None = None) -> DamageReport:
    """Write ``recording`` to the SQLite file ``output`` (replaced if it exists)."""
    with reading(recording, reader) as reader, atomic_output(output) as tmp, \
            contextlib.closing(sqlite3.connect(str(tmp), isolation_level=None)) as con:
        con.execute("PRAGMA journal_mode=OFF")
        con.execute("PRAGMA synchronous=OFF")
        con.execute("PRAGMA cache_size=-65536")
        con.executescript(SCHEMA)
        con.executemany("INSERT INTO ENUM_NSYS_EVENT_TYPE VALUES (?,?,?)", _EVENT_TYPES)
        text_table = np.empty(0, dtype=object)
        domain_local = np.zeros(1, dtype=np.int64)
        con.execute("BEGIN")
        for rows in reader.batches():
            strings = reader.strings()
            if len(text_table) < len(strings):
                text_table = np.array(strings, dtype=object)
            domains = reader.domain_table()
            if len(domain_local) < len(domains):
                domain_local = np.array([d.local_id for d in domains], dtype=np.int64)
            for sql, params in _statements(rows, text_table, domain_local):
                con.executemany(sql, params)
        # Definitions: domains, categories, strings, threads, processes.
        strings = reader.strings()
        domain_names = reader.domain_names()
        extra = []
        for index, d in enumerate(reader.domain_table()):
            if index == 0:
                continue
            start = d.create_ns or (reader.processes[d.pid].start_ns if d.pid in reader.processes else 0)
            gtid = global_tid(d.pid, d.pid)
            extra.append((start, EVENT_DOMAIN_CREATE, None, domain_names[index], gtid, d.local_id))
        domains = reader.domain_table()
        for (dom, category), name in reader.category_names().items():
            d = domains[dom]
            pid = d.pid if dom else next(iter(reader.processes), 0)
            start = reader.processes[pid].start_ns if pid in reader.processes else 0
            extra.append((start, EVENT_CATEGORY, category, name, global_tid(pid, pid), d.local_id))
        con.executemany(
            "INSERT INTO NVTX_EVENTS (start, eventType, category, text, globalTid, domainId) VALUES (?,?,?,?,?,?)", extra
        )
        con.executemany("INSERT INTO StringIds (id, value) VALUES (?, ?)", enumerate(strings))
        names = {}
        for t in reader._decoder.thread_names():
            names[(t.pid, t.tid)] = t.name
        con.executemany(
            "INSERT INTO ThreadNames (nameId, priority, globalTid) VALUES (?, 0, ?)",
            [(name, global_tid(pid, tid)) for (pid, tid), name in sorted(names.items())],
        )
        con.executemany(
            "INSERT INTO PROCESSES (globalPid, pid, name) VALUES (?, ?, ?)",
            [((pid & 0xFFFFFF) << 24, pid, info.name) for pid, info in sorted(reader.processes.items())],
        )
        damage = reader.damage()
        meta = {
            "exporter": "nvtx_plugins_tf",
            "source": str(reader.path),
            "timeOrigin_ns": str(reader.origin_ns),
            "clock": "CLOCK_MONOTONIC",
            "damagedChunks": str(damage.damaged_chunks),
            "damagedSegments": str(damage.damaged_segments),
        }
        con.executemany("INSERT INTO META_DATA_EXPORT (name, value) VALUES (?, ?)", meta.items())
        con.execute("COMMIT")
    return damage
