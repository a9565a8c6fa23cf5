"""record's exports from one decode (recorder/exports/one_pass.py) and their progress line on a terminal."""

from __future__ import annotations

import errno
import io
import os
import sqlite3
import subprocess
import sys
import textwrap

import pytest
from conftest import _child_env
from test_exports import _recording

from nvtx_plugins_tf.cli._exports import write_exports
from nvtx_plugins_tf.recorder import outputs
from nvtx_plugins_tf.recorder.exports import one_pass, remote
from nvtx_plugins_tf.recorder.exports.one_pass import Progress
from nvtx_plugins_tf.recorder.exports.sqlite import SqliteSink, export_sqlite
from nvtx_plugins_tf.recorder.exports.trace_json import export_json
from nvtx_plugins_tf.recorder.recording import _decoder
from nvtx_plugins_tf.recorder.recording.reader import DEFAULT_BATCH, RecordingReader
from nvtx_plugins_tf.recorder.reports.summary import summarize
from nvtx_plugins_tf.recorder.timeline import render

RANGES = DEFAULT_BATCH + 5000  # push/pop ranges of the big thread: two batches at least


def _big_recording(tmp_path):
    """test_exports' recording (two processes, async ranges ended on another thread, marks,
    an open range, categories, thread names, a registered string) and a third process with
    more ranges than one batch holds."""
    from nvtx_plugins_tf.recorder.recording._synth import SegmentWriter

    rec = _recording(tmp_path)
    w = SegmentWriter(pid=3000, start_ns=12_000, chunk_size=1 << 16, process_name="loop")
    th = w.thread(3000)
    th.string(1, "step").string(2, "loop").domain_create(12_001, 1, 2)
    t = 40_000
    for i in range(RANGES):
        th.push(t, 1, domain=1, color=0xFF000000 | i).pop(t + 100 + i % 700, domain=1)
        t += 1_000
    # a category and a domain named after the first batch (a remote sink sees them too)
    th.string(3, "late").category_name(1, 7, 3).push(t, 1, domain=1, category=7).pop(t + 50, domain=1)
    th.domain_create(t + 60, 2, 3).push(t + 70, 3, domain=2).pop(t + 80, domain=2)
    w.write(rec)
    return rec


@pytest.fixture(params=[False, True], ids=["in-process", "remote"])
def parallel(request, monkeypatch):
    """write_exports with every export written by this thread, or (two cores) the SQLite file
    by a child process and the others by threads; yields the (kind, sink) made remote."""
    made = []
    if request.param:
        if len(os.sched_getaffinity(0)) < 2:
            pytest.skip("one core: write_exports writes everything in its own thread")
        for kind in (remote.ChildSink, remote.ThreadSink):

            def spy(self, *args, init=kind.__init__, kind=kind, **kwargs):
                made.append((kind.__name__, args[1].__name__))
                init(self, *args, **kwargs)

            monkeypatch.setattr(kind, "__init__", spy)
    monkeypatch.setattr(outputs, "PARALLEL_MIN_EVENTS", 0 if request.param else 1 << 62)
    yield made
    if request.param:
        assert ("ChildSink", "SqliteSink") in made
        assert all(sink != "SqliteSink" for kind, sink in made if kind == "ThreadSink")
    else:
        assert made == []


def _tables(path):
    """Every table's rows, without the metadata that names the output or the time of the export."""
    con = sqlite3.connect(path)
    try:
        out = {}
        for (name,) in con.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name"):
            rows = con.execute(f'SELECT * FROM "{name}"').fetchall()
            if name == "META_DATA_EXPORT":
                rows = [r for r in rows if not r[0].startswith(("EXPORT_TIME", "EXPORT_PARAM_OUTUPT"))]
            out[name] = rows
        return out
    finally:
        con.close()


