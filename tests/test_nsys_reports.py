"""``report --type pushpop_trace|pushpop_sum|startend_sum`` (recorder/reports/nsys_reports.py), judged
by the real Nsight Systems 2024.2.3, the default judge (issue 14, item 4; issue 23; issue 35).

* Same file: our report on an SQLite file -- nsys's own export, and ours -- is exactly what
  ``nsys stats --report nvtx_pushpop_trace|nvtx_pushpop_sum|nvtx_startend_sum --format csv`` prints for it (same
  columns, same rows, same values, to the rounding).
* Same program, two tools: tests/nsys/nested_ranges.c (nested push/pop ranges on two threads,
  a named domain nested under the default one, start/end ranges, one ended on another thread,
  one push/pop and one start/end range left open) under nsys and under our recorder: our
  report on our recording has nsys's columns and nsys's rows on its file (names, levels,
  parents, children, stacks, instances); times differ between runs, so only their relations
  are checked (DurChild + DurNonChild = Duration, DurChild = the children's durations ...).
  ``--domain trainer`` on the whole recording gives the rows nsys gives for a capture of
  that domain only (``--nvtx-domain-include=trainer``).
* Our recording folder and our SQLite export of it give the same reports.
* Offline, on a synthetic recording: exact child/exclusive times, per thread; the errors.
"""

from __future__ import annotations

import csv
import io
import sqlite3
import subprocess
import sys
from collections import Counter, defaultdict
from pathlib import Path

import nsys_oracle as oracle
import pytest
from conftest import _child_env

from nvtx_plugins_tf import cli
from nvtx_plugins_tf.recorder.recording._synth import SegmentWriter
from nvtx_plugins_tf.recorder.reports import nsys_reports, ranges

REPO = Path(__file__).resolve().parents[1]
SOURCE = REPO / "tests" / "nsys" / "nested_ranges.c"
TYPES = ("pushpop_trace", "pushpop_sum", "startend_sum")


def run_report(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "nvtx_plugins_tf", "report", *map(str, args)],
        env=_child_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )


def csv_rows(text: str) -> tuple[list[str], list[dict]]:
    reader = csv.DictReader(io.StringIO(text))
    rows = list(reader)
    return list(reader.fieldnames or []), rows


def ours_csv(path: Path, report_type: str, *flags: str) -> tuple[list[str], list[dict]]:
    proc = run_report(path, "--type", report_type, "--format", "csv", *flags)
    assert proc.returncode == 0, proc.stderr
    return csv_rows(proc.stdout)


