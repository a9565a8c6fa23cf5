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

from pathlib import Path

import pyarrow.parquet as pq

from ..._paths import arrow_file
from ..recording.model import DamageReport
from ..recording.reader import RecordingReader, reading
from ._table_dir import TableDirSink
from .arrow_tables import ARROW_SCHEMAS, EVENTS_SCHEMA, shifted
from .one_pass import feed

__all__ = ["export_parquetdir", "ParquetSink", "parquet_dir_for"]


def parquet_dir_for(prefix) -> Path:
    """Where nsys puts the parquetdir export of ``PREFIX.nsys-rep``: ``PREFIX_pqtdir``; the
    recipes' ``DataService`` looks for it there."""
    prefix = Path(prefix)
    return prefix.with_name(prefix.name + "_pqtdir")


def export_parquetdir(recording, output, *, reader: RecordingReader | None = None) -> DamageReport:
    """Write ``recording`` as the directory ``output`` of nsys's parquetdir export (replaced
    if it exists); see the module docstring."""
    with reading(recording, reader) as reader, ParquetSink(reader, output) as sink:
        feed(reader, [sink])
        return sink.finish()


class ParquetSink(TableDirSink):
    """:func:`export_parquetdir` batch by batch (see :mod:`.one_pass` and :mod:`._table_dir`):
    one row group per batch; ``finish()`` returns the :class:`DamageReport`."""

    suffix = ".parquet"
    tables = tuple(ARROW_SCHEMAS)

    def _open(self, sink, table: str):
        return pq.ParquetWriter(sink, ARROW_SCHEMAS[table], store_schema=False)

    def _shift_events(self, path: Path, shift: int) -> None:
        moved = path.with_name("NVTX_EVENTS.shifted")
        with arrow_file(moved, "wb") as sink, arrow_file(path) as data:
            with pq.ParquetWriter(sink, EVENTS_SCHEMA, store_schema=False) as out:
                source = pq.ParquetFile(data)
                for g in range(source.num_row_groups):
                    out.write_table(shifted(source.read_row_group(g), shift))
        moved.replace(path)
