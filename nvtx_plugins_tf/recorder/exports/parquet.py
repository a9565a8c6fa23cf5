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

from ..recording.model import DamageReport
from ..recording.reader import RecordingReader, reading
from . import _nsys_schema, nsys_tables
from .arrow_tables import ARROW_SCHEMAS, EVENTS_SCHEMA, definitions_table, event_table, table_of_rows
from .one_pass import Sink, feed

__all__ = ["export_parquetdir", "ParquetSink", "parquet_dir_for"]


def parquet_dir_for(prefix) -> Path:
    """Where nsys puts the parquetdir export of ``PREFIX.nsys-rep``: ``PREFIX_pqtdir``; the
    recipes' ``DataService`` looks for it there."""
    prefix = Path(prefix)
    return prefix.with_name(prefix.name + "_pqtdir")


def _write(path: Path, table: str, rows: list) -> None:
    """``rows`` (tuples in the table's column order) as ``path/TABLE.parquet``."""
    pq.write_table(table_of_rows(table, rows), path / f"{table}.parquet", store_schema=False)


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
            self._events = pq.ParquetWriter(self._tmp / "NVTX_EVENTS.parquet", EVENTS_SCHEMA, store_schema=False)
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
            self._events.write_table(definitions_table(definitions))
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
        with pq.ParquetWriter(shifted, EVENTS_SCHEMA, store_schema=False) as out:
            source = pq.ParquetFile(path)
            for g in range(source.num_row_groups):
                t = source.read_row_group(g)
                for name in ("start", "end"):
                    i = t.schema.get_field_index(name)
                    t = t.set_column(i, EVENTS_SCHEMA.field(name), pc.add(t.column(i), shift))
                out.write_table(t)
        shifted.replace(path)
