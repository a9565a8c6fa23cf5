"""`nvtx-tf export` and the Parquet / Arrow exports (issue 23.2, 23.3).

* Every type from one decode; the Parquet directory and the Arrow file hold nsys's tables with
  nsys's columns and Arrow types (:data:`_nsys_schema.PARQUET`, generated from nsys 2024.2.3's
  own parquetdir export) and the same rows as our SQLite file, table by table, for a
  recording with every kind of event, payload, string and thread crossing.
* Parquet is streamed: a recording read in several batches gives several row groups.
* No time before 0 in any of them, with the same shift.
* The command line: nsys's flags (-t, -o, -f true|false), a table of bad inputs, each one line
  and its exit code, nothing left behind.
"""

from __future__ import annotations

import math
import sqlite3
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from conftest import _child_env

from nvtx_plugins_tf import cli
from nvtx_plugins_tf.recorder.exports import _nsys_schema
from nvtx_plugins_tf.recorder.exports.arrow import read_arrow_tables
from nvtx_plugins_tf.recorder.exports.arrowdir import read_arrowdir_tables
from nvtx_plugins_tf.recorder.recording._synth import SegmentWriter

MONO0 = 5_000_000_000
ROWS_COMPARED = ("NVTX_EVENTS", "StringIds", "ThreadNames", "PROCESSES", "ANALYSIS_DETAILS")


def _rich(tmp_path: Path) -> Path:
    """Every event kind, payload type, a registered string, a domain with a category, a
    thread name, a start/end range ended on another thread, one left open, two processes."""
    rec = tmp_path / "rich.nvtxrec"
    w = SegmentWriter(pid=300, start_ns=MONO0, start_realtime_ns=1_700_000_000_000_000_000, process_name="main")
    main, other = w.thread(300), w.thread(301)
    main.string(1, "outer").string(2, "inner").string(3, "dom").string(4, "reg").string(5, "t-main")
    main.string(6, "cat").domain_create(MONO0 + 50, 1, 3).category_name(1, 2, 6).thread_name(300, 5, override=True)
    main.push(MONO0 + 100, 1, color=0xFF00FF00, payload=("double", 2.5))
    main.push(MONO0 + 110, 2, domain=1, category=2, payload=("u64", 2**63 + 5)).pop(MONO0 + 120, domain=1)
    main.push(MONO0 + 130, 4, registered=True, payload=("i32", -3)).pop(MONO0 + 140)
    main.pop(MONO0 + 200)
    other.string(7, "async").start(MONO0 + 400, 11, 7, payload=("i64", -(2**40)))
    main.end(MONO0 + 450, 11)
    other.start(MONO0 + 500, 12, 7, payload=("u32", 4_000_000_000)).end(MONO0 + 520, 12)
    other.mark(MONO0 + 530, 7, payload=("float", 1.5)).start(MONO0 + 600, 13, 7)
    w.write(rec)
    w2 = SegmentWriter(pid=400, ppid=300, start_ns=MONO0 + 1000, process_name="child")
    w2.thread(400).string(1, "child").push(MONO0 + 1100, 1).pop(MONO0 + 1300)
    w2.write(rec)
    return rec


def nvtx_tf(*args, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "nvtx_plugins_tf", *map(str, args)],
        env=_child_env(), capture_output=True, text=True, timeout=300, cwd=cwd,
    )  # fmt: skip


def _same(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=1e-6)
    return a == b


def _sqlite_rows(path: Path, table: str, columns: list[str]) -> list[tuple]:
    quoted = ", ".join(f'"{c}"' for c in columns)
    con = sqlite3.connect(path)
    try:
        return con.execute(f"SELECT {quoted} FROM {table}").fetchall()
    finally:
        con.close()


def _as_sqlite(value, arrow_type: str):
    if arrow_type == "uint64" and value is not None and value >= 2**63:
        return value - 2**64  # SQLite integers are signed: u64 payloads are stored wrapped
    return value


def _assert_rows_match(table, arrow_table, sqlite_path):
    columns = [f.name for f in arrow_table.schema]
    types = {f.name: str(f.type) for f in arrow_table.schema}
    ours = sorted((tuple(_as_sqlite(r[c], types[c]) for c in columns) for r in arrow_table.to_pylist()), key=repr)
    theirs = sorted(_sqlite_rows(sqlite_path, table, columns), key=repr)
    assert len(ours) == len(theirs), table
    for x, y in zip(ours, theirs):
        assert all(_same(a, b) for a, b in zip(x, y)), (table, x, y)


