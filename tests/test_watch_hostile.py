"""``nvtx-tf watch`` under hostile and careless use (issue 47); the bad command lines are rows
of tests/test_cli_hostile.py's table.

* A foreign file posing as a segment in a folder beside a good recording: the good one's steps
  are shown, the other left out in one warning, exit 6 with one error line.
* A folder whose name is no UTF-8; range and file names with control characters and rich
  markup: escaped on the terminal (as text), exact in JSON.
* SIGINT and SIGTERM end a watch that would run on: 130 and 143, one line, after the lines it
  printed.
* Without rich (the 'watch' extra), the terminal view is one line naming what to install,
  exit 19; ``--json`` needs none.
* Bytes of a live rank damaged after they were read (read in parts, they are not read again
  while it is written): the watch goes on, and the read after its writer ended finds the
  damage: named once, exit 6.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from nvtx_plugins_tf import cli

HOSTILE = "step\\x1b]0;owned\\x07[bold]x\\n"  # (as Python source: an OSC title, markup, a newline)
PROGRAM = f"""
import nvtx, time
for i in range(4):
    with nvtx.annotate(f"step {{i}}"):
        with nvtx.annotate("{HOSTILE}"):
            time.sleep(0.01)
"""


def _cli(env, *args, **kw) -> subprocess.CompletedProcess:
    argv = [sys.executable, "-m", "nvtx_plugins_tf", *[a if isinstance(a, bytes) else str(a) for a in args]]
    return subprocess.run(argv, env=env, capture_output=True, timeout=300, **kw)


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    """A folder whose name is no UTF-8, holding a recording of hostile range names."""
    from conftest import _child_env

    base = tmp_path_factory.mktemp("hostile")
    odd = os.fsencode(str(base)) + b"/run\xff\x1b[31m"
    os.mkdir(odd)
    proc = _cli(_child_env(), "record", "-o", odd + b"/rank0", "--export", "json", "--", sys.executable, "-c", PROGRAM)
    assert proc.returncode == 0, proc.stderr
    return Path(os.fsdecode(odd))


def test_names_are_exact_in_json_and_escaped_on_the_terminal(folder, child_env):
    proc = _cli(child_env(), "watch", os.fsencode(str(folder)), "--json", "--until-done")
    assert proc.returncode == 0, proc.stderr
    objects = [json.loads(line) for line in proc.stdout.decode().splitlines()]
    assert [o["step"] for o in objects] == [0, 1, 2, 3]
    assert all(HOSTILE.encode().decode("unicode_escape") in o["ranges"] for o in objects)
    assert proc.stdout.isascii()
    pytest.importorskip("rich", reason="the 'watch' extra")
    proc = _cli(child_env(COLUMNS=200), "watch", os.fsencode(str(folder)), "--until-done")
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout.decode()
    assert "\x1b" not in text and "\x07" not in text
    assert "step\\x1b]0;owned\\x07[bold]x\\n" in text  # (as text, not read as markup)


def test_a_foreign_segment_beside_a_good_recording(folder, tmp_path, child_env):
    import shutil

    shutil.copytree(folder / "rank0.nvtxrec", tmp_path / "rank0.nvtxrec")
    (tmp_path / "evil.nvtxrec").mkdir()
    (tmp_path / "evil.nvtxrec" / "1-2.nvtxseg").write_bytes(b"NVTXREC1" + b"\xff" * 40)
    proc = _cli(child_env(), "watch", tmp_path, "--json", "--until-done")
    assert proc.returncode == cli.EXIT_DAMAGED, proc.stderr
    assert len(proc.stdout.decode().splitlines()) == 4
    lines = proc.stderr.decode().splitlines()
    assert len(lines) == 2 and "left out: " in lines[0] and "evil.nvtxrec" in lines[0], lines
    assert lines[1].startswith("nvtx-tf: error: 1 recording(s) damaged or left out"), lines
    assert "Traceback" not in proc.stderr.decode()


@pytest.mark.parametrize("signo", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_ends_a_watch_cleanly(folder, child_env, signo):
    argv = [sys.executable, "-m", "nvtx_plugins_tf", "watch", os.fsencode(str(folder)), "--json", "--interval", "0.1"]
    proc = subprocess.Popen(argv, env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, bufsize=0)
    first = proc.stdout.readline()  # (watching: it runs on, the recording done, until told)
    assert json.loads(first)["step"] == 0
    time.sleep(0.3)
    proc.send_signal(signo)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signo, err
    assert len(out.decode().splitlines()) == 3  # (the other steps, printed before it)
    lines = err.decode().splitlines()
    assert len(lines) == 1 and lines[0].startswith("nvtx-tf: error: ") and "Traceback" not in err.decode(), lines
    assert lines[0].endswith("; stopped watching"), lines


def test_without_rich_the_view_says_what_to_install(folder, tmp_path, child_env):
    shadow = tmp_path / "shadow" / "rich"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('no rich here')\n")
    env = child_env()
    env["PYTHONPATH"] = os.pathsep.join([str(shadow.parent), env["PYTHONPATH"]])
    proc = _cli(env, "watch", os.fsencode(str(folder)), "--until-done")
    assert proc.returncode == cli._common.EXIT_WATCH_VIEW_UNAVAILABLE == 19, proc.stderr
    lines = proc.stderr.decode().splitlines()
    assert len(lines) == 1 and "pip install 'nvtx_plugins_tf[watch]'" in lines[0] and "--json" in lines[0]
    proc = _cli(env, "watch", os.fsencode(str(folder)), "--until-done", "--json")
    assert proc.returncode == 0 and len(proc.stdout.splitlines()) == 4, proc.stderr
    marker = tmp_path / "ran"
    program = f"open({str(marker)!r}, 'w').close()"
    proc = _cli(env, "record", "--watch", "-o", tmp_path / "r", "--", sys.executable, "-c", program)
    assert proc.returncode == 19 and not marker.exists() and not (tmp_path / "r.nvtxrec").exists(), proc.stderr
    assert proc.stderr.decode().count("\n") == 1 and "record --watch needs rich" in proc.stderr.decode()


@pytest.mark.parametrize("says", [b"HTTP/1.1 400 Bad Request\r\n\r\n", b""], ids=["a web server", "closes at once"])
def test_a_scheduler_that_is_not_dask_is_one_line(folder, child_env, says):
    """--scheduler naming a service that does not speak Dask's protocol (a dashboard's port, a
    web server): exit 15, one line naming the address and the fix; nothing read, nothing left."""
    import socket
    import threading

    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]

    def answer():
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn:
                conn.sendall(says)

    threading.Thread(target=answer, daemon=True).start()
    try:
        proc = _cli(child_env(), "watch", "--json", "--scheduler", f"tcp://127.0.0.1:{port}", os.fsencode(str(folder)))
    finally:
        server.close()
    assert proc.returncode == cli.EXIT_DASK_UNAVAILABLE == 15, proc.stderr
    lines = proc.stderr.decode().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"nvtx-tf: error: tcp://127.0.0.1:{port} does not speak Dask"), lines
    assert "8786" in lines[0] and proc.stdout == b""


DAMAGED_LATER = """
import os, sys, time, nvtx
def step(i):
    with nvtx.annotate(f"step {i}", domain="w"):
        for k in range(30):
            nvtx.push_range(f"r{k % 3}", domain="w")
            nvtx.pop_range(domain="w")
