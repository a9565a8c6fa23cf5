"""Merge recordings made on several hosts into one recording (``nvtx-tf merge``).

Each host's ``CLOCK_MONOTONIC`` has its own origin (its boot, or a time namespace's
offset); every segment header also stores ``CLOCK_REALTIME`` read at the same moment as its
``start_ns`` (``start_realtime_ns``). A process's clock offset is
``start_realtime_ns - start_ns`` of its first segment: adding it to a monotonic timestamp
gives the wall-clock time of the event.

What :func:`merge` writes is a recording like any other, ``OUT`` (a ``.nvtxrec``
directory) that every tool reads unchanged: each segment is copied with

* every timestamp (events, domain create/destroy, ``start_ns``, ``process_start_ns``,
  ``parent_process_start_ns``) moved onto one reference clock: ``t + (offset -
  reference)``, the reference being the smallest offset (the clock with the earliest
  origin, so no timestamp goes below 0); ``start_realtime_ns`` is kept, so the merged
  recording's offsets all equal the reference;
* the process labelled with its source: ``process_name`` becomes ``LABEL:comm`` and the
  command line ``LABEL:PID cmdline`` (the PID as recorded). The label is the host name the
  recorder wrote into each segment header when every recording holds one host and they all
  differ; else the recording's name without ``.nvtxrec`` (``#2``, ... for repeats);
* a pid that an earlier source already holds (two hosts can run the same pid) replaced by
  a free one from 2**22 up (above Linux's largest pid, below the 24 bits of nsys's
  globalPid), in ``pid``, ``ppid``, ``parent_pid`` and the main thread's tid; the source's
  other pids and tids are kept.

Clocks that agree: offsets that differ by less than :data:`SAME_CLOCK_NS` (1 ms) are one
clock (two recordings of one host, its processes, containers sharing its kernel): they
get one offset, so their events keep their exact monotonic order. On one host the offset
only moves when the wall clock is stepped (NTP slews both clocks alike), so its segments
agree to the microsecond; two hosts whose offsets agree within 1 ms are aligned no worse
than by their realtime anchors.

Accuracy across hosts is that of their wall clocks: NTP keeps them within about a
millisecond on a LAN (tens of milliseconds over the internet; PTP: microseconds). Events
on different hosts closer than that may appear in either order.

``OUT/merge.json`` says what was done (sources, labels, offsets, shifts, new pids).
"""

from __future__ import annotations

import json
import os
import struct
from dataclasses import dataclass, field
from pathlib import Path

from .._paths import SEGMENT_SUFFIX, recording_stem
from .reader import segment_files

__all__ = ["MergeError", "NotARecording", "Source", "merge", "SAME_CLOCK_NS", "FIRST_NEW_PID"]

#: Offsets closer than this are one clock (kept exact relative to each other).
SAME_CLOCK_NS = 1_000_000
#: Replacement pids start above Linux's PID_MAX_LIMIT (2**22) and stay below 2**24.
FIRST_NEW_PID = 1 << 22
_LAST_PID = (1 << 24) - 1
MANIFEST = "merge.json"

# record_format.h, transcribed (see _synth.py)
_MAGIC = b"NVTXREC1"
_CHUNK_MAGIC = 0x4B4E4843
_CHUNK_HEADER = 64
_HEADER_V2_END = 1192  # process_start_ns and after are present in headers this long
_HOST_NAME = slice(1192, 1448)  # host_name: zero from older writers
_EVENT_KINDS = (1, 2, 3, 4, 5)
_K_STRING, _K_DOMAIN_CREATE, _K_DOMAIN_DESTROY, _K_CATEGORY, _K_THREAD_NAME = 16, 17, 18, 19, 20
_K_PAYLOAD_SCHEMA = 21  # u32 byte_length, u32 0, the bytes padded to 8 (as kStringDef)
_PAYLOAD_EXT = 7  # extended payload: the u64 payload is the length of the block after the record


