"""The data model of an NVTX recording: :class:`Range`, :class:`ProcessInfo`,
:class:`DamageReport`, :class:`Recording`, plus the named codes of the format (event
kinds, payload types, nsys event types) and the one payload decoder.

Reading a recording is :mod:`.reader`'s job (streamed, or whole into a :class:`Recording`
by its ``load``); this module imports nothing of it, so the model is what every other
package of the recorder may build on.
:class:`nvtx_plugins_tf.testing.Capture` holds a :class:`Recording` and uses the same
words: ``events`` (every range and mark), ``closed_ranges``, ``open_ranges``, ``marks``,
``find(...)`` and ``count(...)`` mean the same in both.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ._decoder import (
    FLAG_HAS_CATEGORY,
    FLAG_HAS_COLOR,
    FLAG_UNCLOSED,
    KIND_MARK,
    KIND_NAMES,
    KIND_PUSH_POP,
    KIND_START_END,
    PAYLOAD_DOUBLE,
    PAYLOAD_EXT,
    PAYLOAD_FLOAT,
    PAYLOAD_I32,
    PAYLOAD_I64,
    PAYLOAD_NONE,
    PAYLOAD_U32,
    PAYLOAD_U64,
)

__all__ = [
    "DamageReport",
    "ProcessInfo",
    "Range",
    "Recording",
    "decode_payload",
    "payload_array",
    "ranges_from_rows",
    "range_label",
    "KIND_PUSH_POP",
    "KIND_START_END",
    "KIND_MARK",
    "KIND_NAMES",
    "PAYLOAD_NONE",
    "PAYLOAD_U64",
    "PAYLOAD_I64",
    "PAYLOAD_DOUBLE",
    "PAYLOAD_U32",
    "PAYLOAD_I32",
    "PAYLOAD_FLOAT",
    "PAYLOAD_EXT",
    "PAYLOAD_TYPE_NAMES",
    "SAME_CLOCK_NS",
    "EVENT_CATEGORY",
    "EVENT_MARK",
    "EVENT_THREAD_NAME",
    "EVENT_PUSH_POP",
    "EVENT_START_END",
    "EVENT_DOMAIN_CREATE",
    "EVENT_DOMAIN_DESTROY",
    "EVENT_TYPE_OF_KIND",
]

# nsys ``eventType`` codes of NVTX events (ENUM_NSYS_EVENT_TYPE in nsys' SQLite export).
EVENT_CATEGORY = 33
EVENT_MARK = 34
EVENT_THREAD_NAME = 39
EVENT_PUSH_POP = 59
EVENT_START_END = 60
EVENT_DOMAIN_CREATE = 75
EVENT_DOMAIN_DESTROY = 76
#: row ``kind`` -> nsys ``eventType``
EVENT_TYPE_OF_KIND = {KIND_PUSH_POP: EVENT_PUSH_POP, KIND_START_END: EVENT_START_END, KIND_MARK: EVENT_MARK}

# Payload types (record_format.h PayloadType): name, numpy dtype and struct format of
# the value, which sits in the low bytes of the raw little-endian 8 bytes.
_PAYLOADS = {
    PAYLOAD_U64: ("u64", np.dtype("<u8"), "<Q"),
    PAYLOAD_I64: ("i64", np.dtype("<i8"), "<q"),
    PAYLOAD_DOUBLE: ("double", np.dtype("<f8"), "<d"),
    PAYLOAD_U32: ("u32", np.dtype("<u4"), "<I"),
    PAYLOAD_I32: ("i32", np.dtype("<i4"), "<i"),
    PAYLOAD_FLOAT: ("float", np.dtype("<f4"), "<f"),
}
#: payload type code -> name ("u64", "i64", "double", "u32", "i32", "float"); the scalar
#: types only: PAYLOAD_EXT (the NVTX payload extension, a JSON text) is named "json" in
#: :attr:`Range.payload_type`.
PAYLOAD_TYPE_NAMES = {code: spec[0] for code, spec in _PAYLOADS.items()}


def decode_payload(payload_type: int, raw: int) -> int | float | None:
    """Value of one payload from its type code and raw 8 bytes (as an unsigned int)."""
    spec = _PAYLOADS.get(payload_type)
    if spec is None:
        return None
    return struct.unpack_from(spec[2], int(raw).to_bytes(8, "little"))[0]


def payload_array(payload_type: int, raw: np.ndarray) -> np.ndarray:
    """Values of payloads of one type from their raw 8 bytes (``ROW_DTYPE["payload"]``), as
    an array of the type's own dtype (``.tolist()`` gives the values :func:`decode_payload`
    gives)."""
    dtype = _PAYLOADS[payload_type][1]
    raw = np.asarray(raw, dtype=np.uint64)
    if dtype.itemsize == 8:
        return raw.view(dtype)
    return (raw & np.uint64(0xFFFFFFFF)).astype(np.uint32).view(dtype)


def range_label(domain: str | None, message: str | None) -> str:
    """A range's name (in the reports, ``analyze`` and nsys's exports read alike):
    ``domain:message``, or the message in NVTX's default domain."""
    message = message or ""
    return f"{domain}:{message}" if domain else message