def test_every_type_from_one_decode_holds_nsys_tables_and_the_sqlite_rows(tmp_path):
    rec = _rich(tmp_path)
    proc = nvtx_tf("export", "-t", "sqlite,parquetdir,arrow,arrowdir,json", "-o", tmp_path / "out" / "run", rec)
    assert proc.returncode == 0, proc.stderr
    out = tmp_path / "out"
    assert sorted(p.name for p in out.iterdir()) == ["run.arrow", "run.json", "run.sqlite", "run_arwdir", "run_pqtdir"]
    pqt = out / "run_pqtdir"
    # nsys's tables, the empty ones its recipes read, and our own (nsys's stay nsys's).
    parquet = {**_nsys_schema.PARQUET, **_nsys_schema.RECIPE_PARQUET}
    assert sorted(p.stem for p in pqt.iterdir()) == sorted([*parquet, "NVTX_TF_META_DATA"])
    arrow = read_arrow_tables(out / "run.arrow")
    assert sorted(arrow) == sorted([*_nsys_schema.ARROW, "NVTX_TF_META_DATA"])
    for table, columns in parquet.items():
        schema = pq.read_schema(pqt / f"{table}.parquet")
        assert [(f.name, str(f.type), f.nullable) for f in schema] == list(columns), table
    for table, (desc, columns) in _nsys_schema.ARROW.items():  # nsys's --type arrow types and metadata
        schema = arrow[table].schema
        assert [(f.name, str(f.type), f.nullable, (f.metadata or {}).get(b"field_desc", b"").decode() or None)
                for f in schema] == list(columns), table  # fmt: skip
        assert schema.metadata.get(b"table_desc", b"").decode() == (desc or ""), table
        assert arrow[table].num_rows == pq.read_metadata(pqt / f"{table}.parquet").num_rows, table
    for table in ("META_DATA_CAPTURE", "NVTX_TF_META_DATA"):
        assert pq.read_metadata(pqt / f"{table}.parquet").num_rows > 0, table
    # arrowdir: the arrow file's streams, one file per table (schemas, metadata and rows).
    arwdir = read_arrowdir_tables(out / "run_arwdir")
    assert sorted(p.name for p in (out / "run_arwdir").iterdir()) == sorted(f"{t}.arrow" for t in arrow)
    for table, data in arrow.items():
        assert arwdir[table].schema.equals(data.schema, check_metadata=True), table
        if table != "META_DATA_EXPORT":  # (it names its own output and export time)
            assert arwdir[table].to_pylist() == data.to_pylist(), table
    for table in ROWS_COMPARED:
        _assert_rows_match(table, pq.read_table(pqt / f"{table}.parquet"), out / "run.sqlite")
        _assert_rows_match(table, arrow[table], out / "run.sqlite")
    events = pq.read_table(pqt / "NVTX_EVENTS.parquet").to_pylist()
    assert min(e["start"] for e in events) == 0
    crossed = [e for e in events if e["endGlobalTid"] is not None]
    assert len(crossed) == 1 and crossed[0]["endGlobalTid"] != crossed[0]["globalTid"]
    assert [e["uint64Value"] for e in events if e["uint64Value"] is not None] == [2**63 + 5]
    names = {r["name"]: r["value"] for r in pq.read_table(pqt / "META_DATA_EXPORT.parquet").to_pylist()}
    assert names["EXPORT_SCHEMA_VERSION"] == "3.11.1" and names["EXPORT_PARAM_OUTUPT_FILE"] == "run_pqtdir"
    assert not [p for p in out.rglob(".*")], "a temporary file was left behind"


def test_parquet_is_written_in_row_groups_as_the_recording_is_read(tmp_path):
    rec = tmp_path / "big.nvtxrec"
    w = SegmentWriter(pid=7, start_ns=MONO0, chunk_size=1 << 20)
    t = w.thread(7)
    t.string(1, "r")
    for i in range(150_000):  # more rows than one batch of the reader
        t.push(MONO0 + 10 * i, 1).pop(MONO0 + 10 * i + 5)
    w.write(rec)
    assert nvtx_tf("export", "-t", "parquetdir", rec).returncode == 0
    meta = pq.read_metadata(tmp_path / "big_pqtdir" / "NVTX_EVENTS.parquet")
    assert meta.num_rows == 150_000 and meta.num_row_groups > 1


