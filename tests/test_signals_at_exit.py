"""A signal that comes as a command ends is never lost (issue 49): ``export``, ``merge``,
``pack``, ``record`` (its exports) and ``analyze`` (tests/test_analyze_hostile.py) end with
128 + N and one line, never exit 0 nor Python's "Exception ignored", and their outputs are
whole (this run's, or none).

Each point is reached by the code, not by timing: the process runs a preamble that patches a
function or starts a thread, then ``cli.main()`` as ``nvtx-tf`` does. The signal goes to
another thread of the process, which runs the signal's arrival (the C handler) before the
patched code goes on, as a signal from outside may land on any thread:

* while committing: in the middle of the output's rename (held back, then delivered);
* during the interpreter's shutdown: a non-daemon thread waits for the main thread to reach
  ``threading._shutdown`` (after ``sys.exit``) and signals itself then, the point where the
  handler's exception was "ignored" and the process exited 0.
"""

from __future__ import annotations

import json
import shutil
import signal
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import SIGNAL_ELSEWHERE, _child_env

from nvtx_plugins_tf.recorder import load
from nvtx_plugins_tf.recorder.recording._synth import SegmentWriter

PY = sys.executable
NO_PID = 3_999_100  # (a pid above any this machine hands out: `pack` packs a dead writer's segment)

POINTS = {
    "while committing": """
        import os
        _orig = os.replace
        def replace(*a, **k):
            signal_elsewhere(signal.{sig})
            os.replace = _orig
            return _orig(*a, **k)
        os.replace = replace
    """,
    "during the interpreter's shutdown": """
        import signal, threading
        def _at_shutdown():
            threading.main_thread().join()  # (returns once the main thread is in threading._shutdown)
            signal.pthread_kill(threading.get_ident(), signal.{sig})
        threading.Thread(target=_at_shutdown).start()  # (not a daemon: the shutdown waits for it)
    """,
}


def _rank(folder: Path, pid: int) -> Path:
    seg = SegmentWriter(pid=pid, start_ns=1000, start_realtime_ns=1_700_000_000_000_000_000)
    t = seg.thread(pid).string(1, "step").string(2, "data")
    for i in range(20):
        t.push(10_000 + i * 1000, 1).push(10_100 + i * 1000, 2).pop(10_500 + i * 1000).pop(10_900 + i * 1000)
    seg.write(folder)
    return folder


@pytest.fixture(scope="module")
def recordings(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("signals_at_exit")
    _rank(root / "a.nvtxrec", NO_PID)
    _rank(root / "b.nvtxrec", NO_PID + 1)
    return root


def _run(point: str, sig: str, *args, cwd: Path) -> subprocess.CompletedProcess:
    script = SIGNAL_ELSEWHERE + textwrap.dedent(POINTS[point]).replace("{sig}", sig)
    code = script + "\nimport sys\nfrom nvtx_plugins_tf import cli\nsys.exit(cli.main())\n"
    return subprocess.run(
        [PY, "-c", code, *map(str, args)], env=_child_env(), capture_output=True, text=True, timeout=300, cwd=cwd
    )


def _hidden(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob(".*"))


def _ended_by(proc: subprocess.CompletedProcess, sig: str) -> None:
    assert proc.returncode == 128 + getattr(signal, sig), proc.stderr
    assert "Exception ignored" not in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith(f"nvtx-tf: error: {'interrupted' if sig == 'SIGINT' else 'terminated'}"), proc.stderr


def _events(recording: Path) -> int:
    rec = load(recording)
    assert not rec.damage.damaged
    return len(rec.events)


SIGS = ["SIGINT", "SIGTERM"]


@pytest.mark.parametrize("sig", SIGS)
@pytest.mark.parametrize("point", list(POINTS))
def test_export(point, sig, recordings, tmp_path):
    proc = _run(point, sig, "export", "-t", "sqlite,json", "-o", tmp_path / "run", recordings / "a.nvtxrec",
                cwd=tmp_path)  # fmt: skip
    _ended_by(proc, sig)
    assert _hidden(tmp_path) == []
    outputs = sorted(p.name for p in tmp_path.iterdir())
    if point == "while committing":  # (the first output in whole, then the signal: the second never made)
        assert len(outputs) == 1, outputs
    else:
        assert outputs == ["run.json", "run.sqlite"]
    for name in outputs:  # each one whole
        if name.endswith(".json"):
            assert json.loads((tmp_path / name).read_text())["traceEvents"]
        else:
            with sqlite3.connect(tmp_path / name) as db:
                assert db.execute("SELECT COUNT(*) FROM NVTX_EVENTS").fetchone()[0] == 40  # (20 steps of two ranges)


@pytest.mark.parametrize("sig", SIGS)
@pytest.mark.parametrize("point", list(POINTS))
def test_merge(point, sig, recordings, tmp_path):
    proc = _run(point, sig, "merge", "-o", tmp_path / "m", recordings / "a.nvtxrec", recordings / "b.nvtxrec",
                cwd=tmp_path)  # fmt: skip
    _ended_by(proc, sig)
    assert _hidden(tmp_path) == []
    if point == "during the interpreter's shutdown":
        assert sorted(p.name for p in tmp_path.iterdir()) == ["m.json", "m.nvtxrec", "m.sqlite"]
    if (tmp_path / "m.nvtxrec").exists():  # (whole: every event of both inputs)
        assert _events(tmp_path / "m.nvtxrec") == 2 * _events(recordings / "a.nvtxrec")


@pytest.mark.parametrize("sig", SIGS)
def test_pack(sig, recordings, tmp_path):
    rec = Path(shutil.copytree(recordings / "a.nvtxrec", tmp_path / "a.nvtxrec"))
    before = _events(rec)
    proc = _run("during the interpreter's shutdown", sig, "pack", rec, cwd=tmp_path)
    _ended_by(proc, sig)
    assert [p.suffix for p in rec.iterdir()] == [".nvtxsegz"] and _hidden(rec) == []
    assert _events(rec) == before


@pytest.mark.parametrize("sig", SIGS)
def test_record(sig, tmp_path):
    proc = _run("during the interpreter's shutdown", sig, "record", "-o", tmp_path / "r", "--export", "sqlite",
                "--", PY, "-c", "import nvtx\nwith nvtx.annotate('r'): pass", cwd=tmp_path)  # fmt: skip
    _ended_by(proc, sig)
    assert _hidden(tmp_path) == ["r.nvtxrec/.lock"]  # (record's lock file: left by every record)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.nvtxrec", "r.sqlite"]
    assert _events(tmp_path / "r.nvtxrec") == 1
