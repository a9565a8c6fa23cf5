"""The recorder defects of the third review (issue 32), each shown by the small program that
found it (tests/native/, copies of ../shared/repros/ made -Wall clean), run under the recorder
the package attaches and read back by the project's reader.

* kill_writer: a healthy writer killed by SIGKILL at random moments, in full-form and in
  compact records, is never reported damaged (a record whose body was stored and its first
  word not yet is the end of the chunk's data, not damage); nor is a recording read while
  it is written. The end-of-data rule itself on hand-made segments: what it accepts, and
  that anything more is still damage.
* zombie_main: a process whose main thread called pthread_exit (state Z, its other threads
  recording) is not packed: its segment stays raw and loses nothing.
* full_disk_new_segment: when a new segment cannot be opened (full disk), the events dropped
  after are counted in the last segment's header and reported; no half-made segment file.
* window_stale_opener: a capture window whose opening thread exited with its range open is
  not closed by another thread's pop at the same depth.
* full_disk_map_leak: a chunk whose tail could not be backed (full disk) is unmapped whole.
* testing.capture() with NVTX_INJECTION64_PATH naming another copy of the recorder says
  which copy is named, which one the package attaches, and how to get it.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest
from native.segment_oracle import chunk_sums, scan_segment

from nvtx_plugins_tf.recorder import load
from nvtx_plugins_tf.recorder.recording._synth import (
    SEGMENT_HEADER_SIZE,
    SegmentWriter,
    compact_event,
    event,
    string_def,
    word0,
)
from nvtx_plugins_tf.recorder.recording.packed import pack_recording
from nvtx_plugins_tf.recorder.recording.reader import RecordingReader

K_START, K_MARK = 3, 5
T = 10**12  # a timestamp as the writer's clock gives them (ns since boot)


def _damage(recording):
    with RecordingReader(recording) as reader:
        events = sum(len(b) for b in reader.batches())
        return events, reader.damage()


# ---- 1: the end of data in an unsealed chunk -------------------------------------------------


def _torn(record: bytes) -> bytes:
    """``record`` as a killed writer leaves it: its body stored, its first word not yet."""
    return bytes(8) + record[8:]


EXT_BLOCK = struct.pack("<QQIHH", 77, 8, 8, 1, 0) + struct.pack("<q", -1)  # one data entry, 8 bytes
TORN = {
    "full start with a payload": event(K_START, T + 100, msg=1, range_id=7, payload=("u64", 5)),
    "full start with color and payload": event(K_START, T + 100, msg=1, range_id=7, color=1, payload=("u64", 5)),
    "compact start": compact_event(K_START, 10, msg=1, range_id=7),
    "string definition": string_def(2, "a message much longer than one event record " * 3),
    "extended payload": word0(K_MARK, 7 << 4, 0, 1) + struct.pack("<QQ", T + 100, len(EXT_BLOCK)) + EXT_BLOCK,
}


def _segment(tail: bytes, seal: bool = False) -> bytes:
    w = SegmentWriter(pid=5, chunk_size=4096)
    t = w.thread(5)
    t.string(1, "r")
    for i in range(20):
        t.mark(T + i, 1)
    t.record(tail)
    data = bytearray(bytes(w))
    if seal:  # as the writer seals a chunk it leaves: sums, then sealed_end
        base = SEGMENT_HEADER_SIZE
        end = len(w.chunks[0])
        struct.pack_into("<QQQ", data, base + 32, end, *chunk_sums(bytes(data), base, end))
    return bytes(data)


@pytest.mark.parametrize("what", list(TORN))
def test_a_record_without_its_first_word_ends_an_unsealed_chunk(tmp_path, what):
    """Before: damage ('at least 1 event lost') for every one of them."""
    data = _segment(_torn(TORN[what]))
    assert not scan_segment(data).damaged  # the format's rule, as the oracle reads it
    (tmp_path / "5-1000.nvtxseg").write_bytes(data)
    events, damage = _damage(tmp_path)
    assert events == 20 and not damage.damaged, damage.describe()


@pytest.mark.parametrize(
    "what, tail",
    [
        ("a torn record, then a record", _torn(TORN["full start with a payload"]) + event(K_MARK, T + 200, msg=1)),
        (
            "a record's first word zeroed, then compact starts",
            bytes(8) + b"".join(compact_event(K_START, 5, msg=1, range_id=7 + i) for i in range(4)),
        ),
        ("a torn definition, then bytes past its length", _torn(string_def(2, "abc")) + b"\x01" * 24),
    ],
)
def test_more_than_one_record_after_a_zero_word_is_damage(tmp_path, what, tail):
    data = _segment(tail)
    assert scan_segment(data).damaged
    (tmp_path / "5-1000.nvtxseg").write_bytes(data)
    _, damage = _damage(tmp_path)
    assert damage.damaged and damage.damaged_chunks == 1, (what, damage.describe())


def test_a_torn_record_in_a_sealed_chunk_is_damage(tmp_path):
    """A writer seals a chunk at the end of its published records: a zero word before the seal
    is damage, whatever follows it."""
    data = _segment(_torn(TORN["full start with a payload"]), seal=True)
    assert scan_segment(data).damaged
    (tmp_path / "5-1000.nvtxseg").write_bytes(data)
    _, damage = _damage(tmp_path)
    assert damage.damaged and damage.damaged_chunks == 1, damage.describe()


@pytest.mark.parametrize("mode", ["full", "compact"])
def test_sigkill_at_random_moments_is_never_damage(c_sample, recorder_env, tmp_path, mode):
    """100 kills each in full-form and in compact records (before: 1-5 % of the kills were
    reported damaged, exit 6 from `report`)."""
    program = c_sample("kill_writer")
    rng = random.Random(32)
    reported, events = [], 0
    for k in range(100):
        rec = tmp_path / f"k{k}"
        proc = subprocess.Popen([str(program), "5", mode, "0"], env=recorder_env(rec))
        time.sleep(rng.uniform(0.03, 0.15))
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
        if not rec.exists():
            continue
        n, damage = _damage(rec)
        events += n
        if damage.damaged:
            reported.append((k, damage.describe()))
        shutil.rmtree(rec)
    assert events > 0
    assert reported == [], f"{len(reported)} of 100 kills reported damage: {reported[:3]}"


def test_reads_of_a_recording_being_written_are_not_damage(c_sample, recorder_env, tmp_path):
    """view, export and testing.capture() read recordings whose writers still write."""
    rec = tmp_path / "live"
    proc = subprocess.Popen([str(c_sample("kill_writer")), "4", "mixed", "1"], env=recorder_env(rec))
    reads, reported = 0, []
    try:
        while proc.poll() is None:
            if not any(rec.glob("*.nvtxseg")):
                continue
            _, damage = _damage(rec)
            reads += 1
            if damage.damaged:
                reported.append(damage.describe())
    finally:
        proc.kill()
        proc.wait(timeout=60)
    assert reads > 0
    assert reported == [], f"{len(reported)} of {reads} live reads reported damage: {reported[:3]}"


# ---- 2: a process whose main thread exited still runs --------------------------------------


def test_a_process_whose_main_thread_exited_is_not_packed(c_sample, recorder_env, tmp_path):
    """Before: packed meanwhile, its raw segment removed: 'recorded marks=157' of 1001."""
    rec = tmp_path / "z"
    proc = subprocess.Popen([str(c_sample("zombie_main"))], env=recorder_env(rec), stdout=subprocess.PIPE, text=True)
    try:
        for _ in range(500):  # the main thread gone, the worker recording
            if any(rec.glob("*.nvtxseg")) and open(f"/proc/{proc.pid}/stat").read().rsplit(")", 1)[1].split()[0] == "Z":
                break
            time.sleep(0.02)
        result = pack_recording(rec)
        assert proc.poll() is None, "the program ended before the pack: nothing shown"
        assert result.packed == 0 and any("still runs" in why for why in result.left), result
        out, _ = proc.communicate(timeout=60)
    finally:
        proc.kill()
    emitted = int(out.split("=")[1])
    recording = load(rec)
    assert len(recording.marks) == emitted == 1001 and not recording.damage.damaged


# ---- 3 and 5: a full disk ------------------------------------------------------------------


@pytest.fixture
def tiny_tmpfs():
    """A 400 KiB file system (root only): a segment header and one chunk's first pages fit."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mnt = tempfile.mkdtemp(prefix="nvtx_tf_tiny_")
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=400k", "tmpfs", mnt], capture_output=True, text=True)
    if proc.returncode != 0:
        os.rmdir(mnt)
        pytest.skip(f"cannot mount a tmpfs: {proc.stderr.strip()}")
    try:
        yield Path(mnt)
    finally:
        subprocess.run(["umount", mnt], check=False)
        os.rmdir(mnt)


