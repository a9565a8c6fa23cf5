"""An independent decoder of the recording format (cc_ops/format/record_format.h).

Written from the format header alone, sharing no code with the project's reader
(cc_ops/reader, nvtx_plugins_tf/recorder): the tests judge the recorder's segments and the
reader's results with it.

* ``decode_segment`` / ``decode_dir``: strict; a segment written by the recorder must decode
  without a single surprise (UTF-8 strings, records inside their chunk, no missing chunk,
  every string id defined), or an ``AssertionError`` says what is wrong.
* ``scan_segment``: lenient, for damaged bytes; what any reader keeping the format's
  promises recovers from them and whether it must report damage (see its docstring).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

# ---- record_format.h, transcribed ------------------------------------------------------
SEGMENT_MAGIC = b"NVTXREC1"
SEGMENT_HEADER_SIZE = 4096
CHUNK_MAGIC = 0x4B4E4843
CHUNK_HEADER_SIZE = 64
K_PUSH, K_POP, K_START, K_END, K_MARK = 1, 2, 3, 4, 5
K_STRING, K_DOMAIN_CREATE, K_DOMAIN_DESTROY, K_CATEGORY, K_THREAD = 16, 17, 18, 19, 20
K_PAYLOAD_SCHEMA = 21  # body: a PayloadSchemaDef (kept as bytes here)
EVENT_KINDS = {K_PUSH, K_POP, K_START, K_END, K_MARK}
# Format 2: compact events, one word (start/end: + the u64 range id). Bits 0-7 the kind (the
# full kind + 8), 8-13 the domain, 14-31 the message id, 32-63 ns after the chunk's clock:
# the timestamp of the chunk's previous event record (none before its first one).
COMPACT_OFFSET = 8
COMPACT_KINDS = {k + COMPACT_OFFSET for k in EVENT_KINDS}
FORMAT_VERSIONS = (1, 2)


def compact_fields(word0: int) -> tuple[int, int, int, int]:
    """(full kind, domain, msg, delta) of a compact event's word."""
    return (word0 & 0xFF) - COMPACT_OFFSET, (word0 >> 8) & 0x3F, (word0 >> 14) & 0x3FFFF, word0 >> 32


F_COLOR, F_CATEGORY, F_REGISTERED, F_THREAD_OVERRIDE = 1, 2, 4, 8
PAYLOAD_FORMATS = {1: "<Q", 2: "<q", 3: "<d", 4: "<I", 5: "<i", 6: "<f"}
P_EXT = 7  # payload extension: the u64 payload is the length of the block that follows


def chunk_sums(data: bytes, base: int, end: int) -> tuple[int, int]:
    """The seal's sums (ChunkSums in record_format.h) of the chunk at ``base`` whose records
    end at offset ``end`` in it: over the 8-byte words w_0..w_(n-1) of [64, end),
    sum1 = end + sum(w_i), sum2 = n * end + sum((n - i) * w_i), both mod 2**64."""
    n = (end - CHUNK_HEADER_SIZE) // 8
    words = np.frombuffer(data, dtype="<u8", count=n, offset=base + CHUNK_HEADER_SIZE)
    weights = np.arange(n, 0, -1, dtype=np.uint64)
    with np.errstate(over="ignore"):  # uint64 arithmetic wraps: mod 2**64
        sum1 = (end + int(words.sum(dtype=np.uint64))) % 2**64
        sum2 = (n * end + int((weights * words).sum(dtype=np.uint64))) % 2**64
    return sum1, sum2


def chunk_seal(data: bytes, base: int) -> tuple[int, int, int]:
    """(sealed_end, sum1, sum2) of the chunk header at ``base``."""
    return struct.unpack_from("<QQQ", data, base + 32)


@dataclass
class Rec:
    kind: int
    flags: int
    domain: int
    msg: int
    tid: int
    thread_index: int
    ts: int | None = None
    range_id: int | None = None
    color: int | None = None
    category: int | None = None
    payload: object = None
    text: str | None = None  # resolved message / name
    extra: int | None = None  # kCategoryName category, kThreadName tid
    compact: bool = False  # a compact event (format 2); kind is then its full kind


