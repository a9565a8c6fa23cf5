"""Decoder tests on segment files written byte by byte (nvtx_plugins_tf.recorder.recording._synth)."""

from __future__ import annotations

import struct
from collections import Counter

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from native.segment_oracle import K_END, K_MARK, K_POP, K_PUSH, K_START, record_length, scan_segment

from nvtx_plugins_tf.recorder import iter_batches, load
from nvtx_plugins_tf.recorder.recording._decoder import ROW_DTYPE
from nvtx_plugins_tf.recorder.recording._synth import (
    CHUNK_HEADER_SIZE,
    SEGMENT_HEADER_SIZE,
    SegmentWriter,
    word0,
)
from nvtx_plugins_tf.recorder.recording.reader import RecordingReader


def _basic_segment(pid=42, start_ns=1000, chunk_size=4096) -> SegmentWriter:
    w = SegmentWriter(
        pid=pid, ppid=7, start_ns=start_ns, chunk_size=chunk_size, process_name="worker", cmdline="python train.py"
    )
    t = w.thread(pid)
    t.string(1, "outer").string(2, "inner").string(3, "tf").domain_create(1001, 1, 3)
    t.string(4, "layers").category_name(1, 7, 4).string(5, "main loop").thread_name(pid, 5, override=True)
    t.push(1100, 1, color=0xFF00FF00, payload=("double", 2.5))
    t.push(1200, 2, domain=1, category=7, payload=("u64", 2**63 + 5))
    t.push(1250, 2, payload=("i32", -3))
    t.pop(1260)
    t.pop(1300, domain=1)
    t.pop(1400)
    t.end(1500, 99)  # end read before its start (other thread)
    t2 = w.thread(pid + 1)
    t2.string(6, "async").start(1450, 99, 6, payload=("i64", -(2**40)))
    t2.mark(1460, 6, payload=("float", 1.5), color=0x80112233)
    t2.start(1470, 100, 6, payload=("u32", 4000000000))
    t2.push(1480, 1)
    return w


def test_exact_decoding(tmp_path):
    _basic_segment().write(tmp_path)
    rec = load(tmp_path)
    got = [
        (
            r.kind,
            r.domain,
            r.message,
            r.start_ns,
            r.end_ns,
            r.tid,
            r.end_tid,
            r.depth,
            r.payload,
            r.color,
            r.category,
            r.category_name,
        )
        for r in rec.events
    ]
    assert got == [
        ("push-pop", "", "outer", 1100, 1400, 42, 42, 0, 2.5, 0xFF00FF00, None, None),
        ("push-pop", "tf", "inner", 1200, 1300, 42, 42, 0, 2**63 + 5, None, 7, "layers"),
        ("push-pop", "", "inner", 1250, 1260, 42, 42, 1, -3, None, None, None),
        ("start-end", "", "async", 1450, 1500, 43, 42, 0, -(2**40), None, None, None),
        ("mark", "", "async", 1460, 1460, 43, 43, 0, 1.5, 0x80112233, None, None),
        ("start-end", "", "async", 1470, None, 43, 43, 0, 4000000000, None, None, None),
        ("push-pop", "", "outer", 1480, None, 43, 43, 0, None, None, None, None),
    ]
    assert [r.payload_type for r in rec.events] == ["double", "u64", "i32", "i64", "float", "u32", None]
    assert rec.events[3].range_id == 99
    assert rec.processes[42].name == "worker" and rec.processes[42].ppid == 7
    assert rec.processes[42].cmdline == "python train.py"
    assert rec.thread_names == {(42, 42): "main loop"}
    assert rec.domains == ["tf"]
    assert len(rec.open_ranges) == 2 and len(rec.marks) == 1
    assert not rec.damage.damaged
    assert rec.damage.events == 11 and rec.damage.unclosed == 2


