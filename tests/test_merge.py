"""nvtx-tf merge: recordings of several hosts, one timeline.

The hosts are real processes whose CLOCK_MONOTONIC really differs: each worker runs in its
own Linux time namespace (``unshare --time --monotonic=OFFSET``, root and Linux >= 5.6) and
UTS namespace (its own host name, set before its first NVTX call), records into its own
recording, and the two talk through a pipe: A closes its range
"send", then writes a byte; B blocks reading it, then opens its range "recv".
"""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import _child_env, needs_time_namespaces

from nvtx_plugins_tf import cli
from nvtx_plugins_tf.recorder import merge as merge_mod
from nvtx_plugins_tf.recorder.recording._synth import SegmentWriter
from nvtx_plugins_tf.recorder.recording.reader import load, segment_files

try:
    from nvtx_plugins_tf._native_libs import native_library

    native_library("recorder")
    native_library("reader")
    _RECORDER_ERROR = None
except Exception as exc:  # noqa: BLE001
    _RECORDER_ERROR = str(exc)

needs_recorder = pytest.mark.skipif(_RECORDER_ERROR is not None, reason=f"recorder not built: {_RECORDER_ERROR}")

WORKER = """
import os, socket, sys
if os.environ.get("WORKER_HOST"):
    socket.sethostname(os.environ["WORKER_HOST"])
import nvtx
role, fd = sys.argv[1], int(sys.argv[2])
if role == "send":
    nvtx.push_range("send")
    nvtx.pop_range()
    os.write(fd, b"x")
else:
    nvtx.mark("waiting")
    assert os.read(fd, 1) == b"x"
    nvtx.push_range("recv")
    nvtx.pop_range()
"""


def nvtx_tf(*args):
    return subprocess.run(
        [sys.executable, "-m", "nvtx_plugins_tf", *map(str, args)],
        capture_output=True,
        text=True,
        env=_child_env(),
        timeout=300,
    )


def _one_line_error(proc):
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("nvtx-tf: error: "), proc.stderr
    return lines[0]


def _run_workers(tmp_path: Path, offsets: tuple[int, int] | None) -> tuple[Path, Path]:
    """Worker A (send) and B (recv), each recorded into its own recording, each in a time
    namespace with its monotonic offset (``offsets`` = (A, B) seconds; None: no namespace)
    and a UTS namespace with its host name (``node-a``, ``node-b``)."""
    rec_a, rec_b = tmp_path / "hostA.nvtxrec", tmp_path / "hostB.nvtxrec"
    read_fd, write_fd = os.pipe()

    def start(role, fd, recording, offset, host):
        env = _child_env(recording)
        prefix = []
        if offset is not None:
            prefix = ["unshare", "--time", "--uts", "--fork", f"--monotonic={offset}"]
            env["WORKER_HOST"] = host
        return subprocess.Popen([*prefix, sys.executable, "-c", WORKER, role, str(fd)], env=env, pass_fds=(fd,))

    try:
        b = start("recv", read_fd, rec_b, None if offsets is None else offsets[1], "node-b")
        a = start("send", write_fd, rec_a, None if offsets is None else offsets[0], "node-a")
    finally:
        os.close(read_fd)
        os.close(write_fd)
    assert a.wait(timeout=120) == 0
    assert b.wait(timeout=120) == 0
    return rec_a, rec_b


