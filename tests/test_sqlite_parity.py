"""SQLite parity with Nsight Systems' own export (issue 11, items 4 and 5).

Two kinds of tests:

* offline, on synthetic recordings (no nsys needed): session-relative times and their
  anchors, nsys's id and column rules (``globalTid`` bit 48, ``endGlobalTid`` only for a
  range ended on another thread, exactly one of ``text``/``textId``), rows in start order,
  the schema module equals itself once written, open ranges keep ``end`` NULL;
* against the real Nsight Systems 2024.2.3 (build_tools/fetch_nsys.py; skipped with the
  reason only when the Debian archive cannot be reached, never with CI=true): the shipped
  schema module equals what that nsys writes (SQLite, Parquet and Arrow), and nsys's own reports
  (``nsys stats -r nvtx_sum/nvtx_pushpop_sum/nvtx_startend_sum/nvtx_pushpop_trace``, and
  2023.4.4's, and 2022.4.2's ``nvtxsum/...``) give the same rows on our export and on
  nsys's export of the same run of the native C sample (names, styles, instances,
  nesting, order; durations are not compared: two runs).
"""

from __future__ import annotations

import datetime
import sqlite3
from collections import Counter
from pathlib import Path

import nsys_oracle as oracle
import pytest

from nvtx_plugins_tf.recorder import export_sqlite, summarize
from nvtx_plugins_tf.recorder.exports import _nsys_schema, nsys_tables
from nvtx_plugins_tf.recorder.recording._synth import SegmentWriter

MONO0 = 5_000_000_000_000  # CLOCK_MONOTONIC of the first segment (≈ uptime: 1e12+)
REAL0 = 1_700_000_000_123_456_789  # its CLOCK_REALTIME anchor
G = 1 << 48


def _recording(tmp_path) -> Path:
    rec = tmp_path / "rec.nvtxrec"
    w = SegmentWriter(pid=300, start_ns=MONO0, start_realtime_ns=REAL0, process_name="main")
    main, other = w.thread(300), w.thread(301)
    main.string(1, "outer").string(2, "inner").string(3, "dom").string(4, "reg").string(5, "t-main")
    main.string(6, "cat").domain_create(MONO0 + 50, 1, 3).category_name(1, 2, 6)
    main.thread_name(300, 5, override=True)
    main.push(MONO0 + 100, 1).push(MONO0 + 110, 2).pop(MONO0 + 120).pop(MONO0 + 200)
    main.push(MONO0 + 300, 4, domain=1, registered=True).pop(MONO0 + 310, domain=1)
    other.string(7, "async")
    other.start(MONO0 + 400, 11, 7)
    main.end(MONO0 + 450, 11)  # ended on another thread
    other.start(MONO0 + 500, 12, 7).end(MONO0 + 520, 12)  # same thread
    other.start(MONO0 + 600, 13, 7)  # never ended
    main.mark(MONO0 + 650, 1)
    w.write(rec)
    # A child process that started later, with its own anchor.
    w2 = SegmentWriter(pid=400, ppid=300, start_ns=MONO0 + 1000, start_realtime_ns=REAL0 + 1000, process_name="child")
    c = w2.thread(400)
    c.string(1, "child").push(MONO0 + 1100, 1).pop(MONO0 + 1300)
    w2.write(rec)
    return rec


@pytest.fixture
def db(tmp_path):
    out = tmp_path / "rec.sqlite"
    export_sqlite(_recording(tmp_path), out)
    con = sqlite3.connect(out)
    yield con
    con.close()


def _text(con, where):
    return con.execute(
        f"SELECT coalesce(text, (SELECT value FROM StringIds WHERE id = textId)) FROM NVTX_EVENTS WHERE {where}"
    ).fetchall()


def test_tables_are_nsys_tables(db):
    tables = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY rowid")]
    assert tables == [*(name for name, _ in _nsys_schema.TABLES), "NVTX_TF_META_DATA"]  # ours last
    ddl = dict(db.execute("SELECT name, sql FROM sqlite_master WHERE type = 'table'"))
    assert ddl == {**dict(_nsys_schema.TABLES), "NVTX_TF_META_DATA": nsys_tables.PROVENANCE_DDL}
    for name, rows in _nsys_schema.ENUMS.items():
        assert db.execute(f"SELECT id, name, label FROM {name} ORDER BY id").fetchall() == list(rows)
    event_types = dict(db.execute("SELECT id, name FROM ENUM_NSYS_EVENT_TYPE"))
    assert len(event_types) == 145 and event_types[34] == "NvtxMark" and event_types[39] == "NvtxThread"
    for empty in ("ProcessStreams", "PROFILER_OVERHEAD", "TARGET_INFO_SYSTEM_ENV"):
        assert db.execute(f"SELECT count(*) FROM {empty}").fetchone() == (0,)