class MergeError(Exception):
    """A merge that cannot be done (bad input); the message names the input."""


class NotARecording(MergeError):
    pass


@dataclass
class _Segment:
    path: Path
    header: bytes
    pid: int = 0
    start_ns: int = 0
    realtime_ns: int = 0
    process_start_ns: int = 0
    host: str = ""
    valid: bool = False

    @property
    def offset(self) -> int:
        return self.realtime_ns - self.start_ns

    @property
    def process(self) -> tuple[int, int]:
        return (self.pid, self.process_start_ns or self.start_ns)


@dataclass
class Source:
    """One input recording and what merging it does."""

    path: Path
    label: str
    segments: list[_Segment] = field(default_factory=list)
    pid_map: dict[int, int] = field(default_factory=dict)
    #: clock offset (realtime - monotonic, ns) of each process, and the shift its timestamps get
    offsets: dict[tuple[int, int], int] = field(default_factory=dict)
    shifts: dict[tuple[int, int], int] = field(default_factory=dict)


def _read_header(path: Path) -> _Segment:
    with open(path, "rb") as f:
        head = f.read(4096)
    seg = _Segment(path, head)
    if len(head) < 1144 or head[:8] != _MAGIC:
        return seg
    header_size, chunk_size = struct.unpack_from("<II", head, 12)
    if header_size < 1144 or chunk_size == 0 or chunk_size % 4096:
        return seg
    seg.pid, _ppid, seg.start_ns, seg.realtime_ns = struct.unpack_from("<qqQQ", head, 24)
    if header_size >= _HEADER_V2_END and len(head) >= _HEADER_V2_END:
        seg.process_start_ns = struct.unpack_from("<Q", head, 1160)[0]
    seg.host = head[_HOST_NAME].split(b"\0", 1)[0].decode(errors="replace")
    seg.valid = seg.realtime_ns != 0
    return seg


def _host_labels(segment_lists: list[list[_Segment]]) -> list[str] | None:
    """Each recording's host name, when each holds one and they all differ; else None."""
    hosts = []
    for segments in segment_lists:
        names = {s.host for s in segments if s.valid}
        if len(names) != 1 or "" in names:
            return None
        hosts.append(names.pop())
    return hosts if len(set(hosts)) == len(hosts) else None


def _default_labels(paths: list[Path]) -> list[str]:
    labels = []
    for p in paths:
        labels.append(recording_stem(p.resolve()))
    seen: dict[str, int] = {}
    out = []
    for label in labels:
        n = seen.get(label, 0) + 1
        seen[label] = n
        out.append(label if n == 1 and labels.count(label) == 1 else f"{label}#{n}")
    return out


def open_sources(paths, labels=None) -> list[Source]:
    """The input recordings, checked: :class:`MergeError` naming the first bad one."""
    paths = [Path(p) for p in paths]
    segment_lists = []
    for path in paths:
        if not path.exists():
            raise MergeError(f"no such recording: {path}")
        try:
            files = segment_files(path)
            segments = [_read_header(f) for f in files]
        except PermissionError as exc:
            raise MergeError(f"cannot read {exc.filename or path}: permission denied") from exc
        except OSError as exc:
            raise MergeError(f"cannot read {exc.filename or path}: {exc.strerror}") from exc
        if not any(s.valid for s in segments):
            raise NotARecording(f"{path} is not a recording (no {SEGMENT_SUFFIX} segment file with a valid header)")
        segment_lists.append(segments)
    if labels is None:
        labels = _host_labels(segment_lists) or _default_labels(paths)
    return [Source(path, label, segments) for path, label, segments in zip(paths, labels, segment_lists)]


