"""The fourth review of the recorder and the native reader (issue 44): each test here failed
before its row's fix."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import struct
import subprocess
import sys
import time
from contextlib import closing
from pathlib import Path

import numpy as np
import pytest
from conftest import _child_env
from native.segment_oracle import chunk_sums, scan_segment

from nvtx_plugins_tf.recorder.analysis import _native
from nvtx_plugins_tf.recorder.recording._synth import (
    K_CATEGORY,
    K_DOMAIN_CREATE,
    K_DOMAIN_DESTROY,
    K_END,
    K_MARK,
    K_POP,
    K_PUSH,
    K_START,
    K_THREAD_NAME,
    SEGMENT_HEADER_SIZE,
    SegmentWriter,
    compact_event,
    event,
    string_def,
    word0,
)
from nvtx_plugins_tf.recorder.recording.packed import pack_recording, remove_packed_raw
from nvtx_plugins_tf.recorder.recording.reader import RecordingReader


def test_pairs_whose_hashes_collide_stay_two_pairs():
    # row 5: (domainId, pid) pairs were indexed by a 64-bit hash of both (domainId * C ^ pid);
    # a crafted domainId whose hash equals another pair's was appended to the pairs again each
    # time it followed another pair: 50,001 pairs from 100,000 rows of 2 pairs.
    c = 0x9E3779B97F4A7C15
    inv = pow(c, -1, 2**64)  # key(inv, 6) = 1 ^ 6 = 7 = key(0, 7)
    inv_signed = inv - 2**64 if inv >= 2**63 else inv
    n = 10_000
    b = np.arange(n) & 1
    start = np.arange(n, dtype=np.int64) * 10
    end = start + 5
    event_type = np.full(n, 59, dtype=np.int64)  # push/pop
    pid = np.where(b == 1, 6, 7).astype(np.int64)
    gtid = (pid << 24) | 1
    domain = np.where(b == 1, inv_signed, 0).astype(np.int64)
    message = np.zeros(n, dtype=np.int32)
    ranges = _native.NativeRanges()
    try:
        added = ranges.add_export(
            n, start.ctypes.data, end.ctypes.data, 0, 0, event_type.ctypes.data, gtid.ctypes.data,
            domain.ctypes.data, message,
        )  # fmt: skip
        assert added == n
        assert ranges.pairs().tolist() == [[0, 7], [inv_signed, 6]]
    finally:
        ranges.close()


# ---------------------------------------------------------------- row 2: sizes read from files
def _peak_child(code: str, *args) -> tuple[int, str]:
    """Run ``code`` in a child with the venv; (its peak RSS in MiB, the lines it printed before)."""
    # (VmHWM: this process's own peak; ru_maxrss would count the forked parent's before exec)
    script = code + (
        "\nhwm = next(l for l in open('/proc/self/status') if l.startswith('VmHWM:'))"
        "\nprint('peak', int(hwm.split()[1]) // 1024)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script, *map(str, args)], env=_child_env(), capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stdout.strip().splitlines()
    return int(lines[-1].split()[1]), "\n".join(lines[:-1])


def test_packed_and_raw_readers_over_crafted_sizes_stay_bounded_and_say_the_damage(tmp_path):
    # row 2: a pack header's header_size/chunk_size (up to 4 GiB) and a frame's raw_len sized
    # the native reader's buffer (zero-filled) before Zstandard found a few bytes there: a
    # 110-byte file, 4.2 GiB. Here every size, count and length at its limits and past them,
    # in the native and the Python paths: peak memory under 256 MiB, no exception, the same
    # events and damage either way, and no event lost without the damage said.
    proc = subprocess.run(
        [sys.executable, str(Path(__file__).with_name("packed_fuzz.py")), tmp_path],
        env=_child_env(), capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout)
    assert out["peak_mib"] < 256, out["peak_mib"]
    rows = out["rows"]
    assert len(rows) > 150
    by_case: dict[str, dict[str, dict]] = {}
    for row in rows:
        assert "exception" not in row, row
        by_case.setdefault(row["case"], {})[row["path"]] = row
    intact = by_case["intact"]["native"]
    assert intact["events"] == 1200 and not intact["damage"]
    for case, paths in by_case.items():
        if "python" in paths:
            native, python = paths["native"], paths["python"]
            assert (native["events"], native["rows"], bool(native["damage"])) == (
                python["events"], python["rows"], bool(python["damage"])
            ), case  # fmt: skip
        for row in paths.values():
            if not row["damage"]:
                assert (row["events"], row["rows"]) == (intact["events"], intact["rows"]), row
    for case in ("header_size=4294967295", "chunk_size=4294967295", "every chunk: raw_len=1 GiB, chunks of 1 GiB"):
        assert by_case[case]["native"]["damage"], case


def test_the_packed_bomb_of_the_issue_is_damage_said_in_bounded_memory(tmp_path):
    # row 2's repro: a 97-byte packed segment whose header declares 4 GiB - 1 of header and
    # chunk; its one frame 4 GiB - 1 of raw bytes.
    code = (
        "import struct, sys, zlib\n"
        "import pyarrow as pa\n"
        "import nvtx_plugins_tf.recorder.recording.reader as rd\n"
        "d = sys.argv[1]\n"
        "data = pa.Codec('zstd').compress(b'\\0' * 64, asbytes=True)\n"
        "big = 0xFFFFFFFF\n"
        "head = struct.pack('<8sIIQIIQ24x', b'NVTXSEGZ', 1, 1, big, big, 4096, 1)\n"
        "frame = struct.pack('<IIII', len(data), big, zlib.crc32(data), 0) + data\n"
        "open(d + '/5-1000.nvtxsegz', 'wb').write(head + frame)\n"
        "rd.UNPACK_IN_PLACE = sys.argv[2] == 'native'\n"
        "with rd.RecordingReader(d) as r:\n"
        "    n = sum(len(b) for b in r.batches())\n"
        "    print(n, r.damage().describe())\n"
    )
    for path in ("native", "python"):
        folder = tmp_path / f"{path}.nvtxrec"
        folder.mkdir()
        peak, said = _peak_child(code, folder, path)
        assert peak < 256, (path, peak)
        assert said.startswith("0 1 unreadable segment(s)") and "does not unpack (damaged)" in said, said


def test_an_sqlite_record_longer_than_the_file_is_refused_before_it_is_sized(tmp_path):
    # row 2, the SQLite page reader: a record's size (a varint of the file) sized its buffer,
    # zero-filled, up to 2 GiB, before its overflow chain was followed. A record claiming
    # 256 MiB in a file of a few MiB: the pages give up, memory stays bounded.
    from test_sqlite_pages import _leaf_cell, _rows, _varint, make_db

    path = make_db(tmp_path / "long.sqlite", _rows(50, seed=3) + [(5, 9, 59, "x" * (3 << 20), 1 << 24, None, 0)])
    with closing(sqlite3.connect(path)) as con:
        (root,) = con.execute("SELECT rootpage FROM sqlite_master WHERE name='NVTX_EVENTS'").fetchone()
        (rowid,) = con.execute("SELECT max(rowid) FROM NVTX_EVENTS").fetchone()
    data = bytearray(path.read_bytes())
    cell = _leaf_cell(data, (root - 1) * 4096, rowid)
    size, n = _varint(data, cell)
    assert size > 3 << 20 and n == 4
    data[cell : cell + 4] = bytes([0xFF, 0xFF, 0xFF, 0x7F])  # 268,435,455 bytes
    path.write_bytes(bytes(data))
    code = (
        "import sys, os\n"
        "os.environ['NVTX_TF_SQLITE_PAGES'] = '1'\n"
        "from nvtx_plugins_tf.recorder.analysis import _native\n"
        "from nvtx_plugins_tf.recorder.analysis.native_mapper import LIBSQLITE3\n"
        "from nvtx_plugins_tf.recorder.nsys_inputs.batches import range_query\n"
        "from nvtx_plugins_tf.recorder.nsys_inputs.sqlite import open_nsys_sqlite\n"
        "from pathlib import Path\n"
        "path = Path(sys.argv[1])\n"
        "with open_nsys_sqlite(path) as db:\n"
        "    query, ranges = range_query(db)\n"
        "native = _native.NativeRanges()\n"
        "try:\n"
        "    native.add_sqlite(LIBSQLITE3, path.resolve().as_uri() + '?mode=ro', query, ranges)\n"
        "except OSError as exc:\n"
        "    pass\n"
        "print(native.sqlite_pages, native.sqlite_note)\n"
    )
    peak, said = _peak_child(code, path)
    assert peak < 200, (peak, said)
    assert said.startswith("False") and "longer than the file" in said, said


# ---------------------------------------------------------------- row 4: the end of data by kinds
T = 10**12  # a timestamp as the writer's clock gives them
K_PAYLOAD_SCHEMA = 21
EXT_BLOCK = struct.pack("<QQIHH", 77, 8, 8, 1, 0) + struct.pack("<q", -1)  # one data entry, 8 bytes
SCHEMA_BODY = (
    struct.pack("<QQQQIIQ", 1 << 24, 1, 0, 8, 1, 4, 0) + b"abcd".ljust(8, b"\0")  # PayloadSchemaDef, its name
    + struct.pack("<QQQQQII", 0, 5, 0, 0, 8, 1, 0) + b"x".ljust(8, b"\0")  # one entry, its name
)  # fmt: skip
RECORDS = {
    "string definition": string_def(9, "a name"),
    "domain create": word0(K_DOMAIN_CREATE, 0, 3, 1) + struct.pack("<Q", T),
    "domain destroy": word0(K_DOMAIN_DESTROY, 0, 3, 0) + struct.pack("<Q", T),
    "category name": word0(K_CATEGORY, 0, 0, 1) + struct.pack("<II", 64, 0),
    "thread name (tid 17,000)": word0(K_THREAD_NAME, 0, 0, 1) + struct.pack("<q", 17_000),
    "thread name (tid 4,000,000)": word0(K_THREAD_NAME, 0, 0, 1) + struct.pack("<q", 4_000_000),
    "payload schema": word0(K_PAYLOAD_SCHEMA) + struct.pack("<II", len(SCHEMA_BODY), 0) + SCHEMA_BODY,
    "push": event(K_PUSH, T + 50, msg=1),
    "pop": event(K_POP, T + 50),
    "start": event(K_START, T + 50, msg=1, range_id=9),
    "end": event(K_END, T + 50, range_id=9),
    "mark": event(K_MARK, T + 50, msg=1),
    "mark with color, category and payload": event(K_MARK, T + 50, msg=1, color=1, category=2, payload=("u64", 5)),
    "mark with an extended payload": word0(K_MARK, 7 << 4, 0, 1)
    + struct.pack("<QQ", T + 50, len(EXT_BLOCK))
    + EXT_BLOCK,
    "compact push": compact_event(K_PUSH, 5, msg=1),
    "compact pop": compact_event(K_POP, 5),
    "compact start": compact_event(K_START, 5, msg=1, range_id=9),
    "compact end": compact_event(K_END, 5, range_id=9),
    "compact mark": compact_event(K_MARK, 5, msg=1),
}


def _chunk_with(record: bytes, after: int, seal: bool) -> bytes:
    """A segment of one chunk: a string, 20 marks, ``record`` with its first word zeroed, then
    ``after`` marks; sealed at its records' end (the zero word inside the seal) or not."""
    w = SegmentWriter(pid=5, chunk_size=4096)
    t = w.thread(5)
    t.string(1, "r")
    for i in range(20):
        t.mark(T + i, 1)
    t.record(bytes(8) + record[8:])
    for i in range(after):
        t.mark(T + 100 + i, 1)
    data = bytearray(bytes(w))
    if seal:
        end = len(w.chunks[0])
        struct.pack_into(
            "<QQQ", data, SEGMENT_HEADER_SIZE + 32, end, *chunk_sums(bytes(data), SEGMENT_HEADER_SIZE, end)
        )
    return bytes(data)


