"""Packed segments read frame by frame by the decoder (cc_ops/reader/packed_segment.h,
``reader.UNPACK_IN_PLACE``) against the copy they were read through before
(recording/packed.py's ``unpacked``, the reference): the same rows and the same damage
report, value for value, on intact packs and on every kind of damage the copy words (a
hostile table), with the frames cached and without; and analyze's native mapper reading in
place against the numpy mapper reading the copy."""

from __future__ import annotations

import struct
import subprocess
import sys
import zlib

import numpy as np
import pyarrow.parquet as pq
import pytest
from conftest import _child_env
from test_analyze_native import _assert_same, _write_process
from test_packed import nvtx_tf

from nvtx_plugins_tf import cli
from nvtx_plugins_tf.recorder.analysis import mapper
from nvtx_plugins_tf.recorder.recording import _decoder, packed, reader
from nvtx_plugins_tf.recorder.recording.packed import pack_recording
from nvtx_plugins_tf.recorder.recording.reader import RecordingReader

FRAME = struct.Struct("<IIII")


def _packed_recording(folder):
    """A recording of two processes (3 threads each, 4 KiB chunks: many frames), packed."""
    rng = np.random.default_rng(7)
    _write_process(folder, rng, 100, 1_700_000_000 * 10**9, {1: "train"}, 3000)
    _write_process(folder, rng, 200, 1_700_000_500 * 10**9, {1: "other", 2: "train"}, 3000)
    assert pack_recording(folder, live_check=False).packed == 2
    return sorted(folder.glob("*.nvtxsegz"))


def _frames(data: bytes) -> list[int]:
    """Offset of each frame's header."""
    out, pos = [], 64
    for _ in range(int.from_bytes(data[32:40], "little")):
        out.append(pos)
        pos += 16 + int.from_bytes(data[pos : pos + 4], "little")
    return out


def _set_frame(data: bytearray, at: int, packed_len=None, raw_len=None, body=None, fix_crc=False) -> None:
    n, raw, crc, zero = FRAME.unpack_from(data, at)
    if body is not None:
        data[at + 16 : at + 16 + n] = body
    if fix_crc:
        crc = zlib.crc32(bytes(data[at + 16 : at + 16 + n]))
    FRAME.pack_into(data, at, n if packed_len is None else packed_len, raw if raw_len is None else raw_len, crc, zero)


