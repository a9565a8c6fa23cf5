"""Decoder tests on segment files written byte by byte (nvtx_plugins_tf.recorder._synth)."""

from __future__ import annotations

import struct

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nvtx_plugins_tf.recorder import iter_batches, load
from nvtx_plugins_tf.recorder._synth import (
    CHUNK_HEADER_SIZE,
    SEGMENT_HEADER_SIZE,
    SegmentWriter,
)
from nvtx_plugins_tf.recorder.reader import RecordingReader


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
        for r in rec.ranges
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
    assert [r.payload_type for r in rec.ranges] == ["double", "u64", "i32", "i64", "float", "u32", None]
    assert rec.ranges[3].range_id == 99
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
    pp = [r for r in rec.ranges if r.kind == "push-pop"]
    se = [r for r in rec.ranges if r.kind == "start-end"]
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
    assert [(r.pid, r.message) for r in rec.ranges] == [(10, "proc 10"), (11, "proc 11")]
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
    closed = [r for r in rec.ranges if not r.unclosed]
    assert [(r.start_ns, r.end_ns) for r in closed] == [(100 + 2 * i, 101 + 2 * i) for i in range(50)]
    assert len(rec.open_ranges) == 1  # the push whose pop was cut off
    assert rec.damage.damaged_chunks == 1 and rec.damage.damaged


def test_corrupt_record_ends_chunk_only(tmp_path):
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
    assert [(r.message, r.start_ns) for r in rec.marks] == [("a", 10), ("b", 20), ("b", 21)]
    assert rec.damage.damaged_chunks == 1


def test_bad_chunk_magic_and_bad_header(tmp_path):
    w = SegmentWriter(pid=3)
    w.thread(3).string(1, "a").mark(10, 1)
    data = bytearray(bytes(w))
    data[SEGMENT_HEADER_SIZE] ^= 0xFF  # chunk magic
    (tmp_path / "3-1.nvtxseg").write_bytes(data)
    (tmp_path / "4-2.nvtxseg").write_bytes(b"not a segment at all" * 100)
    (tmp_path / "5-3.nvtxseg").write_bytes(b"")
    rec = load(tmp_path)
    assert rec.ranges == []
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
    assert [(r.start_ns, r.end_ns) for r in rec.ranges] == [(7, 8)]
    assert rec.damage.unmatched_pops == 1 and rec.damage.unmatched_ends == 1
    assert rec.damage.seq_gaps == 1


def test_missing_path(tmp_path):
    with pytest.raises(FileNotFoundError):
        load(tmp_path / "nope")


def _decode_bytes(tmp_path, data: bytes):
    path = tmp_path / "9-9.nvtxseg"
    path.write_bytes(data)
    with RecordingReader(path) as reader:
        n = sum(len(b) for b in reader.batches(batch_size=7))
        reader.strings(), reader.domain_names(), reader.category_names(), reader.thread_names
        return n, reader.damage()


_VALID = bytes(_basic_segment())


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    cut=st.integers(0, len(_VALID)),
    flips=st.lists(st.tuples(st.integers(0, len(_VALID) - 1), st.integers(0, 255)), max_size=8),
)
def test_fuzz_truncation_and_corruption_never_crash(tmp_path, cut, flips):
    data = bytearray(_VALID)
    for pos, value in flips:
        data[pos] = value
    n, damage = _decode_bytes(tmp_path, bytes(data[:cut]))
    assert n >= 0 and damage.events <= 20


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=st.binary(max_size=6000))
def test_fuzz_random_chunk_bytes_never_crash(tmp_path, body):
    header = _VALID[:SEGMENT_HEADER_SIZE]
    chunk = _VALID[SEGMENT_HEADER_SIZE : SEGMENT_HEADER_SIZE + CHUNK_HEADER_SIZE]
    _decode_bytes(tmp_path, header + chunk + body)
    _decode_bytes(tmp_path, header + body)
    _decode_bytes(tmp_path, body)


def test_one_payload_decoder_scalar_and_vectorized_agree():
    from nvtx_plugins_tf.recorder.recording import PAYLOAD_TYPE_NAMES, decode_payload, payload_array

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
    for code in PAYLOAD_TYPE_NAMES:
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
    assert rec.events == rec.ranges
    assert len(rec.closed_ranges) + len(rec.open_ranges) + len(rec.marks) == len(rec.events)
    assert rec.count(category="layers") == rec.count(category=7) == 1
    assert [r.message for r in rec.find(domain="tf")] == ["inner"]


def test_peek_segment_reads_the_header_natively(tmp_path):
    from nvtx_plugins_tf.recorder._decoder import peek_segment

    _basic_segment(pid=42, start_ns=1000).write(tmp_path)
    (seg,) = tmp_path.glob("*.nvtxseg")
    info = peek_segment(seg)
    assert (info.pid, info.ppid, info.start_ns, info.process_name) == (42, 7, 1000, b"worker")
    other = tmp_path / "not-a-segment.nvtxseg"
    other.write_bytes(b"x" * 4096)
    assert peek_segment(other) is None
    assert peek_segment(tmp_path / "missing.nvtxseg") is None
