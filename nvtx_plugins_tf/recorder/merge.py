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
  recording's offsets all equal the reference. A forked child's
  ``parent_process_start_ns`` is a time of its parent's clock: it moves with the
  parent's shift (the child may run on another clock, e.g. in a time namespace), so the
  child stays linked to its parent -- the reader resolves the strings it inherited
  through that link;
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
than by their realtime anchors. The rule is :class:`.recording.clocks.Clocks`, which
``analyze`` places its ranks by as well.

Accuracy across hosts is that of their wall clocks: NTP keeps them within about a
millisecond on a LAN (tens of milliseconds over the internet; PTP: microseconds). Events
on different hosts closer than that may appear in either order.

``OUT/merge.json`` says what was done (sources, labels, offsets, shifts, new pids).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from .._paths import PACKED_SEGMENT_SUFFIX, SEGMENT_SUFFIX, recording_stem
from .recording import _decoder
from .recording.clocks import SAME_CLOCK_NS, Clocks
from .recording.packed import unpacked
from .recording.reader import CARRIED_DAMAGE, carried_damage, segment_files, segment_key

__all__ = ["MergeError", "NotARecording", "Source", "merge", "SAME_CLOCK_NS", "FIRST_NEW_PID"]

#: Replacement pids start above Linux's PID_MAX_LIMIT (2**22) and stay below 2**24.
FIRST_NEW_PID = 1 << 22
_LAST_PID = (1 << 24) - 1
MANIFEST = CARRIED_DAMAGE  # (one file: what was done, and the damage carried)
# The recording format is known only to the native reader (cc_ops/reader/decode.h): it
# reads each segment header and rewrites headers and chunks; this module plans the merge.


class MergeError(Exception):
    """A merge that cannot be done (bad input); the message names the input."""


class NotARecording(MergeError):
    pass


@dataclass
class _Segment:
    path: Path
    #: the header as the decoder reads it; None when it would skip the segment as damaged
    info: _decoder.SegmentInfo | None = None
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
    #: damage the recording carries from an earlier merge, by segment file name
    carried: dict[str, dict] = field(default_factory=dict)


def _read_header(path: Path) -> _Segment:
    """A segment file's header; invalid (copied as it is) when the decoder would skip it or
    it has no wall-clock anchor. :class:`MergeError` when the file cannot be read."""
    try:
        with unpacked(path, header_only=True) as raw:
            info = None if raw.unreadable else _decoder.read_segment_header(raw.path)
    except _decoder.SegmentReadError as exc:
        raise MergeError(str(exc).replace(raw.path, str(path))) from exc
    if info is None:
        return _Segment(path)
    return _Segment(
        path,
        info,
        pid=info.pid,
        start_ns=info.start_ns,
        realtime_ns=info.start_realtime_ns,
        process_start_ns=info.process_start_ns,
        host=info.host_name.decode(errors="replace"),
        valid=info.start_realtime_ns != 0,
    )


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
    return [
        Source(path, label, segments, carried=carried_damage(path))
        for path, label, segments in zip(paths, labels, segment_lists)
    ]


def _plan(sources: list[Source]) -> int:
    """Fill every source's offsets, shifts and pid map; returns the reference offset."""
    clocks = Clocks()  # (the rule analyze places its ranks by too)
    for src in sources:
        for seg in sorted((s for s in src.segments if s.valid), key=lambda s: s.start_ns):
            if seg.process not in src.offsets:  # the process's first segment
                src.offsets[seg.process] = clocks.clock_of(seg.offset)
    reference = clocks.reference
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


def _rewrite_header(head: bytearray, seg: _Segment, src: Source, shift: int) -> None:
    """Label the segment's process with its source, renumber its pids, shift its clock (and
    its parent link by its parent's clock, when the parent is in the same source)."""
    info, pid_map = seg.info, src.pid_map
    parent = (info.parent_pid, info.parent_process_start_ns)
    parent_shift = src.shifts.get(parent, shift) if info.parent_process_start_ns else shift
    comm = info.process_name.decode(errors="replace")
    cmdline = info.cmdline.decode(errors="replace")
    _decoder.rewrite_segment_header(
        head,
        shift,
        pid=pid_map.get(info.pid, info.pid),
        ppid=pid_map.get(info.ppid, info.ppid),
        parent_pid=pid_map.get(info.parent_pid, info.parent_pid),
        process_name=f"{src.label}:{comm}".encode(errors="replace"),
        cmdline=f"{src.label}:{info.pid} {cmdline}".encode(errors="replace"),
        parent_shift_ns=parent_shift,
    )


def _copy_segment(seg: _Segment, src: Source, out_dir: Path, used_names: set[str], carried: dict) -> str:
    """Copy one segment into ``out_dir``; returns its new name. The damage that copying
    cannot keep (frames of a packed segment that do not unpack: the copy holds them as
    never-written chunks; damage its source carried from an earlier merge) goes into
    ``carried`` under that name, for the reader to report (:func:`.recording.reader.carried_damage`)."""
    inherited = src.carried.get(segment_key(seg.path.name))
    errors = [str(e) for e in inherited.get("errors", [])] if isinstance(inherited, dict) else []
    chunks = int(inherited.get("damaged_chunks", 0)) if isinstance(inherited, dict) else 0
    if not seg.valid:  # copied as it is: the reader reports the damage
        name = f"{src.label}-{seg.path.name}".replace(os.sep, "_")
        if not name.endswith((SEGMENT_SUFFIX, PACKED_SEGMENT_SUFFIX)):
            name += SEGMENT_SUFFIX
        _write_verbatim(seg.path, out_dir / name)
    else:
        shift = src.shifts.get(seg.process, 0)
        new_pid = src.pid_map.get(seg.pid, seg.pid)
        name = f"{new_pid}-{seg.start_ns + shift}{SEGMENT_SUFFIX}"
        n = 1
        while name in used_names:  # (two segments opened in the same nanosecond)
            n += 1
            name = f"{new_pid}-{seg.start_ns + shift}.{n}{SEGMENT_SUFFIX}"
        used_names.add(name)
        fd = os.open(out_dir / name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with unpacked(seg.path) as raw, open(raw.path, "rb") as fin, os.fdopen(fd, "wb") as fout:
            errors += raw.errors
            chunks += raw.damaged_chunks
            head = bytearray(fin.read(seg.info.header_size))
            _rewrite_header(head, seg, src, shift)
            fout.write(head)
            chunk = bytearray(seg.info.chunk_size)
            while size := fin.readinto(chunk):
                part = memoryview(chunk)[:size]
                # a chunk never published or ending at damage is copied as it is from there:
                # the reader skips it or reports the damage
                _decoder.rewrite_chunk(part, shift, seg.pid, new_pid)
                fout.write(part)
    if errors or chunks:
        carried[segment_key(name)] = {"damaged_chunks": chunks, "errors": errors}
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
        if old.name.endswith((SEGMENT_SUFFIX, PACKED_SEGMENT_SUFFIX)) or old.name == MANIFEST:
            old.unlink()
    used: set[str] = set()
    manifest = {
        "reference_clock_offset_ns": reference,
        "same_clock_tolerance_ns": SAME_CLOCK_NS,
        "accuracy": "across hosts: that of their wall clocks (NTP: about 1 ms on a LAN); one clock: exact",
        "sources": [],
    }
    carried: dict[str, dict] = {}
    for src in sources:
        files = [_copy_segment(seg, src, out_dir, used, carried) for seg in src.segments]
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
    if carried:
        manifest["carried_damage"] = carried
    (out_dir / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
    return manifest
