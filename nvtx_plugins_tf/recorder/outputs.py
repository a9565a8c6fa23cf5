"""What ``record``, ``merge`` and ``export`` write from a recording, from one decode: the
export types asked for (:mod:`nvtx_plugins_tf._export_types`; ``record``'s default: PREFIX.json and
PREFIX.sqlite), PREFIX.png on request, and the range summary.

Every writer is a sink of :mod:`.exports.one_pass`; with two cores or more, a large
recording's SQLite file is written by a child process and its other exports by threads,
while the recording is decoded. On a terminal, stderr shows how far the export is. The
exports of an older run at PREFIX that this run does not write again go (they would no
longer match PREFIX.nvtxrec: ``record --export arrow`` removes an older PREFIX.json); a
recording without events writes nothing and removes them all.

This module sits above the other packages (it feeds the exports, the summary and the
timeline from one pass); the command line maps its errors to exit codes and prints.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from .._export_types import DEFAULT_RECORD_TYPES, TYPES, output_path
from .._signals import held
from .exports.one_pass import Progress, feed
from .exports.remote import ChildSink, ThreadSink
from .recording.model import DamageReport
from .recording.reader import RecordingReader
from .reports.summary import RecordingSummary, Summary

__all__ = ["Outputs", "write_outputs", "output_paths", "PARALLEL_MIN_EVENTS"]

#: Events (estimated) from which the exports are written by a child process (SQLite) and threads (two cores or more).
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


def every_output_path(prefix) -> list[Path]:
    """Every file or folder an export of PREFIX may be (each type's, and the picture's)."""
    return [*output_paths(prefix).values(), *(output_path(prefix, t) for t in TYPES)]


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def write_outputs(
    recording,
    prefix,
    *,
    png: bool = False,
    png_window: str = "1:",
    types: tuple[str, ...] = DEFAULT_RECORD_TYPES,
    targets: dict[str, Path] | None = None,
    summary: bool = True,
    remove_stale: bool = True,
) -> Outputs:
    """Write the export ``types`` of ``recording`` (at PREFIX + each type's suffix, or at
    ``targets``: type -> path), PREFIX.png if ``png`` (the steps ``png_window``), and
    summarize it (``summary``), from one decode. A file left unfinished (an error, no
    events) is removed; with ``remove_stale``, the exports of an older run at PREFIX that
    this one did not write again go (all of them for a recording without events). Errors
    are raised as they come (``OSError``, ``sqlite3.Error``)."""
    prefix = Path(prefix)
    targets = dict(targets) if targets is not None else {t: output_path(prefix, t) for t in types}
    png_path = output_paths(prefix)["png"]
    with RecordingReader(recording) as reader, contextlib.ExitStack() as unfinished:
        parallel = reader.estimated_events() >= PARALLEL_MIN_EVENTS and len(os.sched_getaffinity(0)) > 1
        sinks = {}
        for name in sorted(targets, key=lambda t: t != "sqlite"):  # (the child first: it starts sooner)
            cls = TYPES[name].sink_class()
            # On two cores or more: the SQLite file (Python and SQLite's own work, holding the
            # GIL) in a child process, the others in threads (native formatting, pyarrow and
            # writes: they release the GIL), while this thread decodes.
            remote = (ChildSink if name == "sqlite" else ThreadSink) if parallel else None
            with held():  # (made, its thread or child started, and owned by `unfinished` in one step)
                sink = remote(reader, cls, targets[name]) if remote else cls(reader, targets[name])
                sinks[name] = unfinished.enter_context(sink)
        summary_sink = RecordingSummary(reader) if summary else None
        every = [*sinks.values(), *([summary_sink] if summary_sink else [])]
        timeline = png_error = None
        if png:
            from .timeline import MatplotlibMissing, TimelineSink

            try:
                timeline = unfinished.enter_context(TimelineSink(reader, png_path, window=png_window))
                every.append(timeline)
            except MatplotlibMissing as exc:
                png_error = exc
        with Progress(reader.estimated_events(), total_bytes=reader.total_bytes()) as progress:
            feed(reader, every, progress)
            out = Outputs(reader.damage(), png_error=png_error)
            if out.damage.events == 0:
                if remove_stale:
                    for stale in every_output_path(prefix):
                        _remove(stale)
                return out
            for sink in sinks.values():
                sink.start_finish()  # (a child process or a thread finishes meanwhile)
            # The SQLite file last (sorting its rows is the longest), the remote ones' after the rest.
            children = [n for n, s in sinks.items() if isinstance(s, (ChildSink, ThreadSink))]  # (finishing meanwhile)
            for name in sorted((n for n in sinks if n not in children), key=lambda n: n == "sqlite"):
                progress.update(progress.done, f"writing {targets[name].name}", force=True)
                sinks[name].finish()
                out.written.append(targets[name])
            if summary_sink is not None:
                out.summary = summary_sink.finish()
            try:
                if timeline is not None:
                    progress.update(progress.done, f"drawing {png_path.name}", force=True)
                    timeline.finish()
            finally:
                for name in sorted(children, key=lambda n: n == "sqlite"):
                    progress.update(progress.done, f"writing {targets[name].name}", force=True)
                    sinks[name].finish()
                    out.written.append(targets[name])
            if timeline is not None:
                out.written.append(png_path)
    if remove_stale:  # an older run's exports of another type (or its picture) no longer match the recording
        for stale in set(every_output_path(prefix)) - set(out.written):
            _remove(stale)
    return out
