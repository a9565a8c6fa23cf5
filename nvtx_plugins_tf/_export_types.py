"""The export types, named as ``nsys export --type`` names them: the file (or directory) each
writes next to a prefix, and its sink (in :mod:`nvtx_plugins_tf.recorder.exports`, imported
on use: the command line reads this module without loading the recorder). ``record
--export`` and ``export --type`` take these names; one decode feeds every type asked for
(:mod:`nvtx_plugins_tf.recorder.outputs`).

====================  ===================  ==========================================
type                  written to           what
====================  ===================  ==========================================
``sqlite``            ``PREFIX.sqlite``    nsys 2024.2.3's SQLite export (``exports/sqlite.py``)
``json``              ``PREFIX.json``      Trace Event JSON for Perfetto / chrome://tracing
                                           (``exports/trace_json.py``; nsys's ``json`` is
                                           another, line-per-record format)
``parquetdir``        ``PREFIX_pqtdir/``   nsys's Parquet directory, a file per table
                                           (``exports/parquet.py``)
``arrow``             ``PREFIX.arrow``     nsys's Arrow file, a stream per table
                                           (``exports/arrow.py``)
``arrowdir``          ``PREFIX_arwdir/``   nsys's Arrow directory, a stream file per
                                           table (``exports/arrowdir.py``)
====================  ===================  ==========================================
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

__all__ = ["ExportType", "TYPES", "DEFAULT_RECORD_TYPES", "output_path", "parse_types"]


@dataclass(frozen=True)
class ExportType:
    name: str
    suffix: str  # appended to the prefix
    module: str  # the module of its sink, imported on use (pyarrow only when asked for)
    sink: str

    def sink_class(self):
        import importlib

        return getattr(importlib.import_module(f"nvtx_plugins_tf.recorder.exports.{self.module}"), self.sink)


TYPES = {
    t.name: t
    for t in (
        ExportType("sqlite", ".sqlite", "sqlite", "SqliteSink"),
        ExportType("json", ".json", "trace_json", "JsonSink"),
        ExportType("parquetdir", "_pqtdir", "parquet", "ParquetSink"),
        ExportType("arrow", ".arrow", "arrow", "ArrowSink"),
        ExportType("arrowdir", "_arwdir", "arrowdir", "ArrowDirSink"),
    )
}
#: what ``record`` writes unless ``--export`` says otherwise
DEFAULT_RECORD_TYPES = ("json", "sqlite")


def output_path(prefix, name: str) -> Path:
    """Where type ``name`` is written for ``prefix``: PREFIX + its suffix."""
    prefix = Path(prefix)
    return prefix.with_name(prefix.name + TYPES[name].suffix)


def parse_types(text: str) -> tuple[str, ...]:
    """``"sqlite,parquetdir"`` -> ``("sqlite", "parquetdir")``; ValueError naming what is wrong."""
    names = [t.strip() for t in text.split(",")]
    if not text.strip() or "" in names:
        raise ValueError(f"empty type in {text!r}; choose from {', '.join(TYPES)}")
    unknown = [t for t in names if t not in TYPES]
    if unknown:
        raise ValueError(f"unknown type {unknown[0]!r}; choose from {', '.join(TYPES)} (comma-separated)")
    return tuple(dict.fromkeys(names))
