"""The files a recording is exported to, written from one decode (:mod:`.one_pass`: the
sinks, the driver :func:`~.one_pass.feed`, the progress line; :mod:`.remote`: a sink in a
child process or a thread):
Trace Event JSON (:mod:`.trace_json`), SQLite in Nsight Systems' schema (:mod:`.sqlite`,
nsys's tables in :mod:`._nsys_schema`, their rows in :mod:`.nsys_tables`), nsys's Parquet
directory (:mod:`.parquet`) and Arrow file (:mod:`.arrow`) from the same Arrow tables
(:mod:`.arrow_tables`), each written atomically (:mod:`._output`); the types by name in
:mod:`nvtx_plugins_tf._export_types`.

Reads recordings through :mod:`..recording` only; a new export format is a new module here
with a :class:`~.one_pass.Sink`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..._lazy import attach

if TYPE_CHECKING:
    from .one_pass import Progress, Sink, feed
    from .remote import ChildSink, ThreadSink
    from .sqlite import SqliteSink, export_sqlite
    from .trace_json import JsonSink, export_json

# the public names, imported on first use (nvtx_plugins_tf/_lazy.py), and where each lives
_HOMES = {
    **dict.fromkeys(("Progress", "Sink", "feed"), ".one_pass"),
    **dict.fromkeys(("ChildSink", "ThreadSink"), ".remote"),
    **dict.fromkeys(("SqliteSink", "export_sqlite"), ".sqlite"),
    **dict.fromkeys(("JsonSink", "export_json"), ".trace_json"),
}
__getattr__, __dir__ = attach(__name__, _HOMES)

__all__ = [
    "ChildSink",
    "ThreadSink",
    "JsonSink",
    "Progress",
    "Sink",
    "SqliteSink",
    "export_json",
    "export_sqlite",
    "feed",
]