def test_chunks_follow_seq_order_and_interleave(tmp_path):
    # Small chunks: each thread spans many chunks; pushes in one chunk, pops in later ones.
    w = SegmentWriter(pid=5, chunk_size=4096)
    a, b = w.thread(5), w.thread(6)
    a.string(1, "x")
    b.string(1, "x")
    n = 600
    for i in range(n):
        a.push(10 + i, 1)
        b.start(10 + i, 1000 + i, 1)
    for i in range(n):
        a.pop(10_000 + i)
        b.end(10_000 + i, 1000 + n - 1 - i)
    assert len(w.chunks) > 4
    # Shuffle the chunk order in the file: seq numbers still give each thread's order.
    w.chunks.reverse()
    w.write(tmp_path)
    rec = load(tmp_path)
    pp = [r for r in rec.events if r.kind == "push-pop"]
    se = [r for r in rec.events if r.kind == "start-end"]
    assert len(pp) == n and len(se) == n
    assert sorted((r.start_ns, r.end_ns, r.depth) for r in pp) == [(10 + i, 10_000 + n - 1 - i, i) for i in range(n)]
    assert sorted((r.start_ns, r.end_ns) for r in se) == [(10 + i, 10_000 + n - 1 - i) for i in range(n)]
    assert not rec.damage.damaged


def test_multiple_segments_and_unpublished_chunks(tmp_path):
    for pid, start in ((10, 500), (11, 600)):
        w = SegmentWriter(pid=pid, start_ns=start)
        w.unpublished_chunk()
        t = w.thread(pid)
        t.string(3, f"proc {pid}").push(start + 1, 3).pop(start + 2)
        w.unpublished_chunk()
        w.write(tmp_path)
    rec = load(tmp_path)
    assert [(r.pid, r.message) for r in rec.events] == [(10, "proc 10"), (11, "proc 11")]
    assert rec.damage.unpublished_chunks == 4 and not rec.damage.damaged
    # Batches stream with a tiny batch size too.
    rows = np.concatenate(list(iter_batches(tmp_path, batch_size=1)))
    assert len(rows) == 2


def test_truncated_file_keeps_intact_events(tmp_path):
    w = SegmentWriter(pid=3, chunk_size=8192)
    t = w.thread(3)
    t.string(1, "r")
    for i in range(100):
        t.push(100 + 2 * i, 1).pop(101 + 2 * i)
    data = bytes(w)
    # Cut inside the 51st push/pop pair: records are 16 bytes, the string def 24.
    cut = SEGMENT_HEADER_SIZE + CHUNK_HEADER_SIZE + 24 + 50 * 32 + 20
    (tmp_path / "3-1000.nvtxseg").write_bytes(data[:cut])
    rec = load(tmp_path)
    closed = [r for r in rec.events if not r.unclosed]
    assert [(r.start_ns, r.end_ns) for r in closed] == [(100 + 2 * i, 101 + 2 * i) for i in range(50)]
    assert len(rec.open_ranges) == 1  # the push whose pop was cut off
    assert rec.damage.damaged_chunks == 1 and rec.damage.damaged


def test_corrupt_record_is_damage_and_the_chunk_is_read_past_it(tmp_path):
    """A record that cannot be one is damage; the chunk's records resume at the next valid
    one (issue 21.4; before, it ended the chunk: thread a's third mark was lost too)."""
    w = SegmentWriter(pid=3, chunk_size=4096)
    a, b = w.thread(3), w.thread(4)
    a.string(1, "a").mark(10, 1).mark(11, 1).mark(12, 1)
    b.string(2, "b").mark(20, 2).mark(21, 2)
    data = bytearray(bytes(w))
    # Overwrite thread a's second mark with an unknown record kind.
    off = SEGMENT_HEADER_SIZE + CHUNK_HEADER_SIZE + 24 + 16
    data[off] = 0x7F
    (tmp_path / "3-1000.nvtxseg").write_bytes(data)
    rec = load(tmp_path)
    assert [(r.message, r.start_ns) for r in rec.marks] == [("a", 10), ("a", 12), ("b", 20), ("b", 21)]
    assert rec.damage.damaged_chunks == 1 and rec.damage.lost_events_min == 1


