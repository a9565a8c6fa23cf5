"""Export a recording as Nsight Systems writes ``nsys export --type parquetdir``: a directory
with one ``TABLE.parquet`` per table of its export schema (nsys 2023.4.4), the same table
names, column names and Arrow types (:data:`._nsys_schema.PARQUET`, generated from a real
nsys export), so code written for nsys's Parquet (its recipes' ``DataService``, pandas,
DuckDB, polars) reads ours unchanged.

The rows are those of the SQLite export (:mod:`.sqlite`; the values of both come from
:mod:`.nsys_tables`): ``NVTX_EVENTS``, ``StringIds``, ``ThreadNames``, ``PROCESSES``,
``ANALYSIS_DETAILS``, ``TARGET_INFO_SESSION_START_TIME``, ``META_DATA_EXPORT``, the
``ENUM_*`` tables; the tables we have no data for are written empty, with their columns.
Differences from the SQLite file: ``NVTX_EVENTS`` rows come in the order the recording is
read (each thread's events in time order, threads and processes one after the other, the
definitions -- domains, categories, thread names -- last), not sorted by start: the file is
written batch by batch, one row group per batch, so memory stays bounded whatever the size
of the recording (nsys's recipes and the usual readers sort or group themselves); there is
no ``META_DATA_CAPTURE`` (nsys's parquetdir has none either). Compression: Snappy (nsys
writes uncompressed column chunks; readers do not care).
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..recording._decoder import (
    FLAG_HAS_CATEGORY,
    FLAG_HAS_COLOR,
    FLAG_REGISTERED,
    FLAG_UNCLOSED,
    KIND_MARK,
    KIND_START_END,
    PAYLOAD_EXT,
)
from ..recording.model import EVENT_TYPE_OF_KIND, DamageReport, payload_array
from ..recording.reader import RecordingReader, reading
from . import _nsys_schema, nsys_tables
from .one_pass import Sink, feed

__all__ = ["export_parquetdir", "ParquetSink", "ARROW_SCHEMAS", "parquet_dir_for"]

_ARROW_TYPES = {
    "int8": pa.int8(),
    "int16": pa.int16(),
    "int32": pa.int32(),
    "int64": pa.int64(),
    "uint8": pa.uint8(),
    "uint16": pa.uint16(),
    "uint32": pa.uint32(),
    "uint64": pa.uint64(),
    "float": pa.float32(),
    "double": pa.float64(),
    "string": pa.string(),
    "bool": pa.bool_(),
}


def _schema(columns) -> pa.Schema:
    return pa.schema([pa.field(name, _ARROW_TYPES[kind], nullable) for name, kind, nullable in columns])


#: table -> the Arrow schema of nsys's TABLE.parquet
ARROW_SCHEMAS = {table: _schema(columns) for table, columns in _nsys_schema.PARQUET.items()}
_EVENTS = ARROW_SCHEMAS["NVTX_EVENTS"]
_EVENT_TYPES = np.zeros(max(EVENT_TYPE_OF_KIND) + 1, dtype=np.int64)  # row kind -> eventType
_EVENT_TYPES[list(EVENT_TYPE_OF_KIND)] = list(EVENT_TYPE_OF_KIND.values())


def parquet_dir_for(prefix) -> Path:
    """Where nsys puts the parquetdir export of ``PREFIX.nsys-rep``: ``PREFIX_pqtdir``; the
    recipes' ``DataService`` looks for it there."""
    prefix = Path(prefix)
    return prefix.with_name(prefix.name + "_pqtdir")


def _column(values: np.ndarray, valid: np.ndarray | None, field: pa.Field) -> pa.Array:
    mask = None if valid is None or valid.all() else ~valid
    return pa.array(values, type=field.type, mask=mask)


def _strings(indexes: np.ndarray, valid: np.ndarray, dictionary: pa.Array) -> pa.Array:
    """Strings ``dictionary[indexes]`` where ``valid``, else null (without Python objects)."""
    if not valid.any():
        return pa.nulls(len(indexes), pa.string())
    index = pa.array(indexes.astype(np.int64), mask=~valid)
    return dictionary.take(index)