def _plan(sources: list[Source]) -> int:
    """Fill every source's offsets, shifts and pid map; returns the reference offset."""
    clocks: list[int] = []  # one offset per clock, in order of discovery

    def clock_of(offset: int) -> int:
        for c in clocks:
            if abs(offset - c) < SAME_CLOCK_NS:
                return c
        clocks.append(offset)
        return offset

    for src in sources:
        for seg in sorted((s for s in src.segments if s.valid), key=lambda s: s.start_ns):
            if seg.process not in src.offsets:  # the process's first segment
                src.offsets[seg.process] = clock_of(seg.offset)
    reference = min(clocks)
    taken: set[int] = set()
    for src in sources:
        own = {s.pid for s in src.segments if s.valid}
        for key, offset in src.offsets.items():
            src.shifts[key] = offset - reference
        next_pid = max([FIRST_NEW_PID - 1, *taken]) + 1
        for pid in sorted(own & taken):
            if next_pid > _LAST_PID:
                raise MergeError("too many colliding pids to renumber")
            src.pid_map[pid] = next_pid
            next_pid += 1
        taken |= {src.pid_map.get(p, p) for p in own}
    return reference


def _label_bytes(text: str, size: int) -> bytes:
    data = text.encode("utf-8", errors="replace")[: size - 1]
    return data + b"\0" * (size - len(data))


def _rewrite_header(seg: _Segment, src: Source, shift: int) -> bytes:
    head = bytearray(seg.header)
    pid_map = src.pid_map
    pid, ppid, start_ns = struct.unpack_from("<qqQ", head, 24)
    struct.pack_into("<qqQ", head, 24, pid_map.get(pid, pid), pid_map.get(ppid, ppid), start_ns + shift)
    comm = head[56:120].split(b"\0", 1)[0].decode(errors="replace")
    cmdline = head[120:1144].split(b"\0", 1)[0].decode(errors="replace")
    head[56:120] = _label_bytes(f"{src.label}:{comm}", 64)
    head[120:1144] = _label_bytes(f"{src.label}:{pid} {cmdline}", 1024)
    header_size = struct.unpack_from("<I", head, 12)[0]
    if header_size >= _HEADER_V2_END:
        pstart, parent_pid, parent_start = struct.unpack_from("<QqQ", head, 1160)
        struct.pack_into(
            "<QqQ",
            head,
            1160,
            pstart + shift if pstart else 0,
            pid_map.get(parent_pid, parent_pid),
            parent_start + shift if parent_start else 0,
        )
    return bytes(head)


def _rewrite_chunk(chunk: bytearray, shift: int, old_pid: int, new_pid: int) -> None:
    """Shift the timestamps of one chunk's records in place (the main thread's tid too)."""
    if len(chunk) < _CHUNK_HEADER or struct.unpack_from("<I", chunk, 0)[0] != _CHUNK_MAGIC:
        return  # never published: the reader skips it
    if new_pid != old_pid and struct.unpack_from("<q", chunk, 8)[0] == old_pid:
        struct.pack_into("<q", chunk, 8, new_pid)
    pos, end = _CHUNK_HEADER, len(chunk)
    unpack, pack = struct.unpack_from, struct.pack_into
    while pos + 16 <= end:
        kind, flags = chunk[pos], chunk[pos + 1]
        if kind == 0:
            return
        if kind in _EVENT_KINDS:
            ptype = flags >> 4
            if ptype > _PAYLOAD_EXT:
                return  # damage: the reader stops here too
            length = 16 + (8 if kind in (3, 4) else 0) + (8 if flags & 3 else 0) + (8 if ptype else 0)
            if ptype == _PAYLOAD_EXT and pos + length <= end:  # its u64 payload: the block's length
                length += (unpack("<Q", chunk, pos + length - 8)[0] + 7) & ~7
            if pos + length > end:
                return
            if shift:
                pack("<Q", chunk, pos + 8, unpack("<Q", chunk, pos + 8)[0] + shift)
        elif kind in (_K_STRING, _K_PAYLOAD_SCHEMA):
            n = unpack("<I", chunk, pos + 8)[0]
            length = 16 + ((n + 7) & ~7)
        elif kind in (_K_DOMAIN_CREATE, _K_DOMAIN_DESTROY):
            length = 16
            if shift:
                pack("<Q", chunk, pos + 8, unpack("<Q", chunk, pos + 8)[0] + shift)
        elif kind == _K_THREAD_NAME:
            length = 16
            if new_pid != old_pid and unpack("<q", chunk, pos + 8)[0] == old_pid:
                pack("<q", chunk, pos + 8, new_pid)
        elif kind == _K_CATEGORY:
            length = 16
        else:
            return
        pos += length


