"""Write segment files in the recording format from Python (tests and benchmarks).

Follows cc_ops/format/record_format.h byte for byte with :mod:`struct`; it is not a
recorder (nothing here sees NVTX calls), only a way to produce exact, known input for
the reader.
"""

from __future__ import annotations

import struct
from pathlib import Path

SEGMENT_MAGIC = b"NVTXREC1"
FORMAT_VERSION = 2  # 2: compact events (compact_event); a version-1 segment holds none
SEGMENT_HEADER_SIZE = 4096
CHUNK_MAGIC = 0x4B4E4843
CHUNK_HEADER_SIZE = 64

K_PUSH, K_POP, K_START, K_END, K_MARK = 1, 2, 3, 4, 5
COMPACT_OFFSET = 8  # a compact event's kind: the full kind + 8
K_STRING, K_DOMAIN_CREATE, K_DOMAIN_DESTROY, K_CATEGORY, K_THREAD_NAME = 16, 17, 18, 19, 20
F_COLOR, F_CATEGORY, F_REGISTERED, F_THREAD_OVERRIDE = 1, 2, 4, 8
PAYLOAD_CODES = {"u64": 1, "i64": 2, "double": 3, "u32": 4, "i32": 5, "float": 6}


def word0(kind: int, flags: int = 0, domain: int = 0, msg: int = 0) -> bytes:
    return struct.pack("<BBHI", kind, flags, domain, msg)


def encode_payload(kind: str, value) -> bytes:
    if kind == "u64":
        return struct.pack("<Q", value)
    if kind == "i64":
        return struct.pack("<q", value)
    if kind == "double":
        return struct.pack("<d", value)
    if kind == "u32":
        return struct.pack("<II", value, 0)
    if kind == "i32":
        return struct.pack("<iI", value, 0)
    if kind == "float":
        return struct.pack("<fI", value, 0)
    raise ValueError(kind)


def event(
    kind, ts, *, domain=0, msg=0, range_id=None, color=None, category=None, payload=None, registered=False
) -> bytes:
    flags = 0
    if color is not None:
        flags |= F_COLOR
    if category is not None:
        flags |= F_CATEGORY
    if registered:
        flags |= F_REGISTERED
    if payload is not None:
        flags |= PAYLOAD_CODES[payload[0]] << 4
    out = word0(kind, flags, domain, msg) + struct.pack("<Q", ts)
    if range_id is not None:
        out += struct.pack("<Q", range_id)
    if color is not None or category is not None:
        out += struct.pack("<II", color or 0, category or 0)
    if payload is not None:
        out += encode_payload(*payload)
    return out


def compact_event(kind, delta, *, domain=0, msg=0, range_id=None) -> bytes:
    """A compact event (format 2): one word, ``delta`` ns after the chunk's clock (the
    previous event's timestamp in the same chunk), then the range id of a start or end."""
    if not (0 <= domain < 64 and 0 <= msg < 1 << 18 and 0 <= delta < 1 << 32):
        raise ValueError("field out of the compact range")
    out = struct.pack("<Q", (kind + COMPACT_OFFSET) | domain << 8 | msg << 14 | delta << 32)
    return out + (struct.pack("<Q", range_id) if range_id is not None else b"")


def string_def(string_id: int, text: str, domain: int = 0) -> bytes:
    data = text.encode()
    pad = (-len(data)) % 8
    return word0(K_STRING, 0, domain, string_id) + struct.pack("<II", len(data), 0) + data + b"\0" * pad


def segment_header(
    pid,
    ppid=1,
    start_ns=1000,
    start_realtime_ns=0,
    chunk_size=4096,
    process_name="python",
    cmdline="python test",
    version=FORMAT_VERSION,
) -> bytes:
    head = SEGMENT_MAGIC + struct.pack("<IIII", version, SEGMENT_HEADER_SIZE, chunk_size, 0)
    head += struct.pack("<qqQQ", pid, ppid, start_ns, start_realtime_ns)
    head += process_name.encode()[:63].ljust(64, b"\0") + cmdline.encode()[:1023].ljust(1024, b"\0")
    return head.ljust(SEGMENT_HEADER_SIZE, b"\0")