def test_bad_chunk_magic_and_bad_header(tmp_path):
    w = SegmentWriter(pid=3)
    w.thread(3).string(1, "a").mark(10, 1)
    data = bytearray(bytes(w))
    data[SEGMENT_HEADER_SIZE] ^= 0xFF  # chunk magic
    (tmp_path / "3-1.nvtxseg").write_bytes(data)
    (tmp_path / "4-2.nvtxseg").write_bytes(b"not a segment at all" * 100)
    (tmp_path / "5-3.nvtxseg").write_bytes(b"")
    rec = load(tmp_path)
    assert rec.events == []
    assert rec.damage.damaged_chunks == 1
    assert rec.damage.damaged_segments == 2
    # One line per affected file, each naming it (the damaged chunk's segment too).
    assert len(rec.damage.errors) == 3
    for name, error in zip(("3-1", "4-2", "5-3"), rec.damage.errors):
        assert f"{name}.nvtxseg" in error


def test_unmatched_pops_ends_and_seq_gaps(tmp_path):
    w = SegmentWriter(pid=3)
    t = w.thread(3)
    t.pop(5).end(6, 77).string(1, "x").push(7, 1).pop(8)
    data = bytearray(bytes(w))
    struct.pack_into("<Q", data, SEGMENT_HEADER_SIZE + 16, 3)  # seq 3 instead of 0
    (tmp_path / "3-1.nvtxseg").write_bytes(data)
    rec = load(tmp_path)
    assert [(r.start_ns, r.end_ns) for r in rec.events] == [(7, 8)]
    assert rec.damage.unmatched_pops == 1 and rec.damage.unmatched_ends == 1
    assert rec.damage.seq_gaps == 1


def test_missing_path(tmp_path):
    with pytest.raises(FileNotFoundError):
        load(tmp_path / "nope")


def _decode_bytes(tmp_path, data: bytes):
    """The rows and the damage report of the reader on ``data`` as one segment file."""
    path = tmp_path / "9-9.nvtxseg"
    path.write_bytes(data)
    with RecordingReader(path) as reader:
        batches = list(reader.batches(batch_size=7))
        reader.strings(), reader.domain_names(), reader.category_names(), reader.thread_names
        rows = np.concatenate(batches) if batches else np.zeros(0, ROW_DTYPE)
        return rows, reader.damage()


_ROW_BEGIN = {1: K_PUSH, 2: K_START, 3: K_MARK}  # row kind (push-pop, start-end, mark) -> its first event
_ROW_CLOSE = {1: K_POP, 2: K_END}
_UNCLOSED = 4  # row flag: no end recorded


def test_header_announcing_2_56_chunks_is_truncated(tmp_path):
    data = bytearray(_VALID)
    data[1151] = 1  # chunk_count = 2**56
    scan = scan_segment(bytes(data))
    assert scan.damaged and scan.damage[0].startswith("truncated")
    _, damage = _decode_bytes(tmp_path, bytes(data))
    assert damage.truncated_segments == 1 and damage.damaged


def _agrees_with_oracle(data: bytes, rows, damage):
    """The reader's result on ``data`` is what the independent oracle (tests/native/
    segment_oracle.py) says any reader must recover: the same number of events, damage
    reported exactly when the oracle finds some, one row for each push, start and mark the
    oracle decodes (closed, unclosed or displaced: none lost), each closed by a pop or end
    the oracle decodes (each used once at most). Returns the oracle's scan."""
    scan = scan_segment(data)
    assert damage.events == len(scan.events), scan.damage
    assert damage.damaged == scan.damaged, (scan.damage, damage)
    assert damage.damaged_segments == int(scan.segment_damaged), scan.damage
    begins = Counter((e.kind, e.ts) for e in scan.events if e.kind in (K_PUSH, K_START, K_MARK))
    closes = Counter((e.kind, e.ts) for e in scan.events if e.kind in (K_POP, K_END))
    rows_begin = Counter((_ROW_BEGIN[int(r["kind"])], int(r["start_ns"])) for r in rows)
    closed = [r for r in rows if r["kind"] in _ROW_CLOSE and not r["flags"] & _UNCLOSED]
    rows_close = Counter((_ROW_CLOSE[int(r["kind"])], int(r["end_ns"])) for r in closed)
    assert rows_begin == begins and not rows_close - closes
    assert all(r["end_ns"] == r["start_ns"] for r in rows if r["kind"] == 3)
    return scan


