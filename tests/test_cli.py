"""The nvtx-tf command line, end to end with the native recorder (libnvtx_recorder.so)."""

from __future__ import annotations

import json
import re
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from conftest import _child_env

from nvtx_plugins_tf import cli
from nvtx_plugins_tf.recorder.recording._synth import SEGMENT_HEADER_SIZE, SegmentWriter

ROOT = Path(__file__).resolve().parent.parent

try:
    from nvtx_plugins_tf._native_libs import native_library

    native_library("recorder")
    native_library("reader")
    _RECORDER_ERROR = None
except Exception as exc:  # noqa: BLE001
    _RECORDER_ERROR = str(exc)

needs_recorder = pytest.mark.skipif(_RECORDER_ERROR is not None, reason=f"recorder not built: {_RECORDER_ERROR}")


_env = _child_env


def nvtx_tf(*args, cwd=None, timeout=120):
    return subprocess.run(
        [sys.executable, "-m", "nvtx_plugins_tf", *map(str, args)],
        capture_output=True,
        text=True,
        env=_env(),
        cwd=cwd,
        timeout=timeout,
    )


def _script(tmp_path, name, body):
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return path


def _one_line_error(proc):
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert lines and lines[-1].startswith("nvtx-tf: error: "), proc.stderr
    assert "Traceback" not in proc.stderr


ANNOTATED = """
import nvtx, time
with nvtx.annotate("Dense 1", color="green", domain="tf", category="layers", payload=3):
    time.sleep(0.002)
    nvtx.push_range("inner", color=0xFF123456, payload=2.5)
    nvtx.pop_range()
rid = nvtx.start_range("async load", color="red", payload=-4)
nvtx.mark("checkpoint", domain="tf", payload=7)
nvtx.end_range(rid)
for i in range(3):
    with nvtx.annotate("Dense 1", domain="tf"):
        pass
nvtx.push_range("outer", domain="other")
nvtx.push_range("nested", domain="other")
nvtx.pop_range(domain="other")
nvtx.pop_range(domain="other")
print("script output line")
"""


@needs_recorder
def test_record_exports_exact_attributes(tmp_path):
    script = _script(tmp_path, "annotated.py", ANNOTATED)
    proc = nvtx_tf("record", "-o", tmp_path / "out", "--png", "--", sys.executable, script)
    assert proc.returncode == 0, proc.stderr
    assert "script output line" in proc.stdout
    assert "tf:Dense 1" in proc.stdout and "Total Time (ns)" in proc.stdout
    assert (tmp_path / "out.nvtxrec").is_dir() and (tmp_path / "out.png").stat().st_size > 0

    events = json.loads((tmp_path / "out.json").read_text())["traceEvents"]
    by_name = {}
    for e in events:
        if e["ph"] != "M":
            by_name.setdefault(e["name"], []).append(e)
    dense = [e for e in by_name["Dense 1"] if e["ph"] == "X"]
    assert len(dense) == 4 and all(e["cat"] == "tf" for e in dense)
    first = min(dense, key=lambda e: e["ts"])
    assert first["args"]["category_name"] == "layers" and first["args"]["payload"] == 3
    assert first["args"]["color"] == "#008000" and first["dur"] >= 2000  # green, slept 2 ms
    inner = by_name["inner"][0]
    assert inner["ph"] == "X" and inner["args"]["payload"] == 2.5 and inner["args"]["color"] == "#123456"
    assert first["ts"] <= inner["ts"] and inner["ts"] + inner["dur"] <= first["ts"] + first["dur"]
    b, e = sorted(by_name["async load"], key=lambda x: x["ph"])
    assert (b["ph"], e["ph"]) == ("b", "e") and b["id2"] == e["id2"] and b["cat"] == e["cat"]
    assert b["args"]["payload"] == -4 and b["args"]["color"] == "#ff0000"
    mark = by_name["checkpoint"][0]
    assert mark["ph"] == "i" and mark["cat"] == "tf" and mark["args"]["payload"] == 7
    nested = by_name["nested"][0]
    assert nested["args"]["depth"] == 1 and by_name["outer"][0]["args"]["depth"] == 0

    con = sqlite3.connect(tmp_path / "out.sqlite")
    # The nvtx package registers its strings: nsys (and so our export) puts them in textId.
    con.execute(
        "CREATE TEMP VIEW ev AS SELECT e.*, coalesce(e.text, s.value) AS name FROM NVTX_EVENTS e "
        "LEFT JOIN StringIds s ON s.id = e.textId"
    )
    count, avg = con.execute(
        "SELECT count(*), avg(end - start) FROM ev WHERE name LIKE 'Dense 1' AND start > 0"
    ).fetchone()
    assert count == 4 and avg > 0
    domains = dict(con.execute("SELECT text, domainId FROM NVTX_EVENTS WHERE eventType = 75"))
    assert {"tf", "other"} <= set(domains)
    category, payload, color = con.execute(
        "SELECT category, coalesce(int64Value, uint64Value), color FROM ev "
        "WHERE name = 'Dense 1' AND domainId = ? ORDER BY start LIMIT 1",
        (domains["tf"],),
    ).fetchone()
    assert category is not None and (payload, color & 0xFFFFFF) == (3, 0x008000)
    assert con.execute("SELECT text FROM NVTX_EVENTS WHERE eventType = 33").fetchall() == [("layers",)]
    assert con.execute("SELECT doubleValue, color FROM ev WHERE name = 'inner'").fetchone() == (2.5, 0xFF123456)
    assert con.execute(
        "SELECT text FROM NVTX_EVENTS WHERE eventType = 33 AND category = ?", (category,)
    ).fetchone() == ("layers",)
    assert con.execute("SELECT eventType, int64Value FROM ev WHERE name = 'async load'").fetchone() == (60, -4)
    assert con.execute("SELECT eventType, end FROM ev WHERE name = 'checkpoint'").fetchone() == (34, None)

    report = nvtx_tf("report", tmp_path / "out.sqlite")
    assert report.returncode == 0 and "tf:Dense 1" in report.stdout and "other:nested" in report.stdout
    report = nvtx_tf("report", tmp_path / "out.nvtxrec", "--by-process")
    assert report.returncode == 0 and "PID" in report.stdout