@dataclass(slots=True)
class Range:
    """One NVTX range or mark of a recording.

    ``end_ns`` is None for a range that was still open when the recording ended
    (``unclosed``); for a mark it equals ``start_ns``. ``color`` is 0xAARRGGBB or None,
    ``category`` the category number or None, ``payload`` an int/float or None, or for
    extended payloads (``payload_type == "json"``, the NVTX payload extension) the decoded
    JSON: a dict of field name -> value (a list of dicts for several payloads).
    """

    message: str
    domain: str
    start_ns: int
    end_ns: int | None
    pid: int
    tid: int
    end_tid: int
    kind: str  # 'push-pop' | 'start-end' | 'mark'
    depth: int = 0
    category: int | None = None
    category_name: str | None = None
    color: int | None = None
    payload: int | float | dict | list | None = None
    payload_type: str | None = None
    range_id: int = 0

    @property
    def unclosed(self) -> bool:
        return self.end_ns is None

    @property
    def duration_ns(self) -> int | None:
        return None if self.end_ns is None else self.end_ns - self.start_ns


@dataclass(frozen=True)
class ProcessInfo:
    pid: int
    ppid: int
    name: str
    cmdline: str
    host: str  # the machine's name; "" when an older recorder wrote the recording
    start_ns: int
    start_realtime_ns: int
    segment: str

    @property
    def anchored(self) -> bool:
        """Whether its realtime anchor dates it: written (0: an older recorder wrote none) and
        a time ns since 1970 an int64 holds (before 2262; a garbled header's beyond is none)."""
        return 0 < self.start_realtime_ns < 1 << 63

    @property
    def clock_offset(self) -> int | None:
        """CLOCK_REALTIME minus CLOCK_MONOTONIC when the process started (its first segment):
        added to its timestamps, the wall clock; None without an anchor (:attr:`anchored`)."""
        return self.start_realtime_ns - self.start_ns if self.anchored else None


#: Clock offsets (:attr:`ProcessInfo.clock_offset`) closer than this are one clock: the same
#: host's monotonic clock, whose realtime anchors differ by the time between two reads.
SAME_CLOCK_NS = 1_000_000


@dataclass
class DamageReport:
    """What the decoder had to skip, and what the recorder could not record.

    ``damaged`` is True when data was lost; the CLI exits 6 then and prints
    :meth:`describe` (one line, naming the first affected file). ``errors`` holds one
    line per affected segment file (``"PATH: what"``).

    * ``damaged_segments``: segments whose header is damaged or which could not be
      opened or read at all (another user's 0600 file, an I/O error, out of memory);
      ``unreadable_segments`` counts the latter among them.
    * ``truncated_segments`` / ``missing_chunks``: files shorter than the chunks their
      header says they hold.
    * ``dropped_events``: events the recorder counted as not recorded (disk full,
      ``ulimit -f``, ``ulimit -v``, NVTX calls from a signal handler interrupting one,
      or after the thread's teardown).
    * ``unknown_strings``: events naming a string that is defined nowhere in the
      recording (they are kept, with an empty message).
    * ``lost_events_min``: a lower bound of the events lost inside damaged chunks (bytes
      zeroed or garbled among a chunk's records; the records after the damage are read).
    * ``checksum_mismatches``: chunks (counted in ``damaged_chunks`` too) whose bytes
      changed after the recorder sealed them (a flipped bit on disk or in a copy); their
      records are read, but at least one is not what was recorded.
    """

    segments: int = 0
    damaged_segments: int = 0
    chunks: int = 0
    damaged_chunks: int = 0
    unpublished_chunks: int = 0
    seq_gaps: int = 0
    events: int = 0
    unmatched_pops: int = 0
    unmatched_ends: int = 0
    unclosed: int = 0
    errors: list[str] = field(default_factory=list)
    unreadable_segments: int = 0
    truncated_segments: int = 0
    missing_chunks: int = 0
    dropped_events: int = 0
    unknown_strings: int = 0
    lost_events_min: int = 0  # at least this many events lost inside damaged chunks
    checksum_mismatches: int = 0  # sealed chunks whose bytes changed

    @property
    def damaged(self) -> bool:
        return bool(
            self.damaged_chunks
            or self.damaged_segments
            or self.seq_gaps
            or self.truncated_segments
            or self.dropped_events
            or self.unknown_strings
        )

    def describe(self) -> str:
        parts = []
        if self.damaged_segments:
            parts.append(f"{self.damaged_segments} unreadable segment(s)")
        if self.truncated_segments:
            parts.append(f"{self.truncated_segments} truncated segment(s) ({self.missing_chunks} chunk(s) missing)")
        if self.damaged_chunks:
            parts.append(chunk_damage_text(self.damaged_chunks, self.lost_events_min, self.checksum_mismatches))
        if self.seq_gaps:
            parts.append(f"{self.seq_gaps} missing/repeated chunk(s) in a thread's sequence")
        if self.dropped_events:
            parts.append(f"{self.dropped_events} event(s) dropped by the recorder (disk full or file size limit?)")
        if self.unknown_strings:
            parts.append(f"{self.unknown_strings} event(s) naming an undefined string")
        if not parts:
            return "no damage"
        text = ", ".join(parts)
        if self.errors:
            text += f" (first: {self.errors[0]})"
        return text


