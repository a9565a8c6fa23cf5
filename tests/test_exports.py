"""Exporters and summary on synthetic recordings (no recorder needed)."""

from __future__ import annotations

import json
import sqlite3
import statistics

import pytest

from nvtx_plugins_tf.recorder import export_json, export_sqlite, summarize
from nvtx_plugins_tf.recorder.recording._synth import SegmentWriter

DENSE = [100, 300, 200, 1000]  # durations of "Dense 1" push/pop ranges
ASYNC = [50, 70]


def _recording(tmp_path):
    rec = tmp_path / "rec.nvtxrec"
    w = SegmentWriter(pid=1000, start_ns=10_000, process_name="trainer")
    main, worker = w.thread(1000), w.thread(1001)
    main.string(1, "Dense 1").string(2, "step").string(3, "tf").domain_create(10_001, 1, 3)
    main.string(4, "main").thread_name(1000, 4, override=True)
    t = 20_000
    for d in DENSE:
        main.push(t, 2, color=0xFF112233)
        main.push(t + 1, 1, domain=1, payload=("i64", -7), category=3)
        main.pop(t + 1 + d, domain=1)
        main.pop(t + 2 + d)
        t += 5_000
    worker.string(5, 'load "batch"\n')
    for i, d in enumerate(ASYNC):
        worker.start(t + i * 100, 500 + i, 5, payload=("double", 0.5))
        main.end(t + i * 100 + d, 500 + i)  # ended on another thread
    worker.mark(t + 1000, 5)
    worker.push(t + 2000, 2)  # never popped
    w.write(rec)
    # A second process, registered string for the same text.
    w2 = SegmentWriter(pid=2000, start_ns=15_000, process_name="worker")
    th = w2.thread(2000)
    th.string(9, "Dense 1").push(30_000, 9, registered=True).pop(30_400)
    w2.write(rec)
    return rec


def test_json_trace_event_format(tmp_path):
    rec = _recording(tmp_path)
    out = tmp_path / "trace.json"
    export_json(rec, out)
    doc = json.loads(out.read_text())
    events = doc["traceEvents"]
    assert isinstance(events, list) and doc["displayTimeUnit"] == "ns"
    for e in events:
        assert isinstance(e["name"], str) and isinstance(e["ph"], str)
        assert isinstance(e["pid"], int) and isinstance(e["tid"], int)
        if e["ph"] != "M":
            assert isinstance(e["ts"], (int, float)) and e["ts"] >= 0
            assert isinstance(e["cat"], str)
        if e["ph"] == "X":
            assert isinstance(e["dur"], (int, float)) and e["dur"] >= 0
        if e["ph"] in "be":
            assert "id" not in e and isinstance(e["id2"]["local"], str)  # process-scoped async id
        if e["ph"] == "i":
            assert e["s"] in "gpt"
    assert {e["ph"] for e in events} == {"X", "B", "b", "e", "i", "M"}
    # Async pairs matched by (cat, id); the end sits on the thread that ended the range.
    begins = {(e["pid"], e["cat"], e["id2"]["local"]): e for e in events if e["ph"] == "b"}
    ends = {(e["pid"], e["cat"], e["id2"]["local"]): e for e in events if e["ph"] == "e"}
    assert set(ends) == set(begins) and len(begins) == 2
    for key, b in begins.items():
        e = ends[key]
        assert e["name"] == b["name"] == 'load "batch"\n'
        assert (b["tid"], e["tid"]) == (1001, 1000)
        assert b["args"]["payload"] == 0.5
    durations = sorted(round((ends[k]["ts"] - b["ts"]) * 1000) for k, b in begins.items())
    assert durations == ASYNC
    dense = [e for e in events if e["ph"] == "X" and e["name"] == "Dense 1"]
    assert len(dense) == 5
    tf_dense = [e for e in dense if e["cat"] == "tf"]
    assert sorted(round(e["dur"] * 1000) for e in tf_dense) == sorted(DENSE)
    assert all(e["args"]["payload"] == -7 and e["args"]["domain"] == "tf" for e in tf_dense)
    step = [e for e in events if e["name"] == "step" and e["ph"] == "X"]
    assert all(e["args"]["color"] == "#112233" for e in step)
    # Timestamps: µs since the earliest segment start (10_000 ns).
    assert min(e["ts"] for e in step) == pytest.approx((20_000 - 10_000) / 1000)
    meta = {(e["name"], e["pid"], e["tid"]): e["args"] for e in events if e["ph"] == "M"}
    assert meta[("process_name", 1000, 0)]["name"].startswith("trainer")
    assert meta[("process_name", 2000, 0)]["name"].startswith("worker")
    assert meta[("thread_name", 1000, 1000)]["name"] == "main"
    assert ("thread_name", 1000, 1001) in meta
    unclosed = [e for e in events if e["ph"] == "B"]
    assert len(unclosed) == 1 and unclosed[0]["args"]["unclosed"] is True