@dataclass
class Segment:
    path: Path
    pid: int
    ppid: int
    chunk_size: int
    process_name: str
    cmdline: str
    start_ns: int
    version: int
    records: list[Rec] = field(default_factory=list)
    strings: dict[int, str] = field(default_factory=dict)
    string_domains: dict[int, int] = field(default_factory=dict)

    @property
    def events(self) -> list[Rec]:
        return [r for r in self.records if r.kind in EVENT_KINDS]

    def domains(self) -> dict[int, str]:
        return {r.domain: self.strings[r.msg] for r in self.records if r.kind == K_DOMAIN_CREATE}

    def thread_names(self) -> dict[int, list[tuple[bool, str]]]:
        out: dict[int, list[tuple[bool, str]]] = {}
        for r in self.records:
            if r.kind == K_THREAD:
                out.setdefault(r.extra, []).append((bool(r.flags & F_THREAD_OVERRIDE), self.strings[r.msg]))
        return out


def _decode_chunk(seg: Segment, data: bytes, base: int, chunk_index: int) -> list[Rec]:
    magic, thread_index, tid, seq = struct.unpack_from("<IIqQ", data, base)
    if magic != CHUNK_MAGIC:
        return []
    out = []
    pos, end = base + CHUNK_HEADER_SIZE, base + seg.chunk_size
    clock = None  # the chunk's clock: the previous event's timestamp
    sealed_end, sum1, sum2 = chunk_seal(data, base)
    if sealed_end:  # the writer left the chunk: its records end there, its sums hold
        assert CHUNK_HEADER_SIZE <= sealed_end <= seg.chunk_size and sealed_end % 8 == 0, "bad seal"
        assert chunk_sums(data, base, sealed_end) == (sum1, sum2), f"chunk {chunk_index}: seal does not match"
        end = base + sealed_end
    while pos + 8 <= end:
        (word0,) = struct.unpack_from("<Q", data, pos)
        if word0 == 0:
            break
        kind, flags, domain, msg = word0 & 0xFF, (word0 >> 8) & 0xFF, (word0 >> 16) & 0xFFFF, word0 >> 32
        rec = Rec(kind, flags, domain, msg, tid, thread_index)
        pos += 8
        if kind in COMPACT_KINDS:
            assert seg.version >= 2, "compact event in a version-1 segment"
            assert clock is not None, f"chunk {chunk_index}: compact event before any full one"
            full, domain, msg, delta = compact_fields(word0)
            clock += delta
            rec = Rec(full, 0, domain, msg, tid, thread_index, ts=clock, compact=True)
            if full in (K_START, K_END):
                (rec.range_id,) = struct.unpack_from("<Q", data, pos)
                pos += 8
        elif kind == K_STRING:
            length, zero = struct.unpack_from("<II", data, pos)
            assert zero == 0
            raw = data[pos + 8 : pos + 8 + length]
            rec.text = raw.decode("utf-8")  # must be valid UTF-8
            assert msg not in seg.strings or seg.strings[msg] == rec.text, "string id redefined"
            seg.strings[msg] = rec.text
            seg.string_domains[msg] = domain
            pos += 8 + (length + 7) // 8 * 8
        elif kind == K_PAYLOAD_SCHEMA:
            length, zero = struct.unpack_from("<II", data, pos)
            assert zero == 0
            rec.payload = data[pos + 8 : pos + 8 + length]
            pos += 8 + (length + 7) // 8 * 8
        elif kind in (K_DOMAIN_CREATE, K_DOMAIN_DESTROY):
            (rec.ts,) = struct.unpack_from("<Q", data, pos)
            pos += 8
        elif kind == K_CATEGORY:
            rec.extra, _ = struct.unpack_from("<II", data, pos)
            pos += 8
        elif kind == K_THREAD:
            (rec.extra,) = struct.unpack_from("<q", data, pos)
            pos += 8
        elif kind in EVENT_KINDS:
            (rec.ts,) = struct.unpack_from("<Q", data, pos)
            clock = rec.ts
            pos += 8
            if kind in (K_START, K_END):
                (rec.range_id,) = struct.unpack_from("<Q", data, pos)
                pos += 8
            if flags & (F_COLOR | F_CATEGORY):
                color, category = struct.unpack_from("<II", data, pos)
                rec.color = color if flags & F_COLOR else None
                rec.category = category if flags & F_CATEGORY else None
                pos += 8
            ptype = (flags & 0xF0) >> 4
            if ptype == P_EXT:  # the payload block, as bytes
                (length,) = struct.unpack_from("<Q", data, pos)
                rec.payload = data[pos + 8 : pos + 8 + length]
                pos += 8 + (length + 7) // 8 * 8
            elif ptype:
                rec.payload = struct.unpack_from(PAYLOAD_FORMATS[ptype], data, pos)[0]
                pos += 8
        else:
            raise AssertionError(f"unknown record kind {kind} in {seg.path} chunk {chunk_index}")
        assert pos <= end, "record overruns its chunk"
        out.append(rec)
    assert not sealed_end or pos == end, f"chunk {chunk_index}: records end at {pos - base}, sealed at {sealed_end}"
    return [(thread_index, seq, out)]


