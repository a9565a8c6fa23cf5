"""Damage inside a chunk is detected and counted (issue 21.4: a recording with 64 KiB zeroed
inside one chunk was read silently, `report` exit 0 with 196,672 of 200,000 ranges).

A chunk's records end at its first zero word only when zeros alone follow it; anything else
after it (or a record that cannot be one) is damage: the chunk is counted as damaged, the
bytes skipped as lost events (a lower bound), and the reader resumes at the next record, so
that what follows the damage is still read. A recording cut by SIGKILL (zeros after the last
record) is not damage.
"""

from __future__ import annotations

import shutil
import signal
import struct
import subprocess
import sys

import pytest

from nvtx_plugins_tf.recorder import load

RANGES = 200_000
HEADER = 4096  # kSegmentHeaderSize
CLOCK_SYNC_BYTES = 4096  # kClockSyncBytes (record_format.h)


@pytest.fixture(scope="module")
def recording(tmp_path_factory, c_sample, recorder_env):
    folder = tmp_path_factory.mktemp("chunks") / "rec"
    env = recorder_env(folder)
    subprocess.run([str(c_sample("nvtx_sample")), "stress", "1", str(RANGES)], env=env, check=True, timeout=120)
    return folder


def _copy(recording, tmp_path):
    copy = tmp_path / "rec.nvtxrec"
    shutil.copytree(recording, copy)
    (segment,) = [p for p in copy.glob("*.nvtxseg") if p.stat().st_size > 1 << 20]
    chunk_size = struct.unpack_from("<I", segment.read_bytes(), 16)[0]  # SegmentHeader.chunk_size
    return copy, segment, chunk_size


