"""An SQLite export's range rows read straight from NVTX_EVENTS' pages
(cc_ops/reader/sqlite_pages.h, chosen in sqlite_ranges.cc) held to SQLite's own query (the
same call with ``NVTX_TF_SQLITE_PAGES=0``) value for value: the rows, their order, the
messages numbered in the same order, so analyze's outputs byte for byte.

* Real exports: ours (``export -t sqlite``), nsys 2023.4.4's and 2024.2.3's (a workload of
  registered strings run under the real ``nsys profile``): analyze's outputs byte-identical,
  and the pages read (the flag the C API returns).
* Files made by Python's sqlite3 module for each part of the file format: overflow pages
  (5 KB and 100 KB messages), interior pages several levels deep (200k rows), page sizes
  512 and 65536, reserved bytes at the end of each page, deleted rows (the freelist),
  records shorter than the table (ALTER TABLE ADD COLUMN), textId with and without its
  StringIds row, NULL globalTid/domainId/end.
* Hostile files: a truncated file, a corrupt interior page pointer, a cycle of pages, text as
  a BLOB, start as REAL or TEXT, a UTF-16 database, a WAL database with a live -wal file, a
  column added with a DEFAULT, duplicate StringIds ids: the pages give up (where they must,
  with the reason) and the result is SQLite's, or the same error and exit code.
"""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from contextlib import closing
from pathlib import Path

import numpy as np
import pytest
from conftest import _child_env

from nvtx_plugins_tf.recorder.analysis import _native
from nvtx_plugins_tf.recorder.analysis.native_mapper import LIBSQLITE3
from nvtx_plugins_tf.recorder.nsys_inputs.batches import feed_export, range_query
from nvtx_plugins_tf.recorder.nsys_inputs.sqlite import open_nsys_sqlite

PUSH_POP, START_END, DOMAIN_CREATE, MARK = 59, 60, 75, 34
PID = 4242

#: NVTX_EVENTS as nsys 2024.2 writes it (the columns in its order; comments dropped)
NVTX_EVENTS = """CREATE TABLE NVTX_EVENTS (
    start INTEGER NOT NULL, end INTEGER, eventType INTEGER NOT NULL, rangeId INTEGER,
    category INTEGER, color INTEGER, text TEXT, globalTid INTEGER, endGlobalTid INTEGER,
    textId INTEGER, domainId INTEGER, uint64Value INTEGER, int64Value INTEGER,
    doubleValue REAL, uint32Value INTEGER, int32Value INTEGER, floatValue REAL,
    jsonTextId INTEGER, jsonText TEXT)"""
STRING_IDS = "CREATE TABLE StringIds (id INTEGER NOT NULL PRIMARY KEY, value TEXT NOT NULL)"
INSERT = "INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid, textId, domainId) VALUES (?,?,?,?,?,?,?)"


def _gtid(pid: int, tid: int) -> int:
    return (pid << 24) | tid


def _rows(n: int, seed: int = 0, long_texts: bool = False) -> list[tuple]:
    """n NVTX_EVENTS rows: ranges of both kinds on 3 threads and 2 domains (created first),
    marks, textId rows (registered strings 1-5; 7 has no StringIds row), plain texts, NULL
    ends, NULL globalTid/domainId; with long_texts, messages of 5 KB and 100 KB."""
    rng = np.random.default_rng(seed)
    rows = [
        (0, None, DOMAIN_CREATE, "dom one", _gtid(PID, PID), None, 1),
        (1, None, DOMAIN_CREATE, "dom two", _gtid(PID, PID + 1), None, 2),
    ]
    t = 10
    for i in range(n):
        t += int(rng.integers(1, 50))
        kind = int(rng.choice([PUSH_POP, PUSH_POP, START_END, MARK, 70, 71]))
        end = None if rng.random() < 0.02 else t + int(rng.integers(0, 10_000))
        gtid = None if rng.random() < 0.02 else _gtid(PID, PID + int(rng.integers(0, 3)))
        domain = None if rng.random() < 0.05 else int(rng.integers(0, 3))
        text, text_id = f"name {int(rng.integers(0, 40))}", None
        pick = rng.random()
        if pick < 0.2:
            text, text_id = None, int(rng.integers(1, 8))  # (7: no StringIds row: NULL, or its text)
        elif pick < 0.25:
            text_id = int(rng.integers(1, 8))  # both: the registered string wins when there is one
        elif pick < 0.27:
            text = None
        elif pick < 0.28:
            text = ""
        if long_texts and i % 97 == 0:
            text = ("x" if i % 2 else "é") * (5_000 if i % 3 else 100_000) + str(i % 5)
        rows.append((t, end, kind, text, gtid, text_id, domain))
    # domain 1 created again, earlier (by start, not rowid: this one names it), and 3 nameless
    rows += [(-5, None, DOMAIN_CREATE, "dom one, first", _gtid(PID, PID + 2), None, 1)]
    rows += [(7, None, DOMAIN_CREATE, None, _gtid(PID, PID), None, 3), (8, 9, PUSH_POP, "in 3", None, None, 3)]
    return rows