def _offsets() -> tuple[int, int]:
    """A far ahead, B behind (a negative offset must leave the clock >= 0: half its value, at most 500 s)."""
    return 200_000, -min(500, int(time.monotonic()) // 2)


@needs_recorder
def test_merge_aligns_hosts_with_different_monotonic_clocks(tmp_path):
    needs_time_namespaces()
    off_a, off_b = _offsets()
    rec_a, rec_b = _run_workers(tmp_path, (off_a, off_b))
    raw_a, raw_b = load(rec_a), load(rec_b)
    (send,) = raw_a.find("send")
    (recv,) = raw_b.find("recv")
    # The clocks really differ: in the raw recordings "send" ends ~(off_a - off_b) s after "recv"
    # starts, though it happened first; sorting raw timestamps would put it after "recv".
    gap_s = (send.end_ns - recv.start_ns) / 1e9
    assert abs(gap_s - (off_a - off_b)) < 60, gap_s
    (info_a,) = raw_a.processes.values()
    (info_b,) = raw_b.processes.values()
    anchor_offset = (info_a.start_realtime_ns - info_a.start_ns) - (info_b.start_realtime_ns - info_b.start_ns)
    assert abs(anchor_offset / 1e9 - (off_b - off_a)) < 1
    assert (info_a.host, info_b.host) == ("node-a", "node-b")  # each segment names its machine

    out = tmp_path / "merged" / "job"
    proc = nvtx_tf("merge", rec_a, rec_b, "-o", out)
    assert proc.returncode == 0, proc.stderr
    assert "node-a:" in proc.stdout and "node-b:" in proc.stdout

    merged = load(out.with_name("job.nvtxrec"))
    assert not merged.damage.damaged
    (m_send,) = merged.find("send")
    (m_recv,) = merged.find("recv")
    assert m_send.end_ns < m_recv.start_ns  # causal order restored
    assert m_send.pid != m_recv.pid
    # One clock per host: a host's own durations are untouched.
    assert m_send.duration_ns == send.duration_ns and m_recv.duration_ns == recv.duration_ns
    # A's clock has the earlier origin (its monotonic time is ahead): the reference, B moves onto it.
    assert m_send.start_ns == send.start_ns
    assert abs((m_recv.start_ns - recv.start_ns) / 1e9 - (off_a - off_b)) < 1
    names = {p.pid: (p.name, p.cmdline) for p in merged.processes.values()}
    assert names[m_send.pid][0].startswith("node-a:") and names[m_recv.pid][0].startswith("node-b:")
    assert names[m_send.pid][1].startswith(f"node-a:{send.pid} ")
    assert names[m_recv.pid][1].startswith(f"node-b:{recv.pid} ")

    manifest = json.loads((out.with_name("job.nvtxrec") / "merge.json").read_text())
    # labelled with the host names, not the recordings' names
    assert [s["label"] for s in manifest["sources"]] == ["node-a", "node-b"]
    assert manifest["sources"][0]["shift_ns"] == 0
    assert manifest["sources"][1]["shift_ns"] == m_recv.start_ns - recv.start_ns

    # The exports of the merged recording: JSON (Perfetto) and SQLite (nsys schema).
    trace = json.loads(out.with_name("job.json").read_text())
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    slices = {e["name"]: e for e in events if e.get("ph") == "X" and e["name"] in ("send", "recv")}
    assert slices["send"]["ts"] + slices["send"]["dur"] <= slices["recv"]["ts"]
    proc_names = {e["pid"]: e["args"]["name"] for e in events if e.get("ph") == "M" and e["name"] == "process_name"}
    assert proc_names[slices["send"]["pid"]].startswith("node-a:")
    assert proc_names[slices["recv"]["pid"]].startswith("node-b:")
    con = sqlite3.connect(out.with_name("job.sqlite"))
    text = "COALESCE(e.text, (SELECT value FROM StringIds s WHERE s.id = e.textId))"
    ranges = {name: (start, end) for name, start, end in con.execute(f"SELECT {text}, start, end FROM NVTX_EVENTS e")}
    assert ranges["send"][1] < ranges["recv"][0]
    procs = con.execute("SELECT globalPid, name FROM PROCESSES").fetchall()
    assert len({g for g, _ in procs}) == 2 and sorted(n.split(":")[0] for _, n in procs) == ["node-a", "node-b"]
    con.close()


@needs_recorder
def test_merge_same_clock_keeps_exact_timestamps(tmp_path):
    """Two recordings of one host (no namespace): one clock, nothing shifted, order exact."""
    rec_a, rec_b = _run_workers(tmp_path, None)
    raw_a, raw_b = load(rec_a), load(rec_b)
    out = tmp_path / "same"
    proc = nvtx_tf("merge", rec_a, rec_b, "-o", out, "--label", "w0,w1")
    assert proc.returncode == 0, proc.stderr
    merged = load(tmp_path / "same.nvtxrec")
    by_name = {(r.message, r.start_ns, r.end_ns) for r in merged.events}
    assert by_name == {(r.message, r.start_ns, r.end_ns) for r in raw_a.events + raw_b.events}
    manifest = json.loads((tmp_path / "same.nvtxrec" / "merge.json").read_text())
    assert [s["shift_ns"] for s in manifest["sources"]] == [0, 0]
    assert sorted(p.name.split(":")[0] for p in merged.processes.values()) == ["w0", "w1"]
    # Without --label, two recordings of one host are named after their recordings.
    assert {p.host for p in raw_a.processes.values()} == {socket.gethostname()}
    assert nvtx_tf("merge", rec_a, rec_b, "-o", tmp_path / "named").returncode == 0
    named = json.loads((tmp_path / "named.nvtxrec" / "merge.json").read_text())
    assert [s["label"] for s in named["sources"]] == ["hostA", "hostB"]
    (m_send,) = merged.find("send")
    (m_recv,) = merged.find("recv")
    assert m_send.end_ns < m_recv.start_ns


def _synthetic(directory: Path, pid: int, start_ns: int, realtime_ns: int, message: str) -> None:
    """One process (``pid``, main thread tid == pid, a second thread) with one range per thread."""
    w = SegmentWriter(pid=pid, start_ns=start_ns, start_realtime_ns=realtime_ns, cmdline=f"worker {message}")
    main = w.thread(pid)
    main.string(1, message).string(2, "main").thread_name(pid, 2)
    main.push(start_ns + 100, msg=1, payload=("u64", 7)).pop(start_ns + 300)
    main.domain_create(start_ns + 350, 1, 1)
    other = w.thread(pid + 1)
    other.string(3, "other").start(start_ns + 400, 9, msg=3).end(start_ns + 500, 9)
    w.write(directory)


@needs_recorder
def test_merge_same_pid_on_two_hosts(tmp_path):
    """Two hosts running the same pid: the later recording's process is renumbered (pid,
    main thread tid, thread name) and shifted onto the earlier-origin clock."""
    _synthetic(tmp_path / "h1.nvtxrec", 4242, 1_000_000, 5_000_000_000_000, "one")
    # host 2: booted 1000 s later (its offset realtime - monotonic is 1000 s larger)
    _synthetic(tmp_path / "h2.nvtxrec", 4242, 2_000_000, 5_000_000_000_000 + 1_000_000 + 1000 * 10**9, "two")
    out = tmp_path / "m.nvtxrec"
    manifest = merge_mod.merge([tmp_path / "h1.nvtxrec", tmp_path / "h2.nvtxrec"], out)
    assert manifest["sources"][0]["renumbered_pids"] == {}
    assert manifest["sources"][1]["renumbered_pids"] == {"4242": merge_mod.FIRST_NEW_PID}
    assert manifest["sources"][0]["shift_ns"] == 0 and manifest["sources"][1]["shift_ns"] == 1000 * 10**9
    rec = load(out)
    assert not rec.damage.damaged
    new = merge_mod.FIRST_NEW_PID
    assert sorted(rec.processes) == [4242, new]
    (one,) = rec.find("one")
    (two,) = rec.find("two")
    assert (one.pid, one.tid, one.start_ns, one.payload) == (4242, 4242, 1_000_100, 7)
    shift = 1000 * 10**9
    assert (two.pid, two.tid, two.start_ns, two.end_ns) == (new, new, 2_000_100 + shift, 2_000_300 + shift)
    (other2,) = [r for r in rec.find("other") if r.pid == new]
    assert (other2.tid, other2.start_ns) == (4243, 2_000_400 + shift)  # other threads keep their tid
    assert rec.thread_names[(new, new)] == "main" and rec.thread_names[(4242, 4242)] == "main"
    assert rec.processes[new].name == "h2:python" and rec.processes[new].cmdline == "h2:4242 worker two"
    # The merged recording is one clock: merging it again with itself elsewhere shifts nothing.
    again = merge_mod.merge([out], tmp_path / "again.nvtxrec", labels=["all"])
    assert again["sources"][0]["shift_ns"] == 0
    assert sorted(p.name for p in segment_files(tmp_path / "again.nvtxrec")) == sorted(
        p.name for p in segment_files(out)
    )


@needs_recorder
def test_merge_errors(tmp_path):
    _synthetic(tmp_path / "good.nvtxrec", 7, 1_000, 10**18, "x")
    (tmp_path / "empty.nvtxrec").mkdir()
    (tmp_path / "notes.txt").write_text("not a recording\n")
    (tmp_path / "afile").write_text("")
    good = tmp_path / "good.nvtxrec"
    cases = [
        (("merge", tmp_path / "missing.nvtxrec", good, "-o", tmp_path / "o"), cli.EXIT_INPUT_NOT_FOUND, "missing"),
        (("merge", good, tmp_path / "empty.nvtxrec", "-o", tmp_path / "o"), cli.EXIT_INPUT_NOT_FOUND, "empty"),
        (("merge", good, tmp_path / "notes.txt", "-o", tmp_path / "o"), cli.EXIT_INPUT_NOT_FOUND, "notes.txt"),
        (("merge", good, "-o", tmp_path / "afile" / "o"), cli.EXIT_OUTPUT_NOT_WRITABLE, "afile"),
        (("merge", good, "-o", good), cli.EXIT_USAGE, "good"),
        (("merge", good, good, "-o", tmp_path / "o", "--label", "one"), cli.EXIT_USAGE, "--label"),
        (("merge", good, "-o", ""), cli.EXIT_USAGE, "-o"),
        (("merge", "-o", tmp_path / "o"), cli.EXIT_USAGE, "RECORDING"),
    ]
    for args, code, named in cases:
        proc = nvtx_tf(*args)
        assert proc.returncode == code, (args, proc.returncode, proc.stderr)
        lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
        if code != cli.EXIT_USAGE:
            _one_line_error(proc)
        assert lines[-1].startswith("nvtx-tf: error: ") and named in lines[-1], (named, proc.stderr)
        assert "Traceback" not in proc.stderr
        assert not (tmp_path / "o.nvtxrec").exists()  # nothing written for bad input
    # A read-only output folder (root ignores permission bits: a directory in the way of a segment's name does not
    # help either), so use a file where PREFIX.nvtxrec must be a folder.
    (tmp_path / "taken.nvtxrec").write_text("")
    proc = nvtx_tf("merge", good, "-o", tmp_path / "taken")
    assert proc.returncode == cli.EXIT_OUTPUT_NOT_WRITABLE, proc.stderr
    assert "taken.nvtxrec" in _one_line_error(proc)


@needs_recorder
def test_report_on_several_recordings(tmp_path):
    """report A B: the recordings merged first; --by-process names each process with its host."""
    _synthetic(tmp_path / "h1.nvtxrec", 4242, 1_000_000, 5_000_000_000_000, "one")
    _synthetic(tmp_path / "h2.nvtxrec", 4242, 2_000_000, 5_000_000_000_000 + 1000 * 10**9, "two")
    proc = nvtx_tf("report", tmp_path / "h1.nvtxrec", tmp_path / "h2", "--by-process", "--format", "csv")
    assert proc.returncode == 0, proc.stderr
    assert "h1:4242 worker one" in proc.stdout and "h2:4242 worker two" in proc.stdout
    assert "one" in proc.stdout and "two" in proc.stdout
    single = nvtx_tf("report", tmp_path / "h1.nvtxrec", "--format", "csv")
    assert single.returncode == 0 and "two" not in single.stdout
    proc = nvtx_tf("report", tmp_path / "h1.nvtxrec", tmp_path / "missing.nvtxrec")
    assert proc.returncode == cli.EXIT_INPUT_NOT_FOUND and "missing.nvtxrec" in _one_line_error(proc)
    (tmp_path / "x.sqlite").write_bytes(b"SQLite format 3\0" + b"\0" * 100)
    proc = nvtx_tf("report", tmp_path / "h1.nvtxrec", tmp_path / "x.sqlite")
    assert proc.returncode == cli.EXIT_USAGE and "x.sqlite" in proc.stderr.splitlines()[-1]


@needs_recorder
def test_clocks_within_a_millisecond_are_one_clock(tmp_path):
    """Offsets 0.5 ms apart: one clock, nothing shifted; 2 ms apart: two clocks, shifted by 2 ms.
    A recording whose processes ran on different clocks (a time namespace) is aligned per process."""
    base = 7_000_000_000_000
    _synthetic(tmp_path / "a.nvtxrec", 10, 1_000_000, base, "a")
    _synthetic(tmp_path / "near.nvtxrec", 11, 1_000_000, base + 500_000, "near")
    _synthetic(tmp_path / "far.nvtxrec", 12, 1_000_000, base + 2_000_000, "far")
    m = merge_mod.merge([tmp_path / "a.nvtxrec", tmp_path / "near.nvtxrec", tmp_path / "far.nvtxrec"], tmp_path / "m")
    assert [s["shift_ns"] for s in m["sources"]] == [0, 0, 2_000_000]
    rec = load(tmp_path / "m")
    assert [rec.find(name)[0].start_ns for name in ("a", "near", "far")] == [1_000_100, 1_000_100, 3_000_100]
    # one recording, two processes on clocks 1000 s apart
    _synthetic(tmp_path / "mixed.nvtxrec", 20, 1_000_000, base, "p20")
    _synthetic(tmp_path / "mixed.nvtxrec", 21, 5_000_000, base + 1000 * 10**9 + 4_000_000, "p21")
    m = merge_mod.merge([tmp_path / "mixed.nvtxrec"], tmp_path / "m2")
    assert m["sources"][0]["shift_ns"] == [0, 1000 * 10**9]
    rec = load(tmp_path / "m2")
    assert rec.find("p21")[0].start_ns - rec.find("p20")[0].start_ns == 1000 * 10**9 + 4_000_000


def test_rewrite_chunk_skips_whole_records():
    """Every record kind is stepped over by its length (strings, the payload extension's schema
    records and extended payload blocks included): only timestamps change. (merge's chunk
    rewrite is the native reader's nvtxr_rewrite_chunk.)"""
    from nvtx_plugins_tf.recorder.recording import _decoder, _synth

    body = (
        _synth.chunk_header(0, 99, 0)
        + _synth.string_def(1, "a text of 21 bytes...")
        + _synth.word0(21) + struct.pack("<II", 13, 0) + b"schema bytes!" + b"\0" * 3  # kPayloadSchema
        + _synth.word0(_synth.K_PUSH, 7 << 4, 0, 1) + struct.pack("<QQ", 1000, 20) + b"\x07" * 20 + b"\0" * 4  # ext
        + _synth.event(_synth.K_START, 2000, msg=1, range_id=5, color=0xFF00FF00, payload=("double", 1.5))
        + _synth.word0(_synth.K_THREAD_NAME, 0, 0, 1) + struct.pack("<q", 99)
        + _synth.word0(_synth.K_DOMAIN_CREATE, 0, 1, 1) + struct.pack("<Q", 3000)
    )  # fmt: skip
    chunk = bytearray(body.ljust(4096, b"\0"))
    assert _decoder.rewrite_chunk(chunk, 10**9, 99, 5_000_000) == _decoder.CHUNK_DONE
    expect = bytearray(body.ljust(4096, b"\0"))
    struct.pack_into("<q", expect, 8, 5_000_000)  # the main thread's tid (== pid)
    ts_offsets = []
    pos = 64 + len(_synth.string_def(1, "a text of 21 bytes...")) + 32
    ts_offsets.append(pos + 8)  # the ext-payload push
    pos += 16 + 8 + 24
    ts_offsets.append(pos + 8)  # the start
    pos += len(_synth.event(_synth.K_START, 2000, msg=1, range_id=5, color=0xFF00FF00, payload=("double", 1.5)))
    struct.pack_into("<q", expect, pos + 8, 5_000_000)  # the thread name of the main thread
    pos += 16
    ts_offsets.append(pos + 8)  # the domain's creation
    for off in ts_offsets:
        struct.pack_into("<Q", expect, off, struct.unpack_from("<Q", expect, off)[0] + 10**9)
    assert chunk == expect
    assert [struct.unpack_from("<Q", chunk, off)[0] for off in ts_offsets] == [10**9 + 1000, 10**9 + 2000, 10**9 + 3000]