def _damage(kind: str, data: bytes) -> bytes:
    d = bytearray(data)
    f = _frames(data)
    n3 = int.from_bytes(d[f[3] : f[3] + 4], "little")
    if kind == "a frame's bytes changed":
        d[f[2] + 16 + 3] ^= 0x20
    elif kind == "a frame that does not unpack, its CRC right":
        n = int.from_bytes(d[f[2] : f[2] + 4], "little")
        _set_frame(d, f[2], body=bytes(range(n % 256, n % 256 + n)) if n < 200 else b"\x55" * n, fix_crc=True)
    elif kind == "a frame longer than a chunk":
        _set_frame(d, f[2], raw_len=(1 << 20))
    elif kind == "a packed length past the file":
        _set_frame(d, f[2], packed_len=0xFFFFFFF0)
    elif kind == "cut inside a frame":
        del d[f[3] + 16 + n3 // 2 :]
    elif kind == "cut between frames":
        del d[f[3] + 16 + n3 :]
    elif kind == "the header's frame changed":
        d[f[0] + 16 + 5] ^= 0x01
    elif kind == "not a pack":
        d[:8] = b"\0" * 8
    elif kind == "another version":
        d[8:12] = (9).to_bytes(4, "little")
    elif kind == "empty":
        del d[:]
    elif kind == "no frames":
        d[32:40] = (0).to_bytes(8, "little")
    elif kind == "raw size below its frames":
        d[16:24] = (100).to_bytes(8, "little")
    elif kind == "raw size past its frames":
        d[16:24] = (int.from_bytes(d[16:24], "little") + 3 * 4096).to_bytes(8, "little")
    elif kind == "raw size of 2**62":
        d[16:24] = (1 << 62).to_bytes(8, "little")
    elif kind == "more frames declared":
        d[32:40] = (len(f) + 2).to_bytes(8, "little")
    else:
        assert kind == "intact"
    return bytes(d)


KINDS = [
    "intact",
    "a frame's bytes changed",
    "a frame that does not unpack, its CRC right",
    "a frame longer than a chunk",
    "a packed length past the file",
    "cut inside a frame",
    "cut between frames",
    "the header's frame changed",
    "not a pack",
    "another version",
    "empty",
    "no frames",
    "raw size below its frames",
    "raw size past its frames",
    "more frames declared",
]


def _read(rec, monkeypatch, in_place: bool, cache: int = reader.UNPACK_CACHE):
    monkeypatch.setattr(reader, "UNPACK_IN_PLACE", in_place)
    monkeypatch.setattr(reader, "UNPACK_CACHE", cache)
    with RecordingReader(rec) as r:
        batches = list(r.batches())
        rows = np.concatenate(batches) if batches else np.empty(0, dtype=reader.ROW_DTYPE)
        return rows, r.damage(), r.strings(), dict(r.processes)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("cache", [64 << 20, 8192, 0])
def test_in_place_reads_what_the_copy_reads(tmp_path, monkeypatch, kind, cache):
    rec = tmp_path / "rank.nvtxrec"
    first, _ = _packed_recording(rec)
    first.write_bytes(_damage(kind, first.read_bytes()))
    rows, damage, strings, processes = _read(rec, monkeypatch, True, cache)
    ref_rows, ref_damage, ref_strings, ref_processes = _read(rec, monkeypatch, False)
    assert np.array_equal(rows, ref_rows), kind
    assert damage == ref_damage, (damage, ref_damage)
    assert strings == ref_strings and processes == ref_processes
    assert len(rows) > 1000  # (the other segment at least)
    # (a raw size off the frames' changes only where the unused chunks end: nothing lost)
    assert (kind in ("intact", "raw size below its frames", "raw size past its frames")) == (not damage.errors)


def test_a_packed_segment_is_read_without_a_copy(tmp_path, monkeypatch):
    """No scratch file for the segment's bytes (only the header's, to place it in time)."""
    rec = tmp_path / "rank.nvtxrec"
    _packed_recording(rec)
    sizes = []
    scratch = packed._scratch_file
    monkeypatch.setattr(packed, "_scratch_file", lambda size: sizes.append(size) or scratch(size))
    _read(rec, monkeypatch, True)
    assert sizes and set(sizes) == {0}, sizes


@pytest.mark.parametrize("kind", ["intact", "a frame's bytes changed", "cut inside a frame"])
def test_native_mapper_in_place_is_the_numpy_mapper_on_the_copy(tmp_path, monkeypatch, kind):
    rec = tmp_path / "rank.nvtxrec"
    first, _ = _packed_recording(rec)
    first.write_bytes(_damage(kind, first.read_bytes()))
    for step in (None, mapper.StepSpec.parse("x@train")):
        monkeypatch.setattr(reader, "UNPACK_IN_PLACE", False)
        monkeypatch.setenv("NVTX_TF_ANALYZE_NATIVE", "0")
        reference = mapper.map_input(rec, step)
        monkeypatch.setattr(reader, "UNPACK_IN_PLACE", True)
        monkeypatch.setenv("NVTX_TF_ANALYZE_NATIVE", "1")
        native = mapper.map_input(rec, step)
        assert len(reference) == 2 and all(r.n_steps for r in reference)
        assert (kind == "intact") == (not reference[0].damage)
        _assert_same(native, reference)


@pytest.mark.parametrize(
    "kind, words",
    [
        ("a frame's bytes changed", "chunk 1 does not unpack (damaged)"),
        ("a frame that does not unpack, its CRC right", "chunk 1 does not unpack (damaged)"),
        ("cut inside a frame", "chunk 2 and the"),
        ("the header's frame changed", "the segment's header does not unpack (damaged)"),
    ],
)
def test_analyze_of_a_damaged_pack_is_one_line_and_exit_6(tmp_path, kind, words):
    """The hostile rows of analyze (tests/test_analyze_hostile.py's r5) for damage read in
    place: the damaged input named on one line with what did not unpack, exit 6, the tables
    of the intact events written."""
    rec = tmp_path / "rank.nvtxrec"
    first, _ = _packed_recording(rec)
    first.write_bytes(_damage(kind, first.read_bytes()))
    out = tmp_path / "out"
    proc = nvtx_tf("analyze", rec, "-o", out)
    assert proc.returncode == cli.EXIT_DAMAGED, proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith(f"nvtx-tf: error: damaged recording {rec}: ") and words in line, line
    assert "Traceback" not in proc.stderr
    assert pq.read_table(out / "rank_stats.parquet").num_rows > 0


def test_a_raw_size_past_any_file_reads_the_frames_at_once(tmp_path, monkeypatch):
    """A pack whose header claims 4 EiB of raw bytes: its frames are read, and the raw size
    ends with its last frame (issue 44 row 2: a frame holds its chunk whole, the last one at
    most that), in place and in the copy alike (the copy could not be made that large: it
    reported the segment unreadable)."""
    rec = tmp_path / "rank.nvtxrec"
    first, _ = _packed_recording(rec)
    intact = _read(rec, monkeypatch, True)
    first.write_bytes(_damage("raw size of 2**62", first.read_bytes()))
    for in_place in (True, False):
        rows, damage, strings, _ = _read(rec, monkeypatch, in_place)
        assert np.array_equal(rows, intact[0]) and strings == intact[2]
        assert damage.unpublished_chunks == intact[1].unpublished_chunks and not damage.errors


def test_without_a_loadable_libzstd_the_copy_reads_it(tmp_path):
    """A libzstd.so.1 without Zstandard's functions first on the library path: the reader
    cannot unpack in place and says so; Python unpacks into the copy, and analyze's tables
    are those read in place."""
    fake = tmp_path / "lib"
    fake.mkdir()
    (fake / "empty.c").write_text("int nvtx_tf_not_zstd(void) { return 0; }\n")
    subprocess.run(["cc", "-shared", "-fPIC", "-o", fake / "libzstd.so.1", fake / "empty.c"], check=True)
    rec = tmp_path / "rank.nvtxrec"
    _packed_recording(rec)
    tables = {}
    for name, env in (("in place", {}), ("fake libzstd", {"LD_LIBRARY_PATH": str(fake)})):
        out = tmp_path / name
        proc = subprocess.run(
            [sys.executable, "-m", "nvtx_plugins_tf", "analyze", rec, "-o", out],
            env=_child_env(**env), capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        tables[name] = pq.read_table(out / "rank_stats.parquet").to_pandas()
    assert len(tables["in place"]) and tables["in place"].equals(tables["fake libzstd"])  # (NaN Std equal)
    probe = (
        "import sys\nfrom nvtx_plugins_tf.recorder.recording import _decoder\n"
        "print(_decoder.Decoder().open_packed(sys.argv[1], 0)[2])"
    )
    seg = str(next(rec.glob("*.nvtxsegz")))
    for env, expected in (({}, "[]"), ({"LD_LIBRARY_PATH": str(fake)}, f"[({_decoder.UNPACK_UNAVAILABLE}, 0, 0)]")):
        proc = subprocess.run(
            [sys.executable, "-c", probe, seg], env=_child_env(**env), capture_output=True, text=True, timeout=120
        )
        assert proc.returncode == 0 and proc.stdout.strip() == expected, (proc.stdout, proc.stderr)
