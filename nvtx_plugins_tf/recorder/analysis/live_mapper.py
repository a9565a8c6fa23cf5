"""A recording mapped read after read while it is written (``watch``'s reads), at the cost of
what was written since: the ranges are decoded where the last read stopped
(:class:`..recording.live.LiveReader`), added to a window of the ranges that a later step may
still need, and the window mapped natively as :mod:`.native_mapper` maps a whole recording,
without the per-name statistics (``nvtxr_rank_stats_window``, cc_ops/reader/decode.h).

What the window keeps, so that each step's values are those of a whole read (``analyze``'s):
after each read, the ranges that end after the start of the last step (a later step starts at
or after it; a range that ended before cannot cover it, and a range's parent ends no earlier
than it); the count of the steps dropped (the window's steps are numbered on from it) and the
longest of them (a range longer than every step is not work inside one: the longest is over
all steps). A step that comes after a later-starting one was dropped (a step range left open
across others) would be numbered otherwise than by a whole read: then, as on any damage, a new
segment or a packed one, :meth:`LiveMapping.read` returns None and the recording is read whole
from then on.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..recording.live import LiveReader
from ..reports.ranges import merged_domains, session_times
from . import _native
from .native_mapper import _key_names, recording_results
from .rank_result import RankResult, StepSpec, _choose_step

__all__ = ["LiveMapping"]

_INT64_MIN = -(1 << 63)


class _Messages:
    """The messages of ``reader``'s ``count`` strings, by index, each fetched when asked (index
    ``count``: an unknown string's, ""), from ``known`` (the last read's) when there;
    :attr:`used`: those asked for this time (the next read's ``known``: a window's names)."""

    def __init__(self, reader, count: int, known: dict[int, str]):
        self._reader, self._count, self._known = reader, count, known
        self.used: dict[int, str] = {}

    def __getitem__(self, index: int) -> str:
        if index >= self._count:
            return ""  # (not kept: the next read's strings may hold this index)
        text = self._known.get(index)
        if text is None:
            text = self._reader.string(index)
        self.used[index] = text
        return text


class LiveMapping:
    """The recording ``path`` (one raw segment, written now) mapped at each :meth:`read`, its
    steps named by ``step`` (as a whole read with that step names them)."""

    def __init__(self, path, step: StepSpec):
        self.path = Path(path)
        self.step = step
        #: why it cannot be read in parts ("" while it can)
        self.failed = ""
        #: the ranges the last read decoded (what it cost), and those the window holds after it
        self.decoded = self.kept = 0
        self._reader: LiveReader | None = None
        self._window = None
        self._dropped = 0  # the steps dropped from the window so far
        self._longest = _INT64_MIN  # the longest of them
        self._latest: int | None = None  # the latest start of one
        self._rows = 0
        self._last: list[RankResult] | None = None
        self._messages: dict[int, str] = {}

    def close(self) -> None:
        if self._reader is not None:
            self._reader.close()
        if self._window is not None:
            self._window.close()
        self._reader = self._window = None

    def read(self, segments: list[Path] | None = None) -> list[RankResult] | None:
        """The rank's results as :func:`.mapper.map_input` gives them (``name_stats`` False),
        the steps from the first not dropped (``first_step``); the last read's (the same
        list) when nothing was written since (:attr:`decoded` 0); None when the recording
        cannot be read in parts (any more: :attr:`failed` says why; read it whole).
        ``segments``: the recording's segment files, when just listed."""
        if self.failed:
            return None
        try:
            out = self._read(segments)
        except (OSError, ValueError, MemoryError) as exc:
            out, self.failed = None, f"{type(exc).__name__}: {exc}"
        if out is None:
            self.close()
        return out

    def _read(self, segments: list[Path] | None) -> list[RankResult] | None:
        if self._reader is None:
            segment = LiveReader.segment_of(self.path, segments)
            if segment is None:
                self.failed = "not one raw segment"
                return None
            self._reader, self._window = LiveReader(self.path, segment), _native.NativeRanges()
            self._window.live()
        reader, window = self._reader, self._window
        why = reader.read_more(window, segments)
        if why:
            self.failed = why
            return None
        lowest, highest, rows, _ = window.bounds()
        self.decoded, self._rows = rows - self._rows, rows
        if not self.decoded and self._last is not None:
            return self._last  # (no new range: the same steps)
        count = reader.string_count()  # (not a list of every string: numbered steps name one each)
        _, shift, _ = session_times(reader, lowest, highest, rows)
        dom_map, dom_list = merged_domains(reader)
        keys = window.name(dom_map, count)
        messages = _Messages(reader, count, self._messages)
        name_domain, name_message = _key_names(keys, dom_list, messages, count + 1)
        self._messages = messages.used
        chosen = _choose_step(None, name_domain, name_message, self.step)
        is_step = chosen.mask(name_domain, name_message).view(np.uint8)
        processes, (dropped, longest, latest, self.kept) = window.rank_stats_window(is_step, len(keys), self._longest)
        if len(processes) != 1:
            self.failed = "not one process"
            return None
        starts = processes[0]["step_start"]
        if self._latest is not None and len(starts) and int(starts[0]) < self._latest:
            self.failed = "a step ended after a later one was reported"
            return None
        first = self._dropped
        self._dropped += dropped
        self._longest = longest
        if latest is not None:
            self._latest = latest if self._latest is None else max(self._latest, latest)
        results = recording_results(self.path, reader, shift, processes, name_domain, name_message, chosen)
        for result in results:
            result.first_step = first
            result.events = rows  # (every range read so far: the window holds fewer)
        self._last = results
        return results