@needs_recorder
def test_exit_code_propagation(tmp_path):
    code = "import nvtx; nvtx.mark('x'); raise SystemExit(3)"
    proc = nvtx_tf("record", "-o", tmp_path / "p", "--", sys.executable, "-c", code)
    assert proc.returncode == 3, proc.stderr
    assert (tmp_path / "p.json").exists()
    code = "import nvtx, os, signal; nvtx.mark('x'); os.kill(os.getpid(), signal.SIGKILL)"
    proc = nvtx_tf("record", "-o", tmp_path / "k", "--", sys.executable, "-c", code)
    assert proc.returncode == 128 + signal.SIGKILL


@needs_recorder
def test_error_exit_codes(tmp_path):
    (tmp_path / "afile").write_text("")
    cases = [
        (("record", "-o", tmp_path / "x"), cli.EXIT_USAGE),
        (("record",), cli.EXIT_USAGE),
        (("bogus",), cli.EXIT_USAGE),
        (("record", "-o", tmp_path / "afile" / "x", "--", sys.executable, "-c", "pass"), cli.EXIT_OUTPUT_NOT_WRITABLE),
        (("record", "-o", tmp_path / "nodir" / "x", "--", sys.executable, "-c", "pass"), cli.EXIT_NO_EVENTS),
        (("record", "-o", tmp_path / "c", "--", "no-such-command-xyz"), cli.EXIT_COMMAND_NOT_FOUND),
        (("record", "-o", tmp_path / "c", "--", tmp_path / "missing.sh"), cli.EXIT_COMMAND_NOT_FOUND),
        (("record", "-o", tmp_path / "e", "--", sys.executable, "-c", "pass"), cli.EXIT_NO_EVENTS),
        (("report", tmp_path / "does-not-exist"), cli.EXIT_INPUT_NOT_FOUND),
        (("report", tmp_path / "afile"), cli.EXIT_INPUT_NOT_FOUND),
    ]
    for args, code in cases:
        proc = nvtx_tf(*args)
        assert proc.returncode == code, (args, proc.returncode, proc.stderr)
        _one_line_error(proc)
    # Output path taken by a directory (root ignores permission bits, this still fails).
    (tmp_path / "busy.json").mkdir()
    proc = nvtx_tf("record", "-o", tmp_path / "busy", "--", sys.executable, "-c", "import nvtx; nvtx.mark('m')")
    assert proc.returncode == cli.EXIT_OUTPUT_NOT_WRITABLE, proc.stderr
    _one_line_error(proc)
    # the codes the guide documents (docs/cli.md), one per failure
    assert (
        cli.EXIT_USAGE,
        cli.EXIT_OUTPUT_NOT_WRITABLE,
        cli.EXIT_COMMAND_NOT_FOUND,
        cli.EXIT_NO_EVENTS,
        cli.EXIT_DAMAGED,
        cli.EXIT_INPUT_NOT_FOUND,
        cli.EXIT_RECORDER_UNAVAILABLE,
    ) == (2, 3, 4, 5, 6, 7, 8)


