"""``nvtx-tf watch --web`` under hostile and careless use (issue 47); the bad ``[HOST:]PORT``
values are rows of tests/test_cli_hostile.py's table. Here what needs a socket or a live
process: a port in use (exit 11), a host that is not this machine's or does not resolve
(exit 2), each one line; SIGINT and SIGTERM end a serving watch (130, 143: one line, the port
free again); without bokeh, one line naming the extra (exit 19); with ``--json`` the lines go
to stdout and the URL to stderr; a foreign segment beside a good recording, in a folder whose
name is no UTF-8: the good one's steps, one warning, exit 6, the page's lines unharmed.
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from nvtx_plugins_tf import cli

pytest.importorskip("bokeh", reason="the 'web' extra")
PROGRAM = "import nvtx, time\nfor i in range(3):\n    with nvtx.annotate(f'step {i}'):\n        time.sleep(0.01)\n"


def _argv(*args) -> list[str]:
    return [sys.executable, "-m", "nvtx_plugins_tf", *map(str, args)]


@pytest.fixture(scope="module")
def rec(tmp_path_factory, child_env) -> Path:
    """A recording of 3 steps (PREFIX.nvtxrec)."""
    prefix = tmp_path_factory.mktemp("web") / "rank0"
    proc = subprocess.run(_argv("record", "-o", prefix, "--", sys.executable, "-c", PROGRAM), env=child_env(),
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return prefix.with_name("rank0.nvtxrec")


def _one_line(proc) -> str:
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("nvtx-tf: error: "), proc.stderr
    assert "Traceback" not in proc.stderr
    return lines[0]


def test_a_port_in_use(rec, child_env):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = subprocess.run(_argv("watch", rec, "--web", port), env=child_env(), capture_output=True, text=True,
                              timeout=300)  # fmt: skip
    assert proc.returncode == cli._common.EXIT_PORT_IN_USE == 11, proc.stderr
    assert _one_line(proc) == (
        f"nvtx-tf: error: --web 127.0.0.1:{port}: the port is already in use; choose another PORT (0: any free port)"
    )
    assert proc.stdout == ""


@pytest.mark.parametrize(
    "address, words",
    [("192.0.2.1:0", "192.0.2.1 is not an address of this machine"), ("no-such-host.invalid:0", "no-such-host")],
)
def test_a_host_not_of_this_machine(rec, child_env, address, words):
    proc = subprocess.run(_argv("watch", rec, "--web", address), env=child_env(), capture_output=True, text=True,
                          timeout=300)  # fmt: skip
    assert proc.returncode == cli.EXIT_USAGE, proc.stderr
    line = _one_line(proc)
    assert line.startswith(f"nvtx-tf: error: --web {address}: ") and words in line, line


@pytest.mark.parametrize("signo", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_ends_the_server_cleanly(rec, child_env, signo):
    proc = subprocess.Popen(_argv("watch", rec, "--web", "0", "--json", "--interval", "0.1"), env=child_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        first = proc.stderr.readline()  # (--json: the URL on stderr, the lines on stdout)
        assert first.startswith("nvtx-tf watch --web: http://127.0.0.1:"), first
        url = first.split()[-1]
        port = int(url.rsplit(":", 1)[1].strip("/"))
        assert proc.stderr.readline().startswith("from another machine: ")
        with urllib.request.urlopen(url, timeout=60) as response:
            assert response.status == 200 and b"bokeh" in response.read()
        steps = [json.loads(proc.stdout.readline()) for _ in range(3)]
        assert [o["step"] for o in steps] == [0, 1, 2]
        proc.send_signal(signo)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 128 + signo, err
    words = "interrupted (SIGINT)" if signo == signal.SIGINT else "terminated by SIGTERM"
    assert err.splitlines() == [f"nvtx-tf: error: {words}; stopped watching"], err
    assert out == ""
    with socket.socket() as again:  # (no listener left: the port is free; SO_REUSEADDR: past TIME_WAIT)
        again.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        again.bind(("127.0.0.1", port))
        again.listen()


def test_until_done_ends_the_page_with_the_job(rec, child_env):
    proc = subprocess.run(_argv("watch", rec, "--web", "0", "--until-done"), env=child_env(), capture_output=True,
                          text=True, timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[0].startswith("nvtx-tf watch --web: http://127.0.0.1:") and proc.stderr == ""


def test_without_bokeh_one_line_names_the_extra(rec, tmp_path, child_env):
    shadow = tmp_path / "shadow" / "bokeh"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('no bokeh here')\n")
    env = child_env()
    env["PYTHONPATH"] = f"{shadow.parent}:{env['PYTHONPATH']}"
    proc = subprocess.run(_argv("watch", rec, "--web", "0"), env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == cli._common.EXIT_WATCH_VIEW_UNAVAILABLE == 19, proc.stderr
    assert _one_line(proc) == "nvtx-tf: error: watch --web needs bokeh: pip install 'nvtx_plugins_tf[web]'"


def test_a_foreign_segment_in_a_folder_not_named_in_utf8(rec, tmp_path, child_env):
    import os
    import shutil

    odd = os.fsencode(str(tmp_path)) + b"/runs\xff\x1b[31m"
    os.mkdir(odd)
    shutil.copytree(rec, os.fsdecode(odd + b"/rank0.nvtxrec"))
    os.mkdir(odd + b"/evil.nvtxrec")
    with open(odd + b"/evil.nvtxrec/1-2.nvtxseg", "wb") as f:
        f.write(b"NVTXREC1" + b"\xff" * 40)
    argv = [sys.executable, "-m", "nvtx_plugins_tf", "watch", odd, "--web", "0", "--json", "--until-done"]
    proc = subprocess.run(argv, env=child_env(), capture_output=True, timeout=300)
    assert proc.returncode == cli.EXIT_DAMAGED, proc.stderr
    assert [json.loads(line)["step"] for line in proc.stdout.splitlines()] == [0, 1, 2]
    lines = proc.stderr.decode(errors="replace").splitlines()
    assert lines[0].startswith("nvtx-tf watch --web: http://127.0.0.1:") and lines[1].startswith("from another")
    assert len(lines) == 4 and "left out: " in lines[2] and "evil.nvtxrec" in lines[2], lines
    assert lines[3].startswith("nvtx-tf: error: 1 recording(s) damaged or left out"), lines
    assert b"Traceback" not in proc.stderr