_VALID = bytes(_basic_segment())
_VALID_SCAN = scan_segment(_VALID)
_CHUNK = 4096
_N_CHUNKS = (len(_VALID) - SEGMENT_HEADER_SIZE) // _CHUNK
_BOUNDARIES = [SEGMENT_HEADER_SIZE + k * _CHUNK for k in range(_N_CHUNKS + 1)]


def test_oracle_sees_the_valid_segment():
    assert _N_CHUNKS == 2 and not _VALID_SCAN.damaged
    assert len(_VALID_SCAN.events) == 11 and len(_VALID_SCAN.events_in_chunks([0])) == 7


def test_every_cut_of_the_valid_segment(tmp_path):
    """Cut at every 8th byte (and around the records): the intact prefix decodes, damage
    exactly when the cut loses bytes the reader can tell are missing."""
    cuts = set(range(0, len(_VALID) + 1, 8))
    for b in _BOUNDARIES[:-1]:
        cuts |= set(range(b, b + 400))
    for cut in sorted(cuts):
        rows, damage = _decode_bytes(tmp_path, _VALID[:cut])
        scan = _agrees_with_oracle(_VALID[:cut], rows, damage)
        assert damage.events <= len(_VALID_SCAN.events)
        if cut < SEGMENT_HEADER_SIZE:
            assert damage.damaged_segments == 1 and len(rows) == 0, cut
        elif cut in _BOUNDARIES:
            k = _BOUNDARIES.index(cut)
            assert not damage.damaged, (cut, damage)
            assert damage.events == len(_VALID_SCAN.events_in_chunks(range(k)))
            assert [(e.kind, e.ts) for e in scan.events] == [
                (e.kind, e.ts) for e in _VALID_SCAN.events_in_chunks(range(k))
            ]


def _field_bytes() -> list[int]:
    """Offsets of the bytes that say something in the valid segment: the header's fields,
    each chunk's magic, thread index and seq, each record's kind, flags, string id and the
    low byte of its timestamp or string length, and the zero word after the records."""
    out = [*range(0, 24), *range(1144, 1160)]
    for base in _BOUNDARIES[:-1]:
        out += [*range(base, base + 8), base + 16, base + 17]
        pos = base + CHUNK_HEADER_SIZE
        while any(_VALID[pos : pos + 8]):
            out += [pos, pos + 1, pos + 4, pos + 5, pos + 8]
            length = record_length(_VALID, pos, base + _CHUNK)
            assert length, f"the oracle cannot walk the valid segment at {pos}"
            pos += length
        out.append(pos)
    return out


_FIELD_BYTES = _field_bytes()


def test_full_chunk_without_zero_word(tmp_path):
    """Records filling a chunk to its last byte: no zero word, no damage."""
    w = SegmentWriter(pid=3, chunk_size=4096)
    t = w.thread(3)
    per_chunk = (4096 - CHUNK_HEADER_SIZE) // 16
    for i in range(per_chunk + 1):
        t.mark(100 + i)
    assert len(w.chunks) == 2 and len(w.chunks[0]) == 4096
    data = bytes(w)
    rows, damage = _decode_bytes(tmp_path, data)
    _agrees_with_oracle(data, rows, damage)
    assert not damage.damaged and damage.events == len(rows) == per_chunk + 1
    assert sorted(rows["start_ns"].tolist()) == [100 + i for i in range(per_chunk + 1)]