def test_every_exit_code_is_its_documented_number():
    """All the CLI's exit codes, by their literal numbers: a changed or a new code is noticed."""
    from nvtx_plugins_tf.cli import _common

    codes = {name: value for name, value in vars(_common).items() if name.startswith("EXIT_")}
    assert codes == {
        "EXIT_OK": 0,
        "EXIT_FAILURE": 1,
        "EXIT_USAGE": 2,
        "EXIT_OUTPUT_NOT_WRITABLE": 3,
        "EXIT_COMMAND_NOT_FOUND": 4,
        "EXIT_NO_EVENTS": 5,
        "EXIT_DAMAGED": 6,
        "EXIT_INPUT_NOT_FOUND": 7,
        "EXIT_RECORDER_UNAVAILABLE": 8,
        "EXIT_NO_CAPTURE_WINDOW": 9,
        "EXIT_VIEWER_UNAVAILABLE": 10,
        "EXIT_PORT_IN_USE": 11,
        "EXIT_NO_RANGE_IDS": 12,
        "EXIT_OUTPUT_BUSY": 13,
        "EXIT_OUTPUT_EXISTS": 14,
        "EXIT_DASK_UNAVAILABLE": 15,
        "EXIT_REGRESSION": 16,
        "EXIT_INCONCLUSIVE": 17,
        "EXIT_STATS_UNAVAILABLE": 18,
        "EXIT_WATCH_VIEW_UNAVAILABLE": 19,
    }
    # the package's names are the same numbers
    assert all(getattr(cli, name, value) == value for name, value in codes.items())


def test_damaged_recording_reports_intact_events(tmp_path):
    rec = tmp_path / "dmg.nvtxrec"
    w = SegmentWriter(pid=5)
    t = w.thread(5)
    t.string(1, "kept").push(10, 1).pop(20).push(30, 1).pop(45)
    data = bytearray(bytes(w))
    data[SEGMENT_HEADER_SIZE + 64 + 24 + 64] = 0x7E  # garbage after the two ranges
    rec.mkdir()
    (rec / "5-1.nvtxseg").write_bytes(data)
    proc = nvtx_tf("report", rec)
    assert proc.returncode == cli.EXIT_DAMAGED
    assert "kept" in proc.stdout and "1 damaged chunk" in proc.stderr
    _one_line_error(proc)
    (rec / "5-1.nvtxseg").write_bytes(b"garbage" * 10)
    proc = nvtx_tf("report", rec)
    assert proc.returncode == cli.EXIT_DAMAGED
    _one_line_error(proc)


def test_main_in_process_usage_error(capsys):
    assert cli.main([]) == cli.EXIT_USAGE
    assert cli.main(["report", "/nonexistent/path/x"]) == cli.EXIT_INPUT_NOT_FOUND
    assert "nvtx-tf: error:" in capsys.readouterr().err


