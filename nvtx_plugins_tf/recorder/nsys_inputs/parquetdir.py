"""An Nsight Systems parquetdir export (``nsys export --type parquetdir``, or ours:
``REPORT_pqtdir/TABLE.parquet``) read as the SQLite file the reports read: the tables they
use are copied into an SQLite file batch by batch (memory bounded), with nsys's own
``CREATE TABLE`` statements, so that every report reads a parquetdir exactly as it reads the
SQLite export of the same report (:mod:`.sqlite`)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from ..._paths import arrow_file
from ..exports import _nsys_schema

__all__ = ["is_parquetdir", "events_columns", "parquetdir_to_sqlite", "REQUIRED_COLUMNS", "TABLES_READ"]

#: the tables the reports read (those a parquetdir lacks are left out)
TABLES_READ = ("NVTX_EVENTS", "StringIds", "ThreadNames", "PROCESSES", "TARGET_INFO_SESSION_START_TIME")
_BATCH = 65536


def is_parquetdir(path) -> bool:
    """Whether ``path`` is a directory holding ``NVTX_EVENTS.parquet``."""
    return Path(path, "NVTX_EVENTS.parquet").is_file()


#: The columns of NVTX_EVENTS.parquet without which its rows are no ranges.
REQUIRED_COLUMNS = ("start", "eventType")


def events_columns(directory) -> set[str]:
    """The columns of ``directory``'s NVTX_EVENTS.parquet; ValueError naming the directory
    when the file is missing or lacks one of :data:`REQUIRED_COLUMNS` (pyarrow's own, a
    ValueError too, when it is no Parquet file)."""
    import pyarrow.parquet as pq

    directory = Path(directory)
    if not is_parquetdir(directory):
        raise ValueError(f"{directory}: no NVTX_EVENTS.parquet (not a parquetdir export?)")
    with arrow_file(directory / "NVTX_EVENTS.parquet") as source:
        present = set(pq.read_schema(source).names)
    missing = [c for c in REQUIRED_COLUMNS if c not in present]
    if missing:
        raise ValueError(f"{directory}: NVTX_EVENTS.parquet has no {missing[0]!r} column (not an nsys export?)")
    return present


def _signed(value):
    """SQLite integers are signed 64-bit: a uint64 above 2**63-1 is stored wrapped (as our export)."""
    return value - (1 << 64) if isinstance(value, int) and value >= 1 << 63 else value


def parquetdir_to_sqlite(directory, output) -> Path:
    """Copy the tables of the parquetdir ``directory`` the reports read into the new SQLite
    file ``output``; ValueError naming ``directory`` when it holds no NVTX_EVENTS.parquet
    (pyarrow's errors for a damaged file)."""
    import pyarrow.parquet as pq

    directory, output = Path(directory), Path(output)
    events_columns(directory)
    ddl = dict(_nsys_schema.TABLES)
    con = sqlite3.connect(output, isolation_level=None)
    try:
        con.execute("PRAGMA journal_mode=OFF")
        con.execute("PRAGMA synchronous=OFF")
        con.execute("BEGIN")
        for table in TABLES_READ:
            path = directory / f"{table}.parquet"
            if not path.is_file():
                continue
            con.execute(ddl[table])
            # NVTX_EVENTS through a staging table, then in the SQLite export's order (start,
            # the enclosing range first): a report's row ids are the same as on that file.
            target = "temp.stage" if table == "NVTX_EVENTS" else table
            if table == "NVTX_EVENTS":
                con.execute("CREATE TEMP TABLE stage AS SELECT * FROM main.NVTX_EVENTS WHERE 0")
            with arrow_file(path) as data:
                source = pq.ParquetFile(data)
                known = [r[1] for r in con.execute(f"PRAGMA table_info({table})")]
                columns = [c for c in source.schema_arrow.names if c in known]
                sql = f"INSERT INTO {target} ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))})"
                for batch in source.iter_batches(batch_size=_BATCH, columns=columns) if columns else ():
                    values = [batch.column(i).to_pylist() for i in range(len(columns))]
                    con.executemany(sql, ([_signed(v) for v in row] for row in zip(*values)))
            if table == "NVTX_EVENTS":
                con.execute("INSERT INTO main.NVTX_EVENTS SELECT * FROM temp.stage ORDER BY start, end DESC")
                con.execute("DROP TABLE temp.stage")
        con.execute("COMMIT")
    finally:
        con.close()
    return output
