"""Export a recording as Nsight Systems writes ``nsys export --type parquetdir``: a directory
with one ``TABLE.parquet`` per table of its export schema (nsys 2024.2.3), the same table
names, column names and Arrow types (:data:`._nsys_schema.PARQUET`, generated from a real
nsys export), so code written for nsys's Parquet (its recipes' ``DataService``, pandas,
DuckDB, polars) reads ours unchanged. Also, empty, the CUDA tables 2024.2's ``nvtx_pace``
recipe reads even from an NVTX-only report (:data:`._nsys_schema.RECIPE_PARQUET`: nsys's
recipe loader exports them ``--lazy false``), and our own ``NVTX_TF_META_DATA.parquet``.

The rows are those of the SQLite export (:mod:`.sqlite`; the values of both come from
:mod:`.nsys_tables`): ``NVTX_EVENTS``, ``StringIds``, ``ThreadNames``, ``PROCESSES``,
``ANALYSIS_DETAILS``, ``TARGET_INFO_SESSION_START_TIME``, ``META_DATA_EXPORT``,
``META_DATA_CAPTURE``, the ``ENUM_*`` tables; the tables we have no data for are written
empty, with their columns.
Differences from the SQLite file: ``NVTX_EVENTS`` rows come in the order the recording is
read (each thread's events in time order, threads and processes one after the other, the
definitions -- domains, categories, thread names -- last), not sorted by start: the file is
written batch by batch, one row group per batch, so memory stays bounded whatever the size
of the recording (nsys's recipes and the usual readers sort or group themselves).
Compression: Snappy (nsys
writes uncompressed column chunks; readers do not care).
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pyarrow.parquet as pq

from ..recording.model import DamageReport
from ..recording.reader import RecordingReader, reading
from .arrow_tables import ARROW_SCHEMAS, EVENTS_SCHEMA, EventTables, shifted, table_of_rows
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
        self.reader = reader
        self.output = Path(output)
        self.output.parent.mkdir(parents=True, exist_ok=True)
        self._tmp = Path(tempfile.mkdtemp(prefix=f".{self.output.name}.", dir=self.output.parent))
        try:
            self._events = pq.ParquetWriter(self._tmp / "NVTX_EVENTS.parquet", EVENTS_SCHEMA, store_schema=False)
        except BaseException:
            shutil.rmtree(self._tmp, ignore_errors=True)
            raise
        self._tables = EventTables(reader)

    def add(self, rows) -> None:
        table = self._tables.add(rows)
        if table is not None:
            self._events.write_table(table)

    def _abort(self) -> None:
        try:
            self._events.close()
        finally:
            shutil.rmtree(self._tmp, ignore_errors=True)

    def _finish(self) -> DamageReport:
        tmp = self._tmp
        definitions = self._tables.definitions()
        if definitions is not None:
            self._events.write_table(definitions)
        self._events.close()
        if self._tables.earliest < 0:  # no time before 0, as in nsys and our SQLite: shift everything
            self._shift_events(-self._tables.earliest)
        damage = self.reader.damage()
        tables = self._tables.other_tables(self.output, damage)
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

    def _shift_events(self, shift: int) -> None:
        path = self._tmp / "NVTX_EVENTS.parquet"
        moved = path.with_name("NVTX_EVENTS.shifted")
        with pq.ParquetWriter(moved, EVENTS_SCHEMA, store_schema=False) as out:
            source = pq.ParquetFile(path)
            for g in range(source.num_row_groups):
                out.write_table(shifted(source.read_row_group(g), shift))
        moved.replace(path)