def decode_segment(path: Path) -> Segment:
    data = path.read_bytes()
    assert data[:8] == SEGMENT_MAGIC
    version, header_size, chunk_size, _ = struct.unpack_from("<IIII", data, 8)
    assert version in FORMAT_VERSIONS and header_size == SEGMENT_HEADER_SIZE
    assert chunk_size % 4096 == 0
    pid, ppid, start_ns, _start_rt = struct.unpack_from("<qqQQ", data, 24)
    name = data[56:120].split(b"\0")[0].decode()
    cmdline = data[120:1144].split(b"\0")[0].decode()
    seg = Segment(path, pid, ppid, chunk_size, name, cmdline, start_ns, version)
    chunks = []
    for k in range((len(data) - SEGMENT_HEADER_SIZE) // chunk_size):
        chunks += _decode_chunk(seg, data, SEGMENT_HEADER_SIZE + k * chunk_size, k)
    # Per thread, chunks in seq order (0, 1, 2, ... without gaps) give program order.
    by_thread: dict[int, list] = {}
    for thread_index, seq, recs in chunks:
        by_thread.setdefault(thread_index, []).append((seq, recs))
    for _thread_index, items in sorted(by_thread.items()):
        items.sort(key=lambda item: item[0])
        assert [s for s, _ in items] == list(range(len(items))), "missing chunk"
        for _, recs in items:
            seg.records.extend(recs)
    for r in seg.records:
        if r.kind in EVENT_KINDS and r.msg:
            assert r.msg in seg.strings, f"undefined string id {r.msg}"
            r.text = seg.strings[r.msg]
    return seg


def decode_dir(path: Path) -> list[Segment]:
    return [decode_segment(p) for p in sorted(path.glob("*.nvtxseg"))]


# ---- damaged bytes --------------------------------------------------------------------
# The rules a reader follows on damaged input, as the format states them (record_format.h)
# and as the reader's damage report promises them (DamageReport in recorder/recording/model.py):
#   * a header must have the magic, version 1 or 2, a header_size that is a multiple of 8 in
#     [end of the first writers' header, 1 MiB], a chunk_size that is a multiple of 8 in
#     [4096, 1 GiB], and the file must hold header_size bytes; else the segment is damaged
#     and nothing of it is read;
#   * chunk_count and dropped_events are read only from headers at least as long as the
#     full SegmentHeader: a file shorter than header_size + chunk_count * chunk_size is
#     truncated; dropped events are damage;
#   * the body is cut into chunk_size pieces (the last one may be short): a piece whose
#     chunk header is cut short is unpublished when all its bytes are zero, else damaged;
#     magic 0 = unpublished, another magic than CHUNK_MAGIC = damaged chunk;
#   * a thread's chunks have the seq numbers 0, 1, 2, ...; anything else is damage;
#   * a sealed chunk (sealed_end not 0) holds records up to sealed_end only; a sealed_end
#     that is not a multiple of 8 in [64, chunk_size] is damage (the records are read as
#     if unsealed); a chunk whose bytes up to sealed_end are all present and do not give
#     the seal's sums is damage (its records are read all the same); one cut before
#     sealed_end is cut short (below);
#   * in a chunk, records follow the header up to a zero word that only zero bytes follow;
#     in an unsealed chunk also up to a zero word followed by what one record's body can
#     hold and then zeros (the end of data: a record whose body was stored, its first word
#     not yet, issue 32; see ``torn_record_end``);
#     a zero word with anything else non-zero after it, a record of an unknown kind or payload
#     type, or one that does not fit in the bytes of the chunk present, is damage, and the
#     records resume at the next 8-byte word that starts a valid record in full form (issue
#     21.4; compact events, format 2, are skipped there as they could not be dated; before,
#     such damage ended the chunk and a zero word always did); bytes running out before a
#     zero word in a chunk cut short are damage
#     (a complete chunk may be full without a zero word); an event with an extended
#     payload (payload type 7) ends with its payload block, as long as its u64 payload
#     says (padded to 8); a kPayloadSchema is as long as a string definition;
#   * a compact event (format 2) is dated by its chunk's clock: the timestamp of the
#     previous event record of the chunk since its start or since the last damage skipped
#     in it; with none, the compact event cannot be dated and is lost (damage);
#   * a push, start or mark naming a string id (not 0) that no string definition of the
#     segment defines is damage (the event is kept); pops and ends name nothing (a range
#     takes its message from its begin), their msg field is not read.
HEADER_V1_END = 1144  # offsetof(SegmentHeader, chunk_count)
HEADER_STRUCT_SIZE = 1448  # sizeof(SegmentHeader): shorter headers hold no chunk_count (as the decoder reads them)


@dataclass
class Scan:
    """What ``scan_segment`` found: the event records a reader decodes (``Rec``; ts as a
    signed 64-bit number, as the reader's rows hold it; ``extra`` = the file index of the
    chunk) and the damage it must report (empty: none)."""

    events: list[Rec] = field(default_factory=list)
    damage: list[str] = field(default_factory=list)
    segment_damaged: bool = False  # the header was refused: nothing read

    @property
    def damaged(self) -> bool:
        return bool(self.damage)

    def events_in_chunks(self, indexes) -> list[Rec]:
        indexes = set(indexes)
        return [e for e in self.events if e.extra in indexes]


def record_length(data: bytes, pos: int, end: int) -> int:
    """Bytes of the record at ``pos`` (its first word not zero), 0 when it is not a record
    of the format or does not end by ``end``."""
    (word0,) = struct.unpack_from("<Q", data, pos)
    kind, flags = word0 & 0xFF, (word0 >> 8) & 0xFF
    if kind in COMPACT_KINDS:
        n = 16 if kind - COMPACT_OFFSET in (K_START, K_END) else 8
    elif kind in EVENT_KINDS:
        ptype = flags >> 4
        if ptype and ptype not in PAYLOAD_FORMATS and ptype != P_EXT:
            return 0
        n = 16 + 8 * (kind in (K_START, K_END)) + 8 * bool(flags & (F_COLOR | F_CATEGORY)) + 8 * bool(ptype)
        if ptype == P_EXT and pos + n <= end:  # the payload block follows, its length in the payload
            (block,) = struct.unpack_from("<Q", data, pos + n - 8)
            n += (block + 7) // 8 * 8
    elif kind in (K_STRING, K_PAYLOAD_SCHEMA):
        if end - pos < 16:
            return 0
        (length,) = struct.unpack_from("<I", data, pos + 8)
        n = 16 + (length + 7) // 8 * 8
    elif kind in (K_DOMAIN_CREATE, K_DOMAIN_DESTROY, K_CATEGORY, K_THREAD):
        n = 16
    else:
        return 0
    return n if pos + n <= end else 0


MAX_EXT_PAYLOAD_BYTES = 4096  # kMaxExtPayloadBytes: one event's payload block
MAX_EVENT_BYTES = 40  # the longest event record without a payload block


def _is_payload_block(data: bytes, at: int, n: int) -> bool:
    """Whether data[at:at + n] is a payload block as the writer builds one: entries of a
    24-byte header (u64 key, u64 size, u32 stored, u16 kind 1 or 2, u16 index below 16) and
    ``stored`` bytes padded to 8, ending exactly at n."""
    k = 0
    while k < n:
        if n - k < 24:
            return False
        stored, kind, index = struct.unpack_from("<IHH", data, at + k + 16)
        if kind not in (1, 2) or index >= 16:
            return False
        k += 24
        if stored > n - k:
            return False
        k += (stored + 7) // 8 * 8
    return k == n


def _is_schema_body(data: bytes, at: int, n: int) -> bool:
    """Whether data[at:at + n] is a PayloadSchemaDef (48 bytes, u32 num_entries and u32
    name_len at 32) and its entries (48 bytes, u32 name_len at 40), each with its name padded
    to 8, ending exactly at n."""
    if n < 48:
        return False
    entries, name_len = struct.unpack_from("<II", data, at + 32)
    k = 48 + (name_len + 7) // 8 * 8
    for _ in range(entries):
        if k > n or n - k < 48:
            return False
        (entry_name,) = struct.unpack_from("<I", data, at + k + 40)
        k += 48 + (entry_name + 7) // 8 * 8
    return k == n


def torn_record_end(data: bytes, pos: int, end: int, chunk_size: int) -> int:
    """The furthest the record at ``pos`` (its first word still 0) can end, by the record
    kinds and their real sizes (segment_cursor.cc, TornRecordEnd): an event without a
    payload block or a 16-byte definition (40 bytes); a string definition (u32 length, u32 0,
    then that many text bytes, no NUL among those stored, at most a chunk's room); a payload
    schema (the same, its body a schema definition ending at that length); an event with an
    extended payload (the block's length in its third, fourth or fifth word, the block's
    entries ending there)."""

    def word(k: int) -> int:
        return struct.unpack_from("<Q", data, pos + k)[0] if pos + k + 8 <= end else 0

    last = end
    while last > pos and data[last - 1] == 0:
        last -= 1
    ends = [MAX_EVENT_BYTES]
    w1 = word(8)
    room = chunk_size - CHUNK_HEADER_SIZE - 16
    if w1 < 2**32 and 0 < w1 <= room and pos + 16 + (w1 + 7) // 8 * 8 <= end:
        written = min(max(0, last - pos - 16), w1)
        if 0 not in data[pos + 16 : pos + 16 + written] or _is_schema_body(data, pos + 16, w1):
            ends.append(16 + (w1 + 7) // 8 * 8)
    for k in (16, 24, 32):
        block = word(k)
        if 0 < block <= MAX_EXT_PAYLOAD_BYTES and block % 8 == 0 and pos + k + 8 + block <= end:
            if _is_payload_block(data, pos + k + 8, block):
                ends.append(k + 8 + block)
    return pos + max(ends)


def _resync(data: bytes, pos: int, end: int) -> int:
    """The first offset >= pos, 8 bytes apart, where a valid record in full form starts (end if
    none): a compact event there could not be dated (the chunk's clock is lost with the damage)."""
    while pos + 8 <= end:
        if data[pos] not in COMPACT_KINDS and record_length(data, pos, end):
            return pos
        pos += 8
    return end


def scan_segment(data: bytes) -> Scan:
    """The events and the damage of the bytes of one segment file (rules above)."""
    scan = Scan()

    def refuse(why: str) -> Scan:
        scan.damage.append(why)
        scan.segment_damaged = True
        return scan

    if len(data) < HEADER_V1_END:
        return refuse("segment header truncated")
    if data[:8] != SEGMENT_MAGIC:
        return refuse("bad segment magic")
    version, header_size, chunk_size = struct.unpack_from("<III", data, 8)
    if version not in FORMAT_VERSIONS:
        return refuse("unsupported version")
    if not (HEADER_V1_END <= header_size <= 1 << 20 and header_size % 8 == 0):
        return refuse("bad header size")
    if not (4096 <= chunk_size <= 1 << 30 and chunk_size % 8 == 0):
        return refuse("bad chunk size")
    if len(data) < header_size:
        return refuse("segment header truncated")
    chunk_count = dropped = 0
    if header_size >= HEADER_STRUCT_SIZE:
        chunk_count, dropped = struct.unpack_from("<QQ", data, HEADER_V1_END)
    if dropped:
        scan.damage.append(f"{dropped} dropped events")
    body = len(data) - header_size
    if chunk_count and body < chunk_count * chunk_size:
        scan.damage.append(f"truncated: {chunk_count} chunks announced")

    chunks = []  # (file index, thread index, seq, offset, bytes present)
    for k in range((body + chunk_size - 1) // chunk_size):
        off = header_size + k * chunk_size
        present = min(chunk_size, len(data) - off)
        if present < CHUNK_HEADER_SIZE:
            if any(data[off : off + present]):
                scan.damage.append(f"chunk {k}: header cut short")
            continue
        magic, thread_index, _tid, seq = struct.unpack_from("<IIqQ", data, off)
        if magic == 0:
            continue
        if magic != CHUNK_MAGIC:
            scan.damage.append(f"chunk {k}: bad magic")
            continue
        chunks.append((k, thread_index, seq, off, present))
    by_thread: dict[int, list] = {}
    for chunk in chunks:
        by_thread.setdefault(chunk[1], []).append(chunk)
    for thread_index, items in by_thread.items():
        items.sort(key=lambda c: c[2])
        if [c[2] for c in items] != list(range(len(items))):
            scan.damage.append(f"thread {thread_index}: seq numbers {[c[2] for c in items]}")

    defined: set[int] = set()
    for k, thread_index, _seq, off, present in chunks:
        pos, end = off + CHUNK_HEADER_SIZE, off + present
        clock = None
        whole = present >= chunk_size
        sealed_end, sum1, sum2 = chunk_seal(data, off)
        unsealed = not sealed_end
        if sealed_end and not (CHUNK_HEADER_SIZE <= sealed_end <= chunk_size and sealed_end % 8 == 0):
            scan.damage.append(f"chunk {k}: bad seal {sealed_end}")
            unsealed = True
        elif sealed_end:
            whole = present >= sealed_end
            end = min(end, off + sealed_end)
            if whole and chunk_sums(data, off, sealed_end) != (sum1, sum2):
                scan.damage.append(f"chunk {k}: bytes changed after the seal")
        while True:
            if pos + 8 > end:
                if not whole:
                    scan.damage.append(f"chunk {k}: cut inside its records")
                break
            (word0,) = struct.unpack_from("<Q", data, pos)
            n = record_length(data, pos, end) if word0 else 0
            if n == 0:
                resume = _resync(data, pos + 8, end)
                if word0 == 0 and not any(data[pos:end]) and unsealed:
                    break  # the end of the chunk's records (in a sealed one: damage, before its seal)
                if word0 == 0 and unsealed and not any(data[torn_record_end(data, pos, end, chunk_size) : end]):
                    break  # the end of an unsealed chunk's data: a record's body without its first word
                scan.damage.append(f"chunk {k}: bad record at {pos - off}")
                if resume >= end:
                    break
                pos = resume
                clock = None
                (word0,) = struct.unpack_from("<Q", data, pos)
                n = record_length(data, pos, end)
            kind, flags, domain, msg = word0 & 0xFF, (word0 >> 8) & 0xFF, (word0 >> 16) & 0xFFFF, word0 >> 32
            if kind == K_STRING:
                defined.add(msg)
            elif kind in COMPACT_KINDS:
                full, domain, msg, delta = compact_fields(word0)
                if clock is None:
                    scan.damage.append(f"chunk {k}: compact event at {pos - off} with no clock")
                else:
                    clock = (clock + delta) % 2**64
                    rec = Rec(full, 0, domain, msg, 0, thread_index, ts=clock - 2**64 * (clock >= 2**63), extra=k)
                    if full in (K_START, K_END):
                        (rec.range_id,) = struct.unpack_from("<Q", data, pos + 8)
                    scan.events.append(rec)
            elif kind in EVENT_KINDS:
                (ts,) = struct.unpack_from("<q", data, pos + 8)
                clock = ts % 2**64
                rec = Rec(kind, flags, domain, msg, 0, thread_index, ts=ts, extra=k)
                if kind in (K_START, K_END):
                    (rec.range_id,) = struct.unpack_from("<Q", data, pos + 16)
                scan.events.append(rec)
            pos += n
    named = (e for e in scan.events if e.kind in (K_PUSH, K_START, K_MARK))
    unknown = sum(1 for e in named if e.msg and e.msg not in defined)
    if unknown:
        scan.damage.append(f"{unknown} events name undefined strings")
    return scan