def test_drops_after_a_new_segment_failed_are_counted(c_sample, recorder_env, tiny_tmpfs, child_env):
    """Before: 1000 dropped, 0 counted in any header, and a 0-byte segment file left."""
    rec = tiny_tmpfs / "rec"
    proc = subprocess.run(
        [str(c_sample("full_disk_new_segment"))], env=recorder_env(rec), capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0 and "dropped=1000" in proc.stdout, (proc.stdout, proc.stderr)
    segments = list(rec.glob("*.nvtxseg"))
    assert segments and all(p.stat().st_size >= SEGMENT_HEADER_SIZE for p in segments), [
        (p.name, p.stat().st_size) for p in segments
    ]
    recording = load(rec)
    assert recording.damage.dropped_events == 1000 and recording.damage.unreadable_segments == 0, recording.damage
    assert recording.count(message="before") == 1
    report = subprocess.run(
        [sys.executable, "-m", "nvtx_plugins_tf", "report", str(rec)],
        env=child_env(), capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert report.returncode == 6 and "1000 event(s) dropped" in report.stderr, report.stderr


def test_a_chunk_cut_short_by_a_full_disk_is_unmapped_whole(c_sample, recorder_env, tiny_tmpfs):
    """Before: 380 KiB of segment files mapped after every recording thread exited (the tails
    of their chunks past what could be backed)."""
    rec = tiny_tmpfs / "rec"
    proc = subprocess.run(
        [str(c_sample("full_disk_map_leak"))], env=recorder_env(rec), capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    (segment,) = rec.glob("*.nvtxseg")
    chunk_kib = struct.unpack_from("<I", segment.read_bytes(), 16)[0] >> 10
    # the segment header page, and the main thread's chunk (it still records)
    assert f"2 mappings of segment files, {4 + chunk_kib} KiB" in proc.stdout, proc.stdout


# ---- 4: the capture window's opener ----------------------------------------------------------


def test_a_window_whose_opener_exited_stays_open(c_sample, recorder_env, tmp_path):
    """Before: 'other thread popped 'unrelated': window open = 0' (the new thread's state had
    the exited opener's address)."""
    proc = subprocess.run(
        [str(c_sample("window_stale_opener"))],
        env=recorder_env(tmp_path / "rec"), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == 4 and all(line.endswith("window open = 1") for line in lines), proc.stdout
    recording = load(tmp_path / "rec")
    assert recording.count(message="after") == 1  # inside the window: written


# ---- 7: another copy of the recorder named --------------------------------------------------


def test_capture_names_the_copy_of_the_recorder_in_use(tmp_path, child_env):
    """Before: 'NVTX_INJECTION64_PATH must name libnvtx_recorder.so' although it did."""
    from nvtx_plugins_tf._native_libs import native_library

    ours = Path(native_library("recorder"))
    other = tmp_path / "elsewhere" / "libnvtx_recorder.so"
    other.parent.mkdir()
    shutil.copy(ours, other)
    code = textwrap.dedent(
        """
        from nvtx_plugins_tf import testing
        try:
            with testing.capture():
                pass
        except testing.RecorderNotAttached as exc:
            print(exc)
        """
    )
    env = child_env(tmp_path / "rec", NVTX_INJECTION64_PATH=other)
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    message = proc.stdout.strip()
    assert str(other) in message and str(ours) in message, message
    assert "another copy" in message and "recorder.environment(" in message, message
    assert "must name libnvtx_recorder.so" not in message, message


# ---- drops while a new epoch has no segment yet ------------------------------------------------
def test_drops_after_a_new_segment_with_nothing_written_after_are_counted(c_sample, recorder_env, tmp_path):
    """Events dropped after ``nvtx_recorder_new_segment()`` and before any thread writes again
    (no segment of the new epoch is open) are counted in the last segment's header: they were
    kept pending for a segment never opened, and lost (the stress test under ASan: 4 of 2710
    signal-handler events neither recorded nor counted)."""
    rec = tmp_path / "rec"
    proc = subprocess.run(
        [str(c_sample("drop_after_new_segment")), "4"],
        env=recorder_env(rec),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["dropped=4"], proc.stdout + proc.stderr
    recording = load(rec)
    assert recording.damage.dropped_events == 4, recording.damage
    assert sum(m.message == "early" for m in recording.marks) == 4
