"""The exports ``record`` writes once the command has ended: PREFIX.json, PREFIX.sqlite,
PREFIX.png on request, and the summary on stdout."""

from __future__ import annotations

import contextlib
import errno
import os
from pathlib import Path

from ._common import EXIT_OUTPUT_NOT_WRITABLE, CliError, warn

#: Events (estimated) from which the SQLite file is written by a child process (two cores or more).
PARALLEL_MIN_EVENTS = 1_000_000

# SQLITE_READONLY, SQLITE_IOERR, SQLITE_FULL, SQLITE_CANTOPEN (primary result codes)
_SQLITE_WRITE_ERRORS = (8, 10, 13, 14)


def write_exports(raw_dir: Path, prefix: Path, png: bool, png_window: str = "1:") -> tuple[int, object]:
    """Write PREFIX.json/.sqlite(/.png) and print the summary; returns (events, damage).

    One decode feeds every writer (recorder/exports/one_pass.py); on a terminal, stderr shows how far
    the export is."""
    import sqlite3

    from ..recorder.exports.one_pass import ChildSink, Progress, feed
    from ..recorder.exports.sqlite import SqliteSink
    from ..recorder.exports.trace_json import JsonSink
    from ..recorder.recording.reader import RecordingReader
    from ..recorder.reports.summary import RecordingSummary

    json_path = prefix.with_name(prefix.name + ".json")
    sqlite_path = prefix.with_name(prefix.name + ".sqlite")
    png_path = prefix.with_name(prefix.name + ".png")
    written = []
    no_png = None
    try:
        with RecordingReader(raw_dir) as reader, contextlib.ExitStack() as unfinished:
            # A sink left unfinished (an error, no events) removes what it wrote. With two cores
            # or more, a large recording's SQLite file is written by a child process meanwhile.
            if reader.estimated_events() >= PARALLEL_MIN_EVENTS and len(os.sched_getaffinity(0)) > 1:
                sqlite_sink = unfinished.enter_context(ChildSink(reader, SqliteSink, sqlite_path))
                json_sink = unfinished.enter_context(JsonSink(reader, json_path))
            else:
                json_sink = unfinished.enter_context(JsonSink(reader, json_path))
                sqlite_sink = unfinished.enter_context(SqliteSink(reader, sqlite_path))
            summary_sink = RecordingSummary(reader)
            sinks = [json_sink, sqlite_sink, summary_sink]
            timeline = None
            if png:
                from ..recorder.timeline import MatplotlibMissing, TimelineSink

                try:
                    timeline = unfinished.enter_context(TimelineSink(reader, png_path, window=png_window))
                    sinks.append(timeline)
                except MatplotlibMissing as exc:
                    no_png = exc
            with Progress(reader.estimated_events(), total_bytes=reader.total_bytes()) as progress:
                feed(reader, sinks, progress)
                damage = reader.damage()
                if damage.events == 0:
                    # The new run has started and recorded nothing: exports of an older run
                    # would no longer match PREFIX.nvtxrec.
                    for stale in (json_path, sqlite_path, png_path):
                        stale.unlink(missing_ok=True)
                    return 0, damage
                sqlite_sink.start_finish()  # (a child process sorts the rows meanwhile)
                progress.update(progress.done, f"writing {json_path.name}", force=True)
                json_sink.finish()
                written.append(json_path)
                summary = summary_sink.finish()
                try:
                    if timeline is not None:
                        progress.update(progress.done, f"drawing {png_path.name}", force=True)
                        timeline.finish()
                finally:
                    progress.update(progress.done, f"writing {sqlite_path.name}", force=True)
                    sqlite_sink.finish()
                    written.append(sqlite_path)
                if timeline is not None:
                    written.append(png_path)
        if no_png is not None:
            warn(f"--png: {no_png}; no PNG written")
    except PermissionError as exc:
        raise CliError(f"cannot write {exc.filename or prefix}: permission denied", EXIT_OUTPUT_NOT_WRITABLE) from exc
    except sqlite3.Error as exc:
        # The SQLite file is written along with the others: it can be the first to find the disk full.
        if getattr(exc, "sqlite_errorcode", 0) & 0xFF in _SQLITE_WRITE_ERRORS:
            raise CliError(f"cannot write {sqlite_path}: {exc}", EXIT_OUTPUT_NOT_WRITABLE) from exc
        raise
    except OSError as exc:
        if exc.errno in (
            errno.EACCES,
            errno.EROFS,
            errno.ENOSPC,
            errno.ENOENT,
            errno.EDQUOT,
            errno.EISDIR,
            errno.ENOTDIR,
            errno.EEXIST,
        ):
            raise CliError(f"cannot write {exc.filename or prefix}: {exc.strerror}", EXIT_OUTPUT_NOT_WRITABLE) from exc
        raise
    print(f"\nNVTX range summary ({raw_dir}):")
    print(summary.format())
    print(f"\nwrote {', '.join(map(str, written))}")
    return damage.events, damage