def test_cli_does_not_import_tensorflow(tmp_path):
    code = (
        "import sys; from nvtx_plugins_tf import cli; cli.main(['report', '/nonexistent']); "
        "import nvtx_plugins_tf.recorder, nvtx_plugins_tf.testing; "
        "print('tensorflow' in sys.modules)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=_env())
    assert proc.stdout.strip() == "False", proc.stderr


SPAWN = """
import multiprocessing as mp
import numpy as np
import nvtx

def work(i):
    with nvtx.annotate(f"matrix {i}", domain="worker"):
        a = np.random.rand(200, 200)
        (a @ a).sum()

if __name__ == "__main__":
    mp.set_start_method("spawn")
    with nvtx.annotate("parent", domain="main"):
        procs = [mp.Process(target=work, args=(i,)) for i in range(2)]
        for p in procs:
            p.start()
        for p in procs:
            p.join()
"""


@needs_recorder
def test_multiprocessing_spawn_three_processes(tmp_path):
    script = _script(tmp_path, "spawn_demo.py", SPAWN)
    proc = nvtx_tf("record", "-o", tmp_path / "mp", "--", sys.executable, script, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    events = json.loads((tmp_path / "mp.json").read_text())["traceEvents"]
    ranges = [e for e in events if e["ph"] == "X"]
    pids = {e["name"]: e["pid"] for e in ranges}
    assert set(pids) == {"parent", "matrix 0", "matrix 1"}
    assert len(set(pids.values())) == 3
    parent = next(e for e in ranges if e["name"] == "parent")
    for name in ("matrix 0", "matrix 1"):  # one timeline: children inside the parent's range
        child = next(e for e in ranges if e["name"] == name)
        assert parent["ts"] <= child["ts"] <= parent["ts"] + parent["dur"]
    names = {e["pid"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    assert names >= set(pids.values())
    report = nvtx_tf("report", tmp_path / "mp.nvtxrec", "--by-process")
    assert report.returncode == 0 and "worker:matrix 0" in report.stdout


SLOW = """
import nvtx, sys, time
for i in range(5):
    with nvtx.annotate(f"step {i}", domain="train"):
        pass
open(sys.argv[1], "w").close()
with nvtx.annotate("interrupted", domain="train"):
    time.sleep(60)
"""


@needs_recorder
def test_sigterm_forwarded_and_completed_ranges_kept(tmp_path):
    script = _script(tmp_path, "slow.py", SLOW)
    ready = tmp_path / "ready"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "nvtx_plugins_tf",
            "record",
            "-o",
            str(tmp_path / "t"),
            "--",
            sys.executable,
            str(script),
            str(ready),
        ],
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.time() + 60
    while not ready.exists():
        assert proc.poll() is None and time.time() < deadline, proc.communicate()
        time.sleep(0.05)
    time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM, err
    events = json.loads((tmp_path / "t.json").read_text())["traceEvents"]
    done = sorted(e["name"] for e in events if e["ph"] == "X")
    assert done == [f"step {i}" for i in range(5)]
    unclosed = [e for e in events if e["ph"] == "B"]
    assert [e["name"] for e in unclosed] == ["interrupted"]
    assert "Traceback" not in err


@needs_recorder
def test_cli_imports_nothing_heavy_before_running_command(tmp_path):
    (tmp_path / "afile").write_text("")
    code = (
        "import sys; from nvtx_plugins_tf import cli; cli.main(['record', '-o', sys.argv[1], '--', 'true']); "
        "print(sorted(m for m in ('numpy', 'tensorflow', 'nvtx_plugins_tf.recorder') if m in sys.modules))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "afile" / "x")], capture_output=True, text=True, env=_env()
    )
    assert proc.stdout.strip() == "[]", proc.stderr


def test_cli_page_lists_every_exit_code():
    """The guide's table of exit codes (docs/cli.md, "Exit codes") has one row per code of
    _common, each explained, and no row for a code that does not exist (issues 21, 22)."""
    from nvtx_plugins_tf.cli import _common

    text = (ROOT / "docs" / "cli.md").read_text()
    section = text[text.index("## Exit codes") :]
    section = section[: section.index("\n## ")]
    rows = dict(re.findall(r"^\| (\d+) \| (.+?) \|$", section, re.M))
    codes = {str(value) for name, value in vars(_common).items() if name.startswith("EXIT_")}
    assert set(rows) == codes, sorted(set(rows) ^ codes)
    assert all(len(meaning) > 5 for meaning in rows.values()), rows
    assert "| 128 + N |" in section


def test_version_is_the_packages_one_version():
    """`nvtx-tf --version` prints `nvtx-tf X` with X = nvtx_plugins_tf.__version__ (its one owner), exit 0."""
    import nvtx_plugins_tf

    proc = nvtx_tf("--version")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == f"nvtx-tf {nvtx_plugins_tf.__version__}\n"
    assert re.fullmatch(r"\d+\.\d+\.\d+", nvtx_plugins_tf.__version__)


def test_doctor_prints_the_version():
    import nvtx_plugins_tf

    proc = nvtx_tf("doctor", timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[0].startswith(f"nvtx_plugins_tf: {nvtx_plugins_tf.__version__} imported from ")
