"""Packed segments: a closed segment file compressed chunk by chunk (``PID-START.nvtxsegz``).

The recorder writes raw segments (``.nvtxseg``, cc_ops/format/record_format.h) at 8 bytes
per push or pop and 16 per start or end, through shared mappings, so that a SIGKILL loses
nothing. Once no process writes a segment any more, :func:`pack_recording` (``record`` calls
it after the exports) replaces it with a packed one: the same bytes, each chunk a Zstandard
frame of its own (pyarrow's codec), about 0.5 byte per push/pop event and 2-3 per start/end.
Readers see the raw bytes again: the decoder reads the frames in place (cc_ops/reader/
packed_segment.h, which walks them by the rules of :func:`_unpack_into`), or, the reference
and the fallback, :func:`unpacked` copies them into a file first; every guarantee about damage
is that of the raw segment, and damage in a packed file costs the chunks it hit.

Layout (little-endian)::

    PackHeader  (64 bytes: magic b"NVTXSEGZ", u32 version, u32 codec, u64 raw_size,
                 u32 header_size, u32 chunk_size, u64 frames, 24 reserved bytes)
    frame 0     the raw segment's header (header_size bytes)
    frame k     chunk k - 1 (chunk_size bytes; the last one of a truncated file shorter)

Each frame is a FrameHeader (16 bytes: u32 packed length, u32 raw length, u32 CRC-32 of the
packed bytes, u32 0) and its packed bytes. (The CRC of the packed bytes, a 16th of the raw
ones for push/pop, finds damage to the file as well; sealed chunks carry their own sums.)

Crash safety: the packed file is written unnamed (``O_TMPFILE``), synced, and linked under
its name; only then is the raw segment removed. A kill at any point leaves the raw segment,
or both (the reader then reads the raw one, and the next pack replaces the packed one),
and never a partial file under any name.
"""

from __future__ import annotations

import contextlib
import os
import struct
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from ..._paths import PACKED_SEGMENT_SUFFIX, SEGMENT_SUFFIX
from .liveness import _SEGMENT_MAGIC, liveness

__all__ = [
    "PackResult",
    "Unpacked",
    "is_packed",
    "pack_recording",
    "pack_segment",
    "raw_size",
    "remove_packed_raw",
    "segment_sizes_ok",
    "unpack_segment",
    "unpacked",
]

MAGIC = b"NVTXSEGZ"
VERSION = 1
CODEC_ZSTD = 1
LEVEL = 1  # Zstandard's level 1: 300-450 MB/s here, 0.5 B per push/pop event (level 3 is no smaller)
_PACK_HEADER = struct.Struct("<8sIIQIIQ24x")
_FRAME = struct.Struct("<IIII")
_SEGMENT_SIZES = struct.Struct("<II")  # header_size, chunk_size at offset 12 of a segment header
# The format's limits (cc_ops/format/record_format.h): a header of 24 bytes to 1 MiB, chunks of
# 4 KiB to 1 GiB in whole pages. A pack header past them is damage (nothing is sized by it).
_MIN_HEADER, _MAX_HEADER, _MIN_CHUNK, _MAX_CHUNK = 24, 1 << 20, 4096, 1 << 30
# The most raw bytes a Zstandard frame gives a packed byte (a 4-byte RLE block regenerates at
# most 128 KiB): a frame declaring more raw bytes cannot hold them.
_MAX_RATIO = (128 << 10) // 4
_ZSTD_MAGIC = 0xFD2FB528
assert _PACK_HEADER.size == 64 and _FRAME.size == 16


def _codec():
    import pyarrow as pa

    return pa.Codec("zstd", compression_level=LEVEL)


def is_packed(path) -> bool:
    """Whether ``path`` names a packed segment (by its suffix).

    >>> is_packed("1-2.nvtxsegz"), is_packed("1-2.nvtxseg")
    (True, False)
    """
    return str(path).endswith(PACKED_SEGMENT_SUFFIX)