def test_times_shift_alike_when_an_event_precedes_its_segment(tmp_path):
    rec = tmp_path / "early.nvtxrec"
    w = SegmentWriter(pid=9, start_ns=MONO0)
    w.thread(9).string(1, "early").push(MONO0 - 500, 1).pop(MONO0 + 100)
    w.write(rec)
    assert nvtx_tf("export", "-t", "sqlite,parquetdir,arrow,arrowdir", rec).returncode == 0
    (sqlite_row,) = _sqlite_rows(tmp_path / "early.sqlite", "NVTX_EVENTS", ["start", "end"])
    (pq_row,) = pq.read_table(tmp_path / "early_pqtdir" / "NVTX_EVENTS.parquet", columns=["start", "end"]).to_pylist()
    arrow = read_arrow_tables(tmp_path / "early.arrow")["NVTX_EVENTS"].select(["start", "end"]).to_pylist()
    assert sqlite_row == (0, 600) and (pq_row["start"], pq_row["end"]) == sqlite_row
    assert [(r["start"], r["end"]) for r in arrow] == [sqlite_row]
    arwdir = read_arrowdir_tables(tmp_path / "early_arwdir")["NVTX_EVENTS"].select(["start", "end"]).to_pylist()
    assert [(r["start"], r["end"]) for r in arwdir] == [sqlite_row]


def test_output_names_follow_nsys_export(tmp_path):
    rec = _rich(tmp_path)
    assert nvtx_tf("export", rec).returncode == 0  # default: sqlite, next to the recording
    assert (tmp_path / "rich.sqlite").is_file()
    assert nvtx_tf("export", "-t", "parquetdir", "-o", tmp_path / "x_pqtdir", rec).returncode == 0
    assert (tmp_path / "x_pqtdir" / "NVTX_EVENTS.parquet").is_file()
    assert nvtx_tf("export", "-t", "arrow", "-o", tmp_path / "y", rec).returncode == 0
    assert (tmp_path / "y.arrow").is_file()
    assert nvtx_tf("export", "-t", "arrowdir", "-o", tmp_path / "z", rec).returncode == 0
    assert (tmp_path / "z_arwdir" / "NVTX_EVENTS.arrow").is_file()


def test_existing_output_is_kept_unless_forced(tmp_path):
    rec = _rich(tmp_path)
    target = tmp_path / "keep.sqlite"
    target.write_text("mine")
    proc = nvtx_tf("export", "-o", target, rec)
    assert proc.returncode == cli.EXIT_OUTPUT_EXISTS == 14, proc.stderr
    assert proc.stderr.strip() == f"nvtx-tf: error: {target} exists; add --force-overwrite true to replace it"
    assert target.read_text() == "mine"
    assert nvtx_tf("export", "-o", target, "-f", "false", rec).returncode == 14
    assert nvtx_tf("export", "-o", target, "--force-overwrite", "true", rec).returncode == 0
    assert sqlite3.connect(target).execute("SELECT count(*) FROM NVTX_EVENTS").fetchone()[0] > 0
    (tmp_path / "d_pqtdir").mkdir()
    (tmp_path / "d_pqtdir" / "old.parquet").write_text("x")
    assert nvtx_tf("export", "-t", "parquetdir", "-o", tmp_path / "d_pqtdir", "-f", "true", rec).returncode == 0
    assert not (tmp_path / "d_pqtdir" / "old.parquet").exists()  # replaced whole, as nsys
    (tmp_path / "e_arwdir").mkdir()
    (tmp_path / "e_arwdir" / "old.arrow").write_text("x")
    assert nvtx_tf("export", "-t", "arrowdir", "-o", tmp_path / "e_arwdir", rec).returncode == 14
    assert (tmp_path / "e_arwdir" / "old.arrow").read_text() == "x"
    assert nvtx_tf("export", "-t", "arrowdir", "-o", tmp_path / "e_arwdir", "-f", "true", rec).returncode == 0
    assert sorted(p.name for p in (tmp_path / "e_arwdir").iterdir())[0] != "old.arrow"
    assert not (tmp_path / "e_arwdir" / "old.arrow").exists() and not list(tmp_path.glob(".e_arwdir*"))