@pytest.mark.parametrize("sealed", [False, True], ids=["unsealed", "sealed"])
@pytest.mark.parametrize("after", [0, 5], ids=["last", "followed"])
@pytest.mark.parametrize("kind", list(RECORDS))
def test_every_record_kind_zeroed_at_its_first_word(tmp_path, kind, after, sealed):
    # row 4: the end-of-data rule read any second word below 2**32 as a string definition's
    # length: a thread-name record's tid passed up to tid bytes after a zeroed first word
    # for one torn record, the records there lost without damage said. Now: the last record
    # of an unsealed chunk without its first word is torn (only that record lost, silently);
    # anything after it, or a zero word inside a seal, is damage said, the records after it
    # read (the native reader and the oracle alike).
    data = _chunk_with(RECORDS[kind], after, sealed)
    torn = after == 0 and not sealed
    assert scan_segment(data).damaged != torn
    (tmp_path / "5-1000.nvtxseg").write_bytes(data)
    with RecordingReader(tmp_path) as reader:
        rows = np.concatenate(list(reader.batches()))
        damage = reader.damage()
    assert damage.damaged != torn, damage.describe()
    if not torn:
        assert damage.damaged_chunks == 1, damage.describe()
    # the marks before it and after it (the walk resumes at the next full-form record; what
    # it resumes at inside the damaged record's bytes, if anything, is read as it is)
    start = rows["start_ns"]
    assert np.count_nonzero((start >= T) & (start < T + 20)) == 20
    assert np.count_nonzero((start >= T + 100) & (start < T + 100 + after)) == after