def event_table(rows: np.ndarray, strings: pa.Array, domain_local: np.ndarray, origin: int) -> pa.Table:
    """The NVTX_EVENTS rows of a batch of decoded rows (``ROW_DTYPE``), as nsys fills them
    (see :mod:`.sqlite`: the same values, column by column)."""
    n = len(rows)
    kind = rows["kind"].astype(np.int64)
    flags = rows["flags"].astype(np.int64)
    ptype = rows["payload_type"].astype(np.int64)
    msg = rows["message"].astype(np.int64)
    closed = ((flags & FLAG_UNCLOSED) == 0) & (kind != KIND_MARK)
    start_end = kind == KIND_START_END
    has_msg = msg != 0
    registered = ((flags & FLAG_REGISTERED) != 0) & has_msg
    cross = start_end & closed & (rows["end_tid"] != rows["tid"])
    pid = rows["pid"]
    event_type = _EVENT_TYPES[kind]
    columns = {
        "start": (rows["start_ns"] - origin, None),
        "end": (rows["end_ns"] - origin, closed),
        "eventType": (event_type, None),
        "rangeId": (rows["range_id"], start_end),
        "category": (rows["category"].astype(np.uint64), (flags & FLAG_HAS_CATEGORY) != 0),
        "color": (rows["color"].astype(np.int64), (flags & FLAG_HAS_COLOR) != 0),
        "globalTid": (nsys_tables.global_tid(pid, rows["tid"]).astype(np.uint64), None),
        "endGlobalTid": (nsys_tables.global_tid(pid, rows["end_tid"]).astype(np.uint64), cross),
        "textId": (msg, registered),
        "domainId": (domain_local[rows["domain"]].astype(np.uint64), None),
    }
    arrays = {}
    for name, (values, valid) in columns.items():
        arrays[name] = _column(values, valid, _EVENTS.field(name))
    arrays["text"] = _strings(msg, has_msg & ~registered, strings)
    payload = rows["payload"]
    ext = ptype == PAYLOAD_EXT
    arrays["jsonText"] = _strings(payload.astype(np.int64), ext, strings)
    arrays["jsonTextId"] = pa.nulls(n, pa.int64())
    for pt, name in nsys_tables.PAYLOAD_COLUMNS.items():
        field = _EVENTS.field(name)
        has = ptype == pt
        if has.any():
            values = np.zeros(n, dtype=payload_array(pt, payload[:1]).dtype)
            values[has] = payload_array(pt, payload[has])
            arrays[name] = pa.array(values, mask=~has).cast(field.type)
        else:
            arrays[name] = pa.nulls(n, field.type)
    return pa.Table.from_arrays([arrays[f.name] for f in _EVENTS], schema=_EVENTS)


def _definitions_table(definitions: list[tuple]) -> pa.Table:
    """NVTX_EVENTS rows of :func:`.nsys_tables.definition_events` (start, eventType,
    category, text, globalTid, domainId)."""
    columns = list(zip(*definitions)) if definitions else [()] * 6
    given = dict(zip(("start", "eventType", "category", "text", "globalTid", "domainId"), columns))
    n = len(definitions)
    return pa.Table.from_arrays(
        [pa.array(given[f.name], f.type) if f.name in given else pa.nulls(n, f.type) for f in _EVENTS],
        schema=_EVENTS,
    )


def _write(path: Path, table: str, rows: list) -> None:
    """``rows`` (tuples in the table's column order) as ``path/TABLE.parquet``."""
    schema = ARROW_SCHEMAS[table]
    columns = list(zip(*rows)) if rows else [()] * len(schema)
    data = pa.Table.from_arrays([pa.array(c, f.type) for c, f in zip(columns, schema)], schema=schema)
    pq.write_table(data, path / f"{table}.parquet", store_schema=False)


def export_parquetdir(recording, output, *, reader: RecordingReader | None = None) -> DamageReport:
    """Write ``recording`` as the directory ``output`` of nsys's parquetdir export (replaced
    if it exists); see the module docstring."""
    with reading(recording, reader) as reader, ParquetSink(reader, output) as sink:
        feed(reader, [sink])
        return sink.finish()