@pytest.mark.parametrize(
    "args, code, needle",
    [
        (["-t", "parquet", "{rec}"], 2, "argument -t/--type: unknown type 'parquet'"),
        (["-t", "sqlite,,json", "{rec}"], 2, "argument -t/--type: empty type"),
        (["-t", "", "{rec}"], 2, "argument -t/--type: empty type"),
        (["-f", "yes", "{rec}"], 2, "argument -f/--force-overwrite: 'yes': give true or false"),
        (["{tmp}/missing"], 7, "no such recording: "),
        ([""], 7, "RECORDING '': empty"),
        (["{tmp}/plain.txt"], 7, "not a .nvtxrec recording folder"),
        (["-o", "{tmp}/out/", "{rec}"], 2, "PREFIX must name the output files"),
        (["-o", "{tmp}/afile/x", "{rec}"], 3, "cannot create output directory"),
        (["{tmp}/empty.nvtxrec"], 5, "no NVTX events in"),
        # nsys export's other flags are not taken (docs/cli.md#export says so)
        (["--tables", "NVTX_EVENTS", "{rec}"], 2, "unrecognized arguments: --tables"),
        (["-q", "true", "{rec}"], 2, "unrecognized arguments: -q"),
        (["--lazy", "false", "{rec}"], 2, "unrecognized arguments: --lazy"),
        (["-t", "arwdir", "{rec}"], 2, "argument -t/--type: unknown type 'arwdir'"),
    ],
)
def test_bad_input_is_one_line_and_its_code(tmp_path, args, code, needle):
    rec = _rich(tmp_path)
    (tmp_path / "plain.txt").write_text("x")
    (tmp_path / "afile").write_text("x")
    SegmentWriter(pid=5, start_ns=MONO0).write(tmp_path / "empty.nvtxrec")
    before = sorted(p.name for p in tmp_path.rglob("*"))
    args = [a.format(rec=rec, tmp=tmp_path) for a in args]
    proc = nvtx_tf("export", *args)
    assert proc.returncode == code, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("nvtx-tf: error: ") and needle in lines[0], lines
    assert sorted(p.name for p in tmp_path.rglob("*")) == before, "export left something behind"


def test_damaged_recording_exports_the_intact_events(tmp_path):
    rec = _rich(tmp_path)
    segment = next(p for p in rec.glob("*.nvtxseg") if "300" in p.name)
    data = bytearray(segment.read_bytes())
    data[4096 + 64 : 4096 + 72] = b"\xff" * 8  # a word of garbage where the first record starts
    segment.write_bytes(bytes(data))
    proc = nvtx_tf("export", "-t", "parquetdir", rec)
    assert proc.returncode == cli.EXIT_DAMAGED, proc.stderr
    assert "damaged recording" in proc.stderr and "intact events were exported" in proc.stderr
    assert pq.read_metadata(tmp_path / "rich_pqtdir" / "NVTX_EVENTS.parquet").num_rows > 0


def test_record_export_picks_the_types(tmp_path):
    proc = nvtx_tf(
        "record", "-o", tmp_path / "r", "--export", "parquetdir,arrow", "--",
        sys.executable, "-c", "import nvtx\nwith nvtx.annotate('x'): pass",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.arrow", "r.nvtxrec", "r_pqtdir"]
    assert "wrote " in proc.stdout and "r_pqtdir" in proc.stdout
    bad = nvtx_tf("record", "-o", tmp_path / "s", "--export", "csv", "--", "true")
    assert bad.returncode == 2 and "argument --export: unknown type 'csv'" in bad.stderr
    assert not (tmp_path / "s.nvtxrec").exists()


@pytest.mark.parametrize("report_type", ["sum", "pushpop_trace", "pushpop_sum", "startend_sum"])
def test_report_reads_a_parquetdir_as_the_sqlite_file(tmp_path, report_type):
    """`nvtx-tf report` on our parquetdir export prints what it prints on our SQLite export
    of the same recording (issue 23.5; nsys's parquetdir: tests/test_nsys_recipes.py)."""
    rec = _rich(tmp_path)
    assert nvtx_tf("export", "-t", "sqlite,parquetdir", rec).returncode == 0
    on_sqlite = nvtx_tf("report", tmp_path / "rich.sqlite", "--type", report_type, "--format", "csv")
    on_parquet = nvtx_tf("report", tmp_path / "rich_pqtdir", "--type", report_type, "--format", "csv")
    assert on_sqlite.returncode == on_parquet.returncode == 0, on_parquet.stderr
    assert on_parquet.stdout == on_sqlite.stdout and on_parquet.stdout.count("\n") > 1


def test_report_on_a_damaged_parquetdir_is_one_line(tmp_path):
    (tmp_path / "bad_pqtdir").mkdir()
    (tmp_path / "bad_pqtdir" / "NVTX_EVENTS.parquet").write_bytes(b"PAR1 not really")
    proc = nvtx_tf("report", tmp_path / "bad_pqtdir")
    assert proc.returncode == cli.EXIT_INPUT_NOT_FOUND, proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith(f"nvtx-tf: error: cannot read {tmp_path / 'bad_pqtdir'}: "), line
