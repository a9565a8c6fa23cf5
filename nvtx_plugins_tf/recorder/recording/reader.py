"""Read NVTX recordings: a directory of ``<pid>-<start_ns>.nvtxseg`` segment files.

Two ways in:

* :func:`iter_batches` / :class:`RecordingReader` stream the ranges as numpy structured
  arrays (:data:`ROW_DTYPE`), a fixed-size batch at a time; memory stays bounded by the
  open ranges and the string tables. The exporters use this.
* :func:`load` builds a :class:`~.model.Recording` with a list of :class:`~.model.Range`
  objects; handy for small recordings and tests.

Decoding is done by the native ``libnvtx_reader.so`` (cc_ops/reader, C API in decode.h)
through :mod:`._decoder`; the objects built are those of :mod:`.model`.
"""

from __future__ import annotations

import contextlib
import math
import os
from pathlib import Path
from typing import Iterator

import numpy as np

from ..._paths import PACKED_SEGMENT_SUFFIX, SEGMENT_SUFFIX
from . import _decoder
from ._decoder import ROW_DTYPE
from .model import DamageReport, ProcessInfo, Range, Recording, chunk_damage_text, ranges_from_rows
from .packed import Unpacked, is_packed, raw_size, unpacked

__all__ = [
    "ROW_DTYPE",
    "CARRIED_DAMAGE",
    "RecordingReader",
    "carried_damage",
    "segment_key",
    "is_segment",
    "iter_batches",
    "load",
    "reading",
    "segment_files",
]

DEFAULT_BATCH = 65536

#: A merged recording's file (written by ``merge`` beside its segments) whose ``carried_damage``
#: holds, per segment file, the damage its source had that copying could not keep (frames of a
#: packed segment that did not unpack: the copy reads them as never written).
CARRIED_DAMAGE = "merge.json"

#: Packed segments are read frame by frame by the decoder (cc_ops/reader/packed_segment.h),
#: not unpacked into a file first (:func:`.packed.unpacked`, the reference: the same rows,
#: the same damage; also where Zstandard cannot be loaded natively).
#: ``NVTX_TF_UNPACK_IN_PLACE=0`` unpacks into the file, as before (tests and benchmarks compare).
UNPACK_IN_PLACE = os.environ.get("NVTX_TF_UNPACK_IN_PLACE", "1").strip() not in ("0", "false", "no", "off")
#: Bytes of a packed segment kept unpacked while it is read (a larger one unpacks the rest
#: again in each of the decoder's two passes over its chunks: memory stays bounded).
UNPACK_CACHE = 64 << 20


def segment_key(name: str) -> str:
    """A segment file's name without its suffix: the same for its raw and packed forms.

    >>> segment_key("12-345.nvtxsegz"), segment_key("12-345.nvtxseg")
    ('12-345', '12-345')
    """
    for suffix in (PACKED_SEGMENT_SUFFIX, SEGMENT_SUFFIX):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def carried_damage(path) -> dict[str, dict]:
    """:func:`segment_key` of a segment file -> ``{"damaged_chunks": N, "errors": [...]}`` of the damage a merged
    recording carries from its inputs (empty for any other recording, or when the file
    cannot be read: the segments are then read as they are)."""
    import json

    path = Path(path)
    try:
        manifest = json.loads((path / CARRIED_DAMAGE).read_text()) if path.is_dir() else {}
    except (OSError, ValueError):
        return {}
    carried = manifest.get("carried_damage") if isinstance(manifest, dict) else None
    return carried if isinstance(carried, dict) else {}


def segment_files(path) -> list[Path]:
    """Segment files of a recording directory (or the file itself), oldest first: raw
    (``.nvtxseg``) and packed (``.nvtxsegz``); of a segment present in both forms (a pack
    was cut short), the raw one."""
    path = Path(path)
    if path.is_file():
        return [path]
    if not path.is_dir():
        raise FileNotFoundError(f"no recording at {path}")

    def stem(p: Path) -> str:
        return p.name[: -len(PACKED_SEGMENT_SUFFIX if is_packed(p) else SEGMENT_SUFFIX)]

    def key(p: Path):
        pid, _, start = stem(p).partition("-")
        try:
            return (int(start), int(pid), p.name)
        except ValueError:
            return (math.inf, 0, p.name)

    files = [p for p in path.iterdir() if p.name.endswith((SEGMENT_SUFFIX, PACKED_SEGMENT_SUFFIX)) and p.is_file()]
    raw = {stem(p) for p in files if not is_packed(p)}
    return sorted((p for p in files if not (is_packed(p) and stem(p) in raw)), key=key)