def _import_async(events):
    """Async tracks as Perfetto's and catapult's JSON importers build them: a nestable
    'b'/'e' pair is matched by (cat, id); an ``id2.local`` id is scoped to the event's
    pid (the range goes on a track of that process), a bare ``id`` or ``id2.global``
    is global (Perfetto: "Global Legacy Events"). Returns {track: [(name, begin, end)]}."""
    open_, tracks = {}, {}
    for e in events:
        if e["ph"] not in "be":
            continue
        if "id2" in e and "local" in e["id2"]:
            track = ("process", e["pid"], e["cat"], e["id2"]["local"])
        else:
            track = ("global", e["cat"], e.get("id", e.get("id2", {}).get("global")))
        if e["ph"] == "b":
            assert track not in open_, f"two open ranges share the async id {track}"
            open_[track] = e
        else:
            b = open_.pop(track)
            tracks.setdefault(track[:2], []).append((b["name"], b["ts"], e["ts"]))
    return tracks, open_


def test_json_async_ranges_are_filed_under_their_process(tmp_path):
    """Issue 11 item 6: start/end ranges of two processes, one ended on another thread,
    one left open: every pair lands on its own process's track."""
    rec = tmp_path / "rec.nvtxrec"
    for pid, start in ((700, 1_000), (800, 2_000)):
        w = SegmentWriter(pid=pid, start_ns=start, process_name=f"p{pid}")
        a, b = w.thread(pid), w.thread(pid + 1)
        a.string(1, f"load {pid}").string(2, "open")
        for i in range(3):
            a.start(10_000 + i * 100, 5 + i, 1)  # the same range ids in both processes
            (b if i == 1 else a).end(10_050 + i * 100, 5 + i)
        a.start(20_000, 99, 2)  # never ended
        w.write(rec)
    out = tmp_path / "t.json"
    export_json(rec, out)
    events = json.loads(out.read_text())["traceEvents"]
    asyncs = [e for e in events if e["ph"] in "be"]
    assert asyncs and all("id" not in e and set(e["id2"]) == {"local"} for e in asyncs)
    tracks, still_open = _import_async(events)
    assert set(tracks) == {("process", 700), ("process", 800)}
    for (_, pid), ranges in tracks.items():
        assert sorted(n for n, _, _ in ranges) == [f"load {pid}"] * 3
        assert all(round((end - begin) * 1000) == 50 for _, begin, end in ranges)
    # the open ranges: a 'b' without 'e' on each process, marked unclosed
    assert sorted(e["pid"] for e in still_open.values()) == [700, 800]
    assert all(e["args"]["unclosed"] is True for e in still_open.values())
    # the pair ended on another thread: 'e' on that thread, same process and id
    [cross] = [e for e in asyncs if e["ph"] == "e" and e["tid"] != e["pid"] and e["pid"] == 700]
    assert cross["tid"] == 701


