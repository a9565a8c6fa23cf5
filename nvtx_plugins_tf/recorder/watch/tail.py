"""The ranks ``watch`` follows: which recordings the command line names (a folder's new
recordings picked up as their ranks start), each one read again while it is written, and what
became of its writer.

How a rank is read: while its writer runs, a recording of one raw segment (one process) is
read in parts (:class:`..analysis.live_mapper.LiveMapping`): each read decodes what was
written since the last one and maps a window of the ranges that later steps may need, so a
read costs what was written since, however long the run. Its first read, a read after its
writers ended (the last one), and any recording that cannot be read in parts (several
segments or processes, a packed segment, damage) are read whole, with ``analyze``'s own mapper
(:func:`..analysis.mapper.map_input`, the native one-pass mapper: about 0.1 s of a core per
million ranges), asked for the steps only (``name_stats=False``: none of analyze's per-name
statistics). Either way the steps, their ranges' work and their wall-clock times are
``analyze``'s, to the ns (tests/test_watch_polls.py). A rank whose writers have all ended is
read one last time and then no more. A poll reads a rank only when its writers' state or its
bytes changed since its last read (:mod:`.unchanged`: a fixed cost, whatever its size, when
nothing did). ``NVTX_TF_WATCH_LIVE=0`` reads every rank whole at every read (as before the
live reads: the benchmark's comparison).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..._paths import PACKED_SEGMENT_SUFFIX, RECORDING_SUFFIX, SEGMENT_SUFFIX, recording_path
from ..analysis.live_mapper import LiveMapping
from ..analysis.mapper import RankResult, StepSpec, map_input
from ..recording.liveness import FLAG_CLOSED, liveness, segment_flags
from ..recording.packed import is_packed, unpacked
from ..recording.reader import segment_files
from .unchanged import Fingerprint, fingerprint

__all__ = ["RankSource", "Tailer", "WatchInputError", "expand_recordings", "writer_state", "writers_state"]

#: polls a recording whose writers ended may fail to read (a segment packed meanwhile) before
#: it is left out, named
READ_TRIES = 3


def live_reads() -> bool:
    """Whether a live rank is read in parts (:class:`..analysis.live_mapper.LiveMapping`):
    unless ``NVTX_TF_WATCH_LIVE=0``."""
    return os.environ.get("NVTX_TF_WATCH_LIVE", "1") != "0"


class WatchInputError(ValueError):
    """A command-line REC that names no recording nor folder (one line, naming it)."""


def expand_recordings(values: list[str]) -> list[Path]:
    """The recordings the values name now: a recording (``PREFIX.nvtxrec``, or ``PREFIX``; also
    a folder holding segment files, as ``NVTX_TF_RECORD_DIR`` names one) itself, a folder each
    ``*.nvtxrec`` in it (name order; none yet is fine: its ranks may not have started). Raises
    :class:`WatchInputError` for a value that is neither."""
    out: list[Path] = []
    seen: set[str] = set()
    for value in values:
        if not value:
            raise WatchInputError("REC '': empty; give a recording (PREFIX.nvtxrec) or a folder of them")
        path = recording_path(value)
        if path.name.endswith(RECORDING_SUFFIX) and path.is_dir():
            found = [path]
        elif path.is_dir():
            try:
                inside = list(path.iterdir())
            except OSError as exc:
                raise WatchInputError(f"cannot read the folder {value}: {exc.strerror or exc}") from None
            if any(p.name.endswith((SEGMENT_SUFFIX, PACKED_SEGMENT_SUFFIX)) for p in inside):
                found = [path]  # (segments themselves: a recording made without record)
            else:
                found = sorted(p for p in inside if p.name.endswith(RECORDING_SUFFIX) and p.is_dir())
        elif path.exists():
            raise WatchInputError(f"{value}: not a recording (PREFIX.nvtxrec) nor a folder of them")
        else:
            raise WatchInputError(f"no such recording or folder: {value}")
        for p in found:
            key = os.path.realpath(p)
            if key not in seen:
                seen.add(key)
                out.append(Path(os.path.abspath(p)))
    return out


def writer_state(path) -> str:
    """What became of the writer of the segment ``path`` (raw or packed): ``"live"`` (it holds
    the segment's lock, or by :func:`..recording.liveness.liveness`'s other rules may still
    write it), ``"closed"`` (it closed the segment: a new segment, its exit), ``"lost"`` (gone
    without closing it: SIGKILL, a crash; a packed segment keeps its header's mark),
    ``"unknown"`` (written on another host whose lock cannot be seen here). OSError as it
    comes (a file removed meanwhile)."""
    if is_packed(path):
        with unpacked(path, header_only=True) as raw:
            if raw.unreadable:
                return "closed"
            with open(raw.path, "rb") as f:
                flags = segment_flags(f.read(32))
    else:
        state, _ = liveness(path)
        if state != "done":
            return state
        with open(path, "rb") as f:
            flags = segment_flags(f.read(32))
    if flags is None:
        return "closed"  # (not a segment: nothing writes it; the reader says what it is)
    return "closed" if flags & FLAG_CLOSED else "lost"


def writers_state(path: Path, segments: list[Path] | None = None) -> str:
    """The state of a recording's writers: ``"starting"`` (no segment yet), ``"live"`` (one
    may still write), ``"lost"`` (none does, and one went without closing its segment: killed),
    ``"ended"`` (all closed them). ``segments``: its segment files, when just listed."""
    if segments is None:
        try:
            segments = segment_files(path)
        except OSError:
            return "starting"
    if not segments:
        return "starting"
    states = set()
    for seg in segments:
        try:
            states.add(writer_state(seg))
        except OSError:  # (packed meanwhile: its raw file removed)
            states.add("closed")
    if "live" in states or "unknown" in states:
        return "live"
    return "lost" if "lost" in states else "ended"


@dataclass
class RankSource:
    """One recording followed: its ``path``, the ``results`` of its last read (a rank per
    process: :class:`..analysis.mapper.RankResult`), its writers' ``state`` as of that read
    (:func:`writers_state`), ``changed_at``: when its ranges last changed (``time.monotonic``),
    ``error``: why its last read failed ("" when it did not), ``left_out``: it could not be
    read after its writers ended (:data:`READ_TRIES` polls): no more tries, ``error`` says why."""

    path: Path
    step: StepSpec | None = None
    results: list[RankResult] = field(default_factory=list)
    state: str = "starting"
    changed_at: float = field(default_factory=time.monotonic)
    error: str = ""
    left_out: bool = False
    #: the reads that mapped the recording (a poll that found its bytes unchanged maps nothing)
    maps: int = 0
    #: of those, the reads in parts (:class:`..analysis.live_mapper.LiveMapping`)
    live_maps: int = 0
    #: why it is no longer read in parts ("" while it is, or before its first read)
    live_off: str = ""
    _events: int = -1
    _failed: int = 0
    _seen: Fingerprint | None = None
    _live: LiveMapping | None = None

    @property
    def done(self) -> bool:
        """Its writers have ended (closed or lost) and it was read after they did (or could
        not be: ``left_out``)."""
        return self.left_out or self.state in ("ended", "lost")

    def _read_live(self, state: str, segments: list[Path]) -> list[RankResult] | None:
        """The read in parts of a rank still written, once its step is known (its first read
        is whole: it chooses the step); None: read it whole (its writers ended, or it cannot
        be read in parts: :attr:`live_off` says why, and it is read whole from then on)."""
        if state != "live" or self.step is None or self.live_off or not live_reads():
            if self._live is not None and state != "live":
                self._live.close()  # (the last read is whole: its damage found, as analyze finds it)
                self._live = None
            return None
        if self._live is None:
            self._live = LiveMapping(self.path, self.step)
        results = self._live.read(segments)
        if results is None:
            self.live_off, self._live = self._live.failed, None
            return None
        self.live_maps += bool(self._live.decoded)
        return results

    def read(self) -> bool:
        """Read the recording again (unless it is done, or neither its writers' state nor its
        bytes changed since its last read: :mod:`.unchanged`); returns whether its ranges
        changed. The writers' state and the bytes' fingerprint are taken before the read, so a
        rank seen ended was read whole, and bytes written during a read are read again."""
        if self.done:
            return False
        try:
            segments = segment_files(self.path)
        except OSError:
            segments = []
        state = writers_state(self.path, segments)
        if state == "starting":
            return False
        seen = None
        if self._live is None or state != "live":  # (a read in parts reads only what is new: its own check)
            try:
                # (taken before the read, as the state: what a read after it sees is at least that)
                seen = fingerprint(segments, self._seen)
            except OSError:  # (packed or removed meanwhile: read, as before)
                seen = None
            if seen is not None and seen == self._seen and state == self.state and not self.error:
                return False  # nothing new since the last read: its results stand
        try:
            results = self._read_live(state, segments)
            if results is not None and self._live is not None and not self._live.decoded and self.results:
                return False  # (read in parts: nothing new)
            self.maps += 1
            if results is None:
                results = map_input(self.path, self.step, name_stats=False)  # (the steps only)
        except (OSError, ValueError) as exc:  # (a segment packed or made meanwhile: next poll)
            self.error = str(exc)
            if state in ("ended", "lost"):
                self._failed += 1
                self.left_out = self._failed >= READ_TRIES
            return False
        self.error = ""
        self.state = state
        self._seen = seen
        if self.step is None:  # the step chosen as analyze chooses it, then kept
            named = next((r.step_name for r in results if r.step_name), "")
            if named:
                self.step = StepSpec.parse(named)
        events = sum(r.events for r in results)
        changed = events != self._events
        if changed:
            self._events, self.changed_at = events, time.monotonic()
        self.results = results
        return changed


class Tailer:
    """The recordings named by ``values`` (see :func:`expand_recordings`), found again at each
    :meth:`poll` so that a folder's new recordings join; ``step``: the step ranges (None: as
    ``analyze`` chooses, per recording)."""

    def __init__(self, values: list[str], step: StepSpec | None = None):
        self.values = list(values)
        self.step = step
        self.sources: dict[Path, RankSource] = {}
        expand_recordings(self.values)  # (a bad REC: at once)

    def poll(self) -> list[RankSource]:
        """Find new recordings and read every one not yet done; returns all, in the order met."""
        try:
            found = expand_recordings(self.values)
        except WatchInputError:  # (a folder removed meanwhile: the ranks met so far)
            found = []
        for path in found:
            if path not in self.sources:
                self.sources[path] = RankSource(path, self.step)
        for source in self.sources.values():
            source.read()
        return list(self.sources.values())

    @property
    def all_done(self) -> bool:
        """Every recording met has a writer that has ended, and was read after it did."""
        return bool(self.sources) and all(s.done for s in self.sources.values())
