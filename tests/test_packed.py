"""Packed segments (issue 25 goal 4): `record` packs a closed recording to under 8 bytes an
event; every reader reads it as the raw one; damage in a packed file costs the chunks it
hit and is reported; a pack cut short or a segment still written never loses an event."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import _child_env

from nvtx_plugins_tf import cli
from nvtx_plugins_tf.recorder import load
from nvtx_plugins_tf.recorder.merge import merge
from nvtx_plugins_tf.recorder.recording.packed import (
    MAGIC,
    pack_recording,
    pack_segment,
    raw_size,
    unpack_segment,
    unpacked,
)
from nvtx_plugins_tf.recorder.recording.reader import RecordingReader, segment_files

EVENTS = 100_000  # ranges of each loop
LOOPS = {
    "pushpop": "for i in range(N):\n    nvtx.push_range('step'); nvtx.pop_range()\n",
    "startend": "for i in range(N):\n    nvtx.end_range(nvtx.start_range('step'))\n",
}


def nvtx_tf(*args, timeout=300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "nvtx_plugins_tf", *map(str, args)],
        env=_child_env(), capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip


def _record(tmp_path: Path, kind: str, *extra) -> Path:
    script = tmp_path / f"{kind}.py"
    script.write_text(f"import nvtx\nN = {EVENTS}\n" + LOOPS[kind])
    proc = nvtx_tf("record", "-o", tmp_path / kind, *extra, "--", sys.executable, script)
    assert proc.returncode == 0, proc.stderr
    return tmp_path / f"{kind}.nvtxrec"


def _rows(recording) -> np.ndarray:
    with RecordingReader(recording) as reader:
        rows = np.concatenate(list(reader.batches()))
        assert not reader.damage().damaged, reader.damage().describe()
    return np.sort(rows, order=["start_ns", "end_ns"])


def _unpacked_copy(recording: Path, to: Path) -> Path:
    to.mkdir()
    for seg in recording.iterdir():
        if seg.name.endswith(".nvtxsegz"):
            (to / seg.name).write_bytes(seg.read_bytes())
            unpack_segment(to / seg.name)
    return to


@pytest.mark.parametrize("kind", sorted(LOOPS))
def test_record_packs_under_8_bytes_an_event_and_reads_the_same(tmp_path, kind):
    rec = _record(tmp_path, kind)
    files = sorted(p.name for p in rec.iterdir() if not p.name.startswith("."))
    assert files and all(f.endswith(".nvtxsegz") for f in files), files
    on_disk = sum(p.stat().st_size for p in rec.glob("*.nvtxsegz"))
    assert on_disk / (2 * EVENTS) <= 8, f"{on_disk / (2 * EVENTS):.2f} B/event"
    raw = _unpacked_copy(rec, tmp_path / "raw.nvtxrec")
    assert [p.suffix for p in raw.iterdir()] == [".nvtxseg"]
    assert sum(raw_size(p) for p in rec.glob("*.nvtxsegz")) == sum(p.stat().st_size for p in raw.iterdir())
    packed_rows, raw_rows = _rows(rec), _rows(raw)
    assert len(packed_rows) == EVENTS and np.array_equal(packed_rows, raw_rows)
    # and the exports of either are the same
    for source, prefix in ((rec, tmp_path / "a"), (raw, tmp_path / "b")):
        proc = nvtx_tf("export", "-t", "json", "-o", prefix, source)
        assert proc.returncode == 0, proc.stderr
    a, b = ((tmp_path / f"{x}.json").read_text() for x in "ab")
    assert a.replace(str(rec), str(raw)) == b  # (each names its source)


def test_pack_and_unpack_give_back_every_byte(tmp_path):
    rec = _record(tmp_path, "startend")
    (packed,) = rec.glob("*.nvtxsegz")
    with unpacked(packed) as raw:
        before = Path(raw.path).read_bytes()
        assert raw.errors == [] and not raw.unreadable
    seg = unpack_segment(packed)
    assert not packed.exists() and seg.read_bytes() == before
    assert pack_segment(seg) == packed and not seg.exists()
    with unpacked(packed) as raw:
        assert Path(raw.path).read_bytes() == before
    assert sorted(p.name for p in rec.iterdir() if p.name != ".lock") == [packed.name]  # nothing left behind


def _frames(packed: Path) -> list[tuple[int, int]]:
    """(offset, packed length) of each frame of a packed segment."""
    data = packed.read_bytes()
    assert data[:8] == MAGIC
    frames = int.from_bytes(data[32:40], "little")
    out, pos = [], 64
    for _ in range(frames):
        length = int.from_bytes(data[pos : pos + 4], "little")
        out.append((pos, length))
        pos += 16 + length
    assert pos == len(data)
    return out


def test_a_damaged_frame_costs_its_chunk_and_is_reported(tmp_path):
    rec = _record(tmp_path, "pushpop")
    (packed,) = rec.glob("*.nvtxsegz")
    frames = _frames(packed)
    assert len(frames) >= 3, "the loop fills more than one chunk"
    whole = len(_rows(rec))
    data = bytearray(packed.read_bytes())
    offset, length = frames[1]  # chunk 0's frame: a byte of its packed data changed
    data[offset + 16 + length // 2] ^= 0x40
    packed.write_bytes(bytes(data))
    with RecordingReader(rec) as reader:
        rows = np.concatenate(list(reader.batches()))
        damage = reader.damage()
    assert damage.damaged and damage.damaged_chunks >= 1
    assert any(str(packed) in e and "chunk 0" in e for e in damage.errors), damage.errors
    assert 0 < len(rows) < whole  # the other chunks' events are read
    proc = nvtx_tf("export", "-t", "json", "-o", tmp_path / "d", rec)
    assert proc.returncode == cli.EXIT_DAMAGED, proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("cut", ["truncated", "header", "empty"])
def test_a_cut_or_garbled_packed_file_never_crashes_the_reader(tmp_path, cut):
    rec = _record(tmp_path, "pushpop")
    (packed,) = rec.glob("*.nvtxsegz")
    data = packed.read_bytes()
    if cut == "truncated":
        packed.write_bytes(data[: len(data) // 2])
    elif cut == "header":
        packed.write_bytes(b"\0" * 64 + data[64:])
    else:
        packed.write_bytes(b"")
    with RecordingReader(rec) as reader:
        rows = list(reader.batches())
        damage = reader.damage()
    assert damage.damaged and damage.errors and str(packed) in damage.errors[0], damage.errors
    if cut == "truncated":
        assert rows and damage.damaged_chunks >= 1
    else:
        assert damage.damaged_segments == 1


def test_a_pack_cut_short_leaves_the_raw_segment_which_is_read(tmp_path):
    """Killed between linking the packed file and removing the raw one: both forms are
    there; the reader reads the raw one (once), and the next pack replaces the packed one."""
    rec = _record(tmp_path, "pushpop")
    raw = _unpacked_copy(rec, tmp_path / "raw.nvtxrec")
    (seg,) = raw.glob("*.nvtxseg")
    (packed,) = rec.glob("*.nvtxsegz")
    (raw / packed.name).write_bytes(b"partly written")  # (could not happen: the name is given to a whole file)
    assert segment_files(raw) == [seg]
    assert len(_rows(raw)) == EVENTS
    result = pack_recording(raw)
    assert result.packed == 1 and result.left == []
    assert [p.name for p in raw.iterdir()] == [packed.name] and len(_rows(raw)) == EVENTS


def test_a_segment_still_written_is_not_packed(tmp_path, recorder_env):
    """A process that outlives the command (a daemon) still writes its segment: left raw."""
    rec = tmp_path / "live.nvtxrec"
    code = (
        "import nvtx, sys, time\nnvtx.mark('alive')\nprint('ready', flush=True)\nsys.stdin.read()\nnvtx.mark('late')\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code], env=recorder_env(rec), stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout.readline().strip() == "ready"
        result = pack_recording(rec)
        assert result.packed == 0 and len(result.left) == 1 and "still runs" in result.left[0]
        proc.stdin.close()
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
    assert {r.message for r in load(rec).events} == {"alive", "late"}
    assert pack_recording(rec).packed == 1
    assert {r.message for r in load(rec).events} == {"alive", "late"}


def test_merge_reads_packed_recordings(tmp_path):
    a = _record(tmp_path, "pushpop")
    raw = _unpacked_copy(a, tmp_path / "raw.nvtxrec")
    merge([a], tmp_path / "m1.nvtxrec", labels=["x"])
    merge([raw], tmp_path / "m2.nvtxrec", labels=["x"])
    assert np.array_equal(_rows(tmp_path / "m1.nvtxrec"), _rows(tmp_path / "m2.nvtxrec"))


def test_record_packs_after_a_failing_command(tmp_path):
    """`record` still exits with the command's code, and packs the recording all the same."""
    script = tmp_path / "fails.py"
    script.write_text("import nvtx\nnvtx.mark('x')\nraise SystemExit(3)\n")
    proc = nvtx_tf("record", "-o", tmp_path / "f", "--", sys.executable, script)
    assert proc.returncode == 3, proc.stderr
    assert [p.suffix for p in (tmp_path / "f.nvtxrec").glob("*.nvtxseg*")] == [".nvtxsegz"]
    assert [r.message for r in load(tmp_path / "f.nvtxrec").events] == ["x"]