def test_sqlite_nsys_schema_and_query(tmp_path):
    rec = _recording(tmp_path)
    out = tmp_path / "rec.sqlite"
    export_sqlite(rec, out)
    con = sqlite3.connect(out)
    # The old package's query: plain messages are in `text` (registered strings are not,
    # as in nsys's exports: 4 of the 5 "Dense 1" ranges are plain).
    count, avg = con.execute(
        "SELECT count(*), avg(end - start) FROM NVTX_EVENTS WHERE text LIKE 'Dense 1' AND start > 0"
    ).fetchone()
    assert count == 4 and avg == pytest.approx(statistics.mean(DENSE))
    count, avg = con.execute(
        "SELECT count(*), avg(end - start) FROM NVTX_EVENTS e WHERE "
        "coalesce(text, (SELECT value FROM StringIds WHERE id = textId)) LIKE 'Dense 1' AND start > 0"
    ).fetchone()
    assert count == 5 and avg == pytest.approx(statistics.mean(DENSE + [400]))
    cols = [r[1] for r in con.execute("PRAGMA table_info(NVTX_EVENTS)")]
    assert cols == [
        "start",
        "end",
        "eventType",
        "rangeId",
        "category",
        "color",
        "text",
        "globalTid",
        "endGlobalTid",
        "textId",
        "domainId",
        "uint64Value",
        "int64Value",
        "doubleValue",
        "uint32Value",
        "int32Value",
        "floatValue",
        "jsonTextId",
        "jsonText",
    ]
    types = dict(con.execute("SELECT eventType, count(*) FROM NVTX_EVENTS GROUP BY eventType").fetchall())
    assert types == {59: 4 + 4 + 1 + 1, 60: 2, 34: 1, 75: 1, 39: 1}  # 39: the main thread's name (override)
    # Registered string: textId set, text NULL (nsys fills exactly one of them).
    text, text_id = con.execute(
        "SELECT text, textId FROM NVTX_EVENTS WHERE (globalTid >> 24) & 0xFFFFFF = 2000"
    ).fetchone()
    assert text is None and con.execute("SELECT value FROM StringIds WHERE id = ?", (text_id,)).fetchone() == (
        "Dense 1",
    )
    assert con.execute("SELECT count(*) FROM NVTX_EVENTS WHERE text IS NOT NULL AND textId IS NOT NULL").fetchone() == (
        0,
    )
    # Start/end: ended on another thread -> endGlobalTid; payload columns.
    rows = con.execute(
        "SELECT globalTid & 0xFFFFFF, endGlobalTid & 0xFFFFFF, (globalTid >> 24) & 0xFFFFFF, "
        "globalTid >> 48, doubleValue, rangeId FROM NVTX_EVENTS WHERE eventType = 60 ORDER BY start"
    ).fetchall()
    assert rows == [(1001, 1000, 1000, 1, 0.5, 500), (1001, 1000, 1000, 1, 0.5, 501)]
    assert con.execute(
        "SELECT DISTINCT e.int64Value, e.category FROM NVTX_EVENTS e JOIN NVTX_EVENTS d "
        "ON d.eventType = 75 AND d.domainId = e.domainId AND d.text = 'tf' "
        "WHERE e.eventType = 59"
    ).fetchall() == [(-7, 3)]
    assert con.execute("SELECT color FROM NVTX_EVENTS WHERE text = 'step' AND end IS NOT NULL LIMIT 1").fetchone() == (
        0xFF112233,
    )
    assert con.execute("SELECT count(*) FROM NVTX_EVENTS WHERE eventType = 59 AND end IS NULL").fetchone() == (1,)
    names = con.execute("SELECT s.value, t.globalTid FROM ThreadNames t JOIN StringIds s ON s.id = t.nameId").fetchall()
    assert names == [("main", (1 << 48) | (1000 << 24) | 1000)]
    assert sorted(con.execute("SELECT pid, name, globalPid FROM PROCESSES")) == [
        (1000, "trainer", (1 << 48) | (1000 << 24)),
        (2000, "worker", (1 << 48) | (2000 << 24)),
    ]
    # Session-relative times: 0 = the earliest segment's start (10_000 ns CLOCK_MONOTONIC).
    assert con.execute("SELECT min(start) FROM NVTX_EVENTS WHERE text = 'step'").fetchone() == (20_000 - 10_000,)
    meta = dict(con.execute("SELECT name, value FROM META_DATA_EXPORT"))
    assert meta["EXPORT_SCHEMA_VERSION"] == "3.11.1" and "timeOrigin_ns" not in meta  # nsys's keys only
    ours = dict(con.execute("SELECT name, value FROM NVTX_TF_META_DATA"))
    assert ours["timeOrigin_ns"] == "10000" and ours["exporter"].startswith("nvtx_plugins_tf")