def test_a_thread_name_zeroed_before_the_definitions_and_events_of_its_chunk(tmp_path):
    # row 4's repro (hidden_damage.py): the main thread's unsealed chunk begins with a string,
    # the thread-name record, the string its events name, then the events. Its thread-name
    # record's first word zeroed: exit 5 "no NVTX events recorded", no damage said; now the
    # damage is said and every event is read, named (the definitions after the damage are
    # collected as the events after it are read).
    w = SegmentWriter(pid=5, chunk_size=4096)
    t = w.thread(17_000)
    t.string(1, "main")
    t.record(bytes(8) + struct.pack("<q", 17_000))  # the thread-name record without its first word
    t.string(2, "work")
    for i in range(100):
        t.push(T + 10 * i, 2)
        t.pop(T + 10 * i + 5)
    (tmp_path / "5-1000.nvtxseg").write_bytes(bytes(w))
    with RecordingReader(tmp_path) as reader:
        rows = np.concatenate(list(reader.batches()))
        damage = reader.damage()
        strings = reader.strings()
    assert damage.damaged and damage.damaged_chunks == 1 and not damage.unknown_strings, damage.describe()
    assert len(rows) == 100 and {strings[m] for m in rows["message"]} == {"work"}


# ---------------------------------------------------------------- row 6: one SQLite per process
def test_one_sqlite_namespace_per_process_whatever_name_it_is_asked_by(tmp_path):
    # row 6 (sqlite_names.py): the loader remembered one library name; its soname and its path
    # used in turn each opened a link-map namespace with a libc of its own (2 -> 12 libc
    # mappings, then RTLD_DEEPBIND). Now the same library by any name is the one loaded; a
    # different library (a copy: another file) is refused in one line.
    code = (
        "import ctypes, os, shutil, sys\n"
        "from nvtx_plugins_tf._native_libs import native_library\n"
        "lib = ctypes.CDLL(str(native_library('reader')))\n"
        "lib.nvtxr_sqlite_available.restype = ctypes.c_int\n"
        "lib.nvtxr_sqlite_available.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_uint32]\n"
        "path = next(l.split()[-1] for l in os.popen('ldconfig -p') if 'libsqlite3.so.0 ' in l)\n"
        "libcs = lambda: sum('libc.so.6' in l and 'r-xp' in l for l in open('/proc/self/maps'))\n"
        "err = ctypes.create_string_buffer(256)\n"
        "first = lib.nvtxr_sqlite_available(b'libsqlite3.so.0', err, 256)\n"
        "after_first = libcs()\n"
        "names = [b'libsqlite3.so.0', path.encode(), os.path.realpath(path).encode()]\n"
        "oks = [lib.nvtxr_sqlite_available(names[i % 3], err, 256) for i in range(30)]\n"
        "copy = os.path.join(sys.argv[1], 'libsqlite3-copy.so.0')\n"
        "shutil.copy(path, copy)\n"
        "other = lib.nvtxr_sqlite_available(copy.encode(), err, 256)\n"
        "print(first, after_first, libcs(), all(oks), other)\n"
        "print(err.value.decode())\n"
    )
    _, said = _peak_child(code, tmp_path)
    counts, _, why = said.partition("\n")
    first, after_first, last, oks, other = counts.split()
    assert (first, oks, other) == ("1", "True", "0"), said
    assert int(after_first) <= 2 and last == after_first, said
    assert "libsqlite3-copy.so.0" in why and "one per process" in why, why