def test_write_exports_decodes_once_and_writes_what_the_separate_exports_write(tmp_path, monkeypatch, capsys, parallel):
    pytest.importorskip("matplotlib")
    rec = _big_recording(tmp_path / "in")
    passes, opened, layouts = [], [], []
    batches, open_segment, layout = RecordingReader.batches, _decoder.Decoder.open_segment, render.layout

    def counting_batches(self, *args, **kwargs):
        passes.append(self.path)
        yield from batches(self, *args, **kwargs)

    def counting_open(self, path):
        opened.append(os.path.basename(path))
        return open_segment(self, path)

    monkeypatch.setattr(RecordingReader, "batches", counting_batches)
    monkeypatch.setattr(_decoder.Decoder, "open_segment", counting_open)
    monkeypatch.setattr(render, "layout", lambda *a, **k: layouts.append(layout(*a, **k)) or layouts[-1])

    prefix = tmp_path / "out" / "run"
    prefix.parent.mkdir()
    events, damage = write_exports(rec, prefix, png=True, png_window="all")
    printed = capsys.readouterr().out
    assert len(passes) == 1
    segments = sorted(p.name for p in rec.iterdir())
    assert len(segments) == 3 and sorted(opened) == segments  # each segment decoded once
    assert events == damage.events > 2 * RANGES

    # The same recording through the four functions, one decode each.
    passes.clear()
    alone = tmp_path / "alone"
    alone.mkdir()
    assert export_json(rec, alone / "run.json") == damage
    export_sqlite(rec, alone / "run.sqlite")
    summary = summarize(rec)
    render.render_timeline(rec, alone / "run.png", window="all")
    assert len(passes) == 4

    assert (prefix.parent / "run.json").read_bytes() == (alone / "run.json").read_bytes()
    ours, theirs = _tables(prefix.parent / "run.sqlite"), _tables(alone / "run.sqlite")
    assert len(ours["NVTX_EVENTS"]) > RANGES and ours == theirs
    assert f"NVTX range summary ({rec}):\n{summary.format()}\n" in printed
    assert "loop:step" in summary.format() and summary.open_count == 1
    assert len(layouts) == 2 and layouts[0] == layouts[1] and len(layouts[0].boxes) > 0
    assert (prefix.parent / "run.png").read_bytes() == (alone / "run.png").read_bytes()


def test_no_events_leaves_no_exports_and_no_temporary_files(tmp_path, capsys, parallel):
    from nvtx_plugins_tf.recorder.recording._synth import SegmentWriter

    rec = tmp_path / "empty.nvtxrec"
    w = SegmentWriter(pid=5, start_ns=1_000)
    w.thread(5).string(1, "never used")
    w.write(rec)
    for suffix in (".json", ".sqlite"):  # exports of an older run
        (tmp_path / f"run{suffix}").write_text("old")
    events, damage = write_exports(rec, tmp_path / "run", png=False)
    assert events == 0 and not damage.damaged
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty.nvtxrec"]
    assert capsys.readouterr().out == ""


def test_an_error_while_finishing_keeps_the_exports_already_written(tmp_path, parallel):
    rec = _recording(tmp_path)
    (tmp_path / "run.sqlite").mkdir()  # the SQLite file cannot replace a directory
    from nvtx_plugins_tf.cli._common import CliError

    with pytest.raises(CliError, match="run.sqlite"):
        write_exports(rec, tmp_path / "run", png=False)
    assert (tmp_path / "run.json").stat().st_size > 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rec.nvtxrec", "run.json", "run.sqlite"]


class _FullDisk(one_pass.Sink):
    """Writes its output and runs out of space at the second batch."""

    def __init__(self, reader, output):
        self.file, self.batches = one_pass.OutputFile(output), 0

    def add(self, rows):
        self.file.tmp.write_bytes(rows.tobytes())
        self.batches += 1
        if self.batches == 2:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(self.file.tmp))

    def _finish(self):
        self.file.commit()

    def _abort(self):
        self.file.discard()


REMOTE = pytest.mark.parametrize("remote", [remote.ChildSink, remote.ThreadSink], ids=["child", "thread"])


@REMOTE
def test_an_error_in_the_remote_sink_is_raised_here_and_its_output_removed(tmp_path, remote):
    rec = _big_recording(tmp_path / "in")
    with RecordingReader(rec) as reader, remote(reader, _FullDisk, tmp_path / "out.bin") as sink:
        with pytest.raises(OSError) as info:
            one_pass.feed(reader, [sink])
            sink.finish()
    assert info.value.errno == errno.ENOSPC and info.value.filename.startswith(str(tmp_path / ".out.bin."))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in"]
    # A sink the remote side cannot make: its error, at once.
    with RecordingReader(rec) as reader, pytest.raises(FileNotFoundError):
        remote(reader, _FullDisk, tmp_path / "no" / "dir" / "out.bin")


@REMOTE
def test_a_remote_sink_left_unfinished_removes_its_output(tmp_path, remote):
    rec = _big_recording(tmp_path / "in")
    with RecordingReader(rec) as reader, remote(reader, SqliteSink, tmp_path / "out.sqlite") as sink:
        batches = reader.batches()
        sink.add(next(batches))
        sink.add(next(batches))
        assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".out.sqlite.")]  # being written
        # (an error, Ctrl-C, no events: the sink is left without finish())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in"]


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def test_progress_line_on_a_terminal_only():
    term = _Terminal()
    progress = Progress(10_000_000, term, interval=0)
    progress.update(4_200_000)
    progress.update(10_000_000, "writing run.sqlite", force=True)
    progress.close()
    assert term.getvalue() == (
        "\rnvtx-tf: exporting 4.2M/10.0M events (42 %)\x1b[K"
        "\rnvtx-tf: exporting 10.0M/10.0M events (100 %), writing run.sqlite\x1b[K"
        "\r\x1b[K"
    )
    # Throttled: nothing within the first interval, then at most one line per interval.
    term = _Terminal()
    progress = Progress(1000, term, interval=3600)
    for done in range(0, 1000, 10):
        progress.update(done, force=True)
    progress.close()
    assert term.getvalue() == ""
    # Not a terminal: nothing, ever.
    pipe = io.StringIO()
    progress = Progress(1000, pipe, interval=0)
    progress.update(500)
    progress.close()
    assert pipe.getvalue() == ""


