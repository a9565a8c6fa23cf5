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
    # a record boundary well inside the chunk (this run's chunks hold 16-byte push/pop records only)
    _overwrite(segment, HEADER + index * chunk_size + 64 * 1024 + 64, data)  # a record's first word
    rec = load(copy)
    damage = rec.damage
    assert damage.damaged and damage.damaged_chunks == 1, damage
    assert damage.lost_events_min >= max(1, len(data) // 40), damage
    # the records after the damage are still read: at most what was overwritten is lost
    assert rec.count(message="stress-0") >= RANGES - len(data) // 16 - 2
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