def _report(path, child_env):
    proc = subprocess.run(
        [sys.executable, "-m", "nvtx_plugins_tf", "report", str(path)],
        env=child_env(), capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    return proc


def _overwrite(segment, offset, data: bytes):
    with open(segment, "r+b") as f:
        f.seek(offset)
        f.write(data)


def test_intact_recording_is_not_damaged(recording, child_env):
    rec = load(recording)
    assert rec.count(message="stress-0") == RANGES and not rec.damage.damaged
    assert _report(recording, child_env).returncode == 0


@pytest.mark.parametrize(
    "where, data",
    [
        ("64 KiB zeroed inside chunk 2", bytes(64 * 1024)),
        ("64 KiB zeroed inside the last full chunk", bytes(64 * 1024)),
        ("a word of garbage inside chunk 3", b"\xff" * 8),
        ("a record's first word zeroed inside chunk 1", bytes(8)),
    ],
)
def test_damage_inside_a_chunk_is_reported(recording, tmp_path, child_env, where, data):
    copy, segment, chunk_size = _copy(recording, tmp_path)
    chunks = (segment.stat().st_size - HEADER) // chunk_size
    index = {"2": 2, "3": 3, "1": 1}.get(where.split("chunk ")[-1], chunks - 2)
    # a record boundary well inside the chunk (this run's chunks hold push/pop records only:
    # 8-byte compact ones, and a 16-byte full one first in each 4 KiB block)
    _overwrite(segment, HEADER + index * chunk_size + 64 * 1024 + 64, data)  # a record's first word
    rec = load(copy)
    damage = rec.damage
    assert damage.damaged and damage.damaged_chunks == 1, damage
    assert damage.lost_events_min >= max(1, len(data) // 40), damage
    # the records after the damage are still read: at most the events that were overwritten
    # are lost, and the compact ones after them up to the next full event (whose time they
    # count from: one in each kClockSyncBytes of the chunk)
    assert rec.count(message="stress-0") >= RANGES - len(data) // 8 - CLOCK_SYNC_BYTES // 8 - 2
    assert f"at least {damage.lost_events_min} event(s) lost" in damage.describe()
    proc = _report(copy, child_env)
    assert proc.returncode == 6, proc.stderr
    (line,) = [x for x in proc.stderr.splitlines() if x.startswith("nvtx-tf: error: ")]
    assert "damaged chunk" in line and "event(s) lost" in line and str(segment.parent) in line, line


def test_recording_cut_by_sigkill_is_not_damage(tmp_path, c_sample, recorder_env):
    env = recorder_env(tmp_path / "rec")
    proc = subprocess.Popen([str(c_sample("nvtx_sample")), "stress", "1", "50000000"], env=env)
    try:
        for _ in range(3000):
            segs = list((tmp_path / "rec").glob("*.nvtxseg"))
            if segs and segs[0].stat().st_size > 4 << 20:
                break
            subprocess.run(["sleep", "0.01"])
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
    rec = load(tmp_path / "rec")
    assert rec.count(message="stress-0") > 0
    assert rec.damage.damaged_chunks == 0 and rec.damage.lost_events_min == 0, rec.damage


# ---- the seal (issue 21.4): a chunk's sums, written when its thread leaves it --------------
# Damage that leaves every record well-formed (a flipped bit in a timestamp, a message id, a
# payload) cannot be seen by walking the records; the seal's sums see it.

SEAL = 32  # offsetof(ChunkHeader, sealed_end); sum1, sum2 follow


def _seals(segment, chunk_size):
    data = segment.read_bytes()
    count = (len(data) - HEADER) // chunk_size
    return [struct.unpack_from("<QQQ", data, HEADER + k * chunk_size + SEAL) for k in range(count)]


def test_the_writer_seals_every_chunk_it_leaves(recording, tmp_path):
    _, segment, chunk_size = _copy(recording, tmp_path)
    seals = _seals(segment, chunk_size)
    # (the stress thread leaves each full chunk for a new one, and its last one at its exit)
    assert len(seals) > 4 and all(64 <= end <= chunk_size and end % 8 == 0 for end, _, _ in seals), seals[:3]
    from native.segment_oracle import chunk_sums, decode_segment

    data = segment.read_bytes()
    for k, (end, sum1, sum2) in enumerate(seals):
        assert chunk_sums(data, HEADER + k * chunk_size, end) == (sum1, sum2), k
    decode_segment(segment)  # the oracle's strict walk: records end exactly at each seal


@pytest.mark.parametrize(
    "what, offset, flip",
    [
        ("one bit of a timestamp", 64 * 1024 + 64 + 8, 0x01),  # a push's ts: a valid record still
        ("the top bit of a timestamp", 64 * 1024 + 64 + 8 + 7, 0x80),
        ("one bit of a message id", 64 * 1024 + 64 + 4, 0x02),
        ("one bit of the seal's first sum", SEAL + 8, 0x10),
        ("the seal's end, still a valid end", SEAL, 0x08),
        ("the seal's end, not a multiple of 8", SEAL, 0x01),
    ],
)
def test_a_changed_bit_in_a_sealed_chunk_is_damage(recording, tmp_path, child_env, what, offset, flip):
    copy, segment, chunk_size = _copy(recording, tmp_path)
    at = HEADER + 2 * chunk_size + offset
    with open(segment, "r+b") as f:
        f.seek(at)
        byte = f.read(1)[0]
        f.seek(at)
        f.write(bytes([byte ^ flip]))
    rec = load(copy)
    damage = rec.damage
    assert damage.damaged_chunks == 1 and damage.checksum_mismatches == 1, (what, damage)
    assert "changed after they were written" in damage.describe()
    # nothing is lost: the records are read (one of them is wrong)
    assert rec.count() >= RANGES - 2
    proc = _report(copy, child_env)
    assert proc.returncode == 6, proc.stderr
    assert "bytes changed" in proc.stderr or "changed after" in proc.stderr, proc.stderr


def test_merge_keeps_seals_and_never_launders_damage(recording, tmp_path, child_env):
    """merge rebases timestamps, which changes the words: it seals intact chunks anew, and
    leaves a chunk whose seal did not hold damaged."""
    copy, segment, chunk_size = _copy(recording, tmp_path)
    at = HEADER + 3 * chunk_size + 64 * 1024 + 64 + 8
    with open(segment, "r+b") as f:
        f.seek(at)
        byte = f.read(1)[0]
        f.seek(at)
        f.write(bytes([byte ^ 0x04]))
    out = tmp_path / "merged"
    proc = subprocess.run(
        [sys.executable, "-m", "nvtx_plugins_tf", "merge", "-o", str(out), str(recording), str(copy)],
        env=child_env(), capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 6 and "changed after" in proc.stderr, proc.stderr
    merged = load(tmp_path / "merged.nvtxrec")
    assert merged.damage.checksum_mismatches == 1 and merged.damage.damaged_chunks == 1, merged.damage
    assert merged.count(message="stress-0") >= 2 * RANGES - 2


@pytest.mark.parametrize("damaged", [False, True])
def test_rewriting_a_chunk_seals_it_anew_only_if_its_seal_held(recording, tmp_path, damaged):
    from native.segment_oracle import chunk_seal, chunk_sums

    from nvtx_plugins_tf.recorder.recording import _decoder

    _, segment, chunk_size = _copy(recording, tmp_path)
    data = segment.read_bytes()
    chunk = bytearray(data[HEADER + 2 * chunk_size : HEADER + 3 * chunk_size])
    if damaged:
        chunk[64 * 1024 + 64 + 8] ^= 0x01
    pid = struct.unpack_from("<q", data, 24)[0]
    _decoder.rewrite_chunk(chunk, 10**9, pid, pid + 1)  # timestamps shifted by 1 s: every word changes
    end, sum1, sum2 = chunk_seal(bytes(chunk), 0)
    assert struct.unpack_from("<q", chunk, 64 + 8)[0] > 10**9  # rewritten
    assert (chunk_sums(bytes(chunk), 0, end) == (sum1, sum2)) is not damaged