LOOP = """
import nvtx
for i in range({n}):
    nvtx.push_range("step")
    nvtx.pop_range()
"""


def _record(tmp_path, stderr_fd=None):
    """``record`` of a loop of push/pop ranges; stderr to ``stderr_fd`` (a pty) or a pipe."""
    script = tmp_path / "loop.py"
    script.write_text(textwrap.dedent(LOOP.format(n=RANGES)))
    env = _child_env(NVTX_TF_PROGRESS_INTERVAL="0")
    cmd = [sys.executable, "-m", "nvtx_plugins_tf", "record", "-o", tmp_path / "run", "--", sys.executable, script]
    return subprocess.Popen(
        list(map(str, cmd)),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE if stderr_fd is None else stderr_fd,
        env=env,
    )


def _read_all(fd) -> bytes:
    out = b""
    while True:
        try:
            data = os.read(fd, 65536)
        except OSError as exc:  # EIO: the other side is closed
            if exc.errno == errno.EIO:
                return out
            raise
        if not data:
            return out
        out += data


def test_record_shows_progress_on_a_terminal_and_nothing_in_a_pipe(tmp_path):
    (tmp_path / "tty").mkdir()
    master, slave = os.openpty()
    try:
        proc = _record(tmp_path / "tty", slave)
        os.close(slave)
        slave = None
        err = _read_all(master).decode()
        out, _ = proc.communicate(timeout=300)
    finally:
        os.close(master)
        if slave is not None:
            os.close(slave)
    assert proc.returncode == 0, err
    lines = [ln for ln in err.split("\r") if ln.startswith("nvtx-tf: exporting ")]
    assert len(lines) >= 2, err
    assert any(" events (100 %), writing run.sqlite" in ln for ln in lines), err
    assert err.endswith("\r\x1b[K")  # the line is cleared at the end
    assert b"NVTX range summary" in out and b"wrote " in out

    (tmp_path / "pipe").mkdir()
    proc = _record(tmp_path / "pipe")
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    assert err == b"" and b"NVTX range summary" in out


def test_progress_from_bytes_never_shows_a_time_left_that_then_grows_past_twice():
    """Issue 21.13: the estimate jumped from seconds to minutes and back. Time left comes from
    the bytes read; one shown never grows past twice the one shown before it, whatever the
    rate does (here: fast, then a stall, then fast again)."""
    clock = [0.0]
    term = _Terminal()
    total = 1_000_000
    progress = Progress(0, term, interval=0, total_bytes=total, clock=lambda: clock[0])
    steps = [(1, 100_000), (1, 200_000), (30, 210_000), (30, 220_000), (1, 600_000), (1, 900_000), (1, total)]
    shown = []
    done = 0
    for dt, done_bytes in steps:
        clock[0] += dt
        done += 1000
        progress.update(done, done_bytes=done_bytes)
        left = progress._left_shown
        if left is not None and (not shown or shown[-1] != left):
            shown.append(left)
    progress.close()
    assert shown and all(b <= 2 * a for a, b in zip(shown, shown[1:])), shown
    text = term.getvalue()
    assert "(10 %, about 9 s left)" in text and "(100 %)" in text, text


def test_record_shows_progress_from_bytes(tmp_path, child_env, c_sample):
    """A real export on a pseudo-terminal: the lines printed show shares that only grow."""
    import pty
    import re

    env = child_env(NVTX_TF_PROGRESS_INTERVAL="0")
    program = c_sample("nvtx_sample")
    command = [sys.executable, "-m", "nvtx_plugins_tf", "record", "-o", str(tmp_path / "p"), "--", str(program)]
    leader, follower = pty.openpty()
    proc = subprocess.Popen([*command, "stress", "1", "1000000"], env=env, stdout=subprocess.PIPE, stderr=follower)
    os.close(follower)
    chunks = []
    while True:
        try:
            data = os.read(leader, 65536)
        except OSError:
            break
        if not data:
            break
        chunks.append(data)
    proc.wait(timeout=300)
    os.close(leader)
    assert proc.returncode == 0
    shares = [int(m) for m in re.findall(rb"events \((\d+) %", b"".join(chunks))]
    assert shares and shares == sorted(shares), shares
