"""Export a recording as ``nsys export --type arrow`` writes it: one file holding one Arrow IPC
stream per table of nsys's export schema, one after the other, each stream's schema
carrying the table's name in its metadata (``table_name``). Read it with::

    import pyarrow as pa, pyarrow.ipc as ipc
    source = pa.OSFile(path)           # or pa.memory_map(path)
    while source.tell() < source.size():
        table = ipc.open_stream(source).read_all()
        name = table.schema.metadata[b"table_name"].decode()

The tables, columns, Arrow types and rows are those of the Parquet export (:mod:`.parquet`,
:mod:`.arrow_tables`): NVTX_EVENTS in the order the recording is read, one record batch
per batch read (written to a spool file meanwhile, so memory stays bounded), the
definitions last.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc as ipc

from ..recording.model import DamageReport
from ..recording.reader import RecordingReader, reading
from . import _nsys_schema, nsys_tables
from .arrow_tables import ARROW_SCHEMAS, EVENTS_SCHEMA, definitions_table, event_table, table_of_rows
from .one_pass import OutputFile, Sink, feed

__all__ = ["export_arrow", "ArrowSink", "read_arrow_tables"]


def _named(schema: pa.Schema, table: str) -> pa.Schema:
    return schema.with_metadata({"table_name": table})


def read_arrow_tables(path) -> dict[str, pa.Table]:
    """Every table of an ``--type arrow`` file (ours or nsys's), by name."""
    out = {}
    with pa.OSFile(os.fspath(path)) as source:
        size = source.size()
        while source.tell() < size:
            table = ipc.open_stream(source).read_all()
            out[table.schema.metadata[b"table_name"].decode()] = table
    return out


def export_arrow(recording, output, *, reader: RecordingReader | None = None) -> DamageReport:
    """Write ``recording`` as nsys's single-file Arrow export ``output`` (replaced if it exists)."""
    with reading(recording, reader) as reader, ArrowSink(reader, output) as sink:
        feed(reader, [sink])
        return sink.finish()


class ArrowSink(Sink):
    """:func:`export_arrow` batch by batch (see :mod:`.one_pass`)."""

    def __init__(self, reader: RecordingReader, output):
        self._t0 = time.monotonic()
        self.reader = reader
        self.output = Path(output)
        self._file = OutputFile(self.output)
        fd, spool = tempfile.mkstemp(prefix=f".{self.output.name}.", suffix=".events", dir=self._file.tmp.parent)
        os.close(fd)
        self._spool = Path(spool)
        try:
            self._events = ipc.new_stream(str(self._spool), _named(EVENTS_SCHEMA, "NVTX_EVENTS"))
        except BaseException:
            self._spool.unlink(missing_ok=True)
            self._file.discard()
            raise
        self._strings = pa.array([], pa.string())
        self._domain_local = np.zeros(1, dtype=np.int64)
        self._earliest = 0
        self._last = 0

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
        self._note_times(table)

    def _note_times(self, table: pa.Table) -> None:
        start, end = pc.min_max(table.column("start")), pc.max(table.column("end"))
        self._earliest = min(self._earliest, start["min"].as_py())
        self._last = max(self._last, start["max"].as_py(), end.as_py() or 0)

    def _abort(self) -> None:
        try:
            self._events.close()
        finally:
            self._spool.unlink(missing_ok=True)
            self._file.discard()

    def _finish(self) -> DamageReport:
        reader = self.reader
        origin = reader.origin_ns
        definitions = nsys_tables.definition_events(reader, origin)
        if definitions:
            table = definitions_table(definitions)
            self._events.write_table(table)
            self._note_times(table)
        self._events.close()
        shift = -self._earliest  # no time before 0, as in nsys and our SQLite
        origin -= shift
        tables = nsys_tables.small_tables(reader, origin, self._last + shift)
        damage = reader.damage()
        tables["META_DATA_EXPORT"] = nsys_tables.export_metadata(
            reader, self.output, damage, time.monotonic() - self._t0, origin
        )
        tables.update(_nsys_schema.ENUMS)
        with open(self._file.tmp, "wb") as out:
            for name in ARROW_SCHEMAS:
                if name == "NVTX_EVENTS":
                    self._copy_events(out, shift)
                    continue
                data = table_of_rows(name, tables.get(name, []))
                with ipc.new_stream(out, _named(data.schema, name)) as writer:
                    writer.write_table(data)
        self._spool.unlink(missing_ok=True)
        self._file.commit()
        return damage

    def _copy_events(self, out, shift: int) -> None:
        if not shift:
            with open(self._spool, "rb") as spool:
                shutil.copyfileobj(spool, out, 1 << 20)
            return
        with pa.OSFile(str(self._spool)) as source, ipc.new_stream(out, _named(EVENTS_SCHEMA, "NVTX_EVENTS")) as w:
            for batch in ipc.open_stream(source):
                t = pa.Table.from_batches([batch])
                for name in ("start", "end"):
                    i = t.schema.get_field_index(name)
                    t = t.set_column(i, EVENTS_SCHEMA.field(name), pc.add(t.column(i), shift))
                w.write_table(t)