# ---------------------------------------------------------------- row 3: a drop in its window
@pytest.mark.parametrize("write_after", [True, False], ids=["an event after it", "nothing after it"])
def test_a_drop_in_a_capture_window_is_counted_in_that_window(tmp_path, c_sample, recorder_env, write_after):
    # row 3 (drop_in_window.py): a drop after a window's start and before its first written
    # event was counted in the header of the segment before the window: capture() said 0
    # where the recorder counted 1. With nothing written in the window, its segment is opened
    # at the window's end to hold the drop. Either way the recording's total stays 1.
    lib = c_sample("dropper", "-shared", "-fPIC")
    inside = "h.mark(b'inside the capture')" if write_after else "pass"
    script = tmp_path / "window.py"
    script.write_text(
        "import ctypes, os\n"
        "from nvtx_plugins_tf.testing import capture\n"
        f"h = ctypes.CDLL({str(lib)!r})\n"
        "rec = ctypes.CDLL(os.environ['NVTX_INJECTION64_PATH'])\n"
        "rec.nvtx_recorder_dropped_count.restype = ctypes.c_uint64\n"
        "h.mark(b'before the capture')\n"
        "with capture() as cap:\n"
        "    h.end_of_dropped_start()\n"
        f"    {inside}\n"
        "h.mark(b'between')\n"
        "with capture() as later:\n"
        "    h.mark(b'a later window')\n"
        "print(rec.nvtx_recorder_dropped_count(), cap.damage.dropped_events, later.damage.dropped_events)\n"
    )
    rec = tmp_path / "rec.nvtxrec"
    proc = subprocess.run(
        [sys.executable, str(script)], env=recorder_env(rec), capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split()[-3:] == ["1", "1", "0"], proc.stdout
    with RecordingReader(rec) as reader:
        list(reader.batches())
        assert reader.damage().dropped_events == 1


# ---------------------------------------------------------------- row 1: live segments
def _unshare_works() -> bool:
    if os.geteuid() != 0 or not shutil.which("unshare"):
        return False
    return subprocess.run(["unshare", "--pid", "--fork", "--uts", "true"], capture_output=True).returncode == 0


needs_unshare = pytest.mark.skipif(not _unshare_works(), reason="unshare --pid --fork --uts needs root")


def _in_namespace(writer: Path, args: list[str], host: str | None, env: dict) -> subprocess.Popen:
    """``writer ARGS`` in a PID namespace of its own (150 pids used up first, so that its pid
    names no process of ours), with a host name of its own when ``host`` is given."""
    inner = "i=0; while [ $i -lt 150 ]; do /bin/true; i=$((i+1)); done; "
    if host:
        inner += f"hostname {host}; "
    inner += " ".join([str(writer), *args])
    cmd = ["unshare", "--pid", "--fork", *(["--uts"] if host else []), "sh", "-c", inner]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait_for_segment(rec: Path, proc: subprocess.Popen) -> None:
    """Until the writer's segment file exists (or the writer ended: then the test fails)."""
    while not list(rec.glob("*.nvtxseg")):
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.02)


