"""Export a recording to SQLite as ``nsys export --type sqlite`` of Nsight Systems 2024.2.3
writes it (``EXPORT_SCHEMA_VERSION`` 3.11.1), plus our own table ``NVTX_TF_META_DATA``.

The file has every table and column nsys writes for an NVTX-only capture, created with
nsys's own ``CREATE TABLE`` statements and ``ENUM_*`` rows (shipped in
:mod:`._nsys_schema`, generated from a real export); what goes in them, and what differs
from nsys, is in :mod:`.nsys_tables` (the same rows as the Parquet export). Specific to
this file: ``NVTX_EVENTS`` rows are **in start-time order** (nsys's order; reports such as
``nsys stats -r nvtx_pushpop_trace`` list rows in table order), ties with the enclosing
range (later end) first, marks and open ranges last; u64 payloads above 2**63-1 are stored
wrapped to int64 (SQLite integers are signed); ``META_DATA_CAPTURE`` is filled.

Nsight Systems 2022.4 (schema 3.0.0) named the export metadata table ``EXPORT_META_DATA``
and its keys without ``PARAM_``; its ``nsys stats`` reports do not read that table, and run
on this file as they do on 2024.2's and 2023.4's own exports (tests/test_sqlite_parity.py).
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import numpy as np

from ..recording._decoder import (
    KIND_START_END,
    PAYLOAD_EXT,
)
from ..recording.model import EVENT_TYPE_OF_KIND, DamageReport, payload_array
from ..recording.reader import RecordingReader, reading
from . import _nsys_schema, _sqlite_native, nsys_tables
from .nsys_tables import NSYS_VERSION, SCHEMA_VERSION, global_pid, global_tid
from .one_pass import OutputFile, Sink, feed

__all__ = ["export_sqlite", "SqliteSink", "global_tid", "global_pid", "SCHEMA_VERSION", "NSYS_VERSION"]

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


def _statements(rows: np.ndarray, text_table: np.ndarray, domain_local: np.ndarray, origin: int, table: str):
    """(sql, parameter iterator) per group of rows with the same non-NULL columns.

    Binding None through sqlite3 is slow (it goes through the adapter protocol), so each
    group inserts only its non-NULL columns; constants are SQL literals.
    """
    shape = _sqlite_native.row_flags(rows).group
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
            names.append(nsys_tables.PAYLOAD_COLUMNS[pt])
            cols.append(values.tolist())
        sql = (
            f"INSERT INTO {table} (eventType, {', '.join(names)}) VALUES ({event_type}, {', '.join('?' * len(names))})"
        )
        yield sql, zip(*cols)


def export_sqlite(recording, output, *, reader: RecordingReader | None = None) -> DamageReport:
    """Write ``recording`` to the SQLite file ``output`` (replaced if it exists)."""
    with reading(recording, reader) as reader, SqliteSink(reader, output) as sink:
        feed(reader, [sink])
        return sink.finish()


class SqliteSink(Sink):
    """:func:`export_sqlite` batch by batch (see :mod:`.one_pass`): the events are kept, and
    sorted into ``NVTX_EVENTS`` by ``finish()``, which returns the :class:`DamageReport`.

    Native code writes them when it can (:mod:`._sqlite_native`: the rows held in memory,
    sorted with numpy); else (``NVTX_TF_SQLITE_NATIVE=0``, no libsqlite3 to load, rows that
    would take more than half the memory) they go to a staging table SQLite sorts. Both
    write the same rows in the same order."""

    def __init__(self, reader: RecordingReader, output):
        self._t0 = time.monotonic()
        self.reader = reader
        self.output = Path(output)
        #: why the native path is not taken (None: it is)
        estimate = reader.estimated_events() if hasattr(reader, "estimated_events") else 0
        self.python_path_reason = _sqlite_native.unavailable(estimate)
        self._store = _sqlite_native.RowStore() if self.python_path_reason is None else None
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
            con.execute(nsys_tables.PROVENANCE_DDL)
            con.execute("BEGIN")
            for name, rows in _nsys_schema.ENUMS.items():
                con.executemany(f'INSERT INTO "{name}" (id, name, label) VALUES (?, ?, ?)', rows)
            if self._store is not None:  # the native code writes the events, later
                con.execute("COMMIT")
                con.close()
            else:  # events go to a staging table first, then into NVTX_EVENTS in start order
                con.execute("CREATE TEMP TABLE stage AS SELECT * FROM main.NVTX_EVENTS WHERE 0")
        except BaseException:
            self._abort()
            raise
        self._text_table = np.empty(0, dtype=object)
        self._domain_local = np.zeros(1, dtype=np.int64)

    def add(self, rows) -> None:
        reader, con = self.reader, self._con
        domains = reader.domain_table()
        if len(self._domain_local) < len(domains):
            self._domain_local = np.array([d.local_id for d in domains], dtype=np.int64)
        if self._store is not None:
            local, origin = self._domain_local, reader.origin_ns
            self._store.add(lambda out: _sqlite_native.event_rows(rows, local, origin, out), len(rows))
            return
        strings = reader.strings()
        if len(self._text_table) < len(strings):
            self._text_table = np.array(strings, dtype=object)
        for sql, params in _statements(rows, self._text_table, self._domain_local, reader.origin_ns, "temp.stage"):
            con.executemany(sql, params)

    def _abort(self) -> None:
        try:
            self._con.close()
        finally:
            self._file.discard()

    def _finish(self) -> DamageReport:
        if self._store is not None:
            return self._finish_native()
        reader, con = self.reader, self._con
        origin = reader.origin_ns
        con.executemany(
            "INSERT INTO temp.stage (start, eventType, category, text, globalTid, domainId) VALUES (?,?,?,?,?,?)",
            nsys_tables.definition_events(reader, origin),
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
        last = con.execute("SELECT max(coalesce(max(start), 0), coalesce(max(end), 0)) FROM NVTX_EVENTS").fetchone()
        return self._other_tables(origin, last[0] or 0)

    def _finish_native(self) -> DamageReport:
        """_finish's work with the events written by native code (the same rows, order and shift)."""
        reader, store = self.reader, self._store
        origin = reader.origin_ns
        strings = reader.strings()
        definitions = nsys_tables.definition_events(reader, origin)
        store.append(_sqlite_native.definition_rows(definitions, len(strings)))
        texts = [*strings, *("" if d[3] is None else d[3] for d in definitions)]
        earliest = store.earliest
        if earliest is not None and earliest < 0:  # no time before 0 (see _finish)
            store.shift(-earliest)
            origin += earliest
        _sqlite_native.insert(self._file.tmp, store, store.start_order(), texts)
        last = store.last
        self._store = None  # (the memory)
        self._con = sqlite3.connect(str(self._file.tmp), isolation_level=None)
        self._con.execute("PRAGMA journal_mode=OFF")
        self._con.execute("PRAGMA synchronous=OFF")
        self._con.execute("BEGIN")
        return self._other_tables(origin, last)

    def _other_tables(self, origin: int, last: int) -> DamageReport:
        """Every table but NVTX_EVENTS, then the file is complete (committed, closed, in place)."""
        reader, con, output = self.reader, self._con, self.output
        for table, rows in nsys_tables.small_tables(reader, origin, last).items():
            if rows:
                marks = ", ".join("?" * len(rows[0]))
                con.executemany(f"INSERT INTO {table} VALUES ({marks})", rows)
        damage = reader.damage()
        con.executemany(
            "INSERT INTO META_DATA_EXPORT (name, value) VALUES (?, ?)",
            nsys_tables.export_metadata(reader, output, time.monotonic() - self._t0),
        )
        con.executemany(
            f"INSERT INTO {nsys_tables.PROVENANCE_TABLE} (name, value) VALUES (?, ?)",
            nsys_tables.provenance(reader, damage, origin),
        )
        con.executemany(
            "INSERT INTO META_DATA_CAPTURE (name, value) VALUES (?, ?)", nsys_tables.capture_metadata(reader)
        )
        con.execute("COMMIT")
        con.close()
        self._file.commit()
        return damage
