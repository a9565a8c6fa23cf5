"""What ``record`` and ``merge`` write once a recording is complete, from one decode:
PREFIX.json, PREFIX.sqlite, PREFIX.png on request, and the range summary.

Every writer is a sink of :mod:`.exports.one_pass`; with two cores or more, a large
recording's SQLite file is written by a child process meanwhile. On a terminal, stderr
shows how far the export is. A recording without events writes nothing and removes the
exports of an older run at PREFIX (they would no longer match PREFIX.nvtxrec).

This module sits above the other packages (it feeds the exports, the summary and the
timeline from one pass); the command line maps its errors to exit codes and prints.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, field
from pathlib import Path

from .exports.one_pass import ChildSink, Progress, feed
from .exports.sqlite import SqliteSink
from .exports.trace_json import JsonSink
from .recording.model import DamageReport
from .recording.reader import RecordingReader
from .reports.summary import RecordingSummary, Summary

__all__ = ["Outputs", "write_outputs", "output_paths", "PARALLEL_MIN_EVENTS"]

#: Events (estimated) from which the SQLite file is written by a child process (two cores or more).
PARALLEL_MIN_EVENTS = 1_000_000


@dataclass
class Outputs:
    """What :func:`write_outputs` did: the recording's ``damage`` (``damage.events`` of them
    exported), its ``summary`` (None when it has no events), the files ``written`` (in
    order), and ``png_error`` when a PNG was asked for but matplotlib is missing."""

    damage: DamageReport
    summary: Summary | None = None
    written: list[Path] = field(default_factory=list)
    png_error: ImportError | None = None


def output_paths(prefix) -> dict[str, Path]:
    """PREFIX.json, PREFIX.sqlite, PREFIX.png by their suffix."""
    prefix = Path(prefix)
    return {suffix: prefix.with_name(prefix.name + "." + suffix) for suffix in ("json", "sqlite", "png")}


def write_outputs(recording, prefix, *, png: bool = False, png_window: str = "1:") -> Outputs:
    """Write PREFIX.json and PREFIX.sqlite (and PREFIX.png if ``png``: the steps
    ``png_window``) of ``recording`` and summarize it, from one decode. A file left
    unfinished (an error, no events) is removed; errors are raised as they come
    (``OSError``, ``sqlite3.Error``)."""
    paths = output_paths(prefix)
    json_path, sqlite_path, png_path = paths["json"], paths["sqlite"], paths["png"]
    with RecordingReader(recording) as reader, contextlib.ExitStack() as unfinished:
        if reader.estimated_events() >= PARALLEL_MIN_EVENTS and len(os.sched_getaffinity(0)) > 1:
            sqlite_sink = unfinished.enter_context(ChildSink(reader, SqliteSink, sqlite_path))
            json_sink = unfinished.enter_context(JsonSink(reader, json_path))
        else:
            json_sink = unfinished.enter_context(JsonSink(reader, json_path))
            sqlite_sink = unfinished.enter_context(SqliteSink(reader, sqlite_path))
        summary_sink = RecordingSummary(reader)
        sinks = [json_sink, sqlite_sink, summary_sink]
        timeline = png_error = None
        if png:
            from .timeline import MatplotlibMissing, TimelineSink

            try:
                timeline = unfinished.enter_context(TimelineSink(reader, png_path, window=png_window))
                sinks.append(timeline)
            except MatplotlibMissing as exc:
                png_error = exc
        with Progress(reader.estimated_events(), total_bytes=reader.total_bytes()) as progress:
            feed(reader, sinks, progress)
            out = Outputs(reader.damage(), png_error=png_error)
            if out.damage.events == 0:
                for stale in paths.values():
                    stale.unlink(missing_ok=True)
                return out
            sqlite_sink.start_finish()  # (a child process sorts the rows meanwhile)
            progress.update(progress.done, f"writing {json_path.name}", force=True)
            json_sink.finish()
            out.written.append(json_path)
            out.summary = summary_sink.finish()
            try:
                if timeline is not None:
                    progress.update(progress.done, f"drawing {png_path.name}", force=True)
                    timeline.finish()
            finally:
                progress.update(progress.done, f"writing {sqlite_path.name}", force=True)
                sqlite_sink.finish()
                out.written.append(sqlite_path)
            if timeline is not None:
                out.written.append(png_path)
    return out