class ParquetSink(Sink):
    """:func:`export_parquetdir` batch by batch (see :mod:`.one_pass`). The directory is
    built beside ``output`` and renamed into place by ``finish()``, which returns the
    :class:`DamageReport`; an aborted export leaves no trace."""

    def __init__(self, reader: RecordingReader, output):
        self._t0 = time.monotonic()
        self.reader = reader
        self.output = Path(output)
        self.output.parent.mkdir(parents=True, exist_ok=True)
        self._tmp = Path(tempfile.mkdtemp(prefix=f".{self.output.name}.", dir=self.output.parent))
        try:
            self._events = pq.ParquetWriter(self._tmp / "NVTX_EVENTS.parquet", _EVENTS, store_schema=False)
        except BaseException:
            shutil.rmtree(self._tmp, ignore_errors=True)
            raise
        self._strings = pa.array([], pa.string())
        self._domain_local = np.zeros(1, dtype=np.int64)
        self._earliest = None

    def add(self, rows) -> None:
        reader = self.reader
        strings = reader.strings()
        if len(self._strings) < len(strings):
            self._strings = pa.array(strings, pa.string())
        domains = reader.domain_table()
        if len(self._domain_local) < len(domains):
            self._domain_local = np.array([d.local_id for d in domains], dtype=np.int64)
        if len(rows) == 0:
            return
        table = event_table(rows, self._strings, self._domain_local, reader.origin_ns)
        self._events.write_table(table)
        first = int(rows["start_ns"].min()) - reader.origin_ns
        self._earliest = first if self._earliest is None else min(self._earliest, first)

    def _abort(self) -> None:
        try:
            self._events.close()
        finally:
            shutil.rmtree(self._tmp, ignore_errors=True)

    def _finish(self) -> DamageReport:
        reader, tmp = self.reader, self._tmp
        origin = reader.origin_ns
        definitions = nsys_tables.definition_events(reader, origin)
        earliest = min([self._earliest or 0, 0, *(d[0] for d in definitions)])
        if definitions:
            self._events.write_table(_definitions_table(definitions))
        self._events.close()
        if earliest < 0:  # no time before 0, as in nsys and our SQLite: shift everything
            self._shift_events(-earliest)
            origin += earliest
        tables = nsys_tables.small_tables(reader, origin, self._stop_time(-min(earliest, 0)))
        damage = reader.damage()
        tables["META_DATA_EXPORT"] = nsys_tables.export_metadata(
            reader, self.output, damage, time.monotonic() - self._t0, origin
        )
        tables.update(_nsys_schema.ENUMS)
        for table in ARROW_SCHEMAS:
            if table != "NVTX_EVENTS":
                _write(tmp, table, tables.get(table, []))
        # Replace an older export: moved aside, the new one renamed into place, the old removed.
        old = None
        if self.output.exists() or self.output.is_symlink():
            old = tmp.with_name(tmp.name + ".old")
            self.output.rename(old)
        tmp.rename(self.output)
        if old is not None:
            if old.is_dir() and not old.is_symlink():
                shutil.rmtree(old, ignore_errors=True)
            else:
                old.unlink()
        return damage

    def _stop_time(self, shift: int) -> int:
        """The last timestamp of NVTX_EVENTS (after ``shift``), from the row groups' statistics."""
        meta = pq.ParquetFile(self._tmp / "NVTX_EVENTS.parquet").metadata
        last = 0
        for g in range(meta.num_row_groups):
            group = meta.row_group(g)
            for c in (0, 1):  # start, end
                stats = group.column(c).statistics
                if stats is not None and stats.has_min_max:
                    last = max(last, int(stats.max) + shift)
        return last

    def _shift_events(self, shift: int) -> None:
        path = self._tmp / "NVTX_EVENTS.parquet"
        shifted = path.with_name("NVTX_EVENTS.shifted")
        with pq.ParquetWriter(shifted, _EVENTS, store_schema=False) as out:
            source = pq.ParquetFile(path)
            for g in range(source.num_row_groups):
                t = source.read_row_group(g)
                for name in ("start", "end"):
                    i = t.schema.get_field_index(name)
                    t = t.set_column(i, _EVENTS.field(name), pc.add(t.column(i), shift))
                out.write_table(t)
        shifted.replace(path)
