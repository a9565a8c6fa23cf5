"""Nsight Systems' exports read as inputs (an SQLite file or a parquetdir in nsys's schema,
ours or ``nsys export``'s), with the rules of nsys's own report scripts, for the reports
(:mod:`..reports`) and ``analyze`` (:mod:`..analysis`) alike:

* :mod:`.sqlite`: opening an SQLite export (:func:`~.sqlite.open_nsys_sqlite`), how a
  row's message, domain name and ids are read (the rules, in SQL);
* :mod:`.parquetdir`: a parquetdir recognised, its columns checked, copied into an SQLite
  file for the reports that read SQL (:func:`~.parquetdir.parquetdir_to_sqlite`);
* :mod:`.ranges`: an export's ranges whole, as numpy column arrays (the reference);
* :mod:`.batches`: the same rows streamed batch by batch into the native mapper
  (:func:`~.batches.feed_export`), held to :mod:`.ranges` value for value.

The start of the flow for nsys's files, as :mod:`..recording` is for ours: builds on
:mod:`..recording` (the event types, :func:`~..recording.model.range_label`) and nsys's
schema as :mod:`..exports` writes it (``exports/_nsys_schema.py``); imported by
:mod:`..reports` and :mod:`..analysis`, never the other way.
"""

from __future__ import annotations

from .batches import ExportInfo, feed_export
from .parquetdir import events_columns, is_parquetdir, parquetdir_to_sqlite
from .ranges import parquetdir_columns, sqlite_columns
from .sqlite import NsysFile, is_sqlite, open_nsys_sqlite

__all__ = [
    "ExportInfo",
    "NsysFile",
    "events_columns",
    "feed_export",
    "is_parquetdir",
    "is_sqlite",
    "open_nsys_sqlite",
    "parquetdir_columns",
    "parquetdir_to_sqlite",
    "sqlite_columns",
]