def test_pack_command_packs_a_recording_made_without_record(tmp_path, recorder_env):
    rec = tmp_path / "env.nvtxrec"
    code = "import nvtx\nfor i in range(20000):\n    nvtx.push_range('r'); nvtx.pop_range()\n"
    subprocess.run([sys.executable, "-c", code], env=recorder_env(rec), check=True, timeout=120)
    assert [p.suffix for p in rec.iterdir()] == [".nvtxseg"]
    before = _rows(rec)
    proc = nvtx_tf("pack", tmp_path / "env")  # (PREFIX stands for PREFIX.nvtxrec)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    assert proc.stdout.startswith(f"{rec}: 1 segment(s) packed, ") and " MiB -> " in proc.stdout, proc.stdout
    assert [p.suffix for p in rec.iterdir()] == [".nvtxsegz"]
    assert np.array_equal(_rows(rec), before)
    again = nvtx_tf("pack", rec)  # nothing left to pack
    assert again.returncode == 0 and again.stdout.startswith(f"{rec}: 0 segment(s) packed"), again.stdout


def test_a_large_segment_is_unpacked_into_a_file_not_memory(tmp_path, monkeypatch):
    """Past MEMORY_LIMIT the raw bytes go to an unnamed file of the temporary folder (pages
    the kernel can drop), and read the same; nothing is left there afterwards."""
    from nvtx_plugins_tf.recorder.recording import packed

    rec = _record(tmp_path, "pushpop")
    before = _rows(rec)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setenv("TMPDIR", str(scratch))
    monkeypatch.setattr("tempfile.tempdir", None)  # (TMPDIR read again)
    monkeypatch.setattr(packed, "MEMORY_LIMIT", 1 << 20)
    (seg,) = rec.glob("*.nvtxsegz")
    with unpacked(seg) as raw:
        target = os.readlink(raw.path)
        assert target.startswith(str(scratch)) and "(deleted)" in target, target
    assert np.array_equal(_rows(rec), before)
    assert list(scratch.iterdir()) == []


def test_exports_stay_newer_than_the_packed_recording(tmp_path):
    """Packing after the exports must not make them look stale: nsys's recipes take an export
    as current while its ctime is past its recording's (`getctime(report) < getctime(export)`),
    `nvtx-tf view` while the JSON's mtime is past every segment file's."""
    rec = _record(tmp_path, "startend", "--export", "json,parquetdir")
    folder_ctime = rec.stat().st_ctime_ns
    exports = [tmp_path / "startend.json", *(tmp_path / "startend_pqtdir").iterdir()]
    assert all(p.stat().st_ctime_ns > folder_ctime for p in exports)
    newest_segment = max(p.stat().st_mtime_ns for p in rec.iterdir() if p.is_file())
    assert (tmp_path / "startend.json").stat().st_mtime_ns >= newest_segment
