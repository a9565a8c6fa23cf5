"""Export a recording as ``nsys export --type arrow`` writes it: one file holding one Arrow IPC
stream per table of nsys's export schema, one after the other, each stream's schema
carrying the table's name in its metadata (``table_name``; ``table_desc`` and each field's
``field_desc`` where nsys writes them), with nsys's ``--type arrow`` types (``uint32`` where
its Parquet has ``int64``: :data:`.arrow_tables.IPC_SCHEMAS`). Read it with::

    import pyarrow as pa, pyarrow.ipc as ipc
    source = pa.OSFile(path)           # or pa.memory_map(path)
    while source.tell() < source.size():
        table = ipc.open_stream(source).read_all()
        name = table.schema.metadata[b"table_name"].decode()

The tables are nsys's (those of its ``--type arrow`` of an NVTX-only report) and our own
``NVTX_TF_META_DATA``; columns and rows are those of the Parquet export (:mod:`.parquet`,
:mod:`.arrow_tables`): NVTX_EVENTS in the order the recording is read, one record batch
per batch read (written to a spool file meanwhile, so memory stays bounded), the
definitions last.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pyarrow as pa
import pyarrow.ipc as ipc

from ..._paths import arrow_file
from ..._signals import held
from ..recording.model import DamageReport
from ..recording.reader import RecordingReader, reading
from .arrow_tables import IPC_SCHEMAS, EventTables, as_ipc, shifted, table_of_rows
from .one_pass import OutputFile, Sink, feed

__all__ = ["export_arrow", "ArrowSink", "read_arrow_tables"]


_EVENTS_IPC = IPC_SCHEMAS["NVTX_EVENTS"]


def read_arrow_tables(path) -> dict[str, pa.Table]:
    """Every table of an ``--type arrow`` file (ours or nsys's), by name."""
    out = {}
    with arrow_file(path) as source:
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
        self.reader = reader
        self.output = Path(output)
        self._file = OutputFile(self.output)
        self._spool = None
        try:
            with held():  # (made and owned in one step; see _output)
                folder = self._file.tmp.parent
                fd, spool = tempfile.mkstemp(prefix=f".{self.output.name}.", suffix=".events", dir=folder)
                self._spool = Path(spool)
                os.close(fd)
            self._spool_file = arrow_file(self._spool, "wb")
            self._events = ipc.new_stream(self._spool_file, _EVENTS_IPC)
        except BaseException:
            if self._spool is not None:
                self._spool.unlink(missing_ok=True)
            self._file.discard()
            raise
        self._tables = EventTables(reader)

    def add(self, rows) -> None:
        table = self._tables.add(rows)
        if table is not None:
            self._events.write_table(as_ipc(table, "NVTX_EVENTS"))

    def _abort(self) -> None:
        try:
            self._events.close()
            self._spool_file.close()
        except (OSError, ValueError):  # (a full disk: the spool is discarded all the same)
            pass
        finally:
            self._spool.unlink(missing_ok=True)
            self._file.discard()

    def _finish(self) -> DamageReport:
        definitions = self._tables.definitions()
        if definitions is not None:
            self._events.write_table(as_ipc(definitions, "NVTX_EVENTS"))
        self._events.close()
        self._spool_file.close()
        damage = self.reader.damage()
        tables = self._tables.other_tables(self.output, damage)
        with open(self._file.tmp, "wb") as out:
            for name, schema in IPC_SCHEMAS.items():
                if name == "NVTX_EVENTS":
                    self._copy_events(out, -self._tables.earliest)  # no time before 0, as in nsys
                    continue
                with ipc.new_stream(out, schema) as writer:
                    writer.write_table(as_ipc(table_of_rows(name, tables.get(name, [])), name))
        self._spool.unlink(missing_ok=True)
        self._file.commit()
        return damage

    def _copy_events(self, out, shift: int) -> None:
        if not shift:
            with open(self._spool, "rb") as spool:  # (Python's open: any file name)
                shutil.copyfileobj(spool, out, 1 << 20)
            return
        with arrow_file(self._spool) as source, ipc.new_stream(out, _EVENTS_IPC) as w:
            for batch in ipc.open_stream(source):
                w.write_table(shifted(pa.Table.from_batches([batch]), shift, _EVENTS_IPC))
