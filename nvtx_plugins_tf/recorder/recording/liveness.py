"""Whether a raw segment's writer may still write it (``pack``, ``record``'s packing and its
removal of packed raw segments ask), by what does not depend on pids: the writer's lock on
the file and the closed mark in its header (docs/guarantees.md, "Live segments")."""

from __future__ import annotations

import os
import struct

__all__ = ["FLAG_CLOSED", "FLAG_LOCKED", "liveness", "segment_flags"]

_SEGMENT_MAGIC = b"NVTXREC1"
_SEGMENT_PID = struct.Struct("<q")  # at offset 24
_SEGMENT_FLAGS = struct.Struct("<I")  # at offset 20 (SegmentHeader::flags; 0 from older writers)
_HOST_AT, _HOST_LEN = 1192, 256  # SegmentHeader::host_name
#: SegmentHeader::flags (cc_ops/format/record_format.h): the writer holds an OFD read lock on
#: the file while it writes it; the writer closed it (a new segment, its exit).
FLAG_LOCKED, FLAG_CLOSED = 1, 2


def segment_flags(head: bytes) -> int | None:
    """A raw segment header's ``flags`` (:data:`FLAG_LOCKED`, :data:`FLAG_CLOSED`; 0 from
    older writers) from its first 32 bytes or more; None when ``head`` is no segment header."""
    if len(head) < 32 or head[:8] != _SEGMENT_MAGIC:
        return None
    return _SEGMENT_FLAGS.unpack_from(head, 20)[0]


def _alive(pid: int) -> bool:
    """Whether process ``pid`` runs: any of its threads is not a zombie. (A process whose
    main thread called ``pthread_exit`` shows state Z while its other threads record on; a
    process all of whose threads are zombies writes nothing more.)"""
    if pid <= 0:
        return False
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return False
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/stat", "rb") as f:
                state = f.read().rsplit(b")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue  # (the thread ended meanwhile)
        if state not in (b"Z", b"X"):
            return True
    return False


def _lock_held(fd: int) -> bool | None:
    """Whether someone holds a lock on the file ``fd`` (an OFD write lock asked for, not
    taken: F_OFD_GETLK); None when the file system has no locks (the answer is unknown)."""
    import fcntl

    query = struct.pack("hhxxxxqqixxxx", fcntl.F_WRLCK, os.SEEK_SET, 0, 0, 0)
    try:
        answer = fcntl.fcntl(fd, fcntl.F_OFD_GETLK, query)
    except OSError:
        return None
    return struct.unpack("hhxxxxqqixxxx", answer)[0] != fcntl.F_UNLCK


def liveness(path) -> tuple[str, str]:
    """Whether the raw segment ``path`` may still be written: ("live", why), ("done", "") or
    ("unknown", why), by what does not depend on pids (docs/guarantees.md, "Live segments"):
    its writer holds an OFD read lock on it while it writes it (seen from any PID namespace,
    and from other hosts whose file locks reach this file system) and marks it closed when it
    is done with it (a new segment, its exit). A segment whose lock is held is live; one closed
    is done; one that was locked, is not any more and was not closed lost its writer (SIGKILL,
    a crash) when it was written on this host; written on another host, whether its writer
    still runs cannot be known here (its lock may not be seen from here): unknown, left raw.
    Without a lock to judge by (an older writer, or no file locks here): by the header's pid
    on this host, unknown from another."""
    import socket

    with open(path, "rb") as f:
        head = f.read(_HOST_AT + _HOST_LEN)
        held = _lock_held(f.fileno())
    if len(head) < 32 or head[:8] != _SEGMENT_MAGIC:
        return "done", ""  # (not a segment: pack_segment says so)
    if held:
        return "live", "its process still runs (it holds the segment's lock)"
    flags = _SEGMENT_FLAGS.unpack_from(head, 20)[0]
    if flags & FLAG_CLOSED:
        return "done", ""
    host = head[_HOST_AT:].split(b"\0", 1)[0].decode(errors="replace")
    here = not host or host == socket.gethostname()
    locked = flags & FLAG_LOCKED and held is not None
    if here and not locked:
        return ("live", "its process still runs") if _alive(_SEGMENT_PID.unpack_from(head, 24)[0]) else ("done", "")
    if here:
        return "done", ""  # (its lock is gone, the segment not closed: its writer died)
    why = "it did not close the segment" if flags & FLAG_LOCKED else "an older recorder (no lock) wrote it"
    seen = "file locks are not supported here" if held is None else "its file lock cannot be seen from this host"
    return "unknown", (
        f"written on {host}: whether its process still runs cannot be known here ({why}; {seen}); "
        f"pack it on {host}, or once its process has ended there"
    )
