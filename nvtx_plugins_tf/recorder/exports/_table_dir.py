"""What the two directory exports share (nsys's ``parquetdir``: :mod:`.parquet`; its
``arrowdir``: :mod:`.arrowdir`): a directory with a file per table, built beside the output
and renamed into place by ``finish()`` (an aborted export leaves no trace), ``NVTX_EVENTS``
written batch by batch into its file as the recording is read (the definitions last), and
shifted once at the end if an event precedes its segment (no time before 0, as in nsys and
our SQLite); every other table written at the end.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pyarrow as pa

from ..._paths import arrow_file
from ..._signals import held
from ..recording.model import DamageReport
from ..recording.reader import RecordingReader
from ._output import replace_directory
from .arrow_tables import EventTables, table_of_rows
from .one_pass import Sink

__all__ = ["TableDirSink"]


class TableDirSink(Sink):
    """A directory export batch by batch (see :mod:`.one_pass`). Subclasses say which tables
    (:attr:`tables`), the file of each (:attr:`suffix`), and how a file is opened, written
    and the events file shifted."""

    suffix = ""  #: ".parquet", ".arrow"
    tables: tuple[str, ...] = ()  #: every table written, NVTX_EVENTS included

    def __init__(self, reader: RecordingReader, output):
        self.reader = reader
        self.output = Path(output)
        self.output.parent.mkdir(parents=True, exist_ok=True)
        self._tmp = None
        try:
            with held():  # (the folder made and owned in one step; see _output)
                self._tmp = Path(tempfile.mkdtemp(prefix=f".{self.output.name}.", dir=self.output.parent))
            self._events_file = arrow_file(self._tmp / f"NVTX_EVENTS{self.suffix}", "wb")
            self._events = self._open(self._events_file, "NVTX_EVENTS")
        except BaseException:
            if self._tmp is not None:
                shutil.rmtree(self._tmp, ignore_errors=True)
            raise
        self._tables = EventTables(reader)

    # ---- what a subclass says
    def _open(self, sink, table: str):
        """A writer of ``table`` into the open file ``sink`` (``write_table``, ``close``; the
        file is opened by its bytes, :func:`.._paths.arrow_file`: a name of any bytes)."""
        raise NotImplementedError

    def _converted(self, table: pa.Table, name: str) -> pa.Table:
        """``table`` (of :data:`.arrow_tables.ARROW_SCHEMAS`) as this format writes ``name``."""
        return table

    def _shift_events(self, path: Path, shift: int) -> None:
        raise NotImplementedError

    # ---- the shared work
    def add(self, rows) -> None:
        table = self._tables.add(rows)
        if table is not None:
            self._events.write_table(self._converted(table, "NVTX_EVENTS"))

    def _abort(self) -> None:
        try:
            self._events.close()
            self._events_file.close()
        except (OSError, ValueError):  # (a full disk: the folder is discarded all the same)
            pass
        finally:
            shutil.rmtree(self._tmp, ignore_errors=True)

    def _finish(self) -> DamageReport:
        definitions = self._tables.definitions()
        if definitions is not None:
            self._events.write_table(self._converted(definitions, "NVTX_EVENTS"))
        self._events.close()
        self._events_file.close()
        if self._tables.earliest < 0:
            self._shift_events(self._tmp / f"NVTX_EVENTS{self.suffix}", -self._tables.earliest)
        damage = self.reader.damage()
        rows = self._tables.other_tables(self.output, damage)
        for name in self.tables:
            if name != "NVTX_EVENTS":
                with arrow_file(self._tmp / f"{name}{self.suffix}", "wb") as sink:
                    writer = self._open(sink, name)
                    try:
                        writer.write_table(self._converted(table_of_rows(name, rows.get(name, [])), name))
                    finally:
                        writer.close()
        replace_directory(self._tmp, self.output)
        return damage