def test_extended_payload_block_is_part_of_its_record(tmp_path):
    """An event with an extended payload (type 7) carries its block: the next record starts
    after it; a block length running past the chunk is damage; every cut agrees with the
    oracle."""
    w = SegmentWriter(pid=3, chunk_size=4096)
    t = w.thread(3)
    block = struct.pack("<QQIHH", 77, 8, 8, 1, 0) + struct.pack("<q", -1)  # one data entry, 8 bytes
    t.string(1, "ext")
    t.record(word0(K_MARK, 7 << 4, 0, 1) + struct.pack("<QQ", 500, len(block)) + block)
    t.mark(600, 1)
    data = bytes(w)
    rows, damage = _decode_bytes(tmp_path, data)
    _agrees_with_oracle(data, rows, damage)
    assert not damage.damaged and damage.events == 2
    assert sorted(rows["start_ns"].tolist()) == [500, 600] and sorted(rows["payload_type"].tolist()) == [0, 7]
    length_at = SEGMENT_HEADER_SIZE + CHUNK_HEADER_SIZE + 24 + 16
    for length in (4000, 2**64 - 1, 2**63):
        bad = data[:length_at] + struct.pack("<Q", length) + data[length_at + 8 :]
        rows, damage = _decode_bytes(tmp_path, bad)
        _agrees_with_oracle(bad, rows, damage)
        # the mark with the bad block is lost; the one after it is read past the damage
        assert damage.damaged_chunks == 1 and sorted(rows["start_ns"].tolist()) == [600]
    for cut in range(SEGMENT_HEADER_SIZE, SEGMENT_HEADER_SIZE + 200):
        rows, damage = _decode_bytes(tmp_path, data[:cut])
        _agrees_with_oracle(data[:cut], rows, damage)


_POSITIONS = st.one_of(st.integers(0, len(_VALID) - 1), st.sampled_from(_FIELD_BYTES))


def test_every_field_byte_changed(tmp_path):
    """One byte of a field changed (to 0, to 0xFF, by one): the reader agrees with the
    oracle, damage included (a bad magic, kind, payload type, string length or seq; an
    undefined string id; a chunk count or dropped-event count in the header)."""
    reasons, undamaged = set(), 0
    for pos in _FIELD_BYTES:
        for value in {0, 0xFF, (_VALID[pos] + 1) % 256} - {_VALID[pos]}:
            data = _VALID[:pos] + bytes([value]) + _VALID[pos + 1 :]
            rows, damage = _decode_bytes(tmp_path, data)
            scan = _agrees_with_oracle(data, rows, damage)
            reasons.update(scan.damage)
            undamaged += not scan.damaged
    # The changes reach every kind of damage the oracle knows of but a chunk cut short
    # (test_every_cut_of_the_valid_segment), and some stay unseen (a timestamp, a domain).
    for what in (
        "bad segment magic",
        "unsupported version",
        "bad header size",
        "bad chunk size",
        "bad magic",
        "bad record",
        "seq numbers",
        "events name undefined strings",
        "dropped events",
        "chunks announced",
    ):
        assert any(what in why for why in reasons), (what, reasons)
    assert undamaged > 0


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    cut=st.one_of(st.integers(0, len(_VALID)), st.sampled_from(_BOUNDARIES)),
    flips=st.lists(st.tuples(_POSITIONS, st.integers(0, 255)), max_size=8),
)
def test_fuzz_truncation_and_corruption_never_crash(tmp_path, cut, flips):
    data = bytearray(_VALID)
    for pos, value in flips:
        data[pos] = value
    data = bytes(data[:cut])
    rows, damage = _decode_bytes(tmp_path, data)
    _agrees_with_oracle(data, rows, damage)
    assert len(rows) <= damage.events <= 20
    if data == _VALID[:cut]:  # no flip changed a byte: a prefix of the valid segment
        assert damage.events <= len(_VALID_SCAN.events)
        if cut in _BOUNDARIES:
            k = _BOUNDARIES.index(cut)
            assert not damage.damaged and damage.events == len(_VALID_SCAN.events_in_chunks(range(k)))


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=st.one_of(st.binary(max_size=200), st.binary(min_size=64, max_size=6000)))
def test_fuzz_random_chunk_bytes_never_crash(tmp_path, body):
    header = _VALID[:SEGMENT_HEADER_SIZE]
    chunk = _VALID[SEGMENT_HEADER_SIZE : SEGMENT_HEADER_SIZE + CHUNK_HEADER_SIZE]
    # Random records after a valid chunk header.
    data = header + chunk + body
    rows, damage = _decode_bytes(tmp_path, data)
    _agrees_with_oracle(data, rows, damage)
    assert damage.events <= len(body) // 16  # an event record is 16 bytes at least
    # Random chunk headers: a torn one with any byte set, or a magic that is neither 0 nor
    # the chunk magic, is damage.
    data = header + body
    rows, damage = _decode_bytes(tmp_path, data)
    _agrees_with_oracle(data, rows, damage)
    assert damage.events <= len(body) // 16
    first = body[:CHUNK_HEADER_SIZE]
    if len(first) < CHUNK_HEADER_SIZE and any(first):
        assert damage.damaged and damage.damaged_chunks >= 1
    if len(first) == CHUNK_HEADER_SIZE and first[:4] not in (bytes(4), struct.pack("<I", 0x4B4E4843)):
        assert damage.damaged and damage.damaged_chunks >= 1
    # Random bytes as a whole file: no segment header, nothing read.
    rows, damage = _decode_bytes(tmp_path, body)
    if not body.startswith(b"NVTXREC1"):
        assert damage.damaged_segments == 1 and damage.events == 0 and len(rows) == 0
    _agrees_with_oracle(body, rows, damage)


