"""Compact events (recording format 2, cc_ops/format/record_format.h; issue 25, goal 4).

An event without color, category, payload or registered message whose ids fit and whose time
since the chunk's previous event is below 2^32 ns is written in one word (start/end: + the
range id) instead of 16 (24) bytes. The recorder runs tests/native/compact_sample.c, which sets
CLOCK_MONOTONIC itself, so every event's time is known to the nanosecond: the reader must give
exactly those times back, whatever the gaps, ids and chunk boundaries. The independent decoder
(tests/native/segment_oracle.py) says which records were written compact. Version-1 segments
(no compact events) are still read; synthetic chunks check the reader's rules for the clock.
"""

from __future__ import annotations

import signal
import struct
import subprocess

import pytest
from native.segment_oracle import K_MARK, K_POP, K_PUSH, decode_dir, scan_segment

from nvtx_plugins_tf.recorder import load
from nvtx_plugins_tf.recorder.recording._synth import SegmentWriter

TWO_32 = 2**32


def _run(c_sample, recorder_env, folder, *args, **env) -> list[tuple[str, int]]:
    """The program's events, as it printed them: (kind, ns)."""
    exe = c_sample("compact_sample", "-rdynamic")
    proc = subprocess.run(
        [str(exe), *map(str, args)],
        env=recorder_env(folder, NVTX_TF_RECORDER_CLOCK="monotonic", **env),
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return [(kind, int(ns)) for kind, ns in (line.split() for line in proc.stdout.splitlines())]


def _times(printed, kind) -> list[int]:
    return [ns for k, ns in printed if k == kind]


def test_gaps_beyond_a_compact_delta_are_written_in_full(tmp_path, c_sample, recorder_env):
    printed = _run(c_sample, recorder_env, tmp_path / "rec", "gaps")
    rec = load(tmp_path / "rec")
    assert not rec.damage.damaged, rec.damage
    assert [(r.start_ns, r.end_ns) for r in rec.ranges] == list(zip(_times(printed, "push"), _times(printed, "pop")))
    (segment,) = decode_dir(tmp_path / "rec")
    events = segment.events
    assert [e.ts for e in events] == [ns for _, ns in printed]
    # push (first in its chunk: full), pop 1 us later (compact), push 50 ns later (compact),
    # pop 2^32 - 1 ns later (compact: the largest delta), push, pop 2^32 ns later (full), ...
    gaps = [b.ts - a.ts for a, b in zip(events, events[1:])]
    assert [e.compact for e in events[1:]] == [gap < TWO_32 for gap in gaps]
    assert [e.compact for e in events] == [False, True, True, True, True, False, True, False, True, False]


def test_chunk_boundaries(tmp_path, c_sample, recorder_env):
    """The smallest chunks (8 KiB): dozens of chunk boundaries; each chunk's first event, and
    the first in each 4 KiB block of a chunk, is written in full and every time comes back
    exact, for push/pop, start/end and marks."""
    rounds = 10000
    printed = _run(c_sample, recorder_env, tmp_path / "rec", "chunks", rounds, NVTX_TF_CHUNK_SIZE=8192)
    rec = load(tmp_path / "rec")
    assert not rec.damage.damaged, rec.damage
    pushpop = [r for r in rec.ranges if r.kind == "push-pop"]
    startend = [r for r in rec.ranges if r.kind == "start-end"]
    assert [(r.start_ns, r.end_ns) for r in pushpop] == list(zip(_times(printed, "push"), _times(printed, "pop")))
    assert [(r.start_ns, r.end_ns) for r in startend] == list(zip(_times(printed, "start"), _times(printed, "end")))
    assert [r.start_ns for r in rec.marks] == _times(printed, "mark")
    (segment,) = decode_dir(tmp_path / "rec")
    assert [e.ts for e in segment.events] == [ns for _, ns in printed]
    data = segment.path.read_bytes()
    chunk_size = struct.unpack_from("<I", data, 16)[0]
    assert chunk_size == 8192
    chunks = (len(data) - 4096) // chunk_size
    assert chunks > 50
    full = compact = 0
    for k in range(chunks):
        base = 4096 + k * chunk_size
        pos, block, sealed_end = base + 64, -1, struct.unpack_from("<Q", data, base + 32)[0]
        while pos < base + (sealed_end or chunk_size) and any(data[pos : pos + 8]):  # (the last: not sealed)
            kind = data[pos]
            if kind in (1, 2, 3, 4, 5, 9, 10, 11, 12, 13):
                first_in_block = (pos - base) // 4096 != block
                block = (pos - base) // 4096
                # the first event starting in each 4 KiB block (the chunk's first too): in full form
                assert (kind <= 5) == first_in_block, f"chunk {k} offset {pos - base}: kind {kind}"
                full += kind <= 5
                compact += kind > 5
            length = {1: 16, 2: 16, 3: 24, 4: 24, 5: 16, 9: 8, 10: 8, 11: 16, 12: 16, 13: 8}.get(kind, 16)
            if kind == 16:  # a string definition
                length = 16 + (struct.unpack_from("<I", data, pos + 8)[0] + 7) // 8 * 8
            pos += length
    assert full + compact == len(segment.events) and full <= 2 * chunks


def test_ids_beyond_the_compact_range_are_written_in_full(tmp_path, c_sample, recorder_env):
    printed = _run(c_sample, recorder_env, tmp_path / "rec", "ids")
    rec = load(tmp_path / "rec")
    assert not rec.damage.damaged, rec.damage
    assert [(r.start_ns, r.end_ns) for r in rec.ranges] == list(zip(_times(printed, "push"), _times(printed, "pop")))
    names = [r.message for r in rec.ranges]
    assert names == ["first", *(f"d{k}" for k in range(1, 71)), "colored", "paid", "registered", "high",
                     "small again"]  # fmt: skip
    by_name = {r.message: r for r in rec.ranges}
    assert by_name["colored"].color == 0xFF00FF00 and by_name["paid"].payload == 7
    assert [rec.ranges[k].domain for k in (1, 64, 70)] == ["d1", "d64", "d70"]
    (segment,) = decode_dir(tmp_path / "rec")
    pushes = [e for e in segment.events if e.kind == K_PUSH]
    pops = [e for e in segment.events if e.kind == K_POP]
    full = {name: not push.compact for name, push in zip(names, pushes)}
    # Domain ids from 64 on, a color, a payload, a registered message, message ids past 2^18.
    # (below 64: compact but for the first event in each 4 KiB block of the chunk, at most two)
    assert all(full[f"d{k}"] for k in range(64, 71)) and sum(full[f"d{k}"] for k in range(1, 64)) <= 2
    assert full["colored"] and full["paid"] and full["registered"] and full["high"] and full["small again"]
    assert pushes[names.index("high")].msg >= 2**18
    # Pops name no message: only their domain decides (and the delta).
    assert [not p.compact for p in pops[64:71]] == [True] * 7 and sum(not p.compact for p in pops[1:64]) <= 2


def test_sigkill_loses_no_compact_event(tmp_path, c_sample, recorder_env):
    """Killed while it records compact push/pops (small chunks: the kill may come at any point
    of a chunk's life): every pair completed before "ready" is in the recording, at its exact
    time, and the reader reports no damage (the oracle agrees)."""
    n = 100_000
    exe = c_sample("compact_sample", "-rdynamic")
    env = recorder_env(tmp_path / "rec", NVTX_TF_RECORDER_CLOCK="monotonic", NVTX_TF_CHUNK_SIZE=16384)
    proc = subprocess.Popen([str(exe), "kill", str(n)], env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == f"ready {n}"
        proc.send_signal(signal.SIGKILL)
        assert proc.wait(timeout=30) == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    rec = load(tmp_path / "rec")
    assert not rec.damage.damaged, rec.damage
    t0 = 1_000_000_000_000_000
    ranges = [(r.start_ns, r.end_ns) for r in rec.ranges]
    assert ranges[:n] == [(t0 + 200 * i, t0 + 200 * i + 100) for i in range(n)]
    (segment,) = decode_dir(tmp_path / "rec")
    scan = scan_segment(segment.path.read_bytes())
    assert not scan.damaged and len(scan.events) == len(segment.events) >= 2 * n
    assert sum(e.compact for e in segment.events) > len(segment.events) * 0.99


def test_version_1_segment_is_read(tmp_path):
    """A segment written by a version-1 recorder (no compact events) reads as before."""
    w = SegmentWriter(pid=5, version=1)
    t = w.thread(5)
    t.string(1, "v1").push(1000, 1).mark(1100, 1).pop(1200)
    w.write(tmp_path)
    assert struct.unpack_from("<I", (tmp_path / w.filename()).read_bytes(), 8)[0] == 1
    rec = load(tmp_path)
    assert not rec.damage.damaged
    assert [(r.message, r.kind, r.start_ns, r.end_ns) for r in rec.events] == [
        ("v1", "push-pop", 1000, 1200),
        ("v1", "mark", 1100, 1100),
    ]


def test_unknown_version_is_refused(tmp_path):
    w = SegmentWriter(pid=5, version=3)
    w.thread(5).push(1000).pop(1200)
    w.write(tmp_path)
    rec = load(tmp_path)
    assert rec.damage.damaged_segments == 1 and rec.events == []


def _clock_segment() -> SegmentWriter:
    """Two threads' chunks of compact events, each chunk's clock started by a full event."""
    w = SegmentWriter(pid=9, chunk_size=4096)
    a, b = w.thread(9), w.thread(10)
    a.string(1, "a").push(10**12, 1).compact(K_MARK, 7, msg=1).compact(K_PUSH, 3, msg=1)
    a.compact(K_POP, TWO_32 - 1).compact(K_POP, 5)
    b.string(2, "b").mark(2 * 10**12, 2).compact(K_MARK, 100, msg=2)
    return w


def test_synthetic_compact_events_are_dated_by_the_chunks_clock(tmp_path):
    w = _clock_segment()
    w.write(tmp_path)
    rec = load(tmp_path)
    assert not rec.damage.damaged, rec.damage
    t0 = 10**12
    assert sorted((r.message, r.kind, r.start_ns, r.end_ns) for r in rec.events) == [
        ("a", "mark", t0 + 7, t0 + 7),
        ("a", "push-pop", t0, t0 + 10 + TWO_32 - 1 + 5),
        ("a", "push-pop", t0 + 10, t0 + 10 + TWO_32 - 1),
        ("b", "mark", 2 * t0, 2 * t0),
        ("b", "mark", 2 * t0 + 100, 2 * t0 + 100),
    ]
    scan = scan_segment((tmp_path / w.filename()).read_bytes())
    assert not scan.damaged and len(scan.events) == 7


def test_compact_event_with_no_clock_is_lost_and_damage(tmp_path):
    """A compact event first in its chunk has no time to count from (no writer writes one):
    it is lost, counted as damage; the chunk's other events and the other chunks are read."""
    w = SegmentWriter(pid=9, chunk_size=4096)
    a = w.thread(9)
    a.string(1, "a").compact(K_MARK, 5, msg=1).mark(3000, 1).compact(K_MARK, 5, msg=1)
    w.thread(10).string(2, "b").mark(4000, 2)
    w.write(tmp_path)
    rec = load(tmp_path)
    assert [(r.message, r.start_ns) for r in rec.marks] == [("a", 3000), ("a", 3005), ("b", 4000)]
    assert rec.damage.damaged_chunks == 1 and rec.damage.lost_events_min == 1, rec.damage
    scan = scan_segment((tmp_path / w.filename()).read_bytes())
    assert scan.damaged and len(scan.events) == 3


def test_damage_resumes_at_a_full_event(tmp_path):
    """After damage inside a chunk the reader resumes at the next record in full form: the
    compact events between have lost the time they count from."""
    w = SegmentWriter(pid=9, chunk_size=4096)
    a = w.thread(9)
    a.string(1, "a").mark(1000, 1).compact(K_MARK, 1, msg=1).compact(K_MARK, 1, msg=1)
    a.compact(K_MARK, 1, msg=1).mark(2000, 1).compact(K_MARK, 1, msg=1)
    data = bytearray(bytes(w))
    # The first compact mark becomes a word of garbage (no record kind 0x7F).
    off = 4096 + 64 + 24 + 16  # after the chunk header, the string definition and the full mark
    assert data[off] == K_MARK + 8
    data[off] = 0x7F
    (tmp_path / w.filename()).write_bytes(data)
    rec = load(tmp_path)
    assert [r.start_ns for r in rec.marks] == [1000, 2000, 2001]
    assert rec.damage.damaged_chunks == 1 and rec.damage.lost_events_min >= 1, rec.damage
    scan = scan_segment(bytes(data))
    assert scan.damaged and [e.ts for e in scan.events] == [1000, 2000, 2001]


@pytest.mark.parametrize("field", ["domain", "msg", "delta"])
def test_synthetic_writer_refuses_fields_out_of_range(field):
    from nvtx_plugins_tf.recorder.recording._synth import compact_event

    kw = {"domain": 64} if field == "domain" else {"msg": 2**18} if field == "msg" else {}
    with pytest.raises(ValueError):
        compact_event(K_MARK, TWO_32 if field == "delta" else 1, **kw)