def test_times_are_session_relative_with_anchors(db):
    # 0 = the earliest segment's start; the child's events on the same time line.
    assert db.execute("SELECT start, end FROM NVTX_EVENTS WHERE text = 'outer'").fetchone() == (100, 200)
    assert db.execute("SELECT start, end FROM NVTX_EVENTS WHERE text = 'child'").fetchone() == (1100, 1300)
    utc, utc_text, local_text = db.execute("SELECT * FROM TARGET_INFO_SESSION_START_TIME").fetchone()
    assert utc == REAL0
    assert utc_text == datetime.datetime.fromtimestamp(REAL0 / 1e9, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")
    assert local_text == datetime.datetime.fromtimestamp(REAL0 / 1e9).strftime("%Y-%m-%dT%H:%M:%S")
    assert db.execute("SELECT * FROM ANALYSIS_DETAILS").fetchall() == [(G, 1300, 0, 1300)]
    meta = dict(db.execute("SELECT name, value FROM NVTX_TF_META_DATA"))
    assert meta["timeOrigin_ns"] == str(MONO0) and meta["clock"] == "CLOCK_MONOTONIC"
    # nothing anywhere near the raw clock (nsys's R-tree reports use float32)
    assert db.execute("SELECT max(max(start), max(end)) FROM NVTX_EVENTS").fetchone() == (1300,)


def test_no_realtime_anchor_gives_null_session_start(tmp_path):
    rec = tmp_path / "r.nvtxrec"
    w = SegmentWriter(pid=5, start_ns=1000)  # start_realtime_ns 0: no anchor
    w.thread(5).string(1, "x").push(1100, 1).pop(1200)
    w.write(rec)
    export_sqlite(rec, tmp_path / "r.sqlite")
    con = sqlite3.connect(tmp_path / "r.sqlite")
    assert con.execute("SELECT * FROM TARGET_INFO_SESSION_START_TIME").fetchall() == [(None, None, None)]
    assert con.execute("SELECT start, end FROM NVTX_EVENTS WHERE text = 'x'").fetchone() == (100, 200)


def test_ids_follow_nsys(db):
    for gtid, pid in db.execute("SELECT globalTid, (globalTid >> 24) & 0xFFFFFF FROM NVTX_EVENTS"):
        assert gtid >> 48 == 1 and pid in (300, 400)
    assert sorted(db.execute("SELECT globalPid, pid FROM PROCESSES")) == [(G | 300 << 24, 300), (G | 400 << 24, 400)]
    rows = db.execute(
        "SELECT start, globalTid, endGlobalTid, end FROM NVTX_EVENTS WHERE eventType = 60 ORDER BY start"
    ).fetchall()
    assert rows == [
        (400, G | 300 << 24 | 301, G | 300 << 24 | 300, 450),  # ended on another thread
        (500, G | 300 << 24 | 301, None, 520),  # same thread: NULL
        (600, G | 300 << 24 | 301, None, None),
    ]  # open: NULL end and endGlobalTid
    assert db.execute(
        "SELECT count(*) FROM NVTX_EVENTS WHERE eventType IN (59, 60) AND endGlobalTid IS NOT NULL "
        "AND endGlobalTid = globalTid"
    ).fetchone() == (0,)


def test_text_or_text_id(db):
    assert db.execute("SELECT count(*) FROM NVTX_EVENTS WHERE text IS NOT NULL AND textId IS NOT NULL").fetchone() == (
        0,
    )
    text, text_id = db.execute("SELECT text, textId FROM NVTX_EVENTS WHERE eventType = 59 AND domainId = 1").fetchone()
    assert text is None and db.execute("SELECT value FROM StringIds WHERE id = ?", (text_id,)).fetchone() == ("reg",)
    assert db.execute("SELECT textId FROM NVTX_EVENTS WHERE text = 'outer'").fetchone() == (None,)


def test_rows_in_start_order_and_definition_rows(db):
    starts = [r[0] for r in db.execute("SELECT start FROM NVTX_EVENTS ORDER BY rowid")]
    assert starts == sorted(starts)
    order = [t for (t,) in db.execute("SELECT text FROM NVTX_EVENTS WHERE eventType = 59 ORDER BY rowid")]
    assert order[:2] == ["outer", "inner"]
    kinds = Counter(t for (t,) in db.execute("SELECT eventType FROM NVTX_EVENTS"))
    assert kinds == {59: 4, 60: 3, 34: 1, 75: 1, 33: 1, 39: 1}
    assert db.execute("SELECT start, text, domainId FROM NVTX_EVENTS WHERE eventType = 75").fetchall() == [
        (50, "dom", 1)
    ]
    assert db.execute("SELECT text, category, domainId FROM NVTX_EVENTS WHERE eventType = 33").fetchall() == [
        ("cat", 2, 1)
    ]
    assert db.execute("SELECT text, globalTid FROM NVTX_EVENTS WHERE eventType = 39").fetchall() == [
        ("t-main", G | 300 << 24 | 300)
    ]


def test_open_range_keeps_null_end_and_summary_lists_it(db, tmp_path):
    assert db.execute("SELECT count(*) FROM NVTX_EVENTS WHERE eventType IN (59, 60) AND end IS NULL").fetchone() == (1,)
    summary = summarize(tmp_path / "rec.sqlite")
    assert [(o.range, o.style, o.count) for o in summary.open_ranges] == [("async", "StartEnd", 1)]
    rows = {(r.range, r.style): r.instances for r in summary.rows}
    assert rows == {
        ("outer", "PushPop"): 1,
        ("inner", "PushPop"): 1,
        ("dom:reg", "PushPop"): 1,
        ("async", "StartEnd"): 2,
        ("child", "PushPop"): 1,
    }


def test_schema_module_is_generated_text(tmp_path):
    """The shipped module is exactly what the generator writes for its own data."""
    import pyarrow as pa
    import pyarrow.ipc as ipc
    import pyarrow.parquet as pq

    from nvtx_plugins_tf.recorder.exports.arrow_tables import ARROW_SCHEMAS, IPC_SCHEMAS

    out = tmp_path / "s.sqlite"
    con = sqlite3.connect(out)
    for _, ddl in _nsys_schema.TABLES:
        con.execute(ddl)
    for name, rows in _nsys_schema.ENUMS.items():
        con.executemany(f"INSERT INTO {name} VALUES (?, ?, ?)", rows)
    meta = dict(_nsys_schema.SCHEMA_META)
    con.executemany(
        "INSERT INTO META_DATA_EXPORT VALUES (?, ?)", [(k, meta.get(k, "")) for k in _nsys_schema.META_KEYS]
    )
    con.executemany("INSERT INTO META_DATA_CAPTURE VALUES (?, '')", [(k,) for k in _nsys_schema.CAPTURE_KEYS])
    con.commit()
    con.close()
    pqt, recipe = tmp_path / "s_pqtdir", tmp_path / "recipe_pqtdir"
    pqt.mkdir()
    recipe.mkdir()
    for table, schema in ARROW_SCHEMAS.items():
        if table in _nsys_schema.PARQUET:
            pq.write_table(schema.empty_table(), pqt / f"{table}.parquet")
        elif table in _nsys_schema.RECIPE_PARQUET:
            pq.write_table(schema.empty_table(), recipe / f"{table}.parquet")
    arrow = tmp_path / "s.arrows"
    with pa.OSFile(str(arrow), "wb") as sink:
        for table, schema in IPC_SCHEMAS.items():
            if table in _nsys_schema.ARROW:
                with ipc.new_stream(sink, schema) as writer:
                    writer.write_table(schema.empty_table())
    assert oracle.schema_module_source(out, pqt, recipe, arrow) == oracle.SCHEMA_MODULE.read_text()


# ------------------------------------------------------------------------------ real nsys
@pytest.fixture(scope="module")
def nsys() -> Path:
    return oracle.nsys_or_skip()


@pytest.fixture(scope="module")
def native_runs(nsys, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("parity")
    exe = oracle.build_native_sample(tmp)
    theirs = oracle.run_nsys(nsys, [exe, "basic"], tmp / "nsys")
    ours = oracle.run_ours([exe, "basic"], tmp / "ours")
    return ours.sqlite, theirs.sqlite


def test_shipped_schema_is_what_nsys_writes(nsys, native_runs):
    _, theirs = native_runs
    assert oracle.report_schema_source(nsys, theirs) == oracle.SCHEMA_MODULE.read_text(), (
        "nsys's export differs from nvtx_plugins_tf/recorder/exports/_nsys_schema.py: "
        "regenerate it with `python tests/nsys_oracle.py --write-schema`"
    )


def _stats(nsys, path):
    return {report: oracle.nsys_stats(nsys, report, path) for report in oracle.NVTX_REPORTS}


def _summary_rows(rows):
    return sorted((r.get("Style", ""), r["Range"], int(r["Instances"])) for r in rows)


def _trace(rows):
    """nvtx_pushpop_trace rows in their order, with row ids turned into names and threads into
    their order of appearance (pids and tids differ between the runs)."""
    names = {r["RangeId"]: r["Name"] for r in rows}
    threads: dict = {}
    out = []
    for r in rows:
        thread = threads.setdefault((r["PID"], r["TID"]), len(threads))
        out.append(
            (
                r["Name"],
                thread,
                int(r["Lvl"]),
                int(r["NumChild"]),
                names.get(r["ParentId"]),
                tuple(names[i] for i in r["RangeStack"].split(":")[1:]),
                r["NameTree"],
            )
        )
    return out


def test_nsys_stats_reports_agree(nsys, native_runs):
    ours_path, theirs_path = native_runs
    ours, theirs = _stats(nsys, ours_path), _stats(nsys, theirs_path)
    for report in ("nvtx_sum", "nvtx_pushpop_sum", "nvtx_startend_sum"):
        assert ours[report], report
        assert _summary_rows(ours[report]) == _summary_rows(theirs[report]), report
    assert _trace(ours["nvtx_pushpop_trace"]) == _trace(theirs["nvtx_pushpop_trace"])
    names = [r["Name"] for r in ours["nvtx_pushpop_trace"]]
    assert names.index("push-outer") < names.index("push-inner")  # time order, as nsys
    for r in ours["nvtx_pushpop_trace"]:
        start, end, dur = int(r["Start (ns)"]), int(r["End (ns)"]), int(r["Duration (ns)"])
        assert 0 < start < 10**11 and end - start == dur >= 0  # session-relative
    # Durations: same order of magnitude is all two runs can promise; nsys's own sums
    # must equal our summary's on our file.
    mine = {(r.style, r.range): r.total_ns for r in summarize(ours_path).rows}
    assert {(r["Style"], r["Range"]): int(r["Total Time (ns)"]) for r in ours["nvtx_sum"]} == mine


def test_nsys_2023_4_stats_read_our_file_as_2024_2_does(nsys, native_runs):
    """Nsight Systems 2023.4.4 reads our 2024.2-schema file (schema 3.11.1): its reports give
    on it what 2024.2's give."""
    previous = oracle.nsys_or_skip(oracle.fetch_nsys.PREVIOUS)
    ours_path, _ = native_runs
    for report in oracle.NVTX_REPORTS:
        rows = oracle.nsys_stats(nsys, report, ours_path)
        assert rows and oracle.nsys_stats(previous, report, ours_path) == rows, report


def test_nsys_2022_4_stats_read_our_file_as_2024_2_does(nsys, native_runs):
    """Nsight Systems 2022.4.2 reads our 2024.2-schema file: its reports (old names) give on
    it what 2024.2's give (its report scripts read NVTX_EVENTS and StringIds, not the renamed
    metadata table); only a root's ParentId is printed ``None`` by 2022.4 where 2024.2
    leaves it empty."""
    legacy = oracle.nsys_or_skip(oracle.fetch_nsys.LEGACY)
    ours_path, _ = native_runs
    for new, old in oracle.LEGACY_NVTX_REPORTS.items():
        rows = oracle.nsys_stats(nsys, new, ours_path)
        old_rows = [
            {k: ("" if v == "None" else v) for k, v in r.items()} for r in oracle.nsys_stats(legacy, old, ours_path)
        ]
        assert rows and old_rows == rows, (new, old)


def test_old_package_query_same_counts(native_runs):
    """The old package's test SQL per range name: the same counts on both exports."""
    query = "SELECT count(*) FROM NVTX_EVENTS WHERE text LIKE ? AND start > 0"
    ours, theirs = (sqlite3.connect(p) for p in native_runs)
    names = {
        t
        for (t,) in theirs.execute(
            "SELECT DISTINCT text FROM NVTX_EVENTS WHERE eventType IN (34, 59, 60) AND text IS NOT NULL"
        )
    } - {"bad-size"}
    assert {"push-outer", "cross-thread", "mark-a"} <= names
    for name in sorted(names):
        assert ours.execute(query, (name,)).fetchone() == theirs.execute(query, (name,)).fetchone(), name
    # registered strings are only reachable through textId in both
    assert ours.execute(query, ("reg-msg",)).fetchone() == theirs.execute(query, ("reg-msg",)).fetchone() == (0,)


def test_no_time_before_the_session_start_in_a_capture_window(tmp_path):
    """A domain created before a capture is replayed into its segment with its first
    timestamp: the export still starts at 0 (nsys never writes negative times)."""
    import nvtx

    from nvtx_plugins_tf.testing import capture

    domain = nvtx.get_domain("early-domain")
    domain.push_range(domain.get_event_attributes(message="before"))
    domain.pop_range()
    with capture(keep=True) as rec:
        domain.push_range(domain.get_event_attributes(message="inside"))
        domain.pop_range()
    out = tmp_path / "window.sqlite"
    export_sqlite(rec.directory, out)
    con = sqlite3.connect(out)
    (earliest,) = con.execute("SELECT min(start) FROM NVTX_EVENTS").fetchone()
    assert earliest == 0
    inside = (
        "SELECT count(*) FROM NVTX_EVENTS e JOIN StringIds s ON s.id = e.textId WHERE s.value = 'inside' AND start > 0"
    )
    assert con.execute(inside).fetchone()[0] == 1  # (the nvtx package registers its strings: textId)