def test_one_payload_decoder_scalar_and_vectorized_agree():
    from nvtx_plugins_tf.recorder.recording.model import PAYLOAD_TYPE_NAMES, decode_payload, payload_array

    raws = [
        0,
        1,
        2**63 + 5,
        2**64 - 1,
        struct.unpack("<Q", struct.pack("<d", -2.5))[0],
        struct.unpack("<I", struct.pack("<f", 1.5))[0],
        0xFFFFFFFF,
        0x1_8000_0000,
    ]
    for code, name in PAYLOAD_TYPE_NAMES.items():
        if name == "json":  # the payload extension: no value in the 8 bytes (the JSON is a string)
            assert all(decode_payload(code, raw) is None for raw in raws)
            continue
        vector = payload_array(code, np.array(raws, dtype=np.uint64)).tolist()
        scalar = [decode_payload(code, raw) for raw in raws]
        assert list(map(repr, vector)) == list(map(repr, scalar)), PAYLOAD_TYPE_NAMES[code]  # repr: NaN
    assert decode_payload(3, raws[4]) == -2.5 and decode_payload(6, raws[5]) == 1.5
    assert decode_payload(2, 2**64 - 1) == -1 and decode_payload(5, 0xFFFFFFFF) == -1
    assert decode_payload(4, 0x1_8000_0000) == 0x8000_0000  # 32-bit payloads: the low 4 bytes
    assert decode_payload(0, 123) is None


def test_recording_words_match_capture(tmp_path):
    _basic_segment().write(tmp_path)
    rec = load(tmp_path)
    assert rec.ranges == [r for r in rec.events if r.kind != "mark" and not r.unclosed]
    assert len(rec.ranges) + len(rec.open_ranges) + len(rec.marks) == len(rec.events)
    assert rec.count(category="layers") == rec.count(category=7) == 1
    assert [r.message for r in rec.find(domain="tf")] == ["inner"]


def test_peek_segment_reads_the_header_natively(tmp_path):
    from nvtx_plugins_tf.recorder.recording._decoder import peek_segment

    _basic_segment(pid=42, start_ns=1000).write(tmp_path)
    (seg,) = tmp_path.glob("*.nvtxseg")
    info = peek_segment(seg)
    assert (info.pid, info.ppid, info.start_ns, info.process_name) == (42, 7, 1000, b"worker")
    other = tmp_path / "not-a-segment.nvtxseg"
    other.write_bytes(b"x" * 4096)
    assert peek_segment(other) is None
    assert peek_segment(tmp_path / "missing.nvtxseg") is None
