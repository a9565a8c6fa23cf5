"""Whether a recording's bytes changed since ``watch`` last read it: the cheap check that lets a
poll skip a rank with nothing new before any mapping (issue 47).

A recording's bytes change in a few places only (cc_ops/format/record_format.h): a raw segment's
header page (the writer keeps ``flags``, ``chunk_count`` and ``dropped_events`` current in it),
its file size (extended chunk by chunk), and the chunks not sealed yet: a writer claims a chunk
(its header's magic stored last), appends records to it (each record's first word stored last)
and seals it once when it leaves it (``sealed_end`` stored last); a sealed chunk's bytes are
final. So a :class:`Fingerprint` keeps, per segment file: the file's size, the header's first
:data:`HEADER_BYTES`, and per chunk either its seal (``sealed_end``, ``sum1``, ``sum2``: read
once, not read again), ``None`` (not claimed: magic 0) or the end of its last non-zero word
and the CRC-32 of the bytes up to there (claimed, not sealed: one per live thread, re-read at
each check). A packed segment (``.nvtxsegz``) is written once: its size, mtime and inode.

Cost of a check: a ``listdir``, a ``stat`` and a 1.2 KB read a segment, 64 bytes a chunk not
sealed at the last check, and the 256 KiB (``NVTX_TF_CHUNK_SIZE``) of each chunk still being
written. A false "unchanged" needs a CRC-32 collision at an equal last non-zero word; the next
change (or the writers' end, which ``watch`` reads after) reads it all, so it would delay a step
by a poll, never change one.
"""

from __future__ import annotations

import os
import struct
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..._paths import PACKED_SEGMENT_SUFFIX
from ..recording.liveness import segment_flags
from ..recording.packed import segment_sizes_ok

__all__ = ["Fingerprint", "HEADER_BYTES", "MAX_CHUNKS", "fingerprint"]

#: chunks not sealed at the last check above which a segment is not checked (read each poll):
#: a hostile size (a sparse file of many empty chunks) costs no more than a read
MAX_CHUNKS = 4096
#: the header bytes compared: up to and with ``dropped_events`` (record_format.h's SegmentHeader)
HEADER_BYTES = 1160
_HEADER = struct.Struct("<8sIIII")  # magic, version, header_size, chunk_size, flags
_CHUNK = struct.Struct("<IIqQQQQQ")  # magic, thread_index, tid, seq, thread_serial, sealed_end, sum1, sum2


@dataclass(frozen=True)
class _Segment:
    size: int
    head: bytes
    chunks: tuple = ()  # per chunk: ("sealed", end, sum1, sum2) | None | ("open", crc, last)


@dataclass
class Fingerprint:
    """What a recording's bytes were at a check: per segment file name, its :class:`_Segment`
    (``segments``); equal fingerprints, equal bytes (see the module docstring)."""

    segments: dict[str, object] = field(default_factory=dict)


def _sealed(chunk) -> bool:
    return isinstance(chunk, tuple) and chunk[0] == "sealed"


def _open_chunk(data: bytes) -> tuple:
    """A chunk still written: the end of its last non-zero 8-byte word and the CRC-32 of the
    bytes up to there (the zeros after it are the same whatever their count)."""
    words = np.frombuffer(data, dtype="<u8", count=len(data) // 8)
    nonzero = np.flatnonzero(words)
    last = 8 * (int(nonzero[-1]) + 1) if nonzero.size else 0
    return ("open", zlib.crc32(memoryview(data)[:last]), last)


def _raw_segment(path: Path, before: _Segment | None) -> _Segment:
    with open(path, "rb") as f:
        fd = f.fileno()
        size = os.fstat(fd).st_size
        head = os.pread(fd, HEADER_BYTES, 0)
        if len(head) < _HEADER.size:
            return _Segment(size, head)
        _, _, hsize, csize, _ = _HEADER.unpack_from(head)
        if segment_flags(head) is None or not segment_sizes_ok(hsize, csize) or size <= hsize:
            return _Segment(size, head)  # (not a segment the writer wrote: the reader says what)
        count = (size - hsize + csize - 1) // csize
        old = before.chunks if before is not None else ()
        if count - sum(map(_sealed, old)) > MAX_CHUNKS:
            return _Segment(size, head, (object(),))  # (too many to check: equal to nothing, read)
        chunks = []
        for k in range(count):
            if k < len(old) and _sealed(old[k]):
                chunks.append(old[k])  # (final: not read again)
                continue
            off = hsize + k * csize
            header = os.pread(fd, _CHUNK.size, off)
            if len(header) < _CHUNK.size or not any(header[:4]):
                chunks.append(None if not any(header) else ("short", header))
                continue
            _, _, _, _, _, sealed_end, sum1, sum2 = _CHUNK.unpack(header)
            if sealed_end:
                chunks.append(("sealed", sealed_end, sum1, sum2))
                continue
            chunks.append(_open_chunk(os.pread(fd, csize, off)))
    return _Segment(size, head, tuple(chunks))


def fingerprint(segments: list[Path], before: Fingerprint | None = None) -> Fingerprint:
    """The :class:`Fingerprint` of the segment files ``segments`` (a recording's, as
    ``segment_files`` lists them) now; ``before``: the last one, whose sealed chunks are not
    read again. OSError as it comes (a file removed or packed meanwhile)."""
    out = Fingerprint()
    old = before.segments if before is not None else {}
    for path in segments:
        if path.name.endswith(PACKED_SEGMENT_SUFFIX):
            st = path.stat()
            out.segments[path.name] = (st.st_size, st.st_mtime_ns, st.st_ino)
        else:
            prev = old.get(path.name)
            out.segments[path.name] = _raw_segment(path, prev if isinstance(prev, _Segment) else None)
    return out