@needs_unshare
@pytest.mark.parametrize("host", [None, "elsewhere"], ids=["this host", "a header naming another host"])
def test_a_writer_in_another_pid_namespace_is_never_packed_while_it_writes(tmp_path, c_sample, recorder_env, host):
    # row 1 (foreign_pid_pack.sh): pack judged "its writer still runs" by the header's pid in
    # its own /proc: a writer in another PID namespace (or on another host) was packed and its
    # raw segment unlinked while it wrote: 131-147 of 300 ranges kept, no damage said. Now the
    # writer holds its segment's lock while it writes: pack, record's packing and merge leave
    # it raw; once it has ended (its segment closed at exit) it is packed, every range read.
    writer = c_sample("ns_writer")
    rec, go = tmp_path / "rec.nvtxrec", tmp_path / "go"
    proc = _in_namespace(writer, ["150", str(go)], host, recorder_env(rec))
    try:
        _wait_for_segment(rec, proc)
        result = pack_recording(rec)
        assert result.packed == 0 and len(result.left) == 1, result
        assert "still runs (it holds the segment's lock)" in result.left[0], result.left
        assert remove_packed_raw(rec) == 0 and list(rec.glob("*.nvtxseg"))
    finally:
        go.touch()
        out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0 and "emitted push/pop ranges=300" in out, (out, err)
    result = pack_recording(rec)
    assert result.packed == 1 and not result.left, result
    with RecordingReader(rec) as reader:
        assert sum(len(b) for b in reader.batches()) == 300
        assert not reader.damage().damaged, reader.damage().describe()


@needs_unshare
def test_a_killed_writer_whose_header_names_another_host_is_left_raw_with_why(tmp_path, c_sample, recorder_env):
    # row 1: a writer on another host (a shared file system), killed (its segment never
    # closed), whose lock is not held: whether it still runs cannot be known here; pack leaves
    # it raw and says why in one line (exit 0). On this host the same is packed (its lock gone:
    # its writer ended).
    writer = c_sample("ns_writer")
    for host, packed in (("elsewhere", 0), (None, 1)):
        rec = tmp_path / f"{host}.nvtxrec"
        proc = _in_namespace(writer, ["50", "kill"], host, recorder_env(rec))
        proc.communicate(timeout=300)
        proc = subprocess.run(
            [sys.executable, "-m", "nvtx_plugins_tf", "pack", str(rec)],
            env=_child_env(), capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        assert f"{packed} segment(s) packed" in proc.stdout, proc.stdout
        lines = proc.stderr.strip().splitlines()
        if packed:
            assert not lines, proc.stderr
        else:
            (line,) = lines
            assert line.startswith("nvtx-tf: warning: left raw: ") or "left raw: " in line, line
            assert "written on elsewhere: whether its process still runs cannot be known here" in line, line
        with RecordingReader(rec) as reader:
            assert sum(len(b) for b in reader.batches()) == 50