def raw_size(path) -> int:
    """Bytes of the raw segment ``path`` stands for (its own size if it is not packed; 0 if
    it cannot be read)."""
    try:
        if not is_packed(path):
            return os.stat(path).st_size
        with open(path, "rb") as f:
            head = f.read(_PACK_HEADER.size)
    except OSError:
        return 0
    if len(head) < _PACK_HEADER.size or head[:8] != MAGIC:
        return 0
    return _PACK_HEADER.unpack(head)[3]


@dataclass
class PackResult:
    """What :func:`pack_recording` did: segments packed, bytes before and after, and the
    segments left raw (still written by a live process, or not a segment) with why."""

    packed: int = 0
    raw_bytes: int = 0
    packed_bytes: int = 0
    left: list[str] = field(default_factory=list)


def pack_segment(path, level: int = LEVEL, keep_raw: bool = False) -> Path | None:
    """Replace the raw segment ``path`` by ``PATH`` + ``z`` (packed); returns the packed path,
    or None when ``path`` is not a segment (left as it is, for the reader to report). With
    ``keep_raw`` the raw segment stays (readers read it while both are there; see
    :func:`remove_packed_raw`).

    The caller makes sure no process writes the segment any more. ``OSError`` is raised as
    it comes (the raw segment then stays)."""
    import pyarrow as pa

    path = Path(path)
    codec = pa.Codec("zstd", compression_level=level)
    target = path.with_name(path.name[: -len(SEGMENT_SUFFIX)] + PACKED_SEGMENT_SUFFIX)
    with open(path, "rb") as fin:
        head = fin.read(4096)
        if len(head) < 24 or head[:8] != _SEGMENT_MAGIC:
            return None
        header_size, chunk_size = _SEGMENT_SIZES.unpack_from(head, 12)
        if not segment_sizes_ok(header_size, chunk_size):
            return None
        st = os.fstat(fin.fileno())
        size = st.st_size
        fin.seek(0)
        with _new_file(target, (st.st_atime_ns, st.st_mtime_ns)) as fout:
            frames = 1 + max(0, -(-(size - header_size) // chunk_size))
            fout.write(_PACK_HEADER.pack(MAGIC, VERSION, CODEC_ZSTD, size, header_size, chunk_size, frames))
            for k in range(frames):
                raw = fin.read(header_size if k == 0 else chunk_size)
                data = codec.compress(raw, asbytes=True)
                fout.write(_FRAME.pack(len(data), len(raw), zlib.crc32(data), 0))
                fout.write(data)
    if not keep_raw:
        path.unlink()
    return target


_AT_FDCWD = -100
_AT_SYMLINK_FOLLOW = 0x400


@contextlib.contextmanager
def _new_file(target: Path, times_ns: tuple[int, int] | None = None):
    """A file written whole or not at all: unnamed (``O_TMPFILE``) until it is complete and
    synced, then linked as ``target`` (replacing a file of that name). Where the file system
    has no ``O_TMPFILE``: a hidden ``.NAME.partial`` renamed into place (a kill may leave it;
    :func:`pack_recording` removes it the next time). ``times_ns``: its (atime, mtime), the
    raw segment's (the same content: a packed segment is not newer than the exports made
    from the raw one, for the tools that compare)."""
    try:
        fd = os.open(target.parent, os.O_TMPFILE | os.O_WRONLY, 0o600)
    except OSError:
        fd = None
    if fd is None:
        partial = target.with_name(f".{target.name}.partial")
        try:
            with open(os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "wb") as fout:
                yield fout
                fout.flush()
                if times_ns:
                    os.utime(fout.fileno(), ns=times_ns)
                os.fsync(fout.fileno())
            os.replace(partial, target)
        finally:
            with contextlib.suppress(FileNotFoundError):
                partial.unlink()
        return
    try:
        with os.fdopen(os.dup(fd), "wb") as fout:
            yield fout
            fout.flush()
            if times_ns:
                os.utime(fout.fileno(), ns=times_ns)
            os.fsync(fout.fileno())
        with contextlib.suppress(FileNotFoundError):
            target.unlink()  # a packed file left by a pack killed before it removed the raw one
        _link_fd(fd, target)
    finally:
        os.close(fd)


def _link_fd(fd: int, target: Path) -> None:
    """Give the unnamed file ``fd`` the name ``target`` (linkat through /proc, which needs no
    privilege, unlike AT_EMPTY_PATH)."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    source = f"/proc/self/fd/{fd}".encode()
    if libc.linkat(_AT_FDCWD, source, _AT_FDCWD, os.fsencode(target), _AT_SYMLINK_FOLLOW) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), str(target))


def remove_packed_raw(folder) -> int:
    """Remove the raw segments of ``folder`` that have a packed twin (a packed file has its
    name only once it is whole) and no live writer (:func:`liveness`: a live or unknown one
    is kept, and read rather than its twin); returns how many."""
    removed = 0
    for seg in Path(folder).glob("*" + SEGMENT_SUFFIX):
        if seg.with_name(seg.name[: -len(SEGMENT_SUFFIX)] + PACKED_SEGMENT_SUFFIX).is_file():
            with contextlib.suppress(OSError):
                if liveness(seg)[0] != "done":
                    continue
                seg.unlink()
                removed += 1
    return removed


def pack_recording(folder, live_check: bool = True, keep_raw: bool = False) -> PackResult:
    """Pack every raw segment of the recording ``folder`` whose writer is done (:func:`liveness`;
    a live one, or one whose liveness cannot be known, is left raw, with why in ``left``;
    ``live_check`` False: every one, for a recording no process writes, e.g. ``merge``'s;
    ``keep_raw``: see :func:`pack_segment`)."""
    out = PackResult()
    for stale in Path(folder).glob(f".*{PACKED_SEGMENT_SUFFIX}.partial"):  # left by a pack that was killed
        with contextlib.suppress(OSError):
            stale.unlink()
    for seg in sorted(Path(folder).glob("*" + SEGMENT_SUFFIX)):
        try:
            state, why = liveness(seg) if live_check else ("done", "")
        except OSError as exc:
            out.left.append(f"{seg}: {exc.strerror}")
            continue
        if state != "done":
            out.left.append(f"{seg}: {why}")
            continue
        before = seg.stat().st_size
        packed = pack_segment(seg, keep_raw=keep_raw)
        if packed is None:
            out.left.append(f"{seg}: not a segment")
            continue
        out.packed += 1
        out.raw_bytes += before
        out.packed_bytes += packed.stat().st_size
    return out


def unpack_segment(path) -> Path:
    """Replace the packed segment ``path`` by the raw segment it holds (for tools that read
    the raw format); returns the raw path. ``ValueError`` if a frame does not unpack (the
    packed file is then kept)."""
    path = Path(path)
    target = path.with_name(path.name[: -len(PACKED_SEGMENT_SUFFIX)] + SEGMENT_SUFFIX)
    with unpacked(path) as raw:
        if raw.errors:
            raise ValueError("; ".join(raw.errors))
        with open(raw.path, "rb") as fin, _new_file(target) as fout:
            while block := fin.read(1 << 20):
                fout.write(block)
    path.unlink()
    return target


#: What does not unpack (the codes of NvtxrUnpackCode in cc_ops/reader/decode.h, whose reader
#: of packed segments notes damage by the rules of :func:`_unpack_into`): see :meth:`Unpacked.note`.
NOT_PACKED, UNKNOWN_CODEC, TRUNCATED, HEADER_DAMAGED, LOST_FROM, FRAME_DAMAGED, OS_ERROR, TRAILING = range(1, 9)
_UNPACK_TEXT = {
    NOT_PACKED: "not a packed segment (damaged header)",
    UNKNOWN_CODEC: "packed segment version {a} codec {b} is not known here",
    TRUNCATED: "packed file truncated ({b} chunk(s) missing)",
    HEADER_DAMAGED: "the segment's header does not unpack (damaged)",
    LOST_FROM: "{what} and the {after} after it do not unpack (damaged)",
    FRAME_DAMAGED: "{what} does not unpack (damaged)",
    TRAILING: "{b} byte(s) after its last frame (its frame count, {a}, damaged: the chunks there are lost)",
}


@dataclass
class Unpacked:
    """A packed segment's raw bytes, readable at :attr:`path` while open; :attr:`errors`
    names what could not be unpacked, :attr:`damaged_chunks` and :attr:`unreadable` count it."""

    path: str
    errors: list[str]
    damaged_chunks: int = 0
    unreadable: bool = False

    def note(self, packed, code: int, a: int = 0, b: int = 0) -> None:
        """Word and count one thing of the packed file ``packed`` that did not unpack
        (``code`` and its numbers: frame ``a`` and ``b`` frames, a version and a codec, or an
        errno)."""
        what = "header" if a == 0 else f"chunk {a - 1}"
        text = _UNPACK_TEXT[code].format(a=a, b=b, what=what, after=b - 1) if code != OS_ERROR else os.strerror(a)
        self.errors.append(f"{packed}: {text}")
        self.damaged_chunks += b if code in (TRUNCATED, LOST_FROM) else int(code in (FRAME_DAMAGED, TRAILING))
        self.unreadable = self.unreadable or code in (NOT_PACKED, UNKNOWN_CODEC, HEADER_DAMAGED, OS_ERROR)


@contextlib.contextmanager
def unpacked(path, header_only: bool = False) -> Iterator[Unpacked]:
    """The raw segment behind ``path``: ``path`` itself if it is not packed, else its bytes
    unpacked into an unnamed file read at ``/proc/self/fd/N`` (with ``header_only``, the
    segment's header alone). A frame that does not unpack (damage) is left zero: its chunk
    reads as never written, and is counted here.

    The unnamed file is in memory (a memfd) up to :data:`MEMORY_LIMIT` bytes; a larger
    segment is unpacked into an ``O_TMPFILE`` file in the system's temporary folder, whose
    pages the kernel may write out and drop (reading stays bounded in memory). Either is gone
    when it is closed, however the process ends."""
    if not is_packed(path):
        yield Unpacked(str(path), [])
        return
    fd = _scratch_file(0 if header_only else min(raw_size(path), _MAX_COPY))
    try:
        yield _unpack_into(Path(path), fd, header_only)
    finally:
        os.close(fd)


MEMORY_LIMIT = 256 << 20
#: The largest copy made, 1 TiB: sparse, but a file system's files have a largest size (ext4:
#: 16 TiB); the bytes of a packed segment past its frames are zeros, read as unpublished chunks
#: whatever the copy's size (a raw size past this is damage its frames show).
_MAX_COPY = 1 << 40
_MAX_COUNT = 2**63 - 1  # (a count noted, as the native reader's int64)


def _scratch_file(size: int) -> int:
    """An unnamed read-write file for ``size`` bytes (see :func:`unpacked`)."""
    if size > MEMORY_LIMIT:
        import tempfile

        try:
            return os.open(tempfile.gettempdir(), os.O_TMPFILE | os.O_RDWR | os.O_CLOEXEC, 0o600)
        except OSError:
            pass  # (no O_TMPFILE there): in memory after all
    return os.memfd_create("nvtxseg", os.MFD_CLOEXEC)


def segment_sizes_ok(header_size: int, chunk_size: int) -> bool:
    """Whether a segment's header and chunk size are within the format's limits (a raw
    segment's header, a pack header)."""
    return (
        _MIN_HEADER <= header_size <= _MAX_HEADER
        and _MIN_CHUNK <= chunk_size <= _MAX_CHUNK
        and chunk_size % _MIN_CHUNK == 0
    )


def _content_size(frame: bytes) -> int | None:
    """The raw size a Zstandard frame's own header declares (RFC 8878, 3.1.1.1); None when it
    does not say, -1 when ``frame`` does not begin as a Zstandard frame."""
    if len(frame) < 5 or int.from_bytes(frame[:4], "little") != _ZSTD_MAGIC:
        return -1
    fhd = frame[4]
    single, fcs_flag, dict_flag = (fhd >> 5) & 1, fhd >> 6, fhd & 3
    fcs_bytes = (1 if single else 0, 2, 4, 8)[fcs_flag]
    if not fcs_bytes:
        return None
    at = 5 + (0 if single else 1) + (0, 1, 2, 4)[dict_flag]
    if len(frame) < at + fcs_bytes:
        return -1
    value = int.from_bytes(frame[at : at + fcs_bytes], "little")
    return value + 256 if fcs_bytes == 2 else value


def _frame_holds(data: bytes, raw_len: int) -> bool:
    """Whether the packed frame ``data`` can hold ``raw_len`` raw bytes (cc_ops/reader/
    packed_segment.cc, FrameHolds): not more than Zstandard's most, and what its own header
    declares when it declares it."""
    if raw_len > len(data) * _MAX_RATIO:
        return False
    declared = _content_size(data)
    return declared is None or declared == raw_len


def _unpack_into(path: Path, fd: int, header_only: bool) -> Unpacked:
    out = Unpacked(f"/proc/self/fd/{fd}", [])
    try:
        with open(path, "rb") as f:
            head = f.read(_PACK_HEADER.size)
            if len(head) < _PACK_HEADER.size or head[:8] != MAGIC:
                out.note(path, NOT_PACKED)
                return out
            _, version, codec_id, size, header_size, chunk_size, frames = _PACK_HEADER.unpack(head)
            if version != VERSION or codec_id != CODEC_ZSTD:
                out.note(path, UNKNOWN_CODEC, version, codec_id)
                return out
            if not segment_sizes_ok(header_size, chunk_size):
                out.note(path, HEADER_DAMAGED)  # (sizes no packer writes: nothing is sized by them)
                return out
            file_size = os.fstat(f.fileno()).st_size
            declared_frames = frames
            if header_only:
                frames = min(frames, 1)
                size = min(size, header_size)
            # (a raw size past what a file can be, 2**63, is damage the frames show; the bytes
            # past the frames are zeros, a hole the reader passes over)
            os.ftruncate(fd, min(size, _MAX_COPY))
            codec = _codec()
            offset = 0
            for k in range(frames):
                expected = header_size if k == 0 else chunk_size
                frame = f.read(_FRAME.size)
                if len(frame) < _FRAME.size:
                    out.note(path, TRUNCATED, k, min(frames - k, _MAX_COUNT))
                    break
                packed_len, raw_len, crc, _ = _FRAME.unpack(frame)
                # (what the file can hold: a length past its end is not read, nor allocated)
                fits = packed_len <= 2 * expected + 4096 and packed_len <= file_size - f.tell()
                data = f.read(packed_len) if fits else b""
                last = k + 1 == declared_frames
                # a frame holds its chunk whole, the last one at most that (the raw size ends with it)
                sized = raw_len <= expected if last else raw_len == expected
                raw = None
                if sized and len(data) == packed_len and zlib.crc32(data) == crc and _frame_holds(data, raw_len):
                    with contextlib.suppress(Exception):  # pyarrow's error for a garbled frame
                        raw = codec.decompress(data, decompressed_size=raw_len)
                if raw is None or len(raw) != raw_len:
                    if k == 0:
                        out.note(path, HEADER_DAMAGED)
                        return out
                    if len(data) != packed_len:  # the frames' boundaries are lost from here on
                        out.note(path, LOST_FROM, k, min(frames - k, _MAX_COUNT))
                        break
                    out.note(path, FRAME_DAMAGED, k)
                else:
                    os.pwrite(fd, raw, offset)
                    if last:  # (the raw size ends with the last frame)
                        os.ftruncate(fd, offset + raw_len)
                offset += expected
            else:
                if not header_only and f.tell() < file_size:  # (frames its header does not count)
                    out.note(path, TRAILING, frames, file_size - f.tell())
    except OSError as exc:
        out.note(path, OS_ERROR, exc.errno or 0)
    return out
