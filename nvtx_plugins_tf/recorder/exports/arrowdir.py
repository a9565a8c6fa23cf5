"""Export a recording as ``nsys export --type arrowdir`` writes it: a directory
``PREFIX_arwdir`` with one ``TABLE.arrow`` per table, each an Arrow IPC stream with the
schema of that table's stream in the ``--type arrow`` file (:mod:`.arrow`: nsys's types,
``table_name``, ``table_desc`` and ``field_desc``; our own ``NVTX_TF_META_DATA`` last).
Read a table with ``pyarrow.ipc.open_stream(path).read_all()``.

Rows as in the Parquet export (:mod:`.parquet`): ``NVTX_EVENTS`` in the order the recording
is read, one record batch per batch read, written straight into its file (shifted once at
the end if an event precedes its segment: no time before 0); the directory is built beside
the output and renamed into place at the end, an aborted export leaves no trace.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.ipc as ipc

from ..._paths import arrow_file
from ..recording.model import DamageReport
from ..recording.reader import RecordingReader, reading
from ._table_dir import TableDirSink
from .arrow_tables import IPC_SCHEMAS, as_ipc, shifted
from .one_pass import feed

__all__ = ["export_arrowdir", "ArrowDirSink", "read_arrowdir_tables"]

_EVENTS_IPC = IPC_SCHEMAS["NVTX_EVENTS"]


def read_arrowdir_tables(path) -> dict[str, pa.Table]:
    """Every table of an ``--type arrowdir`` directory (ours or nsys's), by name."""
    out = {}
    for p in sorted(Path(path).glob("*.arrow")):
        with arrow_file(p) as source:
            out[p.stem] = ipc.open_stream(source).read_all()
    return out


def export_arrowdir(recording, output, *, reader: RecordingReader | None = None) -> DamageReport:
    """Write ``recording`` as nsys's Arrow directory ``output`` (replaced if it exists)."""
    with reading(recording, reader) as reader, ArrowDirSink(reader, output) as sink:
        feed(reader, [sink])
        return sink.finish()


class ArrowDirSink(TableDirSink):
    """:func:`export_arrowdir` batch by batch (see :mod:`.one_pass` and :mod:`._table_dir`)."""

    suffix = ".arrow"
    tables = tuple(IPC_SCHEMAS)

    def _open(self, sink, table: str):
        return ipc.new_stream(sink, IPC_SCHEMAS[table])

    def _converted(self, table: pa.Table, name: str) -> pa.Table:
        return as_ipc(table, name)

    def _shift_events(self, path: Path, shift: int) -> None:
        moved = path.with_name("NVTX_EVENTS.shifted")
        with arrow_file(path) as source, arrow_file(moved, "wb") as sink, ipc.new_stream(sink, _EVENTS_IPC) as out:
            for batch in ipc.open_stream(source):
                out.write_table(shifted(pa.Table.from_batches([batch]), shift, _EVENTS_IPC))
        moved.replace(path)
