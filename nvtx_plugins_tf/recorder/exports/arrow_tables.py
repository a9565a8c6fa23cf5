"""nsys's export tables as Arrow tables: the schemas of :data:`._nsys_schema.PARQUET` and
:data:`._nsys_schema.RECIPE_PARQUET` (nsys's Parquet types: :data:`ARROW_SCHEMAS`), of
:data:`._nsys_schema.ARROW` (nsys's ``--type arrow`` types, ``table_name``, ``table_desc``
and ``field_desc``: :data:`IPC_SCHEMAS`), and the ``NVTX_EVENTS`` rows of decoded batches,
without Python objects per row. What the Parquet (:mod:`.parquet`) and Arrow (:mod:`.arrow`)
exports write; the values are those of :mod:`.nsys_tables`, as in the SQLite file. Our own
table :data:`.nsys_tables.PROVENANCE_TABLE` comes last in each.
"""

from __future__ import annotations

import time

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .._arrays import array, scalar
from ..recording._decoder import (
    FLAG_HAS_CATEGORY,
    FLAG_HAS_COLOR,
    FLAG_REGISTERED,
    FLAG_UNCLOSED,
    KIND_MARK,
    KIND_START_END,
    PAYLOAD_EXT,
)
from ..recording.model import EVENT_TYPE_OF_KIND, payload_array
from . import _nsys_schema, nsys_tables

__all__ = [
    "ARROW_SCHEMAS",
    "IPC_SCHEMAS",
    "as_ipc",
    "EVENTS_SCHEMA",
    "EventTables",
    "event_table",
    "definitions_table",
    "shifted",
    "table_of_rows",
]

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


_PROVENANCE = {nsys_tables.PROVENANCE_TABLE: (("name", "string", False), ("value", "string", True))}
#: table -> the Arrow schema of nsys's TABLE.parquet (and of the tables its recipes read, then ours)
ARROW_SCHEMAS = {
    table: _schema(columns)
    for table, columns in {**_nsys_schema.PARQUET, **_nsys_schema.RECIPE_PARQUET, **_PROVENANCE}.items()
}


def _ipc_schema(table: str, desc: str | None, columns) -> pa.Schema:
    fields = [
        pa.field(name, _ARROW_TYPES[kind], nullable, None if fdesc is None else {"field_desc": fdesc})
        for name, kind, nullable, fdesc in columns
    ]
    meta = {"table_name": table} if desc is None else {"table_name": table, "table_desc": desc}
    return pa.schema(fields, metadata=meta)


#: table -> the Arrow schema of its stream in nsys's ``--type arrow`` file: nsys's types (uint32
#: where its Parquet has int64), ``table_name``, ``table_desc`` and ``field_desc`` metadata
IPC_SCHEMAS = {table: _ipc_schema(table, desc, columns) for table, (desc, columns) in _nsys_schema.ARROW.items()}
IPC_SCHEMAS[nsys_tables.PROVENANCE_TABLE] = _ipc_schema(
    nsys_tables.PROVENANCE_TABLE,
    "nvtx_plugins_tf: who wrote this export, from what, and how it was read.",
    [(n, t, nullable, None) for n, t, nullable in _PROVENANCE[nsys_tables.PROVENANCE_TABLE]],
)


def as_ipc(table: pa.Table, name: str) -> pa.Table:
    """``table`` (of :data:`ARROW_SCHEMAS`) with the types and metadata of ``IPC_SCHEMAS[name]``."""
    return table.cast(IPC_SCHEMAS[name])


EVENTS_SCHEMA = _EVENTS = ARROW_SCHEMAS["NVTX_EVENTS"]
_EVENT_TYPES = np.zeros(max(EVENT_TYPE_OF_KIND) + 1, dtype=np.int64)  # row kind -> eventType
_EVENT_TYPES[list(EVENT_TYPE_OF_KIND)] = list(EVENT_TYPE_OF_KIND.values())


def _column(values: np.ndarray, valid: np.ndarray | None, field: pa.Field) -> pa.Array:
    mask = None if valid is None or valid.all() else ~valid
    return array(values, field.type, mask)