def _strings(con, values: dict | None = None) -> None:
    con.execute(STRING_IDS)
    values = values if values is not None else {k: f"registered {k}" for k in range(1, 7)}
    con.executemany("INSERT INTO StringIds VALUES (?, ?)", list(values.items()))


def make_db(
    path: Path, rows: list[tuple], page_size: int = 4096, reserved: int = 0, strings: bool = True, pragmas=()
) -> Path:
    """An nsys-schema SQLite file of ``rows`` (see :func:`_rows`); ``reserved`` bytes at the
    end of each page (SQLite keeps the header's count of them for a database made after it
    is set: page 1 alone, its cell area moved below them)."""
    if reserved:
        with closing(sqlite3.connect(path)) as con:
            con.execute(f"PRAGMA page_size={page_size}")
            con.execute("PRAGMA user_version=1")
            con.commit()
        data = bytearray(path.read_bytes())
        assert len(data) == page_size
        data[20] = reserved
        data[105:107] = (page_size - reserved).to_bytes(2, "big")
        path.write_bytes(bytes(data))
    with closing(sqlite3.connect(path)) as con:
        con.execute(f"PRAGMA page_size={page_size}")
        for pragma in pragmas:
            con.execute(pragma)
        con.execute(NVTX_EVENTS)
        if strings:
            _strings(con)
        con.executemany(INSERT, rows)
        con.commit()
    return path


def read(path: Path, pages: bool, monkeypatch) -> tuple[bool, str, object]:
    """``path``'s ranges fed to the native mapper's columns as analyze feeds them, by the
    pages or (pages False) SQLite's query: (pages read, why not, everything the columns
    say: messages in order, (domainId, pid) pairs in order, bounds, each range's name key,
    every process's results) or the exception's type and message."""
    monkeypatch.setenv("NVTX_TF_SQLITE_PAGES", "1" if pages else "0")
    native = _native.NativeRanges()
    try:
        info = feed_export(
            path, native.add_export, native.reserve, lambda u, q, r: native.add_sqlite(LIBSQLITE3, u, q, r)
        )
    except Exception as exc:  # noqa: BLE001 - the error is the result compared
        return native.sqlite_pages, native.sqlite_note, (type(exc).__name__, str(exc))
    pairs = native.pairs()
    bounds = native.bounds()
    keys = native.name(np.arange(len(pairs) + 1, dtype=np.int64), len(info.messages))
    stats = native.rank_stats(None, len(keys))
    plain = [{k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in s.items()} for s in stats]
    names = info.domain_names
    return native.sqlite_pages, native.sqlite_note, (info.messages, names, pairs.tolist(), bounds, keys.tolist(), plain)


def assert_same(path: Path, monkeypatch, pages: bool = True, note: str = "") -> object:
    """The pages' reading of ``path`` is SQLite's; the pages were read (``pages``) or not,
    ``note`` in the reason."""
    used, why, fast = read(path, True, monkeypatch)
    reference_used, _, reference = read(path, False, monkeypatch)
    assert not reference_used
    assert used == pages, why
    assert note in why
    assert fast == reference
    return fast