def nsys_csv(nsys: Path, report_type: str, sqlite: Path) -> tuple[list[str], list[dict]]:
    proc = subprocess.run(
        [str(nsys), "stats", "-q", "-r", nsys_reports.NSYS_REPORTS[report_type], "-f", "csv", "-o", "-", str(sqlite)],
        env=oracle.nsys_env(nsys),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0 and proc.stdout.strip(), proc.stderr
    return csv_rows(proc.stdout)


# ------------------------------------------------------------------------------ fixtures
@pytest.fixture(scope="module")
def nsys() -> Path:
    return oracle.nsys_or_skip()


@pytest.fixture(scope="module")
def workload(c_sample) -> Path:
    return c_sample(SOURCE)


@pytest.fixture(scope="module")
def runs(nsys, workload, tmp_path_factory):
    """(our prefix, nsys's SQLite, nsys's SQLite of a capture of domain 'trainer' only)."""
    tmp = tmp_path_factory.mktemp("nsys_reports")
    theirs = oracle.run_nsys(nsys, [workload, "open"], tmp / "nsys").sqlite
    only = oracle.run_nsys(nsys, [workload, "open"], tmp / "nsys_trainer", args=("--nvtx-domain-include=trainer",))
    oracle.run_ours([workload, "open"], tmp / "ours")
    return tmp / "ours", theirs, only.sqlite


# ------------------------------------------------------------------------------ same file
@pytest.mark.parametrize("which", ["nsys", "ours"])
@pytest.mark.parametrize("report_type", TYPES)
def test_same_file_is_exactly_nsys_stats(nsys, runs, which, report_type):
    prefix, theirs, _ = runs
    sqlite = theirs if which == "nsys" else prefix.with_name("ours.sqlite")
    columns, rows = ours_csv(sqlite, report_type)
    nsys_columns, nsys_rows = nsys_csv(nsys, report_type, sqlite)
    assert columns == nsys_columns
    assert rows == nsys_rows
    assert len(rows) >= 4


# ------------------------------------------------------------------------------ two tools
def _trace_structure(rows: list[dict]) -> Counter:
    """Per thread, its rows in order with ids as names; a multiset over the threads (how the
    threads' rows interleave is timing, and pids and tids differ between the runs)."""
    names = {r["RangeId"]: r["Name"] for r in rows}
    threads: dict = defaultdict(list)
    for r in rows:
        stack = tuple(names[i] for i in r["RangeStack"].split(":")[1:])
        threads[(r["PID"], r["TID"])].append(
            (r["Name"], r["Lvl"], r["NumChild"], names.get(r["ParentId"]), stack, r["NameTree"])
        )
    return Counter(tuple(v) for v in threads.values())


def _check_trace_relations(rows: list[dict]) -> None:
    children = defaultdict(int)
    by_id = {r["RangeId"]: r for r in rows}
    for r in rows:
        start, end, dur = int(r["Start (ns)"]), int(r["End (ns)"]), int(r["Duration (ns)"])
        child, own = int(r["DurChild (ns)"]), int(r["DurNonChild (ns)"])
        assert end - start == dur and child + own == dur and 0 <= child <= dur, r
        if r["ParentId"] != "":
            parent = by_id[r["ParentId"]]
            children[r["ParentId"]] += dur
            assert (parent["PID"], parent["TID"]) == (r["PID"], r["TID"])  # nesting is per thread
            assert int(parent["Start (ns)"]) <= start and end <= int(parent["End (ns)"])
            assert int(r["Lvl"]) == int(parent["Lvl"]) + 1
    for r in rows:
        assert int(r["DurChild (ns)"]) == children.get(r["RangeId"], 0), r


def test_pushpop_trace_has_nsys_rows(nsys, runs):
    prefix, theirs, _ = runs
    columns, rows = ours_csv(prefix.with_name("ours.nvtxrec"), "pushpop_trace")
    nsys_columns, nsys_rows = nsys_csv(nsys, "pushpop_trace", theirs)
    assert columns == nsys_columns == list(nsys_reports.TRACE_COLUMNS)
    assert _trace_structure(rows) == _trace_structure(nsys_rows)
    for table in (rows, nsys_rows):
        _check_trace_relations(table)
    mine = {r["NameTree"] for r in rows}
    assert {"step", "--forward", "----layer", "--backward", "----trainer:optimizer", "left-open"} == mine
    # Exclusive time: a layer has no children; a step's own time is what its children leave.
    for r in rows:
        if r["Name"] == "layer":
            assert r["DurNonChild (ns)"] == r["Duration (ns)"] and r["NumChild"] == "0"
        if r["Name"] == "step":
            assert r["NumChild"] == "2" and int(r["DurNonChild (ns)"]) < int(r["Duration (ns)"])


@pytest.mark.parametrize("report_type", ["pushpop_sum", "startend_sum"])
def test_sums_have_nsys_rows(nsys, runs, report_type):
    prefix, theirs, _ = runs
    columns, rows = ours_csv(prefix.with_name("ours.nvtxrec"), report_type)
    nsys_columns, nsys_rows = nsys_csv(nsys, report_type, theirs)
    assert columns == nsys_columns == list(nsys_reports.SUM_COLUMNS)
    assert Counter((r["Range"], r["Instances"]) for r in rows) == Counter(
        (r["Range"], r["Instances"]) for r in nsys_rows
    )
    for table in (rows, nsys_rows):
        totals = [int(r["Total Time (ns)"]) for r in table]
        assert totals == sorted(totals, reverse=True)
        assert abs(sum(float(r["Time (%)"]) for r in table) - 100) < 0.1 * len(table)
        for r in table:
            n, total = int(r["Instances"]), int(r["Total Time (ns)"])
            lo, med, hi, avg = int(r["Min (ns)"]), float(r["Med (ns)"]), int(r["Max (ns)"]), float(r["Avg (ns)"])
            assert lo <= med <= hi and lo <= avg <= hi and abs(avg * n - total) <= 0.05 * n + 1
            assert (float(r["StdDev (ns)"]) == 0) == (lo == hi)


def test_domain_selection_is_an_nsys_capture_of_that_domain(nsys, runs):
    prefix, _, only_trainer = runs
    for report_type in TYPES:
        _, rows = ours_csv(prefix.with_name("ours.nvtxrec"), report_type, "--domain", "trainer")
        _, nsys_rows = nsys_csv(nsys, report_type, only_trainer)
        if report_type == "pushpop_trace":
            assert _trace_structure(rows) == _trace_structure(nsys_rows)
            assert {r["NameTree"] for r in rows} == {"trainer:optimizer"}  # its parents were not captured
        else:
            assert sorted((r["Range"], r["Instances"]) for r in rows) == sorted(
                (r["Range"], r["Instances"]) for r in nsys_rows
            )


# ------------------------------------------------------------------------------ ours: folder and file
@pytest.mark.parametrize("fmt", ["csv", "table"])
def test_recording_folder_and_sqlite_export_agree(runs, fmt):
    prefix, _, _ = runs
    for report_type in TYPES:
        for flags in ((), ("--domain", "trainer,default"), ("--domain", "trainer")):
            outputs = []
            for path in (prefix.with_name("ours.nvtxrec"), prefix.with_name("ours.sqlite")):
                proc = run_report(path, "--type", report_type, "--format", fmt, *flags)
                assert proc.returncode == 0, proc.stderr
                outputs.append(proc.stdout)
            assert outputs[0] == outputs[1], (report_type, flags)
    table = run_report(prefix.with_name("ours.nvtxrec"), "--type", "pushpop_sum").stdout
    assert "2 ranges" not in table and "1 range still open when the recording ended" in table


def test_domain_and_top_filter_the_rows(runs):
    prefix = runs[0].with_name("ours.nvtxrec")
    _, every = ours_csv(prefix, "startend_sum")
    _, both = ours_csv(prefix, "startend_sum", "--domain", "default", "--domain", "trainer")
    assert every == both
    _, default = ours_csv(prefix, "startend_sum", "--domain", "default")
    assert {r["Range"] for r in default} == {"whole-run", "handoff", "left-open-async"}
    _, top = ours_csv(prefix, "pushpop_sum", "--top", "2")
    _, full = ours_csv(prefix, "pushpop_sum")
    assert top == full[:2] and len(full) > 2
    # --top and --domain on the default report (sum) too
    proc = run_report(prefix, "--domain", "trainer", "--top", "1", "--format", "csv")
    assert proc.returncode == 0, proc.stderr
    rows = list(csv.DictReader(io.StringIO(proc.stdout)))
    assert [(r["Range"], r["Style"]) for r in rows] == [("trainer:optimizer", "PushPop")]


# ------------------------------------------------------------------------------ offline
def _synthetic(tmp_path) -> Path:
    """Thread 1: outer 100..200 holding a 110..120 and b 130..150 (b holds c 131..132);
    thread 2: other 105..195 (overlapping outer in time: not its child); an open push."""
    rec = tmp_path / "syn.nvtxrec"
    w = SegmentWriter(pid=50, start_ns=1000)
    t1, t2 = w.thread(50), w.thread(51)
    t1.string(1, "outer").string(2, "a").string(3, "b").string(4, "c").string(5, "other").string(6, "open")
    t1.push(1100, 1).push(1110, 2).pop(1120).push(1130, 3).push(1131, 4).pop(1132).pop(1150).pop(1200)
    t2.push(1105, 5).pop(1195)
    t1.push(1300, 6)
    w.write(rec)
    return rec


def test_trace_exact_child_and_exclusive_time_per_thread(tmp_path):
    rec = _synthetic(tmp_path)
    report = nsys_reports.nsys_report(rec, "pushpop_trace")
    rows = {r[5]: dict(zip(report.columns, r)) for r in report.rows}
    outer, a, b, c, other, still = (rows[n] for n in ("outer", "a", "b", "c", "other", "open"))
    assert (outer["Duration (ns)"], outer["DurChild (ns)"], outer["DurNonChild (ns)"]) == (100, 30, 70)
    assert (outer["NumChild"], outer["Lvl"], outer["ParentId"]) == (2, 0, None)
    assert (b["DurChild (ns)"], b["DurNonChild (ns)"], b["Lvl"], b["ParentId"]) == (1, 19, 1, outer["RangeId"])
    assert c["RangeStack"] == f":{outer['RangeId']}:{b['RangeId']}:{c['RangeId']}" and c["NameTree"] == "----c"
    assert a["ParentId"] == outer["RangeId"] and a["DurNonChild (ns)"] == 10
    assert (other["Lvl"], other["ParentId"], other["DurChild (ns)"]) == (0, None, 0)  # another thread
    assert still["End (ns)"] == report.last_ns == 300 and report.open_ranges == 1  # until the last timestamp
    assert [r[0] for r in report.rows] == sorted(r[0] for r in report.rows)  # id (= start) order
    summary = nsys_reports.nsys_report(rec, "pushpop_sum", top=2)
    assert [r[-1] for r in summary.rows] == ["outer", "other"] and summary.rows[0][1:3] == (100, 1)


def test_sum_rounding_is_sqlites(tmp_path):
    """nsys rounds in SQL: 2.25 -> 2.3 (half away from zero), where Python's format gives 2.2."""
    rec = tmp_path / "r.nvtxrec"
    w = SegmentWriter(pid=7, start_ns=0)
    t = w.thread(7)
    t.string(1, "x")
    for i, d in enumerate((1, 2, 3, 3)):  # avg 2.25
        t.push(100 * (i + 1), 1).pop(100 * (i + 1) + d)
    w.write(rec)
    (row,) = nsys_reports.nsys_report(rec, "pushpop_sum").rows
    assert row[:4] == (100.0, 9, 4, 2.3) and f"{2.25:.1f}" == "2.2"


def _error(capsys, *args) -> tuple[int, str]:
    code = cli.main(["report", *map(str, args)])
    err = capsys.readouterr().err.strip().splitlines()
    return code, err[-1]


@pytest.mark.parametrize(
    "args, code, message",
    [
        (("--type", "pushpop"), cli.EXIT_USAGE, "argument --type: invalid choice: 'pushpop'"),
        (("--top", "0"), cli.EXIT_USAGE, "argument --top: must be a positive integer, not '0'"),
        (("--top", "-3"), cli.EXIT_USAGE, "argument --top: must be a positive integer, not '-3'"),
        (("--top", "ten"), cli.EXIT_USAGE, "argument --top: must be a positive integer, not 'ten'"),
        (("--domain", "nope"), cli.EXIT_USAGE, "--domain: no domain 'nope' in"),
        (("--type", "pushpop_sum", "--domain", "x,nope"), cli.EXIT_USAGE, "--domain: no domain 'nope', 'x' in"),
        (("--domain", ","), cli.EXIT_USAGE, "--domain: empty domain name"),
        (("--type", "pushpop_trace", "--top", "3"), cli.EXIT_USAGE, "--top applies to summaries"),
        (("--type", "pushpop_sum", "--by-process"), cli.EXIT_USAGE, "--by-process applies to --type sum"),
        (("--pairs", "--type", "pushpop_sum"), cli.EXIT_USAGE, "--pairs cannot be combined with --type"),
        (("--type", "startend_sum"), cli.EXIT_NO_EVENTS, "no start/end ranges in"),
    ],
)
def test_errors_name_the_flag(tmp_path, capsys, args, code, message):
    rec = _synthetic(tmp_path)
    for path in (rec, tmp_path / "syn.sqlite"):
        if path.suffix == ".sqlite":
            from nvtx_plugins_tf.recorder import export_sqlite

            export_sqlite(rec, path)
        got, line = _error(capsys, path, *args)
        assert got == code, line
        assert line.startswith("nvtx-tf: error: ") and message in line, line
        assert "Traceback" not in line
    if "--domain" in args and code == cli.EXIT_USAGE and "empty" not in message:
        assert "(its domains: default)" in line


# ------------------------------------------------------------------------------ one reading of SQLite
def _ambiguous_sqlite(tmp_path) -> Path:
    """Our export of a small recording, then edited into what nsys's schema allows and the
    reports once read differently: domain 'first' created again later as 'second' (same id,
    same process), a range with both ``text`` ('plain') and ``textId`` ('registered'), and a
    range of another process in that domain id without its own creation row ('orphan')."""
    from nvtx_plugins_tf.recorder import export_sqlite

    rec = tmp_path / "amb.nvtxrec"
    w = SegmentWriter(pid=50, start_ns=1000)
    t = w.thread(50)
    t.string(1, "first").string(2, "plain").string(3, "dflt")
    t.domain_create(1005, 1, 1)
    t.push(1100, 2, domain=1).pop(1130, domain=1).push(1200, 3).pop(1210)
    w.write(rec)
    path = tmp_path / "amb.sqlite"
    export_sqlite(rec, path)
    con = sqlite3.connect(path)
    with con:
        dom, gtid = con.execute("SELECT domainId, globalTid FROM NVTX_EVENTS WHERE eventType = 75").fetchone()
        con.execute(
            "INSERT INTO NVTX_EVENTS (eventType, start, globalTid, domainId, text) VALUES (75, 1150, ?, ?, 'second')",
            (gtid, dom),
        )
        (sid,) = con.execute("SELECT max(id) + 1 FROM StringIds").fetchone()
        con.execute("INSERT INTO StringIds (id, value) VALUES (?, 'registered')", (sid,))
        con.execute("UPDATE NVTX_EVENTS SET textId = ? WHERE text = 'plain'", (sid,))
        other = (1 << 48) | (99 << 24) | 99
        con.execute(
            "INSERT INTO NVTX_EVENTS (eventType, start, end, globalTid, domainId, text) "
            "VALUES (59, 1300, 1340, ?, ?, 'orphan')",
            (other, dom),
        )
    con.close()
    return path


AMBIGUOUS_NAMES = {"first:registered": 30, "dflt": 10, "orphan": 40}


def test_summary_and_reports_read_sqlite_alike(tmp_path):
    """A registered string over a plain text, a domain's first creation, no name borrowed
    from another process: what nsys's reports do (next test), in every reader."""
    from nvtx_plugins_tf.recorder import summarize

    path = _ambiguous_sqlite(tmp_path)
    assert {r.range: r.total_ns for r in summarize(path).rows} == AMBIGUOUS_NAMES
    report = nsys_reports.nsys_report(path, "pushpop_sum")
    assert {r[-1]: r[1] for r in report.rows} == AMBIGUOUS_NAMES
    assert ranges.sqlite_domain_names(path) == ["", "first"]


def test_sqlite_reading_is_nsys_stats(nsys, tmp_path):
    path = _ambiguous_sqlite(tmp_path)
    assert {r["Range"]: int(r["Total Time (ns)"]) for r in oracle.nsys_stats(nsys, "nvtx_sum", path)} == AMBIGUOUS_NAMES
    assert ours_csv(path, "pushpop_sum") == nsys_csv(nsys, "pushpop_sum", path)
