"""The SQLite export's native path (exports/_sqlite_native.py, cc_ops/reader/sqlite_insert.h)
writes the file the Python path writes: every table, NVTX_EVENTS row for row in the same
order (ties in start and end included), on a synthetic recording with every column
and a recording of the real NVTX payload extension; ``NVTX_TF_SQLITE_NATIVE=0`` forces the
Python path, and a libsqlite3 that cannot be loaded falls back to it with the same file."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from contextlib import closing
from pathlib import Path

import pytest

from nvtx_plugins_tf.recorder.exports import _sqlite_native, remote
from nvtx_plugins_tf.recorder.exports.sqlite import SqliteSink
from nvtx_plugins_tf.recorder.recording._synth import SegmentWriter
from nvtx_plugins_tf.recorder.recording.reader import RecordingReader

sys.path.insert(0, str(Path(__file__).resolve().parent))
import nsys_oracle  # noqa: E402

T0 = 1_000_000
# META_DATA_EXPORT values that differ between two exports (clock, output path)
_PER_EXPORT = ("EXPORT_TIME", "EXPORT_PARAM_OUTUPT")


def _recording(tmp_path) -> Path:
    """Ties everywhere (same start on two threads and two processes, same start and end,
    marks and open ranges at a range's start), every payload type, colors, categories,
    registered strings, a range ended on another thread, definitions, and an event before
    its segment's start (the shift to time 0)."""
    rec = tmp_path / "rec.nvtxrec"
    w = SegmentWriter(pid=70, start_ns=T0, process_name="main")
    a, b = w.thread(70), w.thread(71)
    for i, text in enumerate(("outer", "inner", "dom", "cat", "reg", "t-a", "async", "same"), start=1):
        a.string(i, text)
    a.domain_create(T0 + 5, 1, 3).category_name(1, 2, 4).thread_name(70, 6, override=True)
    payloads = [("u64", 2**64 - 3), ("i64", -5), ("double", 0.25), ("u32", 2**32 - 1), ("i32", -9), ("float", 1.5)]
    t = T0 + 100
    for i, payload in enumerate(payloads):
        a.push(t, 1, color=0xFF000000 + i).push(t, 2, payload=payload, category=2, domain=1)
        a.pop(t + 10, domain=1).pop(t + 20)
        b.push(t, 8).pop(t + 20)  # same start and end as "outer", another thread
        b.push(t, 8).pop(t + 20)  # and again on the same thread
        a.mark(t, 8)  # a mark at their start: after them
        t += 100
    a.push(t, 5, registered=True, domain=1).pop(t + 5, domain=1)
    b.start(t, 41, 7, payload=("i64", 3))
    a.end(t + 50, 41)  # ended on another thread
    b.start(t, 42, 7).end(t + 50, 42)
    b.start(t, 43, 7)  # never ended
    a.push(T0 - 40, 8).pop(T0 - 30)  # before the segment's start
    b.push(t + 1000, 8)  # never popped
    w.write(rec)
    w2 = SegmentWriter(pid=80, start_ns=T0 + 50, process_name="child")
    c = w2.thread(80)
    c.string(1, "same").push(T0 + 100, 1).pop(T0 + 120).mark(T0 + 100, 1)
    w2.write(rec)
    return rec


def _export(rec: Path, out: Path, batch: int = 3) -> SqliteSink:
    """The sink's export fed ``batch`` rows at a time (rows grouped across many batches)."""
    with RecordingReader(rec) as reader, SqliteSink(reader, out) as sink:
        for rows in reader.batches(batch):
            sink.add(rows)
        sink.finish()
    return sink


def _tables(path: Path) -> dict[str, list]:
    con = sqlite3.connect(path)
    try:
        names = [n for (n,) in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        tables = {n: con.execute(f'SELECT * FROM "{n}" ORDER BY rowid').fetchall() for n in names}
        tables["sqlite_master"] = con.execute("SELECT type, name, tbl_name, sql FROM sqlite_master").fetchall()
    finally:
        con.close()
    tables["META_DATA_EXPORT"] = [r for r in tables["META_DATA_EXPORT"] if not r[0].startswith(_PER_EXPORT)]
    return tables


def _both(rec: Path, tmp_path: Path, monkeypatch, **kw) -> tuple[dict, dict]:
    native = _export(rec, tmp_path / "native.sqlite", **kw)
    assert native.python_path_reason is None
    monkeypatch.setenv(_sqlite_native.NATIVE_ENV, "0")
    python = _export(rec, tmp_path / "python.sqlite", **kw)
    assert python.python_path_reason == f"{_sqlite_native.NATIVE_ENV}=0"
    return _tables(tmp_path / "native.sqlite"), _tables(tmp_path / "python.sqlite")


@pytest.mark.parametrize("batch", [3, 1000])  # rows grouped across many batches; all in one
def test_native_and_python_paths_write_the_same_rows(tmp_path, monkeypatch, batch):
    monkeypatch.setattr(_sqlite_native.RowStore, "BLOCK_BITS", 2)  # rows across many blocks
    native, python = _both(_recording(tmp_path), tmp_path, monkeypatch, batch=batch)
    events = native["NVTX_EVENTS"]
    assert events == python["NVTX_EVENTS"]
    assert native == python
    # What the recording was made to hold is there: ties, every payload column, the shift.
    assert len(events) == 41 and events[0][:2] == (0, 10)  # the event before the segment, at 0
    ties = [(r[1], r[2], r[6]) for r in events if r[0] == 140]  # start T0 + 100 - (T0 - 40)
    same, mark = (160, 59, "same"), (None, 34, "same")  # (end, eventType, text)
    # equal (start, end): in the order the Python path inserted them, which groups a
    # batch's rows by their NULL columns: the colored "outer" after its process's "same"
    # ranges when they share a batch (the child process's come in a later batch)
    outer = (160, 59, "outer")
    expected = [outer, same, same, same] if batch == 3 else [same, same, outer, same]
    assert ties == [*expected, (150, 59, "inner"), mark, mark]
    payload_columns = {i for r in events for i in range(11, 17) if r[i] is not None}
    assert payload_columns == set(range(11, 17))
    assert any(r[8] is not None for r in events) and any(r[9] is not None for r in events)


def test_extended_payloads_json_text_the_same(c_sample, tmp_path, monkeypatch):
    prefix = tmp_path / "rec"
    nsys_oracle.run_ours([c_sample("payload_sample")], prefix)
    native, python = _both(prefix.with_name("rec.nvtxrec"), tmp_path, monkeypatch, batch=4)
    assert native == python
    assert sum(r[-1] is not None for r in native["NVTX_EVENTS"]) >= 8  # jsonText


def test_missing_libsqlite3_falls_back_to_the_python_path(tmp_path, monkeypatch, capfd):
    rec = _recording(tmp_path)
    _export(rec, tmp_path / "native.sqlite")
    monkeypatch.setattr(_sqlite_native, "LIBSQLITE3", "libsqlite3-absent.so.0")
    assert "libsqlite3-absent.so.0" in _sqlite_native.unavailable()
    sink = _export(rec, tmp_path / "fallback.sqlite")
    assert "libsqlite3-absent.so.0" in sink.python_path_reason
    assert _tables(tmp_path / "fallback.sqlite") == _tables(tmp_path / "native.sqlite")
    assert capfd.readouterr() == ("", "")  # no warning, no trace
    assert sorted(p.name for p in tmp_path.iterdir() if p.suffix == ".sqlite") == ["fallback.sqlite", "native.sqlite"]


def test_native_error_is_an_sqlite_error_and_leaves_no_file(tmp_path):
    rec = _recording(tmp_path)
    with RecordingReader(rec) as reader, SqliteSink(reader, tmp_path / "x.sqlite") as sink:
        for rows in reader.batches():
            sink.add(rows)
        sink._file.tmp.unlink()  # the file the native code is to open is gone
        with pytest.raises(sqlite3.Error):
            sink.finish()
    assert sorted(p.name for p in tmp_path.iterdir() if p.suffix == ".sqlite" or "tmp" in p.name) == []


def test_rows_beyond_the_memory_budget_take_the_python_path(tmp_path, monkeypatch):
    rec = _recording(tmp_path)
    _export(rec, tmp_path / "native.sqlite")
    monkeypatch.setattr(_sqlite_native, "memory_budget", lambda: 1000)  # fewer bytes than its rows need
    sink = _export(rec, tmp_path / "budget.sqlite")
    assert "more than half the machine's" in sink.python_path_reason
    assert _tables(tmp_path / "budget.sqlite") == _tables(tmp_path / "native.sqlite")
    # The helper process of a large export judges by the parent's estimate (it reads no segment).
    with RecordingReader(rec) as reader:
        with remote.ChildSink(reader, _SayingWhy, tmp_path / "child.sqlite") as child:
            for rows in reader.batches(3):
                child.add(rows)
            _, why = child.finish()
    assert "more than half the machine's" in why
    assert _tables(tmp_path / "child.sqlite") == _tables(tmp_path / "native.sqlite")


class _SayingWhy(SqliteSink):
    """The sink's result with the reason it took the Python path (from a child process)."""

    def _finish(self):
        return super()._finish(), self.python_path_reason


def test_native_insert_after_tensorflow_and_sqlite3_were_imported(tmp_path):
    """TensorFlow exports a SQLite of its own into the global scope (libtensorflow_cc.so.2,
    loaded RTLD_GLOBAL); a libsqlite3 loaded after it (``import sqlite3`` after ``import
    tensorflow``, as in a training script that records and exports in-process) must not mix
    the two versions on one connection (it crashed in the native insert)."""
    rec = _recording(tmp_path)
    out = tmp_path / "after_tf.sqlite"
    script = (
        "import sys, tensorflow, sqlite3\n"
        "from nvtx_plugins_tf.recorder.exports import _sqlite_native\n"
        "from nvtx_plugins_tf.recorder.exports.sqlite import export_sqlite\n"
        "assert _sqlite_native.unavailable() is None, _sqlite_native.unavailable()\n"
        "export_sqlite(sys.argv[1], sys.argv[2])\n"
        "print(sqlite3.connect(sys.argv[2]).execute('SELECT COUNT(*) FROM NVTX_EVENTS').fetchone()[0])\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script, str(rec), str(out)], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    with closing(sqlite3.connect(out)) as db:
        (count,) = db.execute("SELECT COUNT(*) FROM NVTX_EVENTS").fetchone()
    assert count > 0 and proc.stdout.strip() == str(count)