def analyze(path: Path, out: Path, pages: bool) -> subprocess.CompletedProcess:
    env = _child_env(None, NVTX_TF_SQLITE_PAGES="1" if pages else "0")
    return subprocess.run(
        [sys.executable, "-m", "nvtx_plugins_tf", "analyze", str(path), "-o", str(out)],
        env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip


def assert_same_outputs(path: Path, tmp_path: Path) -> None:
    """analyze's outputs (or its error line and exit code) of ``path`` byte for byte alike,
    by the pages and by SQLite's query."""
    a, b = tmp_path / "pages", tmp_path / "query"
    fast, slow = analyze(path, a, True), analyze(path, b, False)
    assert (fast.returncode, fast.stderr) == (slow.returncode, slow.stderr)
    if fast.returncode == 0:
        files = sorted(p.relative_to(a) for p in a.rglob("*") if p.is_file())
        assert files and files == sorted(p.relative_to(b) for p in b.rglob("*") if p.is_file())
        for f in files:
            assert (a / f).read_bytes() == (b / f).read_bytes(), f


# ------------------------------------------------------------------ real exports
def test_our_sqlite_export(tmp_path, monkeypatch):
    from test_analyze_native import _write_process

    from nvtx_plugins_tf.recorder.exports.sqlite import export_sqlite

    rec = tmp_path / "rank.nvtxrec"
    rng = np.random.default_rng(3)
    _write_process(rec, rng, 100, 1_700_000_000 * 10**9, {1: "train"}, 3000)
    _write_process(rec, rng, 200, 1_700_000_000 * 10**9, {1: "other", 2: "train"}, 3000)
    export = tmp_path / "rank.sqlite"
    export_sqlite(rec, export)
    fast = assert_same(export, monkeypatch)
    assert len(fast[0]) > 10 and fast[3][3] > 1000
    assert_same_outputs(export, tmp_path)


@pytest.fixture(scope="module")
def nsys_exports(c_sample, tmp_path_factory) -> dict[str, Path]:
    """nsys's SQLite export of tests/nsys/rank_steps.c (registered strings, steps, a range left
    open) under Nsight Systems 2023.4.4 and 2024.2.3."""
    import nsys_oracle as oracle

    workload = c_sample(Path(__file__).resolve().parent / "nsys" / "rank_steps.c")
    tmp = tmp_path_factory.mktemp("nsys_pages")
    out = {}
    for release in (oracle.fetch_nsys.PREVIOUS, oracle.fetch_nsys.CURRENT):
        nsys = oracle.nsys_or_skip(release)
        out[release] = oracle.run_nsys(nsys, [workload, 0, 12, 2], tmp / f"rank_{release}").sqlite
    return out


@pytest.mark.parametrize("release", ["2023.4.4", "2024.2.3"])
def test_nsys_sqlite_exports(nsys_exports, release, tmp_path, monkeypatch):
    export = nsys_exports[release]
    fast = assert_same(export, monkeypatch)
    assert fast[3][3] >= 12
    assert_same_outputs(export, tmp_path)


# ------------------------------------------------------------------ the file format
@pytest.mark.parametrize("page_size", [512, 4096, 65536])
def test_page_sizes_and_overflow_pages(tmp_path, monkeypatch, page_size):
    path = make_db(tmp_path / "f.sqlite", _rows(3000, seed=page_size, long_texts=True), page_size=page_size)
    messages, names = assert_same(path, monkeypatch)[:2]
    assert names[(1, PID)] == "dom one, first" and names[(3, PID)] is None
    assert max(map(len, messages)) > 100_000 and any(4_000 < len(m) < 6_000 for m in messages)


def test_interior_pages_several_levels_deep(tmp_path, monkeypatch):
    path = make_db(tmp_path / "deep.sqlite", _rows(200_000, seed=1), page_size=512)
    with closing(sqlite3.connect(path)) as con:
        (root,) = con.execute("SELECT rootpage FROM sqlite_master WHERE name='NVTX_EVENTS'").fetchone()
    data = path.read_bytes()
    # root, child and grandchild interior pages (0x05): three levels at least above the leaves
    page = root
    for _ in range(3):
        at = (page - 1) * 512
        assert data[at] == 0x05
        page = int.from_bytes(data[at + 8 : at + 12], "big")  # (the right-most child)
    assert assert_same(path, monkeypatch)[3][3] > 100_000
    assert_same_outputs(path, tmp_path)


@pytest.mark.parametrize("page_size", [512, 4096])
def test_reserved_bytes(tmp_path, monkeypatch, page_size):
    path = make_db(tmp_path / "r.sqlite", _rows(3000, long_texts=True), page_size=page_size, reserved=32)
    assert path.read_bytes()[20] == 32
    with closing(sqlite3.connect(path)) as con:
        assert con.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    assert_same(path, monkeypatch)


def test_deleted_rows_and_the_freelist(tmp_path, monkeypatch):
    path = make_db(tmp_path / "d.sqlite", _rows(20_000, long_texts=True))
    with closing(sqlite3.connect(path)) as con:
        con.execute("DELETE FROM NVTX_EVENTS WHERE rowid % 3 = 0 OR rowid BETWEEN 5000 AND 9000")
        con.execute(
            "INSERT INTO NVTX_EVENTS (rowid, start, end, eventType, text) VALUES (1000000000, 5, 6, 59, 'last')"
        )
        con.commit()
        assert con.execute("PRAGMA freelist_count").fetchone()[0] > 0
    assert assert_same(path, monkeypatch)[0][-1] == "last"


def test_records_shorter_than_the_table(tmp_path, monkeypatch):
    """Rows written before ALTER TABLE ADD COLUMN hold fewer columns: SQLite reads the
    missing ones as NULL (their DEFAULT)."""
    path = tmp_path / "short.sqlite"
    rows = _rows(2000, seed=5)
    with closing(sqlite3.connect(path)) as con:
        con.execute("CREATE TABLE NVTX_EVENTS (start INTEGER, end INTEGER, eventType INTEGER, text TEXT)")
        con.executemany("INSERT INTO NVTX_EVENTS VALUES (?,?,?,?)", [r[:4] for r in rows[:1000]])
        for column in ("globalTid", "textId", "domainId"):
            con.execute(f"ALTER TABLE NVTX_EVENTS ADD COLUMN {column} INTEGER")
        _strings(con)
        con.executemany(INSERT, rows[1000:])
        con.commit()
    assert assert_same(path, monkeypatch)[3][3] > 1000


def test_many_messages_alike_numbered_in_first_seen_order(tmp_path, monkeypatch):
    """Messages numbered in the order they first come, as SQLite's query numbers them, past
    the reader's cache of recent messages: 3,000 of them, many of one length sharing their
    first and last eight bytes (the cache's slot), each met at random several times."""
    rng = np.random.default_rng(5)
    names = [f"sharedhead{i:06d}sharedtail" for i in range(2000)] + [f"m{i}" for i in range(1000)] + ["", "é" * 9]
    rows = [(0, None, DOMAIN_CREATE, "dom", _gtid(PID, PID), None, 1)]
    for i, pick in enumerate(rng.integers(0, len(names), 20_000).tolist()):
        rows.append((10 + 3 * i, 11 + 3 * i, PUSH_POP, names[pick], _gtid(PID, PID), None, 1))
    fast = assert_same(make_db(tmp_path / "many.sqlite", rows), monkeypatch)
    assert len(fast[0]) > 2500


def test_no_string_ids_table(tmp_path, monkeypatch):
    rows = [r[:5] + (None,) + r[6:] for r in _rows(2000, seed=6) if r[3] is not None]
    path = make_db(tmp_path / "nostrings.sqlite", rows, strings=False)
    assert_same(path, monkeypatch)


# ------------------------------------------------------------------ hostile files
def _interior_page(path: Path, page_size: int) -> tuple[bytearray, int]:
    """The file's bytes and the offset of NVTX_EVENTS' root page (an interior page)."""
    with closing(sqlite3.connect(path)) as con:
        (root,) = con.execute("SELECT rootpage FROM sqlite_master WHERE name='NVTX_EVENTS'").fetchone()
    data = bytearray(path.read_bytes())
    at = (root - 1) * page_size
    assert data[at] == 0x05
    return data, at


def _first_child(data: bytearray, at: int) -> int:
    """The offset of the root's first cell (its first 4 bytes: the left child's page)."""
    return at + int.from_bytes(data[at + 12 : at + 14], "big")


def direct(path: Path, query: tuple[str, str], pages: bool, monkeypatch) -> tuple[bool, str, object]:
    """The range query of ``path`` (``range_query``'s) given to the native reader alone (as
    analyze gives it, but without the sqlite3 module's questions first, which meet a damaged
    table before it): (pages read, why not, the messages or the error)."""
    monkeypatch.setenv("NVTX_TF_SQLITE_PAGES", "1" if pages else "0")
    query, ranges = query
    native = _native.NativeRanges()
    try:
        result = native.add_sqlite(LIBSQLITE3, path.resolve().as_uri() + "?mode=ro", query, ranges)
    except OSError as exc:
        result = str(exc)
    return native.sqlite_pages, native.sqlite_note, result


@pytest.mark.parametrize(
    "damage, note",
    [
        ("truncated", "shorter"),
        ("a child out of range", "out of range"),
        ("a leaf's child page 1", "out of range"),
        ("a cycle", "twice"),
        ("an overflow page out of range", "overflow"),
        ("a cell out of its page", "cell"),
        ("a value past its record", "out of its record"),
    ],
)
def test_damaged_files_give_sqlite_s_result(tmp_path, monkeypatch, damage, note):
    """The damage made where only the walk of the table's pages meets it (the sqlite3
    module's questions before, domain creations and max(rowid), still answer): the pages
    give up, SQLite's query then says what it says."""
    path = make_db(tmp_path / "bad.sqlite", _rows(5000, seed=7, long_texts=True))
    with open_nsys_sqlite(path) as db:
        query = range_query(db)
    data, at = _interior_page(path, 4096)
    cell = _first_child(data, at)
    if damage == "truncated":  # (its last page cut short: the header counts one page more)
        data = data[: len(data) - 100]
    elif damage == "a child out of range":
        data[cell : cell + 4] = (10**6).to_bytes(4, "big")
    elif damage == "a leaf's child page 1":
        data[cell : cell + 4] = (1).to_bytes(4, "big")
    elif damage == "a cycle":  # (the root's first child: the root itself)
        data[cell : cell + 4] = (at // 4096 + 1).to_bytes(4, "big")
    elif damage == "a cell out of its page":  # (the first leaf's first cell pointer past the page:
        # SQLite reads it masked, at 5000 % 4096; not one a byte before the end, which SQLite
        # parses past the page's buffer, its result then hanging on what memory holds there)
        leaf = (int.from_bytes(data[cell : cell + 4], "big") - 1) * 4096
        data[leaf + 8 : leaf + 10] = (5000).to_bytes(2, "big")
    elif damage == "a value past its record":  # (row 1's start: text of 57 bytes, in a record of about 40)
        leaf_cell = _leaf_cell(data, at, 1)
        header = leaf_cell + _varint(data, leaf_cell)[1] + _varint(data, leaf_cell + _varint(data, leaf_cell)[1])[1]
        assert data[header] < 0x80 and data[header + 1] in (8, 9, 1, 2, 3, 4, 5, 6)
        data[header + 1] = 0x7F
    else:  # the first long row: its first overflow page's number
        with closing(sqlite3.connect(path)) as con:
            (rowid,) = con.execute("SELECT min(rowid) FROM NVTX_EVENTS WHERE length(text) > 4000").fetchone()
        leaf_cell = _leaf_cell(data, at, rowid)
        payload, n = _varint(data, leaf_cell)
        pointer = leaf_cell + n + _varint(data, leaf_cell + n)[1] + _local(payload, 4096)
        data[pointer : pointer + 4] = (10**6).to_bytes(4, "big")
    path.write_bytes(bytes(data))
    fast, slow = direct(path, query, True, monkeypatch), direct(path, query, False, monkeypatch)
    assert not fast[0] and note in fast[1], fast[1]
    assert fast[2] == slow[2]
    assert read(path, True, monkeypatch)[2] == read(path, False, monkeypatch)[2]
    assert_same_outputs(path, tmp_path)


def _varint(data: bytearray, at: int) -> tuple[int, int]:
    """An SQLite varint at ``at``: (its value, its size)."""
    value = 0
    for n in range(8):
        value = (value << 7) | (data[at + n] & 0x7F)
        if not data[at + n] & 0x80:
            return value, n + 1
    return (value << 8) | data[at + 8], 9


def _local(payload: int, usable: int) -> int:
    """The bytes of a table leaf cell's payload on its page (the rest: overflow pages)."""
    most, least = usable - 35, (usable - 12) * 32 // 255 - 23
    k = least + (payload - least) % (usable - 4)
    return payload if payload <= most else (k if k <= most else least)


def _leaf_cell(data: bytearray, page_at: int, rowid: int) -> int:
    """The offset of the cell of ``rowid`` in the table b-tree whose root is at ``page_at``."""
    while data[page_at] == 0x05:
        cells = int.from_bytes(data[page_at + 3 : page_at + 5], "big")
        child = int.from_bytes(data[page_at + 8 : page_at + 12], "big")
        for c in range(cells):
            cell = page_at + int.from_bytes(data[page_at + 12 + 2 * c : page_at + 14 + 2 * c], "big")
            if rowid <= _varint(data, cell + 4)[0]:
                child = int.from_bytes(data[cell : cell + 4], "big")
                break
        page_at = (child - 1) * 4096
    for c in range(int.from_bytes(data[page_at + 3 : page_at + 5], "big")):
        cell = page_at + int.from_bytes(data[page_at + 8 + 2 * c : page_at + 10 + 2 * c], "big")
        if _varint(data, cell + _varint(data, cell)[1])[0] == rowid:
            return cell
    raise AssertionError(f"no row {rowid}")


A_RANGE = "rowid = (SELECT max(rowid) FROM NVTX_EVENTS WHERE eventType = 59 AND text > '')"


@pytest.mark.parametrize(
    "value, note",
    [
        (f"UPDATE NVTX_EVENTS SET text = CAST(text AS BLOB) WHERE {A_RANGE} AND text > ''", "serial type"),
        (f"UPDATE NVTX_EVENTS SET start = start + 0.5 WHERE {A_RANGE}", "serial type"),
        (f"UPDATE NVTX_EVENTS SET start = 'soon' WHERE {A_RANGE}", "serial type"),
        ("UPDATE NVTX_EVENTS SET eventType = 59.0 WHERE rowid = 80", ""),  # (stored as the integer 59)
        ("UPDATE NVTX_EVENTS SET eventType = 59.5 WHERE rowid = 90", "serial type"),
        ("ALTER TABLE NVTX_EVENTS ADD COLUMN later INTEGER DEFAULT 5", ""),  # (a column not read)
    ],
)
def test_values_of_other_types(tmp_path, monkeypatch, value, note):
    path = make_db(tmp_path / "types.sqlite", _rows(500, seed=8))
    with closing(sqlite3.connect(path)) as con:
        con.execute(value)
        con.commit()
    assert_same(path, monkeypatch, pages=not note, note=note)
    assert_same_outputs(path, tmp_path)


def test_a_needed_column_added_with_a_default(tmp_path, monkeypatch):
    path = tmp_path / "default.sqlite"
    rows = _rows(500, seed=9)
    with closing(sqlite3.connect(path)) as con:
        con.execute("CREATE TABLE NVTX_EVENTS (start INTEGER, end INTEGER, eventType INTEGER, text TEXT)")
        con.executemany("INSERT INTO NVTX_EVENTS VALUES (?,?,?,?)", [r[:4] for r in rows])
        con.execute("ALTER TABLE NVTX_EVENTS ADD COLUMN globalTid INTEGER DEFAULT 77")
        con.execute("ALTER TABLE NVTX_EVENTS ADD COLUMN domainId INTEGER")
        con.commit()
    assert_same(path, monkeypatch, pages=False, note="default")


def test_string_ids_repeated(tmp_path, monkeypatch):
    """StringIds without its key, an id twice: the LEFT JOIN makes two rows of one."""
    path = tmp_path / "twice.sqlite"
    with closing(sqlite3.connect(path)) as con:
        con.execute(NVTX_EVENTS)
        con.execute("CREATE TABLE StringIds (id INTEGER, value TEXT)")
        con.executemany("INSERT INTO StringIds VALUES (?, ?)", [(1, "a"), (2, "b"), (1, "again")])
        con.executemany(INSERT, _rows(300, seed=10))
        con.commit()
    assert_same(path, monkeypatch, pages=False, note="unique")


def test_utf16_database(tmp_path, monkeypatch):
    rows = _rows(1000, seed=11, long_texts=True)
    path = make_db(tmp_path / "utf16.sqlite", rows, pragmas=["PRAGMA encoding='UTF-16le'"])
    assert assert_same(path, monkeypatch, pages=False, note="UTF-8")[3][3] > 100


def test_wal_database_with_a_live_wal(tmp_path, monkeypatch):
    path = make_db(tmp_path / "wal.sqlite", _rows(1000, seed=12), pragmas=["PRAGMA journal_mode=WAL"])
    with closing(sqlite3.connect(path)) as writer:
        writer.execute("PRAGMA wal_autocheckpoint=0")
        writer.executemany(INSERT, _rows(500, seed=13)[2:])
        writer.commit()
        assert Path(f"{path}-wal").stat().st_size > 0
        fast = assert_same(path, monkeypatch, pages=False, note="WAL")
        assert fast[3][3] > 1000  # (the rows in the -wal file too)
    # rollback-journal mode again, the WAL file gone: the pages are read
    with closing(sqlite3.connect(path)) as con:
        con.execute("PRAGMA journal_mode=DELETE")
    assert not Path(f"{path}-wal").exists()
    assert assert_same(path, monkeypatch) == fast


def test_a_hot_journal_beside_the_file(tmp_path, monkeypatch):
    """A -journal file left by a writer that died mid-transaction: SQLite must roll it back
    first (a read-only connection cannot: its error); the pages are not read."""
    path = make_db(tmp_path / "hot.sqlite", _rows(1000, seed=14))
    journal = Path(f"{path}-journal")
    script = (
        "import os, sqlite3, sys\n"
        "con = sqlite3.connect(sys.argv[1], isolation_level=None)\n"
        "con.execute('PRAGMA cache_size=1')\n"
        "con.execute('BEGIN')\n"
        "con.execute('DELETE FROM NVTX_EVENTS')\n"
        "con.execute('INSERT INTO NVTX_EVENTS (start, eventType) VALUES (1, 59)')\n"
        "os._exit(0)\n"
    )
    subprocess.run([sys.executable, "-c", script, str(path)], check=True)
    assert journal.stat().st_size > 0
    assert_same(path, monkeypatch, pages=False)


@pytest.mark.parametrize(
    "table",
    [
        # a generated column before the needed ones: not in the record, the places shift
        "CREATE TABLE NVTX_EVENTS (twice INTEGER AS (start * 2), start INTEGER, end INTEGER, eventType INTEGER,"
        " text TEXT, globalTid INTEGER, textId INTEGER, domainId INTEGER)",
        # start an INTEGER PRIMARY KEY: the rowid itself, NULL in the record
        "CREATE TABLE NVTX_EVENTS (start INTEGER PRIMARY KEY, end INTEGER, eventType INTEGER, text TEXT,"
        " globalTid INTEGER, textId INTEGER, domainId INTEGER)",
    ],
)
def test_columns_not_in_the_record_where_declared(tmp_path, monkeypatch, table):
    path = tmp_path / "columns.sqlite"
    rows = sorted({r[0]: r for r in _rows(500, seed=15)}.values())  # (start unique: it may be the key)
    with closing(sqlite3.connect(path)) as con:
        con.execute(table)
        _strings(con)
        con.executemany(INSERT, rows)
        con.commit()
    fast = assert_same(path, monkeypatch, pages=False, note="NVTX_EVENTS has a hidden")
    assert fast[3][3] > 100


# a file read by the pages in a loop while another thread truncates it at a later moment each
# round (the walk of 300k rows takes tens of ms): every round must end in rows or an error
_TRUNCATED = """
import shutil, sys, threading, time
from pathlib import Path
from nvtx_plugins_tf.recorder.analysis import _native
from nvtx_plugins_tf.recorder.analysis.native_mapper import LIBSQLITE3
from nvtx_plugins_tf.recorder.nsys_inputs.batches import feed_export
source, work = Path(sys.argv[1]), Path(sys.argv[2])
outcomes = []
for k in range(16):
    shutil.copyfile(source, work)
    size = work.stat().st_size
    def cut(delay=0.003 * k):
        time.sleep(delay)
        with open(work, "r+b") as f:
            f.truncate(size // 3)
    cutter = threading.Thread(target=cut)
    native = _native.NativeRanges()
    cutter.start()
    try:
        feed_export(work, native.add_export, native.reserve, lambda u, q, r: native.add_sqlite(LIBSQLITE3, u, q, r))
        outcomes.append("rows")
    except Exception as exc:
        outcomes.append(type(exc).__name__)
    cutter.join()
print("OUTCOMES", " ".join(outcomes))
"""


def test_a_file_truncated_while_read_is_rows_or_an_error_never_a_signal(tmp_path):
    """The pages are read with pread, never mapped: a file truncated while its pages are
    walked (another `nsys export` over it) ends the walk with a read that fails, and SQLite's
    query then says what it can, where a mapping's access past the new end was a SIGBUS."""
    source = make_db(tmp_path / "big.sqlite", _rows(300_000))
    proc = subprocess.run(
        [sys.executable, "-c", _TRUNCATED, str(source), str(tmp_path / "work.sqlite")],
        env=_child_env(), capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-2000:])
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("OUTCOMES ")]
    assert line and len(line[0].split()) == 17, proc.stdout[-2000:]
