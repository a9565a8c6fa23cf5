"""The command line under real-world and hostile inputs, second table (issue 33: ``merge``,
``report``, ``export``, ``record``, ``pack``): damage is never silent however many inputs,
exports refused in one line when a table is missing, each recording once, a full disk or a
name that is no UTF-8 handled in one line or done, no temporary file left whatever moment a
signal lands, and range names that cannot drive the terminal.

Every row failed before its fix (the line quoted in each row's comment is what it did).
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from nvtx_plugins_tf import cli

PY = sys.executable
RANGES = "import nvtx\nfor i in range({n}):\n    with nvtx.annotate('r'): pass\n"


def _cli(env, *args, cwd=None) -> subprocess.CompletedProcess:
    argv = [PY, "-m", "nvtx_plugins_tf", *[a if isinstance(a, bytes) else str(a) for a in args]]
    return subprocess.run(argv, env=env, capture_output=True, timeout=300, cwd=cwd)


def _record(env, prefix: Path, n: int) -> None:
    proc = _cli(env, "record", "-o", prefix, "--", PY, "-c", RANGES.format(n=n))
    assert proc.returncode == 0, proc.stderr.decode()


@pytest.fixture(scope="module")
def inputs(tmp_path_factory, child_env) -> Path:
    """good (1,000 ranges, with good.json, good.sqlite, good_pqtdir), dam (packed, its last
    frames cut off), exports with a table or columns missing, folders whose only segment is
    empty or random bytes."""
    folder = tmp_path_factory.mktemp("inputs")
    env = child_env()
    _record(env, folder / "good", 1000)
    assert _cli(env, "export", "-t", "parquetdir", folder / "good").returncode == 0
    _record(env, folder / "dam", 100_000)
    [packed] = (folder / "dam.nvtxrec").glob("*.nvtxsegz")
    os.truncate(packed, packed.stat().st_size * 6 // 10)
    import shutil

    shutil.copy(folder / "good.sqlite", folder / "second.sqlite")
    shutil.copytree(folder / "good_pqtdir", folder / "second_pqtdir")
    shutil.copy(folder / "good.sqlite", folder / "nostrings.sqlite")
    with contextlib.closing(sqlite3.connect(folder / "nostrings.sqlite")) as db:
        db.execute("DROP TABLE StringIds")
        db.commit()
    shutil.copytree(folder / "good_pqtdir", folder / "nostrings_pqtdir")
    (folder / "nostrings_pqtdir" / "StringIds.parquet").unlink()
    shutil.copytree(folder / "good_pqtdir", folder / "nostart_pqtdir")
    import pyarrow.parquet as pq

    events = folder / "nostart_pqtdir" / "NVTX_EVENTS.parquet"
    pq.write_table(pq.read_table(events).drop(["start"]), events)
    with contextlib.closing(sqlite3.connect(folder / "other.sqlite")) as db:
        db.execute("CREATE TABLE t (x)")
    (folder / "foreign.nvtxrec").mkdir()
    (folder / "foreign.nvtxrec" / "1-2.nvtxseg").write_bytes(os.urandom(100_000))
    (folder / "zero.nvtxrec").mkdir()
    (folder / "zero.nvtxrec" / "1-2.nvtxseg").write_bytes(b"")
    return folder


def _rows(i: Path, out: Path, marker: Path):
    """(id, argv, exit code, text the line holds, what ``out`` holds afterwards: None = not checked)."""
    usage, damaged, not_found = cli.EXIT_USAGE, cli.EXIT_DAMAGED, cli.EXIT_INPUT_NOT_FOUND
    return [
        # 4: before, exit 0 and the 24 chunks that did not unpack silently dropped
        ("merge damaged good", ["merge", i / "dam", i / "good", "-o", out / "m"], damaged, "do not unpack", None),
        ("report damaged good", ["report", i / "dam", i / "good"], damaged, "do not unpack", []),
        # 13: before, exit 0 with every range named ""
        ("report sqlite without StringIds", ["report", i / "nostrings.sqlite"], not_found, "StringIds", []),
        ("report parquetdir without StringIds", ["report", i / "nostrings_pqtdir"], not_found, "StringIds", []),
        (
            "analyze sqlite without StringIds",
            ["analyze", i / "nostrings.sqlite", "-o", out / "an"],
            not_found,
            "StringIds",
            None,
        ),
        (
            "analyze parquetdir without StringIds",
            ["analyze", i / "nostrings_pqtdir", "-o", out / "an"],
            not_found,
            "StringIds",
            None,
        ),
        # 17: before, exit 1 "OperationalError: near ')'"
        ("report parquetdir lacking columns", ["report", i / "nostart_pqtdir"], not_found, "'start'", []),
        # 18: before, exit 7 "not a recording" for these, exit 2 "several paths" for SQLite files
        ("report two parquetdirs", ["report", i / "good_pqtdir", i / "second_pqtdir"], usage, "one at a time", []),
        ("report two sqlite files", ["report", i / "good.sqlite", i / "second.sqlite"], usage, "one at a time", []),
        # before, exit 0: every event twice
        ("merge A A", ["merge", i / "good", i / "good.nvtxrec", "-o", out / "m"], usage, "once", []),
        ("report A A", ["report", i / "good", f"{i}/./good"], usage, "once", []),
        # before, "cannot read X: X: no NVTX_EVENTS table"
        ("report sqlite of no export", ["report", i / "other.sqlite"], not_found, "NVTX_EVENTS", []),
        # before, exit 0 "0 segment(s) packed"
        ("pack foreign segment only", ["pack", i / "foreign"], not_found, "not a recording", []),
        # before, "... intact events were exported" while nothing was
        ("export zero-length segment", ["export", i / "zero", "-o", out / "z"], damaged, "nothing exported", []),
        ("export random segment", ["export", i / "foreign", "-o", out / "z"], damaged, "nothing exported", []),
        # before, exit 1 "OSError: File name too long" once the program had run
        (
            "record -o 240 characters",
            ["record", "-o", out / ("a" * 240), "--", PY, "-c", f"open({str(marker)!r}, 'w').close()"],
            usage,
            "too long",
            [],
        ),
    ]


def _ids():
    return [row[0] for row in _rows(Path("/i"), Path("/o"), Path("/m"))]


def _one_error_line(proc) -> str:
    stderr = proc.stderr.decode(errors="replace")
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("nvtx-tf: error: "), stderr
    assert "Traceback" not in stderr
    return lines[0]


@pytest.mark.parametrize("case", _ids())
def test_bad_input_gets_one_line_and_its_exit_code(case, inputs, tmp_path, child_env):
    out = tmp_path / "out"
    out.mkdir()
    marker = tmp_path / "ran"
    (row,) = [r for r in _rows(inputs, out, marker) if r[0] == case]
    _, argv, code, says, made = row
    proc = _cli(child_env(), *argv, cwd=tmp_path)
    line = _one_error_line(proc)
    assert proc.returncode == code, (proc.returncode, line)
    assert says in line, line
    assert not re.search(r"(\S+): \1:", line), f"the path said twice: {line}"
    assert "nvtx-tf-report-" not in line and ".tmp" not in line, f"a temporary name: {line}"
    assert "intact events were exported" not in line or "nothing" not in line
    assert not marker.exists(), "the program was launched"
    if made is not None:
        assert sorted(p.name for p in out.iterdir()) == made


def test_merged_recording_carries_its_inputs_damage(inputs, tmp_path, child_env):
    """A merged recording keeps its inputs' damage counts: ``report M`` and a merge of M
    report it (before: frames of a packed input that did not unpack were copied as
    never-written chunks; ``report M`` exit 0, clean)."""
    env = child_env()
    first = _cli(env, "merge", inputs / "dam", inputs / "good", "-o", tmp_path / "m")
    line = _one_error_line(first)
    assert first.returncode == cli.EXIT_DAMAGED and "dam.nvtxrec" in line and "intact events were exported" in line
    report = _cli(env, "report", tmp_path / "m")
    assert report.returncode == cli.EXIT_DAMAGED, report.stderr.decode()
    assert "damaged chunk(s)" in _one_error_line(report) and b"r" in report.stdout
    again = _cli(env, "merge", tmp_path / "m", inputs / "good", "-o", tmp_path / "m2")
    assert again.returncode == cli.EXIT_DAMAGED and "dam.nvtxrec" in _one_error_line(again)
    from nvtx_plugins_tf.recorder import load

    damage = load(tmp_path / "m2.nvtxrec").damage
    assert damage.damaged and damage.damaged_chunks == load(inputs / "dam.nvtxrec").damage.damaged_chunks


@pytest.fixture
def full_disk(tmp_path):
    """A real tmpfs of 2 MiB, filled up but for 16 KiB (skips where it cannot be mounted)."""
    mount = tmp_path / "full"
    mount.mkdir()
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount)], capture_output=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.decode().strip()}")
    try:
        free = os.statvfs(mount).f_bavail * os.statvfs(mount).f_frsize
        (mount / "filler").write_bytes(b"\0" * (free - (16 << 10)))
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


@pytest.fixture(scope="module")
def big(tmp_path_factory, child_env, c_sample) -> Path:
    """A recording of 4M events: its exports are written by threads and a child process."""
    folder = tmp_path_factory.mktemp("big") / "big.nvtxrec"
    program = c_sample("nvtx_sample")
    proc = subprocess.run([program, "stress", "2", "1000000"], env=child_env(folder), capture_output=True)
    assert proc.returncode == 0, proc.stderr.decode()
    return folder


@pytest.mark.parametrize("size", ["small", "big"])
@pytest.mark.parametrize("kind", ["arrow", "parquetdir", "json", "sqlite"])
def test_export_to_a_full_disk(kind, size, full_disk, inputs, request):
    """11: one line naming the output (never a hidden temporary name), exit 3, nothing
    partial. Before, arrow: a traceback from thread "nvtx-tf ArrowSink", then exit 1
    "RuntimeError: ... writer ended unexpectedly"."""
    recording = request.getfixturevalue("big") if size == "big" else inputs / "good.nvtxrec"
    env = request.getfixturevalue("child_env")()
    proc = _cli(env, "export", "-t", kind, "-o", full_disk / "x", recording)
    line = _one_error_line(proc)
    assert proc.returncode == cli.EXIT_OUTPUT_NOT_WRITABLE, line
    from nvtx_plugins_tf._export_types import output_path

    assert f"cannot write {output_path(full_disk / 'x', kind)}: " in line
    assert "No space left on device" in line or "database or disk is full" in line, line
    assert sorted(p.name for p in full_disk.iterdir()) == ["filler"]


@pytest.mark.parametrize("command", ["record", "merge", "export", "analyze"])
def test_output_names_that_are_no_utf8_work(command, inputs, tmp_path, child_env):
    """12: ``-o $'out_\\xff'`` writes its outputs under that name (paths are bytes on Linux),
    and the lines that print it do not fail under a UTF-8 locale's strict stdout. Before:
    exit 1 "UnicodeEncodeError", an empty output folder left; record wrote no exports."""
    name = b"out_\xff"
    argv = {
        "record": ["record", "-o", name, "--", PY, "-c", RANGES.format(n=10)],
        "merge": ["merge", inputs / "good", "-o", name],
        "export": ["export", "-t", "sqlite,json,arrow,parquetdir", "-o", name, inputs / "good"],
        "analyze": ["analyze", inputs / "good", "-o", name],
    }[command]
    proc = _cli(child_env(PYTHONIOENCODING="utf-8:strict"), *argv, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    made = sorted(os.listdir(os.fsencode(tmp_path)))
    expected = {
        "record": [b"out_\xff.json", b"out_\xff.nvtxrec", b"out_\xff.sqlite"],
        "merge": [b"out_\xff.json", b"out_\xff.nvtxrec", b"out_\xff.sqlite"],
        "export": [b"out_\xff.arrow", b"out_\xff.json", b"out_\xff.sqlite", b"out_\xff_pqtdir"],
        "analyze": [b"out_\xff"],
    }[command]
    assert made == expected
    if command == "export":
        report = _cli(child_env(), "report", b"out_\xff_pqtdir", cwd=tmp_path)
        assert report.returncode == 0 and b" r\n" in report.stdout, report.stderr
    if command == "analyze":
        assert b"rank_stats.parquet" in os.listdir(os.fsencode(tmp_path / "out_\udcff"))


def test_record_removes_the_stale_exports_of_its_prefix(tmp_path, child_env):
    """``record --export arrow -o s`` after a run that wrote s.json and s.sqlite: those no
    longer match s.nvtxrec and go (before, they stayed beside the new recording)."""
    env = child_env()
    _record(env, tmp_path / "s", 5)
    assert (tmp_path / "s.json").exists() and (tmp_path / "s.sqlite").exists()
    proc = _cli(env, "record", "--export", "arrow", "-o", tmp_path / "s", "--", PY, "-c", RANGES.format(n=3))
    assert proc.returncode == 0, proc.stderr.decode()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.arrow", "s.nvtxrec"]


def test_range_names_cannot_drive_the_terminal(tmp_path, child_env):
    """Range and domain names from the recorded program go to the terminal escaped: no ESC
    sequence (repaint, title), no newline forging a report line, no bidi override. Before,
    record and report printed them as they are."""
    program = (
        "import nvtx\n"
        "with nvtx.annotate('a\\x1b]0;title\\x07\\x1b[2J'): pass\n"
        "with nvtx.annotate('b\\n  99.0  1,000  forged'): pass\n"
        "with nvtx.annotate('c\\u202eevil', domain='D\\x1b[31m'): pass\n"
        "nvtx.push_range('open\\r\\x1b[H')\n"
    )
    env = child_env()
    record = _cli(env, "record", "-o", tmp_path / "ctl", "--", PY, "-c", program)
    assert record.returncode == 0, record.stderr.decode()
    report = _cli(env, "report", tmp_path / "ctl")
    domain = _cli(env, "report", tmp_path / "ctl", "--domain", "nope")
    for text in (record.stdout, report.stdout, domain.stderr):
        decoded = text.decode()
        assert not re.search("[\x00-\x08\x0b-\x1f\x7f\u202e]", decoded), decoded
        assert not any(line.lstrip().startswith("99.0") for line in decoded.splitlines()), decoded
    assert "a\\x1b]0;title\\x07\\x1b[2J" in report.stdout.decode()
    assert "D\\x1b[31m:c\\u202eevil" in report.stdout.decode()
    assert "D\\x1b[31m" in domain.stderr.decode() and domain.returncode == cli.EXIT_USAGE


# ---- a signal in the window between a temporary file's creation and its cleanup's ownership


def _wait_for(predicate, what: str, limit: int = 6000):
    for _ in range(limit):
        if predicate():
            return
        threading.Event().wait(0.01)
    raise AssertionError(f"timed out waiting for {what}")


@contextlib.contextmanager
def _as_the_cli_handles(signame: str):
    """SIGINT and SIGTERM raising KeyboardInterrupt and Terminated as the CLI has them."""
    from nvtx_plugins_tf.cli._common import Terminated, terminate_by_exception

    saved = terminate_by_exception()
    try:
        yield KeyboardInterrupt if signame == "SIGINT" else Terminated
    finally:
        for s, handler in saved.items():
            signal.signal(s, handler)


@pytest.mark.parametrize("signame", ["SIGINT", "SIGTERM"])
def test_signal_while_a_writer_thread_makes_its_temporary_file(signame, inputs, tmp_path, monkeypatch):
    """The race of tests/test_cli_hostile.py::test_signal_during_export_leaves_no_partial_file
    hit on purpose: the signal lands once the writer thread has made `.run.json.XXXX.tmp`,
    before the thread's sink was in the export's cleanup. Before, the thread was never told
    and the file stayed."""
    from nvtx_plugins_tf.recorder import outputs

    monkeypatch.setattr(outputs, "PARALLEL_MIN_EVENTS", 0)  # (the small recording written by a thread)
    real_start = threading.Thread.start

    def start_then_signal(thread):
        real_start(thread)
        if thread.name.startswith("nvtx-tf "):
            _wait_for(lambda: list(tmp_path.glob(".run.json.*.tmp")), "the writer's temporary file")
            os.kill(os.getpid(), getattr(signal, signame))

    monkeypatch.setattr(threading.Thread, "start", start_then_signal)
    with _as_the_cli_handles(signame) as raised, pytest.raises(raised):
        outputs.write_outputs(inputs / "good.nvtxrec", tmp_path / "run", types=("json",), summary=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == []


@pytest.mark.parametrize("signame", ["SIGINT", "SIGTERM"])
@pytest.mark.parametrize("kind", ["json", "arrow", "parquetdir", "sqlite"])
def test_signal_just_after_a_temporary_file_is_made(kind, signame, inputs, tmp_path, monkeypatch):
    """The signal lands right after the temporary file (or folder) is made, in this thread,
    before the code that made it holds it. Before, it stayed."""
    import tempfile

    from nvtx_plugins_tf.recorder import outputs

    def made_then_signal(real):
        def make(*args, **kwargs):
            made = real(*args, **kwargs)
            os.kill(os.getpid(), getattr(signal, signame))
            return made

        return make

    monkeypatch.setattr(tempfile, "mkstemp", made_then_signal(tempfile.mkstemp))
    monkeypatch.setattr(tempfile, "mkdtemp", made_then_signal(tempfile.mkdtemp))
    with _as_the_cli_handles(signame) as raised, pytest.raises(raised):
        outputs.write_outputs(inputs / "good.nvtxrec", tmp_path / "run", types=(kind,), summary=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == []
