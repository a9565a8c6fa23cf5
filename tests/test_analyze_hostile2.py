"""`nvtx-tf analyze` under wrong and hostile use, issue 48's rows (section 2):

* r48-1/2: ``--scheduler`` at a TCP service that is no Dask scheduler (an SSH server's
  banner, an HTTP server answering at once, a web server that waits for a request, as a Dask
  dashboard's port does): one line and exit 15 within the documented wait, nothing written;
  SIGINT or SIGTERM while it waits end it at once (128 + N), nothing written.
* r48-3: the summary prints range names and paths with their control characters escaped.
* r48-4: a run killed by SIGKILL leaves its hidden folder; the next successful run into the
  same OUTDIR removes it, never the folder of a run still alive (its lock) nor a young one.
* r48-6: an input that cannot be read among good ones: the outputs of the rest, exit 6.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from conftest import _child_env
from test_analyze_hostile import NO_PID, nvtx_tf, one_error, patched, synth_rank

from nvtx_plugins_tf.recorder.recording._synth import SegmentWriter

PY = sys.executable


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("runs48")
    for r in range(3):
        synth_rank(root / f"rank{r}.nvtxrec", NO_PID + 60 + r, slow=3_000_000 if r == 1 else 0)
    return root


@contextlib.contextmanager
def not_dask(greeting: bytes | None, answer: bytes | None = None):
    """A TCP service on loopback that is no Dask scheduler: to each connection it sends
    ``greeting`` at once, ``answer`` once it has read something, and keeps it open. Yields
    (its tcp:// address, an Event set at its first connection)."""
    server = socket.create_server(("127.0.0.1", 0))
    connected = threading.Event()
    held: list[socket.socket] = []

    def serve():
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            held.append(conn)
            connected.set()
            if greeting:
                conn.sendall(greeting)
            if answer:
                with contextlib.suppress(OSError):
                    conn.settimeout(30)
                    if conn.recv(100):
                        conn.sendall(answer)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"tcp://127.0.0.1:{server.getsockname()[1]}", connected
    finally:
        server.close()
        for conn in held:
            conn.close()


SERVICES = {
    "an SSH server's banner": (b"SSH-2.0-OpenSSH_9.2p1 Debian-2\r\n", None, "its first bytes b'SSH-2.0-'"),
    "an HTTP server answering 400 at once": (b"HTTP/1.1 400 Bad Request\r\n\r\n", None, "its first bytes b'HTTP/1.1'"),
    "an HTTP server waiting for a request (a dashboard's port)": (
        None,
        b"HTTP/1.0 400 x\r\n\r\n",
        "it said nothing in 10 s",
    ),
}


@pytest.mark.parametrize("service", list(SERVICES))
def test_r48_1_a_service_that_is_not_dask_is_one_line_and_exit_15(runs, tmp_path, service):
    greeting, answer, why = SERVICES[service]
    with not_dask(greeting, answer) as (address, _):
        proc = nvtx_tf("analyze", runs, "-o", tmp_path / "out", "--scheduler", address, timeout=120)
    assert proc.returncode == 15, proc.stderr
    line = one_error(proc)
    assert line.startswith(f"nvtx-tf: error: {address} does not speak Dask's protocol ({why}"), line
    assert "usually 8786" in line
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM"])
def test_r48_2_a_signal_while_waiting_for_the_scheduler_ends_it(runs, tmp_path, sig):
    """The signal is sent once the service saw the connection (the command then waits for its
    greeting): it ends the command with 128 + N, not the greeting's wait."""
    with not_dask(None) as (address, connected):
        proc = subprocess.Popen(
            [PY, "-m", "nvtx_plugins_tf", "analyze", runs, "-o", tmp_path / "out", "--scheduler", address],
            env=_child_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert connected.wait(120)
        proc.send_signal(getattr(signal, sig))
        _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 128 + getattr(signal, sig), stderr
    assert stderr.strip().splitlines() == [
        f"nvtx-tf: error: {'interrupted (SIGINT)' if sig == 'SIGINT' else 'terminated by SIGTERM'}; "
        "partial outputs removed"
    ], stderr
    assert not (tmp_path / "out").exists()


def test_r48_3_the_summary_escapes_names_and_paths(tmp_path):
    """The slow range of the straggler is named with ESC sequences and a newline; OUTDIR's name
    holds an ESC too: stdout shows them escaped, as record's summary does."""
    evil = "\x1b[31mRED\x1b[0m\x1b[2K\nforged line"
    for r in range(3):
        seg = SegmentWriter(pid=NO_PID + 70 + r, start_ns=1000, start_realtime_ns=1_700_000_000_000_000_000)
        t = seg.thread(NO_PID + 70 + r).string(1, evil).string(2, "compute")
        now = 10_000
        for i in range(8):
            slow = 2_000_000 if r == 2 else 0
            t.string(10 + i, f"step {i}").push(now, 10 + i).push(now + 10, 1).pop(now + 100_000 + slow)
            t.push(now + 100_010 + slow, 2).pop(now + 900_000 + slow).pop(now + 1_000_000 + slow)
            now += 1_001_000 + slow
        seg.write(tmp_path / "in" / f"rank{r}.nvtxrec")
    out = tmp_path / "out\x1b[2J"
    proc = nvtx_tf("analyze", tmp_path / "in", "-o", out)
    assert proc.returncode == 0, proc.stderr
    assert "\x1b" not in proc.stdout and "forged line" not in proc.stdout.replace("\\nforged line", ""), proc.stdout
    assert "\\x1b[31mRED" in proc.stdout and "out\\x1b[2J" in proc.stdout, proc.stdout


KILL_AFTER_FIRST_TABLE = """
    import os, signal
    import pyarrow.parquet as pq
    _orig = pq.write_table
    def write_table(*a, **k):
        _orig(*a, **k)
        os.kill(os.getpid(), signal.SIGKILL)
    pq.write_table = write_table
"""


def _aged(path: Path) -> Path:
    old = time.time() - 60
    os.utime(path, (old, old))
    return path


def test_r48_4_the_next_run_removes_a_killed_run_s_folder_never_a_live_one(runs, tmp_path):
    out = tmp_path / "out"
    first = nvtx_tf("analyze", runs, "-o", out)
    assert first.returncode == 0, first.stderr
    killed_inside = patched(KILL_AFTER_FIRST_TABLE, "analyze", runs, "-o", out)
    killed_beside = patched(KILL_AFTER_FIRST_TABLE, "analyze", runs, "-o", tmp_path / "new")
    assert killed_inside.returncode == killed_beside.returncode == -signal.SIGKILL
    (dead_inside,) = out.glob(".nvtx-tf-analyze.*.tmp")
    (dead_beside,) = tmp_path.glob(".new.*.tmp")
    assert list(dead_inside.iterdir()) and list(dead_beside.iterdir())  # (a table written in each)
    _aged(dead_inside), _aged(dead_beside)
    live = out / ".nvtx-tf-analyze.0123abcd.tmp"
    live.mkdir()
    _aged(live)
    young = out / ".nvtx-tf-analyze.4567cdef.tmp"
    young.mkdir()
    mine = out / ".nvtx-tf-analyze.notmine.tmp"  # (not this naming: a file of the user's)
    mine.mkdir()
    _aged(mine)
    fd = os.open(live, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # (a run still at work, on this host or another)
        (tmp_path / "plain.txt").write_text("x")
        failed = nvtx_tf("analyze", runs, "-o", tmp_path / "plain.txt" / "x")
        assert failed.returncode == 3 and dead_inside.exists()  # (a failed run into elsewhere changes nothing)
        second = nvtx_tf("analyze", runs, "-o", out)
        assert second.returncode == 0, second.stderr
        third = nvtx_tf("analyze", runs, "-o", tmp_path / "new")
        assert third.returncode == 0, third.stderr
    finally:
        os.close(fd)
    assert not dead_inside.exists() and not dead_beside.exists()
    assert live.exists() and young.exists() and mine.exists()


def test_r48_6_a_cut_sqlite_export_beside_a_good_input_is_exit_6_with_the_rest_written(runs, tmp_path):
    export = tmp_path / "rank9.sqlite"
    made = nvtx_tf("export", "-t", "sqlite", "-o", export, runs / "rank0.nvtxrec")
    assert made.returncode == 0, made.stderr
    data = export.read_bytes()
    export.write_bytes(data[: len(data) // 3])
    proc = nvtx_tf("analyze", runs / "rank1.nvtxrec", runs / "rank2.nvtxrec", export, "-o", tmp_path / "out")
    assert proc.returncode == 6, proc.stderr
    line = one_error(proc)
    assert line.startswith(f"nvtx-tf: error: left out: {export}: ") and line.endswith("count the other inputs")
    names = {r["RankName"] for r in pq.read_table(tmp_path / "out" / "rank_stats.parquet").to_pylist()}
    assert names == {"rank1", "rank2"}


def test_r48_5_an_export_named_after_a_recording_counts_only_when_it_is_that_recording_s(runs, tmp_path):
    """A folder of rank0.nvtxrec and rank0.sqlite: its own export is left out (one rank, nothing
    said); another run's rank0.sqlite (another process) is counted too, with a line saying so."""
    import shutil

    own = tmp_path / "own"
    shutil.copytree(runs / "rank0.nvtxrec", own / "rank0.nvtxrec")
    assert nvtx_tf("export", "-t", "sqlite,parquetdir", own / "rank0.nvtxrec").returncode == 0
    proc = nvtx_tf("analyze", own, "-o", tmp_path / "out_own")
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    assert proc.stdout.startswith("1 rank(s) in 1 input(s)"), proc.stdout

    other = tmp_path / "other"
    shutil.copytree(runs / "rank0.nvtxrec", other / "rank0.nvtxrec")
    made = nvtx_tf("export", "-t", "sqlite", "-o", other / "rank0.sqlite", runs / "rank1.nvtxrec")
    assert made.returncode == 0, made.stderr
    proc = nvtx_tf("analyze", other, "-o", tmp_path / "out_other")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.splitlines() == [
        f"nvtx-tf: warning: {other / 'rank0.sqlite'}: named after rank0.nvtxrec but of other processes "
        "(another run's export?): both counted"
    ], proc.stderr
    names = {r["RankName"] for r in pq.read_table(tmp_path / "out_other" / "rank_stats.parquet").to_pylist()}
    assert len(names) == 2, names