def chunk_header(thread_index, tid, seq) -> bytes:
    return struct.pack("<IIqQ", CHUNK_MAGIC, thread_index, tid, seq) + b"\0" * 40


class ThreadStream:
    def __init__(self, segment: "SegmentWriter", thread_index: int, tid: int):
        self.segment, self.thread_index, self.tid = segment, thread_index, tid
        self.seq = 0
        self.current: bytearray | None = None

    def record(self, data: bytes) -> "ThreadStream":
        size = self.segment.chunk_size
        if len(data) > size - CHUNK_HEADER_SIZE:
            raise ValueError("record larger than a chunk")
        if self.current is None or len(self.current) + len(data) > size:
            self.current = bytearray(chunk_header(self.thread_index, self.tid, self.seq))
            self.seq += 1
            self.segment.chunks.append(self.current)
        self.current += data
        return self

    # Convenience wrappers.
    def string(self, string_id, text, domain=0):
        return self.record(string_def(string_id, text, domain))

    def push(self, ts, msg=0, domain=0, **kw):
        return self.record(event(K_PUSH, ts, domain=domain, msg=msg, **kw))

    def pop(self, ts, domain=0):
        return self.record(event(K_POP, ts, domain=domain))

    def start(self, ts, range_id, msg=0, domain=0, **kw):
        return self.record(event(K_START, ts, domain=domain, msg=msg, range_id=range_id, **kw))

    def end(self, ts, range_id, domain=0):
        return self.record(event(K_END, ts, domain=domain, range_id=range_id))

    def compact(self, kind, delta, **kw):
        return self.record(compact_event(kind, delta, **kw))

    def mark(self, ts, msg=0, domain=0, **kw):
        return self.record(event(K_MARK, ts, domain=domain, msg=msg, **kw))

    def domain_create(self, ts, domain, name_id):
        return self.record(word0(K_DOMAIN_CREATE, 0, domain, name_id) + struct.pack("<Q", ts))

    def domain_destroy(self, ts, domain):
        return self.record(word0(K_DOMAIN_DESTROY, 0, domain, 0) + struct.pack("<Q", ts))

    def category_name(self, domain, category, name_id):
        return self.record(word0(K_CATEGORY, 0, domain, name_id) + struct.pack("<II", category, 0))

    def thread_name(self, tid, name_id, override=False):
        return self.record(
            word0(K_THREAD_NAME, F_THREAD_OVERRIDE if override else 0, 0, name_id) + struct.pack("<q", tid)
        )


class SegmentWriter:
    """Build one segment in memory; ``bytes()`` / ``write(dir)`` produce the file."""

    def __init__(
        self,
        pid=100,
        ppid=1,
        start_ns=1000,
        chunk_size=4096,
        process_name="python",
        cmdline="python test",
        start_realtime_ns=0,
        version=FORMAT_VERSION,
    ):
        self.pid, self.start_ns, self.chunk_size = pid, start_ns, chunk_size
        self.header = segment_header(pid, ppid, start_ns, start_realtime_ns, chunk_size, process_name, cmdline, version)
        self.chunks: list[bytearray] = []
        self.threads: dict[int, ThreadStream] = {}

    def thread(self, tid: int) -> ThreadStream:
        if tid not in self.threads:
            self.threads[tid] = ThreadStream(self, len(self.threads), tid)
        return self.threads[tid]

    def unpublished_chunk(self) -> None:
        self.chunks.append(bytearray(self.chunk_size))

    def __bytes__(self) -> bytes:
        body = b"".join(bytes(c).ljust(self.chunk_size, b"\0") for c in self.chunks)
        return self.header + body

    def filename(self) -> str:
        return f"{self.pid}-{self.start_ns}.nvtxseg"

    def write(self, directory) -> Path:
        path = Path(directory) / self.filename()
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(bytes(self))
        return path
