"""Read NVTX recordings: a directory of ``<pid>-<start_ns>.nvtxseg`` segment files.

Two ways in:

* :func:`iter_batches` / :class:`RecordingReader` stream the ranges as numpy structured
  arrays (:data:`ROW_DTYPE`), a fixed-size batch at a time; memory stays bounded by the
  open ranges and the string tables. The exporters use this.
* :func:`load` builds a :class:`Recording` with a list of :class:`Range` objects; handy for
  small recordings and tests.

Decoding is done by the native ``libnvtx_reader.so`` (cc_ops/reader/decode.cc).
"""

from __future__ import annotations

import contextlib

import math
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import numpy as np

from . import _decoder
from ._decoder import FLAG_HAS_CATEGORY, FLAG_HAS_COLOR, FLAG_UNCLOSED, ROW_DTYPE

__all__ = [
    "ROW_DTYPE",
    "SEGMENT_SUFFIX",
    "DamageReport",
    "ProcessInfo",
    "Range",
    "Recording",
    "RecordingReader",
    "iter_batches",
    "load",
    "segment_files",
    "decode_payload",
]

SEGMENT_SUFFIX = ".nvtxseg"
DEFAULT_BATCH = 65536


@dataclass(slots=True)
class Range:
    """One NVTX range or mark of a recording.

    ``end_ns`` is None for a range that was still open when the recording ended
    (``unclosed``); for a mark it equals ``start_ns``. ``color`` is 0xAARRGGBB or None,
    ``category`` the category number or None, ``payload`` an int/float or None.
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
    payload: int | float | None = None
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
    start_ns: int
    start_realtime_ns: int
    segment: str


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
            parts.append(f"{self.damaged_chunks} damaged chunk(s)")
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


PAYLOAD_TYPE_NAMES = {1: "u64", 2: "i64", 3: "double", 4: "u32", 5: "i32", 6: "float"}


def decode_payload(payload_type: int, raw: int) -> int | float | None:
    """Value of a payload from its type code and raw 8 bytes (as an unsigned int)."""
    if payload_type == 1:
        return raw
    if payload_type == 2:
        return struct.unpack("<q", struct.pack("<Q", raw))[0]
    if payload_type == 3:
        return struct.unpack("<d", struct.pack("<Q", raw))[0]
    if payload_type == 4:
        return raw & 0xFFFFFFFF
    if payload_type == 5:
        return struct.unpack("<i", struct.pack("<I", raw & 0xFFFFFFFF))[0]
    if payload_type == 6:
        return struct.unpack("<f", struct.pack("<I", raw & 0xFFFFFFFF))[0]
    return None


def segment_files(path) -> list[Path]:
    """Segment files of a recording directory (or the file itself), oldest first."""
    path = Path(path)
    if path.is_file():
        return [path]
    if not path.is_dir():
        raise FileNotFoundError(f"no recording at {path}")

    def key(p: Path):
        stem = p.name[: -len(SEGMENT_SUFFIX)]
        pid, _, start = stem.partition("-")
        try:
            return (int(start), int(pid), p.name)
        except ValueError:
            return (math.inf, 0, p.name)

    return sorted((p for p in path.iterdir() if p.name.endswith(SEGMENT_SUFFIX) and p.is_file()), key=key)


def _peek_start_ns(path: Path) -> int | None:
    info = _decoder.peek_segment(path)
    return None if info is None else info.start_ns


@contextlib.contextmanager
def reading(recording, reader: "RecordingReader | None" = None):
    """``reader`` as given (left open), or a new reader of ``recording`` closed on exit."""
    if reader is not None:
        yield reader
        return
    with RecordingReader(recording) as own:
        yield own


class RecordingReader:
    """Streaming reader of one recording (a directory or a single segment file).

    Iterate :meth:`batches` once; the tables (:meth:`string`, :meth:`domain_name`,
    :meth:`category_name`, :attr:`processes`, :attr:`thread_names`) fill while reading
    and are complete when the iteration ends. Row fields ``message`` and ``domain`` are
    indexes into :meth:`strings` and :meth:`domain_names`.
    """

    def __init__(self, path, segments=None):
        self.path = Path(path)
        #: the segment files read, oldest first (``segments`` selects some of them)
        self.segments = segment_files(self.path) if segments is None else [Path(s) for s in segments]
        self.processes: dict[int, ProcessInfo] = {}
        self.errors: list[str] = []
        self._decoder = _decoder.Decoder()
        self._domain_names: list[str] = []
        starts = [s for s in (_peek_start_ns(p) for p in self.segments) if s is not None]
        #: CLOCK_MONOTONIC of the earliest segment (time origin for exports), 0 if none.
        self.origin_ns = min(starts) if starts else 0

    def close(self) -> None:
        self._decoder.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def batches(self, batch_size: int = DEFAULT_BATCH) -> Iterator[np.ndarray]:
        """Yield arrays of :data:`ROW_DTYPE` rows (each a new array, yours to keep).

        The ranges still open at the end of the recording come last.
        """
        for seg in self.segments:
            before = self._decoder.stats()
            rc, err = self._decoder.open_segment(str(seg))
            if rc != 0:
                self.errors.append(err or f"cannot read {seg}")
                continue
            info = self._decoder.segment_info()
            if info is not None and info.pid not in self.processes:
                self.processes[info.pid] = ProcessInfo(
                    pid=info.pid,
                    ppid=info.ppid,
                    name=info.process_name.decode(errors="replace"),
                    cmdline=info.cmdline.decode(errors="replace"),
                    start_ns=info.start_ns,
                    start_realtime_ns=info.start_realtime_ns,
                    segment=str(seg),
                )
            try:
                while True:
                    rows = self._decoder.next_rows(batch_size)
                    if len(rows) == 0:
                        break
                    yield rows
            finally:
                self._decoder.close_segment()
            self._note_damage(seg, before, self._decoder.stats())
        self._decoder.finish()
        while True:
            rows = self._decoder.next_rows(batch_size)
            if len(rows) == 0:
                break
            yield rows

    def _note_damage(self, seg, before: dict, after: dict) -> None:
        d = {k: after[k] - before[k] for k in after}
        what = []
        if d["truncated_segments"]:
            what.append(f"truncated ({d['missing_chunks']} chunk(s) missing)")
        if d["damaged_chunks"]:
            what.append(f"{d['damaged_chunks']} damaged chunk(s)")
        if d["seq_gaps"]:
            what.append(f"{d['seq_gaps']} missing/repeated chunk(s) in a thread's sequence")
        if d["dropped_events"]:
            what.append(f"{d['dropped_events']} event(s) dropped by the recorder")
        if d["unknown_strings"]:
            what.append(f"{d['unknown_strings']} event(s) naming an undefined string")
        if what:
            self.errors.append(f"{seg}: " + ", ".join(what))

    # Tables -----------------------------------------------------------------------
    def strings(self) -> list[str]:
        return self._decoder.strings()

    def string(self, index: int) -> str:
        return self._decoder.strings()[index]

    def domain_table(self):
        return self._decoder.domains()

    def domain_names(self) -> list[str]:
        """Name of every global domain index ('' = default domain)."""
        domains = self._decoder.domains()
        if len(domains) != len(self._domain_names):
            strings = self._decoder.strings()
            self._domain_names = [
                "" if i == 0 else (strings[d.name] if d.name >= 0 else f"domain {d.local_id}")
                for i, d in enumerate(domains)
            ]
        return self._domain_names

    def domain_name(self, index: int) -> str:
        names = self.domain_names()
        return names[index] if index < len(names) else f"domain #{index}"

    def category_names(self) -> dict[tuple[int, int], str]:
        """(global domain index, category number) -> name."""
        strings = self._decoder.strings()
        return {(c.domain, c.category): strings[c.name] for c in self._decoder.categories()}

    def category_name(self, domain: int, category: int) -> str | None:
        return self.category_names().get((domain, category))

    @property
    def thread_names(self) -> dict[tuple[int, int], str]:
        """(pid, tid) -> thread name."""
        strings = self._decoder.strings()
        return {(t.pid, t.tid): strings[t.name] for t in self._decoder.thread_names()}

    def damage(self) -> DamageReport:
        s = self._decoder.stats()
        return DamageReport(
            segments=s["segments"],
            damaged_segments=s["damaged_segments"] + s["unreadable_segments"],
            chunks=s["chunks"],
            damaged_chunks=s["damaged_chunks"],
            unpublished_chunks=s["unpublished_chunks"],
            seq_gaps=s["seq_gaps"],
            events=s["events"],
            unmatched_pops=s["unmatched_pops"],
            unmatched_ends=s["unmatched_ends"],
            unclosed=s["unclosed"],
            errors=list(self.errors),
            unreadable_segments=s["unreadable_segments"],
            truncated_segments=s["truncated_segments"],
            missing_chunks=s["missing_chunks"],
            dropped_events=s["dropped_events"],
            unknown_strings=s["unknown_strings"],
        )

    def ranges(self, rows: np.ndarray) -> list[Range]:
        """Turn rows into :class:`Range` objects (tables must cover them: call after reading)."""
        n = len(rows)
        if n == 0:
            return []
        strings = np.array(self.strings(), dtype=object)
        domains = np.array(self.domain_names(), dtype=object)
        categories = self.category_names()
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
        low32 = (raw & np.uint64(0xFFFFFFFF)).astype(np.uint32)
        payload = np.full(n, None, dtype=object)
        for code, values in (
            (1, raw),
            (2, raw.view(np.int64)),
            (3, raw.view(np.float64)),
            (4, low32),
            (5, low32.view(np.int32)),
            (6, low32.view(np.float32).astype(np.float64)),
        ):
            mask = ptype == code
            if mask.any():
                payload[mask] = np.array(values[mask].tolist(), dtype=object)
        dom = rows["domain"]
        cat = rows["category"]
        cat_names = [None] * n
        if categories and has_cat.any():
            for i in np.flatnonzero(has_cat).tolist():
                cat_names[i] = categories.get((int(dom[i]), int(cat[i])))
        kind_names = np.array(["?", "push-pop", "start-end", "mark"], dtype=object)
        ptype_names = np.array([None, "u64", "i64", "double", "u32", "i32", "float", None, None, None, None, None,
                                None, None, None, None], dtype=object)
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


def iter_batches(path, batch_size: int = DEFAULT_BATCH) -> Iterator[np.ndarray]:
    """Stream the rows of a recording (see :class:`RecordingReader` for the tables)."""
    reader = RecordingReader(path)
    try:
        yield from reader.batches(batch_size)
    finally:
        reader.close()


@dataclass
class Recording:
    """A fully loaded recording (see :func:`load`)."""

    path: Path
    ranges: list[Range]
    processes: dict[int, ProcessInfo]
    thread_names: dict[tuple[int, int], str]
    damage: DamageReport
    domains: list[str]

    @property
    def marks(self) -> list[Range]:
        return [r for r in self.ranges if r.kind == "mark"]

    @property
    def open_ranges(self) -> list[Range]:
        return [r for r in self.ranges if r.unclosed]

    @property
    def closed_ranges(self) -> list[Range]:
        return [r for r in self.ranges if r.kind != "mark" and not r.unclosed]

    def find(self, message=None, domain=None, kind=None) -> list[Range]:
        return [
            r
            for r in self.ranges
            if (message is None or r.message == message)
            and (domain is None or r.domain == domain)
            and (kind is None or r.kind == kind)
        ]

    def count(self, message=None, domain=None, kind=None) -> int:
        return len(self.find(message, domain, kind))


def load(path, segments=None) -> Recording:
    """Read a whole recording into memory, ranges sorted by start time.

    ``segments`` (paths) reads only those segment files of the recording.
    """
    with RecordingReader(path, segments=segments) as reader:
        batches = list(reader.batches())
        rows = np.concatenate(batches) if batches else np.empty(0, dtype=ROW_DTYPE)
        rows = rows[np.argsort(rows["start_ns"], kind="stable")]
        return Recording(
            path=Path(path),
            ranges=reader.ranges(rows),
            processes=dict(reader.processes),
            thread_names=reader.thread_names,
            damage=reader.damage(),
            domains=[d for d in dict.fromkeys(reader.domain_names()) if d],
        )
