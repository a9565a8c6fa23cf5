"""One decode, many writers: the exports of a recording from a single pass of its reader.

Every writer is a :class:`Sink`: made with the open :class:`~..recording.reader.RecordingReader`
(before reading), given each batch of rows with :meth:`Sink.add` while the reader
streams them, then :meth:`Sink.finish`-ed once the batches are exhausted (when the
reader's tables -- strings, domains, categories, thread names, processes, damage -- are
complete); a sink left unfinished discards what it wrote (``with sink:``, :meth:`Sink.abort`).
A batch is handed to the sinks in turn and may be kept by them (each is a new array).
The sinks: :class:`~.trace_json.JsonSink`, :class:`~.sqlite.SqliteSink`,
:class:`~..reports.summary.RecordingSummary`, :class:`~..timeline.render.TimelineSink`; the functions
``export_json``, ``export_sqlite``, ``summarize`` and ``render_timeline`` feed one sink
each, ``record`` (:mod:`..outputs`) feeds all of its exports from one :func:`feed`.

:class:`Progress` shows how far a long export is on stderr, and only when stderr is a
terminal: one line, updated a few times a second (``NVTX_TF_PROGRESS_INTERVAL``
seconds, default 0.25; none before the first interval), cleared at the end.

A sink can also run elsewhere, fed the same batches (:mod:`.remote`: a child process or a
thread).
"""

from __future__ import annotations

import os
import sys
import time
from typing import Iterable

from ._output import atomic_output

__all__ = ["Sink", "OutputFile", "Progress", "feed", "PROGRESS_INTERVAL_ENV"]

PROGRESS_INTERVAL_ENV = "NVTX_TF_PROGRESS_INTERVAL"


class Sink:
    """A writer fed batch by batch (see the module docstring)."""

    _closed = False

    def add(self, rows) -> None:
        raise NotImplementedError

    def _finish(self):
        raise NotImplementedError

    def _abort(self) -> None:
        """Discard the partial output."""

    def finish(self):
        """Complete the output (the reader has been read to its end); returns the sink's result."""
        self._closed = True
        try:
            return self._finish()
        except BaseException:
            self._abort()
            raise

    def start_finish(self) -> None:
        """Let :meth:`finish` begin where it can run meanwhile (a :class:`ChildSink`)."""

    def abort(self) -> None:
        if not self._closed:
            self._closed = True
            self._abort()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.abort()


class _Discarded(Exception):
    pass


class OutputFile:
    """:func:`~._output.atomic_output` held open across calls: :attr:`tmp` to write,
    :meth:`commit` replaces the output with it, :meth:`discard` removes it."""

    def __init__(self, output):
        self._cm = atomic_output(output)
        self.tmp = self._cm.__enter__()

    def commit(self) -> None:
        cm, self._cm = self._cm, None
        if cm is not None:
            cm.__exit__(None, None, None)

    def discard(self) -> None:
        cm, self._cm = self._cm, None
        if cm is not None:
            cm.__exit__(_Discarded, _Discarded(), None)


def _count(n: float) -> str:
    if n < 1000:
        return f"{n:.0f}"
    if n < 1_000_000:
        return f"{n / 1e3:.1f}k"
    return f"{n / 1e6:.1f}M"


class Progress:
    """``nvtx-tf: exporting 4.2M events (42 %, about 12 s left)`` on one line of ``stream``
    (stderr), only if it is a terminal; throttled, and cleared by :meth:`close`.

    The share done and the time left come from the bytes of the recording read so far
    (``total_bytes``, ``update(..., done_bytes=)``), not from a count of events estimated
    in advance (events differ in size: that estimate jumped). The time left is shown once
    5 % is done, and a figure shown never grows past twice the one before it (issue 21.13).
    Without byte counts (``total_bytes`` 0) it shows ``done/total events``.
    """

    def __init__(
        self,
        total: int,
        stream=None,
        *,
        what: str = "exporting",
        interval: float | None = None,
        total_bytes: int = 0,
        clock=time.monotonic,
    ):
        self.stream = sys.stderr if stream is None else stream
        try:
            self.enabled = bool(self.stream.isatty())
        except (AttributeError, ValueError, OSError):
            self.enabled = False
        if interval is None:
            try:
                interval = float(os.environ.get(PROGRESS_INTERVAL_ENV, "0.25"))
            except ValueError:
                interval = 0.25
        self.interval = max(interval, 0.0)
        self.total = max(int(total), 0)
        self.total_bytes = max(int(total_bytes), 0)
        self.what = what
        self.done = 0
        self.done_bytes = 0
        self._clock = clock
        self._start = clock()
        self._shown = False
        self._left_shown: float | None = None
        self._next = self._start + self.interval

    def seconds_left(self, done_bytes: int, now: float) -> float | None:
        """The time left to show for ``done_bytes`` read at ``now`` (None: not yet)."""
        if not self.total_bytes or done_bytes < self.total_bytes / 20 or now <= self._start:
            return None
        done = min(done_bytes, self.total_bytes)
        left = (now - self._start) * (self.total_bytes - done) / done
        if self._left_shown is not None:
            left = min(left, 2 * self._left_shown)
        self._left_shown = left
        return left

    def update(self, done: int, note: str = "", *, force: bool = False, done_bytes: int | None = None) -> None:
        """``done`` events so far (``done_bytes`` of the recording read); ``note`` follows the
        figures (e.g. the file being finished). ``force`` skips the throttle, not the first
        interval."""
        self.done = done
        if done_bytes is not None:
            self.done_bytes = done_bytes
        if not self.enabled:
            return
        now = self._clock()
        if now < self._next and not (force and self._shown):
            return
        self._next = now + self.interval
        if self.total_bytes:
            share = min(self.done_bytes, self.total_bytes) / self.total_bytes
            line = f"nvtx-tf: {self.what} {_count(done)} events ({int(100 * share)} %"
            left = self.seconds_left(self.done_bytes, now) if share < 1 else None
            line += f", about {_duration(left)} left)" if left is not None else ")"
        else:
            total = max(self.total, done, 1)
            line = f"nvtx-tf: {self.what} {_count(done)}/{_count(total)} events ({100 * done // total} %)"
        if note:
            line += f", {note}"
        self._write("\r" + line + "\x1b[K")
        self._shown = True

    def close(self) -> None:
        if self._shown:
            self._write("\r\x1b[K")
            self._shown = False
        self.enabled = False

    def _write(self, text: str) -> None:
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError):
            self.enabled = False

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _duration(seconds: float) -> str:
    if seconds < 60:
        return f"{max(seconds, 1):.0f} s"
    return f"{seconds / 60:.0f} min" if seconds < 3600 else f"{seconds / 3600:.1f} h"


def feed(reader, sinks: Iterable[Sink], progress: Progress | None = None) -> None:
    """Read ``reader`` once (it must not have been iterated yet), each batch to every sink."""
    sinks = list(sinks)
    for rows in reader.batches():
        for sink in sinks:
            sink.add(rows)
        if progress is not None:
            progress.update(reader.events_read(), done_bytes=reader.bytes_read())
    if progress is not None:  # the totals are known now
        progress.total = progress.done = reader.events_read()
        progress.done_bytes = progress.total_bytes