def _copy_segment(seg: _Segment, src: Source, out_dir: Path, used_names: set[str]) -> str:
    if not seg.valid:  # copied as it is: the reader reports the damage
        name = f"{src.label}-{seg.path.name}".replace(os.sep, "_")
        if not name.endswith(SEGMENT_SUFFIX):
            name += SEGMENT_SUFFIX
        _write_verbatim(seg.path, out_dir / name)
        return name
    shift = src.shifts.get(seg.process, 0)
    new_pid = src.pid_map.get(seg.pid, seg.pid)
    name = f"{new_pid}-{seg.start_ns + shift}{SEGMENT_SUFFIX}"
    n = 1
    while name in used_names:  # (two segments opened in the same nanosecond)
        n += 1
        name = f"{new_pid}-{seg.start_ns + shift}.{n}{SEGMENT_SUFFIX}"
    used_names.add(name)
    header_size, chunk_size = struct.unpack_from("<II", seg.header, 12)
    fd = os.open(out_dir / name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with open(seg.path, "rb") as fin, os.fdopen(fd, "wb") as fout:
        fin.seek(header_size)
        head = _rewrite_header(seg, src, shift)
        fout.write(head + b"\0" * (header_size - len(head)) if header_size > len(head) else head[:header_size])
        while True:
            chunk = bytearray(fin.read(chunk_size))
            if not chunk:
                break
            _rewrite_chunk(chunk, shift, seg.pid, new_pid)
            fout.write(chunk)
    return name


def _write_verbatim(src: Path, dst: Path) -> None:
    fd = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with open(src, "rb") as fin, os.fdopen(fd, "wb") as fout:
        while block := fin.read(1 << 20):
            fout.write(block)


def merge(inputs, out_dir, labels=None) -> dict:
    """Merge the recordings ``inputs`` into the recording directory ``out_dir`` (created,
    its old segments replaced); returns the manifest also written to ``out_dir/merge.json``.

    Raises :class:`MergeError` (bad input, one line naming it) before writing anything,
    :class:`OSError` when the output cannot be written."""
    sources = open_sources(inputs, labels)
    out_dir = Path(out_dir)
    resolved = {s.path.resolve() for s in sources}
    if out_dir.resolve() in resolved:
        raise MergeError(f"the output {out_dir} is one of the inputs")
    reference = _plan(sources)
    out_dir.mkdir(mode=0o700, exist_ok=True)
    if not out_dir.is_dir():
        raise NotADirectoryError(20, "Not a directory", str(out_dir))
    for old in list(out_dir.iterdir()):
        if old.name.endswith(SEGMENT_SUFFIX) or old.name == MANIFEST:
            old.unlink()
    used: set[str] = set()
    manifest = {
        "reference_clock_offset_ns": reference,
        "same_clock_tolerance_ns": SAME_CLOCK_NS,
        "accuracy": "across hosts: that of their wall clocks (NTP: about 1 ms on a LAN); one clock: exact",
        "sources": [],
    }
    for src in sources:
        files = [_copy_segment(seg, src, out_dir, used) for seg in src.segments]
        shifts = sorted(set(src.shifts.values()))
        manifest["sources"].append(
            {
                "path": str(src.path),
                "label": src.label,
                "clock_offsets_ns": sorted(set(src.offsets.values())),
                "shift_ns": shifts[0] if len(shifts) == 1 else shifts,
                "renumbered_pids": {str(k): v for k, v in sorted(src.pid_map.items())},
                "segments": files,
            }
        )
    (out_dir / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
    return manifest