def _expected(durations):
    return (
        sum(durations),
        len(durations),
        statistics.mean(durations),
        statistics.median(durations),
        min(durations),
        max(durations),
        statistics.stdev(durations) if len(durations) > 1 else 0.0,
    )


@pytest.mark.parametrize("source", ["recording", "sqlite"])
def test_summary_numbers(tmp_path, source):
    rec = _recording(tmp_path)
    path = rec
    if source == "sqlite":
        path = tmp_path / "rec.sqlite"
        export_sqlite(rec, path)
    summary = summarize(path)
    rows = {(r.range, r.style): r for r in summary.rows}
    step = [d + 2 for d in DENSE]
    expected = {
        ("tf:Dense 1", "PushPop"): _expected(DENSE),
        ("step", "PushPop"): _expected(step),
        ("Dense 1", "PushPop"): _expected([400]),
        ('load "batch"\n', "StartEnd"): _expected(ASYNC),
    }
    assert set(rows) == set(expected)
    grand = sum(v[0] for v in expected.values())
    for key, (total, n, avg, med, lo, hi, std) in expected.items():
        r = rows[key]
        assert (r.total_ns, r.instances, r.min_ns, r.max_ns) == (total, n, lo, hi)
        assert r.avg_ns == pytest.approx(avg) and r.med_ns == pytest.approx(med)
        assert r.stddev_ns == pytest.approx(std)
        assert r.time_percent == pytest.approx(100 * total / grand)
    assert [r.total_ns for r in summary.rows] == sorted((r.total_ns for r in summary.rows), reverse=True)
    text = summary.format()
    header = text.splitlines()[0]
    for col in (
        "Time (%)",
        "Total Time (ns)",
        "Instances",
        "Avg (ns)",
        "Med (ns)",
        "Min (ns)",
        "Max (ns)",
        "StdDev (ns)",
        "Style",
        "Range",
    ):
        assert col in header
    # By process: the two "Dense 1" groups of different processes stay apart.
    by_proc = summarize(path, by_process=True)
    assert {(r.pid, r.range) for r in by_proc.rows if r.range == "Dense 1"} == {(2000, "Dense 1")}
    assert [r.time_percent for r in by_proc.rows if r.pid == 2000] == [pytest.approx(100.0)]
    assert {"PID", "Process"} & set(by_proc.format().splitlines()[0].split())  # header of the pid column


def test_summary_of_real_nsys_style_sqlite(tmp_path):
    """An nsys export: text NULL for registered strings (textId), domains as eventType 75."""
    path = tmp_path / "nsys.sqlite"
    con = sqlite3.connect(path)
    con.executescript("""
        CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT);
        CREATE TABLE NVTX_EVENTS (start INTEGER, end INTEGER, eventType INTEGER, rangeId INTEGER,
            category INTEGER, color INTEGER, text TEXT, globalTid INTEGER, endGlobalTid INTEGER,
            textId INTEGER, domainId INTEGER, uint64Value INTEGER, int64Value INTEGER, doubleValue REAL,
            uint32Value INTEGER, int32Value INTEGER, floatValue REAL, jsonTextId INTEGER, jsonText TEXT);
        INSERT INTO StringIds VALUES (7, 'conv');
    """)
    g = 281474976710656 | (77 << 24) | 78
    con.executemany(
        "INSERT INTO NVTX_EVENTS (start, end, eventType, text, textId, globalTid, domainId) VALUES (?,?,?,?,?,?,?)",
        [
            (1, None, 75, "cudnn", None, g, 3),
            (10, 30, 59, None, 7, g, 3),
            (40, 50, 59, None, 7, g, 3),
            (5, 6, 60, "plain", None, g, 0),
            (7, None, 34, "mark", None, g, 0),
        ],
    )
    con.commit()
    con.close()
    rows = {(r.range, r.style): (r.total_ns, r.instances) for r in summarize(path).rows}
    assert rows == {("cudnn:conv", "PushPop"): (30, 2), ("plain", "StartEnd"): (1, 1)}