def _strings(indexes: np.ndarray, valid: np.ndarray, dictionary: pa.Array) -> pa.Array:
    """Strings ``dictionary[indexes]`` where ``valid``, else null (without Python objects)."""
    if not valid.any():
        return pa.nulls(len(indexes), pa.string())
    index = array(indexes.astype(np.int64), pa.int64(), ~valid)
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
            arrays[name] = array(values, field.type, ~has)
        else:
            arrays[name] = pa.nulls(n, field.type)
    return pa.Table.from_arrays([arrays[f.name] for f in _EVENTS], schema=_EVENTS)


def definitions_table(definitions: list[tuple]) -> pa.Table:
    """NVTX_EVENTS rows of :func:`.nsys_tables.definition_events` (start, eventType,
    category, text, globalTid, domainId)."""
    columns = list(zip(*definitions)) if definitions else [()] * 6
    given = dict(zip(("start", "eventType", "category", "text", "globalTid", "domainId"), columns))
    n = len(definitions)
    return pa.Table.from_arrays(
        [array(given[f.name], f.type) if f.name in given else pa.nulls(n, f.type) for f in _EVENTS],
        schema=_EVENTS,
    )


def table_of_rows(table: str, rows: list) -> pa.Table:
    """``rows`` (tuples in the table's column order) as an Arrow table of nsys's schema."""
    schema = ARROW_SCHEMAS[table]
    columns = list(zip(*rows)) if rows else [()] * len(schema)
    return pa.Table.from_arrays([array(c, f.type) for c, f in zip(columns, schema)], schema=schema)


def shifted(table: pa.Table, shift: int, schema: pa.Schema = EVENTS_SCHEMA) -> pa.Table:
    """NVTX_EVENTS rows (of ``schema``) with ``shift`` ns added to ``start`` and ``end``."""
    for name in ("start", "end"):
        i = table.schema.get_field_index(name)
        table = table.set_column(i, schema.field(name), pc.add(table.column(i), scalar(shift, pa.int64())))
    return table


class EventTables:
    """What the Parquet and Arrow sinks share: the reader's batches as NVTX_EVENTS tables
    (:meth:`add`, then the definitions: :meth:`definitions`), the earliest and the last
    timestamp of the tables made (``earliest`` <= 0: the shift to time 0, as in nsys and our
    SQLite), and the rows of every other table once they are done (:meth:`other_tables`)."""

    def __init__(self, reader):
        self.reader = reader
        self.started = time.monotonic()
        self.earliest = 0
        self.last = 0
        self._strings = array([], pa.string())
        self._domain_local = np.zeros(1, dtype=np.int64)

    def add(self, rows: np.ndarray) -> pa.Table | None:
        """The NVTX_EVENTS rows of a batch (None for an empty batch)."""
        strings = self.reader.strings()
        if len(self._strings) < len(strings):
            self._strings = array(strings, pa.string())
        domains = self.reader.domain_table()
        if len(self._domain_local) < len(domains):
            self._domain_local = np.array([d.local_id for d in domains], dtype=np.int64)
        if len(rows) == 0:
            return None
        return self._noted(event_table(rows, self._strings, self._domain_local, self.reader.origin_ns))

    def definitions(self) -> pa.Table | None:
        """The NVTX_EVENTS rows of the definitions (None when there are none), once read."""
        rows = nsys_tables.definition_events(self.reader, self.reader.origin_ns)
        return self._noted(definitions_table(rows)) if rows else None

    def _noted(self, table: pa.Table) -> pa.Table:
        start, end = pc.min_max(table.column("start")), pc.max(table.column("end"))
        self.earliest = min(self.earliest, start["min"].as_py())
        self.last = max(self.last, start["max"].as_py(), end.as_py() or 0)
        return table

    def other_tables(self, output, damage) -> dict[str, list]:
        """Every table but NVTX_EVENTS: table -> rows, times after the shift to 0."""
        origin = self.reader.origin_ns + self.earliest
        tables = nsys_tables.small_tables(self.reader, origin, self.last - self.earliest)
        seconds = time.monotonic() - self.started
        tables["META_DATA_EXPORT"] = nsys_tables.export_metadata(self.reader, output, seconds)
        tables["META_DATA_CAPTURE"] = nsys_tables.capture_metadata(self.reader)
        tables[nsys_tables.PROVENANCE_TABLE] = nsys_tables.provenance(self.reader, damage, origin)
        tables.update(_nsys_schema.ENUMS)
        return tables