def _peek_start_ns(path: Path) -> int | None:
    with unpacked(path, header_only=True) as raw:
        info = None if raw.unreadable else _decoder.peek_segment(raw.path)
    return None if info is None else info.start_ns


def is_segment(path) -> bool:
    """Whether the file ``path`` (raw or packed) starts with a segment header the decoder reads."""
    return _peek_start_ns(Path(path)) is not None


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
        self._bytes_done = 0  # segments read whole (bytes_read)
        self._segment_chunks0 = 0
        self._chunk_size = 0
        self._decoder = _decoder.Decoder()
        self._domain_names: list[str] = []
        self._unpack_damage = {"segments": 0, "chunks": 0}  # packed segments' frames that did not unpack
        self._carried = carried_damage(self.path)  # (a merged recording: its inputs' damage)
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
        yield from self._read(lambda: self._decoder.next_rows(batch_size), len)

    def collect(self, ranges, capacity: int = 1 << 20) -> None:
        """Decode every segment into ``ranges`` (an ``analysis._native.NativeRanges``): the
        rows go from the decoder to its columns without Python (the GIL released)."""
        for _ in self._read(lambda: ranges.collect(self._decoder, capacity), int):
            pass

    def _read(self, take, count) -> Iterator:
        """Open each segment and yield ``take()`` until ``count`` of it is 0, then the same
        for the ranges left open (``take``: the next rows of the decoder)."""
        for seg in self.segments:
            opened = self._open_packed(seg) if UNPACK_IN_PLACE and is_packed(seg) else None
            if opened is not None:
                yield from self._read_segment(seg, opened[1], take, count, opened)
                continue
            with unpacked(seg) as raw:
                yield from self._read_segment(seg, raw, take, count)
        self._decoder.finish()
        while True:
            rows = take()
            if count(rows) == 0:
                break
            yield rows

    def _open_packed(self, seg: Path):
        """Open the packed segment ``seg`` in the decoder: (the decoder's stats before, what
        did not unpack as :class:`.packed.Unpacked`, rc, error); None when this decoder
        cannot unpack (then :func:`.packed.unpacked` does)."""
        before = self._decoder.stats()
        rc, err, damage = self._decoder.open_packed(str(seg), UNPACK_CACHE)
        if any(code == _decoder.UNPACK_UNAVAILABLE for code, _, _ in damage):
            return None
        raw = Unpacked(str(seg), [])
        for code, a, b in sorted(damage, key=lambda d: d[1]):  # (in the order of the frames, as the copy)
            raw.note(seg, code, a, b)
        return before, raw, rc, err

    def _read_segment(self, seg: Path, raw, take, count, opened=None) -> Iterator:
        """The rows of one segment (``raw``: its raw bytes, see :func:`.packed.unpacked`;
        ``opened``: :meth:`_open_packed`'s, the segment open in the decoder already)."""
        self.errors.extend(raw.errors)
        self._unpack_damage["chunks"] += raw.damaged_chunks
        carried = self._carried.get(segment_key(seg.name))
        if isinstance(carried, dict):
            self.errors.extend(str(e) for e in carried.get("errors", []))
            self._unpack_damage["chunks"] += int(carried.get("damaged_chunks", 0))
        if raw.unreadable:
            self._unpack_damage["segments"] += 1
            return
        if opened is None:
            before = self._decoder.stats()
            rc, err = self._decoder.open_segment(raw.path)
        else:
            before, _, rc, err = opened
        self._segment_chunks0 = before["chunks"]
        if rc != 0:
            self.errors.append((err or f"cannot read {seg}").replace(raw.path, str(seg)))
            return
        info = self._note_process(seg)
        self._chunk_size = info.chunk_size if info is not None else 0
        try:
            while True:
                rows = take()
                if count(rows) == 0:
                    break
                yield rows
        finally:
            self._decoder.close_segment()
            self._bytes_done += raw_size(seg)
            self._chunk_size = 0
        self._note_damage(seg, before, self._decoder.stats())

    def _note_process(self, seg: Path):
        """The segment open in the decoder (``seg``): its process noted (:attr:`processes`,
        once); its info (None: none is open)."""
        info = self._decoder.segment_info()
        if info is not None and info.pid not in self.processes:
            self.processes[info.pid] = ProcessInfo(
                pid=info.pid,
                ppid=info.ppid,
                name=info.process_name.decode(errors="replace"),
                cmdline=info.cmdline.decode(errors="replace"),
                host=info.host_name.decode(errors="replace"),
                start_ns=info.start_ns,
                start_realtime_ns=info.start_realtime_ns,
                segment=str(seg),
            )
        return info

    def bytes_read(self) -> int:
        """Bytes of the segments read so far by :meth:`batches` (whole segments, then whole
        chunks of the current one): the export's progress, whatever the events' sizes."""
        current = (self._decoder.stats()["chunks"] - self._segment_chunks0) * self._chunk_size
        return self._bytes_done + current

    def total_bytes(self) -> int:
        """Bytes of the segment files (what :meth:`bytes_read` reaches at the end)."""
        return sum(raw_size(seg) for seg in self.segments)

    def events_read(self) -> int:
        """Events decoded so far by :meth:`batches` (its progress)."""
        return self._decoder.stats()["events"]

    def estimated_events(self) -> int:
        """The events of the segments, estimated before reading from their sizes (16 bytes
        an event; headers, definitions and unused chunk space count as events)."""
        return self.total_bytes() // 16

    def _note_damage(self, seg, before: dict, after: dict) -> None:
        d = {k: after[k] - before[k] for k in after}
        what = []
        if d["truncated_segments"]:
            what.append(f"truncated ({d['missing_chunks']} chunk(s) missing)")
        if d["damaged_chunks"]:
            what.append(chunk_damage_text(d["damaged_chunks"], d["lost_events_min"], d["checksum_mismatches"]))
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
        """String ``index`` alone ("" out of range): :meth:`strings` fetches and keeps them all."""
        return self._decoder.string(index)

    def string_count(self) -> int:
        """How many strings the tables hold (without fetching them)."""
        return self._decoder.string_count()

    def domain_table(self):
        return self._decoder.domains()

    def domain_names(self) -> list[str]:
        """Name of every global domain index ('' = default domain)."""
        domains = self._decoder.domains()
        if len(domains) != len(self._domain_names):
            string = self._decoder.string  # (a domain's name alone: not every string)
            self._domain_names = [
                "" if i == 0 else (string(d.name) if d.name >= 0 else f"domain {d.local_id}")
                for i, d in enumerate(domains)
            ]
        return self._domain_names

    def domain_name(self, index: int) -> str:
        names = self.domain_names()
        return names[index] if index < len(names) else f"domain #{index}"

    def category_table(self):
        """The categories as the decoder holds them (domain, category number, name = string index)."""
        return self._decoder.categories()

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

    def thread_name_records(self) -> list:
        """The thread names as the decoder holds them (pid, tid, name = string index, override)."""
        return self._decoder.thread_names()

    def damage(self) -> DamageReport:
        s = self._decoder.stats()
        return DamageReport(
            segments=s["segments"],
            damaged_segments=s["damaged_segments"] + s["unreadable_segments"] + self._unpack_damage["segments"],
            chunks=s["chunks"],
            damaged_chunks=s["damaged_chunks"] + self._unpack_damage["chunks"],
            unpublished_chunks=s["unpublished_chunks"],
            seq_gaps=s["seq_gaps"],
            events=s["events"],
            unmatched_pops=s["unmatched_pops"],
            unmatched_ends=s["unmatched_ends"],
            unclosed=s["unclosed"],
            errors=list(self.errors),
            unreadable_segments=s["unreadable_segments"] + self._unpack_damage["segments"],
            truncated_segments=s["truncated_segments"],
            missing_chunks=s["missing_chunks"],
            lost_events_min=s["lost_events_min"],
            checksum_mismatches=s["checksum_mismatches"],
            dropped_events=s["dropped_events"],
            unknown_strings=s["unknown_strings"],
        )

    def events(self, rows: np.ndarray) -> list[Range]:
        """Turn rows into :class:`Range` objects (tables must cover them: call after reading)."""
        if len(rows) == 0:
            return []
        return ranges_from_rows(rows, self.strings(), self.domain_names(), self.category_names())


def iter_batches(path, batch_size: int = DEFAULT_BATCH) -> Iterator[np.ndarray]:
    """Stream the rows of a recording (see :class:`RecordingReader` for the tables)."""
    reader = RecordingReader(path)
    try:
        yield from reader.batches(batch_size)
    finally:
        reader.close()


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
            events=reader.events(rows),
            processes=dict(reader.processes),
            thread_names=reader.thread_names,
            damage=reader.damage(),
            domains=[d for d in dict.fromkeys(reader.domain_names()) if d],
        )
