"""A recording read while it is written, each read taking up where the last one stopped
(watch's reads: cc_ops/reader/segment_cursor.h, ``SegmentCursor::OpenLive``): a read costs
what was written since, not the whole recording.

Only a recording of one raw segment (one process, not packed) is read this way; the decoder
keeps, from one read to the next, each chunk's place and clock, the ranges still open (on its
stacks, never flushed as unclosed) and the tables. Any damage, a new segment, a segment packed
or replaced: :meth:`LiveReader.read_more` says why not, and the recording is to be read whole
(as :class:`.reader.RecordingReader` reads it) from then on.
"""

from __future__ import annotations

from pathlib import Path

from .packed import is_packed
from .reader import RecordingReader, segment_files

__all__ = ["LiveReader"]

#: the decoder's counts that say a read met damage (its rows are then not kept)
_DAMAGE = (
    "unreadable_segments",
    "damaged_segments",
    "truncated_segments",
    "damaged_chunks",
    "seq_gaps",
    "lost_events_min",
    "unknown_strings",
)


class LiveReader(RecordingReader):
    """A :class:`.reader.RecordingReader` of the recording ``path`` whose one raw segment is
    read in parts (:meth:`read_more`), its tables (strings, domains, processes) those of
    everything read so far."""

    def __init__(self, path, segment: Path):
        super().__init__(path, [segment])
        self.segment = Path(segment)
        self._open = False

    @staticmethod
    def segment_of(path, segments: list[Path] | None = None) -> Path | None:
        """The one raw segment of the recording ``path`` (None: none, several, or packed);
        ``segments``: its segment files, when just listed."""
        if segments is None:
            try:
                segments = segment_files(path)
            except OSError:
                return None
        return segments[0] if len(segments) == 1 and not is_packed(segments[0]) else None

    def read_more(self, ranges, segments: list[Path] | None = None, capacity: int = 1 << 20) -> str:
        """Decode what was written since the last call (all of it, the first time) into
        ``ranges`` (an ``analysis._native.NativeRanges``, a live window); "" when done, else
        why the recording cannot be read in parts (any more): then its rows of this call are
        not to be kept. ``segments``: the recording's segment files, when just listed."""
        if self.segment_of(self.path, segments) != self.segment:
            return "its segments changed"
        decoder = self._decoder
        before = decoder.stats()
        rc, err = decoder.resume() if self._open else decoder.open_live(str(self.segment))
        if rc != 0:
            return err or "it cannot be taken up"
        if not self._open:
            self._open = True
            self._note_process(self.segment)
        while ranges.collect(decoder, capacity):
            pass
        after = decoder.stats()
        if decoder.live_failed() or any(after[k] != before[k] for k in _DAMAGE):
            return "damage in what was written since"
        return ""
