"""The command line under careless and hostile use (issue 21): a table of bad inputs for every
command, each answered with exactly one line ``nvtx-tf: error: ...`` naming the argument, a
distinct documented exit code, no traceback, nothing left behind, and for ``record`` the
program never launched; two records into one PREFIX; a capture inside a recording.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from nvtx_plugins_tf import cli
from nvtx_plugins_tf.recorder import load

PY = sys.executable
MARKS = "import nvtx; nvtx.mark('x')"


@pytest.fixture(scope="module")
def good(tmp_path_factory, child_env):
    """A small good recording (PREFIX), a text file, a PNG and an SQLite file that is no export."""
    folder = tmp_path_factory.mktemp("good")
    proc = _cli(
        child_env(), "record", "-o", folder / "rec", "--", PY, "-c", "import nvtx\nwith nvtx.annotate('r'): pass"
    )
    assert proc.returncode == 0, proc.stderr
    (folder / "text.txt").write_text("not a recording\n")
    (folder / "picture.png").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(64))
    import sqlite3

    with sqlite3.connect(folder / "other.sqlite") as db:
        db.execute("CREATE TABLE t (x)")
    return folder


def _cli(env, *args, cwd=None) -> subprocess.CompletedProcess:
    argv = [PY, "-m", "nvtx_plugins_tf", *[a if isinstance(a, bytes) else str(a) for a in args]]
    return subprocess.run(argv, env=env, capture_output=True, timeout=300, cwd=cwd)


def _rows(good: Path, out: Path, marker: Path):
    """(id, argv, expected exit code, text the line must hold)."""
    run = ["--", PY, "-c", f"open({str(marker)!r}, 'w').close()"]
    long_name = "a" * 300
    bad_bytes = os.fsencode(str(out)) + b"/\xff\xfe-bad"
    rec = good / "rec.nvtxrec"
    usage, not_writable, not_found = cli.EXIT_USAGE, cli.EXIT_OUTPUT_NOT_WRITABLE, cli.EXIT_INPUT_NOT_FOUND
    return [
        # record: -o
        ("record -o empty", ["record", "-o", "", *run], usage, "-o"),
        ("record -o /", ["record", "-o", "/", *run], usage, "-o"),
        ("record -o dir/", ["record", "-o", f"{out}/", *run], usage, "-o"),
        ("record -o too long", ["record", "-o", out / long_name, *run], usage, "too long"),
        ("record -o path too long", ["record", "-o", out / ("b/" * 2500), *run], not_writable, "too long"),
        ("record -o under a file", ["record", "-o", good / "text.txt" / "x", *run], not_writable, "text.txt"),
        ("record -o /proc", ["record", "-o", "/proc/x", *run], not_writable, "not writable"),
        ("record -o /sys", ["record", "-o", "/sys/x", *run], not_writable, "not writable"),
        ("record -o /dev/null/x", ["record", "-o", "/dev/null/x", *run], not_writable, "/dev/null"),
        # record: other flags
        (
            "record --png-window reversed",
            ["record", "-o", out / "r", "--png-window", "5:2", *run],
            usage,
            "--png-window",
        ),
        ("record --png-window negative", ["record", "-o", out / "r", "--png-window", "-1:2", *run], usage, "--png"),
        ("record --png-window word", ["record", "-o", out / "r", "--png-window", "x", *run], usage, "--png-window"),
        ("record --capture-range empty", ["record", "-o", out / "r", "--capture-range", "", *run], usage, "capture"),
        (
            "record --capture-range-end bad",
            ["record", "-o", out / "r", "--capture-range", "W", "--capture-range-end", "sometimes", *run],
            usage,
            "capture-range-end",
        ),  # fmt: skip
        ("record no command", ["record", "-o", out / "r"], usage, "command"),
        (
            "record missing command",
            ["record", "-o", out / "r", "--", out / "missing.sh"],
            cli.EXIT_COMMAND_NOT_FOUND,
            "missing.sh",
        ),  # fmt: skip
        ("record command is a dir", ["record", "-o", out / "r", "--", out], cli.EXIT_COMMAND_NOT_FOUND, str(out)),
        # report
        ("report missing", ["report", out / "missing"], not_found, "missing"),
        ("report empty", ["report", ""], not_found, "PATH ''"),
        ("report /dev/null", ["report", "/dev/null"], not_found, "/dev/null"),
        ("report /dev/zero", ["report", "/dev/zero"], not_found, "/dev/zero"),
        ("report text file", ["report", good / "text.txt"], not_found, "text.txt"),
        ("report png", ["report", good / "picture.png"], not_found, "picture.png"),
        ("report non-utf8 path", ["report", bad_bytes], not_found, "bad"),
        ("report --top 0", ["report", rec, "--top", "0"], usage, "--top"),
        ("report --top -1", ["report", rec, "--top", "-1"], usage, "--top"),
        ("report --top word", ["report", rec, "--top", "x"], usage, "--top"),
        ("report --pairs --format csv", ["report", rec, "--pairs", "--format", "csv"], usage, "--pairs"),
        ("report --pairs --by-process", ["report", rec, "--pairs", "--by-process"], usage, "--pairs"),
        ("report --format bad", ["report", rec, "--format", "xml"], usage, "--format"),
        # merge
        ("merge -o /sys", ["merge", "-o", "/sys/x", rec], not_writable, "not writable"),
        ("merge -o /proc", ["merge", "-o", "/proc/x", rec], not_writable, "not writable"),
        ("merge missing input", ["merge", "-o", out / "m", out / "missing"], not_found, "missing"),
        ("merge /dev/null input", ["merge", "-o", out / "m", "/dev/null"], not_found, "/dev/null"),
        ("merge text input", ["merge", "-o", out / "m", good / "text.txt"], not_found, "text.txt"),
        ("merge --label count", ["merge", "-o", out / "m", "--label", "a", "--label", "b", rec], usage, "--label"),
        # pack
        ("pack missing", ["pack", out / "missing"], not_found, "missing"),
        ("pack empty", ["pack", ""], not_found, "RECORDING ''"),
        ("pack /dev/null", ["pack", "/dev/null"], not_found, "/dev/null"),
        ("pack text file", ["pack", good / "text.txt"], not_found, "text.txt"),
        ("pack folder of no recording", ["pack", out], not_found, "not a recording"),
        ("pack no argument", ["pack"], usage, "RECORDING"),
        # view
        ("view --port negative", ["view", "--port", "-1", good / "rec"], usage, "--port"),
        ("view --port too large", ["view", "--port", "70000", good / "rec"], usage, "--port"),
        ("view --port word", ["view", "--port", "x", good / "rec"], usage, "--port"),
        # watch (tests/test_watch_hostile.py: damaged and foreign recordings, names, signals)
        ("watch missing", ["watch", out / "missing"], not_found, "missing"),
        ("watch empty", ["watch", ""], not_found, "REC ''"),
        ("watch /dev/null", ["watch", "/dev/null"], not_found, "/dev/null"),
        ("watch text file", ["watch", good / "text.txt"], not_found, "text.txt"),
        ("watch no argument", ["watch"], usage, "REC"),
        ("watch --interval 0", ["watch", "--interval", "0", rec], usage, "--interval"),
        ("watch --interval nan", ["watch", "--interval", "nan", rec], usage, "--interval"),
        ("watch --interval word", ["watch", "--interval", "x", rec], usage, "--interval"),
        ("watch --cpu-budget 0", ["watch", "--cpu-budget", "0", rec], usage, "--cpu-budget"),
        ("watch --stale-after negative", ["watch", "--stale-after", "-1", rec], usage, "--stale-after"),
        ("watch --step empty", ["watch", "--step", "", rec], usage, "--step"),
        ("watch --step @domain", ["watch", "--step", "@train", rec], usage, "--step"),
        # watch --scheduler (tests/test_watch_hosts.py: a REC no worker sees, signals; a service not Dask:
        # tests/test_watch_hostile.py)
        ("watch --scheduler word", ["watch", "--json", "--scheduler", "foo", rec], usage, "--scheduler 'foo'"),
        ("watch --scheduler empty", ["watch", "--json", "--scheduler", "", rec], usage, "--scheduler ''"),
        ("watch --scheduler port 0", ["watch", "--json", "--scheduler", "tcp://h:0", rec], usage, "PORT 1 to"),
        ("watch --scheduler inproc", ["watch", "--json", "--scheduler", "inproc://x", rec], usage, "inproc"),
        (
            "watch --scheduler unreachable",
            ["watch", "--json", "--scheduler", "tcp://127.0.0.1:9", rec],
            cli.EXIT_DASK_UNAVAILABLE,
            "cannot reach the Dask scheduler tcp://127.0.0.1:9",
        ),
        # watch --web (tests/test_watch_web_hostile.py: a port in use, hosts, signals)
        ("watch --web word", ["watch", "--web", "web", rec], usage, "--web"),
        ("watch --web too large", ["watch", "--web", "70000", rec], usage, "--web"),
        ("watch --web negative", ["watch", "--web", "127.0.0.1:-1", rec], usage, "--web"),
        ("watch --web no port", ["watch", "--web", "127.0.0.1:", rec], usage, "--web"),
        ("watch --web empty host", ["watch", "--web", ":8080", rec], usage, "--web"),
        ("watch --web control host", ["watch", "--web", "a\x1bb:8080", rec], usage, "--web"),
        # the CLI itself
        ("unknown command", ["bogus"], usage, "bogus"),
    ]


def _table_ids():
    return [row[0] for row in _rows(Path("/g"), Path("/o"), Path("/m"))]


@pytest.mark.parametrize("case", _table_ids())
def test_bad_input_gets_one_line_and_its_exit_code(case, good, tmp_path, child_env):
    out = tmp_path / "out"
    out.mkdir()
    marker = tmp_path / "ran"
    (row,) = [r for r in _rows(good, out, marker) if r[0] == case]
    _, argv, code, names = row
    before = sorted(p.name for p in good.iterdir())
    proc = _cli(child_env(), *argv, cwd=tmp_path)
    stderr = proc.stderr.decode(errors="replace")
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert proc.returncode == code, (proc.returncode, stderr)
    assert len(lines) == 1 and lines[0].startswith("nvtx-tf: error: "), stderr
    assert names in lines[0], lines[0]
    assert "Traceback" not in stderr and "Error:" not in lines[0].split("error: ", 1)[1][:30]
    assert not marker.exists(), "the program was launched"
    assert sorted(p.name for p in good.iterdir()) == before
    assert [p.name for p in out.iterdir()] == [], "output left behind"


@pytest.mark.parametrize(
    "argv", [["record", "-o"], ["report"], ["merge"], ["view"], ["watch"], ["report", "--bogus", "x"], []]
)
def test_usage_errors_are_short_and_point_to_help(argv, child_env):
    proc = _cli(child_env(), *argv)
    lines = [line for line in proc.stderr.decode().splitlines() if line.strip()]
    assert proc.returncode == cli.EXIT_USAGE
    assert 1 <= len(lines) <= 3 and "--help" in lines[-1], lines


def test_two_records_into_one_prefix(tmp_path, child_env):
    """Before: the second run deleted the first run's segment when it started; both exited 0."""
    gate = tmp_path / "go"
    first_program = (
        "import nvtx, os, time\n"
        "nvtx.mark('first')\n"
        f"open({str(tmp_path / 'started')!r}, 'w').close()\n"
        f"while not os.path.exists({str(gate)!r}): time.sleep(0.01)\n"
        "nvtx.mark('first end')\n"
    )
    env = child_env()
    first = subprocess.Popen(
        [PY, "-m", "nvtx_plugins_tf", "record", "-o", tmp_path / "run", "--", PY, "-c", first_program],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        for _ in range(3000):
            if (tmp_path / "started").exists():
                break
            subprocess.run(["sleep", "0.01"])
        second = _cli(env, "record", "-o", tmp_path / "run", "--", PY, "-c", MARKS)
    finally:
        gate.touch()
        out, err = first.communicate(timeout=300)
    line = second.stderr.decode().strip()
    assert second.returncode == cli.EXIT_OUTPUT_BUSY, line
    assert f"pid {first.pid}" in line and "-o" in line and line.count("\n") == 0, line
    assert first.returncode == 0, err
    assert sorted(m.message for m in load(tmp_path / "run.nvtxrec").marks) == ["first", "first end"]
    # once the first has ended, the prefix is free again
    third = _cli(env, "record", "-o", tmp_path / "run", "--", PY, "-c", MARKS)
    assert third.returncode == 0, third.stderr.decode()


def test_capture_inside_a_recording_keeps_the_outer_recording(tmp_path, child_env):
    """testing.capture() as the program's first NVTX use, under record (pytest under record):
    before, the outer recording was empty (exit 5)."""
    program = (
        "import nvtx\n"
        "from nvtx_plugins_tf.testing import capture\n"
        "with capture() as cap:\n"
        "    with nvtx.annotate('inside', domain='D'): pass\n"
        "with nvtx.annotate('after', domain='D'): pass\n"
        "print('capture saw', sorted(r.message for r in cap.ranges))\n"
    )
    proc = _cli(child_env(), "record", "-o", tmp_path / "outer", "--", PY, "-c", program)
    assert proc.returncode == 0, proc.stderr.decode()
    assert "capture saw ['inside']" in proc.stdout.decode()
    assert sorted(r.message for r in load(tmp_path / "outer.nvtxrec").ranges) == ["after", "inside"]


def _wait_for(predicate, what: str, limit: int = 6000):
    for _ in range(limit):
        if predicate():
            return
        subprocess.run(["sleep", "0.01"])
    raise AssertionError(f"timed out waiting for {what}")


@pytest.mark.parametrize("signame", ["SIGTERM", "SIGHUP", "SIGINT"])
def test_signal_during_export_leaves_no_partial_file(signame, tmp_path, child_env, c_sample):
    """A signal while record writes its exports (4M events: seconds of export): one line,
    128 + the signal's number, no temporary file, no process left, the recording intact and
    readable. Before: SIGTERM and SIGHUP killed record at once and left the partial
    `.NAME.json.XXXX.tmp` (tens of MB)."""
    import signal as signals

    program = c_sample("nvtx_sample")
    proc = subprocess.Popen(
        [PY, "-m", "nvtx_plugins_tf", "record", "-o", tmp_path / "big", "--", program, "stress", "2", "1000000"],
        env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip
    try:
        _wait_for(lambda: list(tmp_path.glob(".big.json.*.tmp")) or proc.poll() is not None, "the export")
        assert proc.poll() is None, "record ended before its export could be interrupted"
        proc.send_signal(getattr(signals, signame))
        _, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    signo = getattr(signals, signame)
    assert proc.returncode == 128 + signo, err
    lines = [line for line in err.splitlines() if line.strip() and not line.startswith("\r")]
    assert lines[-1].startswith("nvtx-tf: error: ") and "is intact" in lines[-1], err
    assert "Traceback" not in err
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == [], list(tmp_path.iterdir())
    assert not (tmp_path / "big.json").exists() and not (tmp_path / "big.sqlite").exists()
    leftover = subprocess.run(["pgrep", "-s", str(proc.pid)], capture_output=True, text=True).stdout.split()
    assert leftover == [], leftover
    report = _cli(child_env(), "report", tmp_path / "big")
    assert report.returncode == 0, report.stderr.decode()
    assert b"stress-0" in report.stdout


def test_our_commands_print_no_tensorflow_startup_lines(good, tmp_path, child_env):
    """doctor imports TensorFlow; report and merge do not: none of them shows its start-up
    lines (issue 21.9). A recorded program's own lines are left as they are."""
    from nvtx_plugins_tf._quiet import _STARTUP_LINE

    env = child_env()
    env.pop("TF_CPP_MIN_LOG_LEVEL", None)
    for argv in (["doctor"], ["report", good / "rec"], ["merge", "-o", tmp_path / "m", good / "rec.nvtxrec"]):
        proc = _cli(env, *argv)
        assert proc.returncode == 0, proc.stderr.decode()
        noise = [line for line in proc.stderr.decode().splitlines() if _STARTUP_LINE.match(line)]
        assert noise == [], (argv, noise)
    program = "import tensorflow as tf, nvtx; tf.config.list_physical_devices('GPU'); nvtx.mark('x')"
    proc = _cli(env, "record", "-o", tmp_path / "tf", "--", PY, "-c", program)
    assert proc.returncode == 0, proc.stderr.decode()
    assert any(_STARTUP_LINE.match(line) for line in proc.stderr.decode().splitlines()), "the program's own lines"
    verbose = _cli(dict(env, NVTX_TF_VERBOSE="1"), "doctor")
    assert any(_STARTUP_LINE.match(line) for line in verbose.stderr.decode().splitlines())