def chunk_damage_text(damaged_chunks: int, lost_events_min: int, checksum_mismatches: int) -> str:
    """How :meth:`DamageReport.describe` words damaged chunks."""
    text = f"{damaged_chunks} damaged chunk(s)"
    if checksum_mismatches:
        text += f" ({checksum_mismatches} whose bytes changed after they were written)"
    if lost_events_min:
        text += f", at least {lost_events_min} event(s) lost"
    return text


def ranges_from_rows(
    rows: np.ndarray,
    strings: list[str],
    domain_names: list[str],
    category_names: dict[tuple[int, int], str],
) -> list[Range]:
    """:class:`Range` objects of decoded rows (``ROW_DTYPE``), naming their strings,
    domains and categories from the reader's tables."""
    n = len(rows)
    if n == 0:
        return []
    strings = np.array(strings, dtype=object)
    domains = np.array(domain_names, dtype=object)
    flags = rows["flags"]
    kind = rows["kind"]
    unclosed = (flags & FLAG_UNCLOSED) != 0
    has_cat = (flags & FLAG_HAS_CATEGORY) != 0
    has_color = (flags & FLAG_HAS_COLOR) != 0

    def opt(values, mask):
        out = values.astype(object)
        out[~mask] = None
        return out.tolist()

    ptype = rows["payload_type"]
    raw = rows["payload"]
    payload = np.full(n, None, dtype=object)
    for code in _PAYLOADS:
        mask = ptype == code
        if mask.any():
            payload[mask] = np.array(payload_array(code, raw[mask]).tolist(), dtype=object)
    for i in np.flatnonzero(ptype == PAYLOAD_EXT).tolist():
        payload[i] = json.loads(strings[int(raw[i])])
    dom = rows["domain"]
    cat = rows["category"]
    cat_names = [None] * n
    if category_names and has_cat.any():
        for i in np.flatnonzero(has_cat).tolist():
            cat_names[i] = category_names.get((int(dom[i]), int(cat[i])))
    kind_names = np.array(["?", *(KIND_NAMES[k] for k in (KIND_PUSH_POP, KIND_START_END, KIND_MARK))], dtype=object)
    ptype_names = np.array([PAYLOAD_TYPE_NAMES.get(code) for code in range(16)], dtype=object)
    ptype_names[PAYLOAD_EXT] = "json"
    dom_safe = np.where(dom < len(domains), dom, 0)
    columns = (
        strings[rows["message"]].tolist(),
        domains[dom_safe].tolist(),
        rows["start_ns"].tolist(),
        opt(rows["end_ns"], ~unclosed),
        rows["pid"].tolist(),
        rows["tid"].tolist(),
        rows["end_tid"].tolist(),
        kind_names[np.minimum(kind, 3)].tolist(),
        rows["depth"].tolist(),
        opt(cat, has_cat),
        cat_names,
        opt(rows["color"], has_color),
        payload.tolist(),
        ptype_names[ptype & 15].tolist(),
        rows["range_id"].tolist(),
    )
    return [Range(*fields) for fields in zip(*columns)]


def _matches(r: Range, message, domain, kind, category) -> bool:
    return (
        (message is None or r.message == message)
        and (domain is None or r.domain == domain)
        and (kind is None or r.kind == kind)
        and (category is None or category in (r.category, r.category_name))
    )


@dataclass
class Recording:
    """A fully loaded recording (see :func:`.reader.load`).

    ``events`` holds every event -- closed and open ranges and marks -- by start time;
    ``ranges`` (the closed ranges), ``open_ranges`` and ``marks`` are its parts. The words
    mean the same on :class:`nvtx_plugins_tf.testing.Capture`, which holds a Recording.
    """

    path: Path
    events: list[Range]
    processes: dict[int, ProcessInfo]
    thread_names: dict[tuple[int, int], str]
    damage: DamageReport
    domains: list[str]

    @property
    def marks(self) -> list[Range]:
        return [r for r in self.events if r.kind == "mark"]

    @property
    def open_ranges(self) -> list[Range]:
        """Ranges still open when the recording ended."""
        return [r for r in self.events if r.unclosed]

    @property
    def ranges(self) -> list[Range]:
        """Closed push/pop and start/end ranges, by start time."""
        return [r for r in self.events if r.kind != "mark" and not r.unclosed]

    def find(self, message=None, domain=None, kind=None, category=None) -> list[Range]:
        """Events matching all given attributes (message, domain, kind, category name or number)."""
        return [r for r in self.events if _matches(r, message, domain, kind, category)]

    def count(self, message=None, domain=None, kind=None, category=None) -> int:
        return len(self.find(message, domain, kind, category))