i = 0
while not os.path.exists(sys.argv[1]):  # (steps until told, read in parts meanwhile)
    step(i)
    i += 1
    time.sleep(0.02)
for i in range(i, i + 10):
    step(i)
time.sleep(1.0)  # (the steps read in parts before the writer ends)
"""


def test_bytes_damaged_after_they_were_read_are_said_at_the_end(tmp_path, recorder_env):
    """A live rank is read in parts: bytes already read are not read again while it is
    written. Damaged then (a sealed chunk's byte flipped), the watch goes on, each step shown
    once, and the read after the writer ended (whole) finds the damage: named once, exit 6."""
    rec, go = tmp_path / "rank0.nvtxrec", tmp_path / "go"
    rec.mkdir()
    script = tmp_path / "rank.py"
    script.write_text(DAMAGED_LATER)
    env = recorder_env(rec, NVTX_TF_CHUNK_SIZE="4096")
    rank = subprocess.Popen([sys.executable, str(script), str(go)], env=env)
    argv = [sys.executable, "-m", "nvtx_plugins_tf", "watch", str(rec), "--json", "--until-done", "--interval", "0.1"]
    watch = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        lines = [json.loads(watch.stdout.readline()) for _ in range(30)]  # (3 s or so: reads in parts)
        (segment,) = rec.iterdir()
        with open(segment, "r+b") as f:  # (chunk 0, sealed: a byte of its records flipped)
            f.seek(4096 + 64 + 8 * 10 + 7)  # (the segment's header, 4 KiB; chunk 0's 11th word, its high byte)
            byte = f.read(1)
            f.seek(-1, os.SEEK_CUR)
            f.write(bytes([byte[0] ^ 0x80]))
        go.touch()
        out = watch.stdout.read()  # (not communicate: it would skip the lines readline buffered)
        err = watch.stderr.read()
        watch.wait(timeout=60)
    finally:
        go.touch()
        rank.wait(timeout=60)
        watch.kill()
    lines += [json.loads(line) for line in out.splitlines()]
    assert watch.returncode == cli.EXIT_DAMAGED, err
    steps = [o["step"] for o in lines if o["kind"] == "step"]
    assert steps == list(range(len(steps))) and len(steps) >= 40, steps
    notes = err.splitlines()
    assert any(n.startswith("nvtx-tf: warning: damaged recording ") and "rank0.nvtxrec" in n for n in notes), notes
    assert "Traceback" not in err
