"""The real Nsight Systems as a second oracle: run a workload under nsys and under our
recorder, read both SQLite exports the same way, compare what matters.

Helpers only; the tests are in tests/test_nsys_oracle.py. nsys comes from
build_tools/fetch_nsys.py (Nsight Systems 2023.4.4 from Debian 13's non-free archive and
2022.4.2 from Debian 12's; ``fetch_nsys.DEFAULT`` is the one the comparisons use).

Both files are read into :class:`Event` rows keyed by ``(domain name, message, style)``
(style: ``mark``, ``pushpop``, ``startend``). Per key :func:`summarize` gives: count;
for push/pop ranges the key of the enclosing push/pop range on the same thread and domain
(nesting); category, color and payload multisets (a payload that is the id of another
range of the same process -- our backward ranges carry their forward range's id, which
differs between the two tools -- is compared as that range's key); the number of distinct
threads and processes; and how many start/end ranges ended on another thread.
:func:`thread_groups` describes thread identity: which keys share a thread.

Things that legitimately differ are normalized, never compared: absolute timestamps (both
session-relative, but the sessions start at different moments), range ids, string ids.
``text``/``textId`` are read through ``StringIds`` and ``globalTid``'s high bits (nsys's VM
id, bit 48, which our export sets too) are ignored, so older exports still load.
:func:`schema_diff` and :func:`metadata` compare the tables and the metadata;
:func:`nsys_stats` runs nsys's own reports on a file.

``python tests/nsys_oracle.py --write-schema`` regenerates the schema module our exporter
ships (nvtx_plugins_tf/recorder/exports/_nsys_schema.py) from a real export.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter, defaultdict
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from nvtx_plugins_tf import _native_libs as libs

REPO = Path(__file__).resolve().parents[1]
WORKLOADS = REPO / "tests" / "nsys"
PYTHON = sys.executable

sys.path.insert(0, str(REPO / "build_tools"))
try:
    import fetch_nsys  # noqa: E402
finally:
    sys.path.pop(0)

# Environment variables of an attached NVTX tool (ours, from the pytest plugin): removed
# for the nsys run so that nsys's own injection library is the one loaded.
_TOOL_ENV = (libs.INJECTION_ENV, libs.INJECTION32_ENV, libs.RECORD_DIR_ENV, libs.CHUNK_SIZE_ENV)

NSYS_PROFILE_ARGS = ["profile", "-t", "nvtx", "-s", "none", "--cpuctxsw=none", "-f", "true"]

EVENT_STYLES = {34: "mark", 59: "pushpop", 60: "startend"}
EVENT_CATEGORY, EVENT_DOMAIN_CREATE, EVENT_DOMAIN_DESTROY = 33, 75, 76
PAYLOAD_COLUMNS = (
    "uint64Value",
    "int64Value",
    "doubleValue",
    "uint32Value",
    "int32Value",
    "floatValue",
    "jsonTextId",
    "jsonText",
)


# ----------------------------------------------------------------------------- nsys
def nsys_or_skip(release: str | None = None) -> Path:
    """The fetched nsys of ``release`` (default ``fetch_nsys.DEFAULT``; fetching it on first
    use). Skips with the reason only when the Debian archive cannot be reached, and never
    when ``CI=true`` (then it fails)."""
    version = fetch_nsys.release_of(release).version
    try:
        nsys = fetch_nsys.ensure(release)
    except fetch_nsys.FetchError as e:
        message = f"Nsight Systems {version} unavailable: {e}"
        if e.unreachable and os.environ.get("CI", "").lower() != "true":
            print(message, file=sys.stderr)
            pytest.skip(message)
        pytest.fail(message)
    reason = fetch_nsys.why_not(release)
    if reason:
        pytest.fail(f"Nsight Systems {version} fetched but unusable: {reason}")
    return nsys


def release_of_nsys(nsys: Path) -> str:
    """The release (a key of ``fetch_nsys.RELEASES``) whose fetched tree holds ``nsys``."""
    for release in fetch_nsys.RELEASES:
        if Path(nsys).is_relative_to(fetch_nsys.cache_dir(release)):
            return release
    raise AssertionError(f"{nsys} is no nsys fetched by build_tools/fetch_nsys.py")


def nsys_env(nsys: Path, env: dict | None = None) -> dict:
    """``env`` (default :func:`clean_env`) as that nsys's binaries need it to run."""
    return fetch_nsys.run_env(release_of_nsys(nsys), env if env is not None else clean_env())


def nsys_recipe(nsys: Path, *args, timeout: float = 600, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """``nsys recipe ARGS`` with the python its recipes need first on PATH (2024.2: the recipe
    venv of build_tools/fetch_nsys.py, NumPy < 2; older: this Python); fails the test with
    nsys's output unless it exits 0."""
    proc = subprocess.run(
        [str(nsys), "recipe", *map(str, args)],
        env=fetch_nsys.recipe_env(release_of_nsys(nsys), clean_env()),
        capture_output=True, text=True, timeout=timeout, cwd=cwd,
    )  # fmt: skip
    _check(proc, f"nsys recipe {' '.join(map(str, args))}")
    return proc


def clean_env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in _TOOL_ENV}
    env.update(extra)
    return env


@dataclass
class Run:
    sqlite: Path
    stdout: str
    seconds: float


def _check(proc: subprocess.CompletedProcess, what: str) -> None:
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-20:])
        raise AssertionError(f"{what} failed with exit status {proc.returncode}:\n{tail}")


def _end_agents(nsys_pid: int) -> None:
    """End the agent an ``nsys profile`` of pid ``nsys_pid`` started (``nsys --start-agent
    --session-name profile-PID``): 2024.2.3 sometimes leaves it running after a session that
    succeeded, and a later ``nsys profile`` then fails ("Local Endpoint is not available") or
    captures nothing (docs/nsys.md). Ours to end: this run started it."""
    tag = f"profile-{nsys_pid}".encode()

    def agents() -> list[int]:
        found = []
        for proc in Path("/proc").glob("[0-9]*"):
            try:
                args = (proc / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"--start-agent" in args and tag in args:
                found.append(int(proc.name))
        return found

    deadline = time.monotonic() + 5  # (it normally ends by itself within a second)
    while (left := agents()) and time.monotonic() < deadline:
        time.sleep(0.1)
    for pid in left:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


def run_nsys(
    nsys: Path, command: list[str], prefix: Path, timeout: float = 300, env: dict | None = None, args: tuple = ()
) -> Run:
    """``nsys profile -t nvtx -s none --cpuctxsw=none [ARGS] -o PREFIX COMMAND``, then (if nsys
    left only ``PREFIX.qdstrm``) ``QdstrmImporter -i PREFIX.qdstrm``, then
    ``nsys export --type sqlite``. Returns ``PREFIX.sqlite`` and the command's stdout."""
    t0 = time.monotonic()
    with subprocess.Popen(
        [str(nsys), *NSYS_PROFILE_ARGS, *args, "-o", str(prefix), *map(str, command)],
        env=nsys_env(nsys, env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as popen:
        try:
            stdout, stderr = popen.communicate(timeout=timeout)
        finally:
            if popen.poll() is None:
                popen.kill()
            _end_agents(popen.pid)
    proc = subprocess.CompletedProcess(popen.args, popen.returncode, stdout, stderr)
    _check(proc, f"nsys profile {' '.join(map(str, command))}")
    rep = prefix.with_name(prefix.name + ".nsys-rep")
    qdstrm = prefix.with_name(prefix.name + ".qdstrm")
    if not rep.exists():
        importer = fetch_nsys.importer_path(release_of_nsys(nsys))
        assert qdstrm.exists() and importer, f"nsys wrote neither {rep} nor {qdstrm}:\n{proc.stdout}{proc.stderr}"
        imp = subprocess.run([str(importer), "-i", str(qdstrm)], capture_output=True, text=True, timeout=timeout)
        _check(imp, "QdstrmImporter")
    out = prefix.with_name(prefix.name + ".sqlite")
    exp = subprocess.run(
        [str(nsys), "export", "--type", "sqlite", "-f", "true", "-o", str(out), str(rep)],
        env=nsys_env(nsys),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    _check(exp, "nsys export --type sqlite")
    prefix.with_name(prefix.name + ".nsys.log").write_text(proc.stdout + proc.stderr)  # (to read after a failure)
    return Run(out, proc.stdout, time.monotonic() - t0)


def run_ours(command: list[str], prefix: Path, timeout: float = 300, env: dict | None = None) -> Run:
    """``python -m nvtx_plugins_tf record -o PREFIX -- COMMAND``; returns ``PREFIX.sqlite``."""
    t0 = time.monotonic()
    proc = subprocess.run(
        [PYTHON, "-m", "nvtx_plugins_tf", "record", "-o", str(prefix), "--", *map(str, command)],
        env=env or clean_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    _check(proc, f"nvtx_plugins_tf record {' '.join(map(str, command))}")
    return Run(prefix.with_name(prefix.name + ".sqlite"), proc.stdout, time.monotonic() - t0)


# ----------------------------------------------------------------------------- reading
@dataclass
class Event:
    style: str
    domain: str
    message: str | None
    pid: int
    tid: int
    end_tid: int | None
    start: int
    end: int | None
    category: int | None
    color: int | None
    payload: tuple | None  # (column, value)
    range_id: int | None

    @property
    def key(self) -> tuple:
        return (self.domain, self.message, self.style)


def _split_gtid(gtid: int | None) -> tuple[int, int]:
    """(pid, tid) of an nsys-style globalTid; nsys sets high bits (VM id) that we ignore."""
    if gtid is None:
        return 0, 0
    return (gtid >> 24) & 0xFFFFFF, gtid & 0xFFFFFF


@dataclass
class Trace:
    path: Path
    events: list[Event]
    domains: dict[tuple[int, int], str]  # (pid, domainId) -> name
    categories: set[tuple[str, int, str]]  # (domain, category id, name)
    domain_creates: Counter  # domain name -> rows of eventType 75
    domain_destroys: int
    tables: dict[str, list[str]]

    def by_key(self) -> dict[tuple, list[Event]]:
        out: dict[tuple, list[Event]] = defaultdict(list)
        for e in self.events:
            out[e.key].append(e)
        return dict(out)

    def keys(self, domains: set[str] | None = None) -> set[tuple]:
        return {e.key for e in self.events if domains is None or e.domain in domains}

    def only(self, keep) -> "Trace":
        """A copy with the events for which ``keep(event)`` is true."""
        return Trace(
            self.path,
            [e for e in self.events if keep(e)],
            self.domains,
            self.categories,
            self.domain_creates,
            self.domain_destroys,
            self.tables,
        )


def tables(con: sqlite3.Connection) -> dict[str, list[str]]:
    names = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table' ORDER BY name")]
    return {n: [r[1] for r in con.execute(f'PRAGMA table_info("{n}")')] for n in names}


def load(path: Path) -> Trace:
    with closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as con:
        schema = tables(con)
        strings = dict(con.execute("SELECT id, value FROM StringIds")) if "StringIds" in schema else {}
        # nsys 2024.2 exports lazily: no NVTX_EVENTS table when the capture holds no NVTX event.
        assert "NVTX_EVENTS" in schema, f"{path} has no NVTX_EVENTS table: no NVTX event was captured"
        cols = schema["NVTX_EVENTS"]
        rows = [dict(zip(cols, r)) for r in con.execute("SELECT * FROM NVTX_EVENTS ORDER BY start")]

    def text(r):
        if r.get("text") is not None:
            return r["text"]
        return strings.get(r["textId"]) if r.get("textId") is not None else None

    domains: dict[tuple[int, int], str] = {}
    creates: Counter = Counter()
    destroys = 0
    for r in rows:
        if r["eventType"] == EVENT_DOMAIN_CREATE:
            pid, _ = _split_gtid(r["globalTid"])
            domains[(pid, r["domainId"])] = text(r)
            creates[text(r)] += 1
        elif r["eventType"] == EVENT_DOMAIN_DESTROY:
            destroys += 1

    def domain(pid, domain_id):
        if not domain_id:
            return ""
        return domains.get((pid, domain_id), f"<domain {domain_id}>")

    events, categories = [], set()
    for r in rows:
        pid, tid = _split_gtid(r["globalTid"])
        et = r["eventType"]
        if et == EVENT_CATEGORY:
            categories.add((domain(pid, r["domainId"]), r["category"], text(r)))
            continue
        style = EVENT_STYLES.get(et)
        if style is None:
            continue
        payload = next(((c, r[c]) for c in PAYLOAD_COLUMNS if r.get(c) is not None), None)
        end_tid = tid
        if r.get("endGlobalTid") is not None:
            end_pid, end_tid = _split_gtid(r["endGlobalTid"])
        events.append(
            Event(
                style,
                domain(pid, r["domainId"]),
                text(r),
                pid,
                tid,
                end_tid if style == "startend" and r["end"] is not None else None,
                r["start"],
                r["end"],
                r["category"],
                r["color"],
                payload,
                r["rangeId"],
            )
        )
    return Trace(path, events, domains, categories, creates, destroys, schema)


# ----------------------------------------------------------------------------- comparing
@dataclass
class Summary:
    count: int = 0
    parents: Counter = field(default_factory=Counter)
    categories: Counter = field(default_factory=Counter)
    colors: Counter = field(default_factory=Counter)
    payloads: Counter = field(default_factory=Counter)
    payload_refs: Counter | None = None
    threads: int = 0
    processes: int = 0
    cross_thread_ends: int = 0
    unclosed: int = 0

    def as_dict(self, with_refs: bool) -> dict:
        d = {k: v for k, v in vars(self).items() if k not in ("payloads", "payload_refs")}
        d["payloads"] = self.payload_refs if with_refs else self.payloads
        return d


def _parents(events: list[Event]) -> dict[int, tuple | None]:
    """id(event) -> key of the innermost enclosing push/pop range, same thread and domain."""
    out: dict[int, tuple | None] = {}
    groups: dict[tuple, list[Event]] = defaultdict(list)
    for e in events:
        if e.style == "pushpop":
            groups[(e.pid, e.tid, e.domain)].append(e)
    for group in groups.values():
        group.sort(key=lambda e: (e.start, -(e.end if e.end is not None else 1 << 62)))
        stack: list[Event] = []
        for e in group:
            while stack and stack[-1].end is not None and stack[-1].end <= e.start:
                stack.pop()
            out[id(e)] = stack[-1].key if stack else None
            stack.append(e)
    return out


def summarize(trace: Trace) -> dict[tuple, Summary]:
    parents = _parents(trace.events)
    ranges = {(e.pid, e.range_id): e.key for e in trace.events if e.style == "startend" and e.range_id is not None}
    out: dict[tuple, Summary] = {}
    threads: dict[tuple, set] = defaultdict(set)
    pids: dict[tuple, set] = defaultdict(set)
    for e in trace.events:
        s = out.setdefault(e.key, Summary(payload_refs=Counter()))
        s.count += 1
        if e.style == "pushpop":
            s.parents[parents[id(e)]] += 1
        s.categories[e.category] += 1
        s.colors[e.color] += 1
        s.payloads[e.payload] += 1
        if s.payload_refs is not None:
            ref = None
            if e.payload and e.payload[0] in ("uint64Value", "int64Value"):
                ref = ranges.get((e.pid, e.payload[1]))
            if ref is None:
                s.payload_refs = None
            else:
                s.payload_refs[("range", ref)] += 1
        threads[e.key].add((e.pid, e.tid))
        pids[e.key].add(e.pid)
        if e.end_tid is not None and e.end_tid != e.tid:
            s.cross_thread_ends += 1
        if e.style != "mark" and e.end is None:
            s.unclosed += 1
    for k, s in out.items():
        s.threads, s.processes = len(threads[k]), len(pids[k])
    return out


def compare(ours: Trace, theirs: Trace, keys: set[tuple] | None = None) -> list[str]:
    """Differences per (domain, message, style) between our export and nsys's (empty: same).

    ``keys``: compare only these keys (default: all keys of either file)."""
    a, b = summarize(ours), summarize(theirs)
    keys = keys if keys is not None else set(a) | set(b)
    diffs = []
    for key in sorted(keys, key=repr):
        if key not in a or key not in b:
            where = "ours only" if key in a else "nsys only" if key in b else "neither"
            n = (a.get(key) or b.get(key) or Summary()).count
            diffs.append(f"{key}: {where} ({n} events)")
            continue
        sa, sb = a[key], b[key]
        # Payloads: equal values, or both the ids of ranges with the same keys.
        refs = sa.payloads != sb.payloads and sa.payload_refs is not None and sb.payload_refs is not None
        da, db = sa.as_dict(refs), sb.as_dict(refs)
        for name in da:
            if da[name] != db[name]:
                diffs.append(f"{key}: {name}: ours {_fmt(da[name])} != nsys {_fmt(db[name])}")
    return diffs


def _fmt(value) -> str:
    if isinstance(value, Counter):
        return "{" + ", ".join(f"{k!r}: {v}" for k, v in sorted(value.items(), key=repr)) + "}"
    return repr(value)


def thread_groups(trace: Trace, keys: set[tuple] | None = None) -> Counter:
    """Thread identity: multiset over threads of the set of keys each thread emitted."""
    per_thread: dict[tuple, set] = defaultdict(set)
    for e in trace.events:
        if keys is None or e.key in keys:
            per_thread[(e.pid, e.tid)].add(e.key)
    return Counter(frozenset(v) for v in per_thread.values())


def sequences(trace: Trace, keys: set[tuple] | None = None) -> Counter:
    """Order: multiset over threads of the sequence of keys in start order (with ends of
    ranges as ``('end', key)`` so that the interleaving counts too)."""
    per_thread: dict[tuple, list] = defaultdict(list)
    for e in trace.events:
        if keys is not None and e.key not in keys:
            continue
        per_thread[(e.pid, e.tid)].append((e.start, 1, e.key))
        if e.end is not None:
            per_thread[(e.pid, e.end_tid if e.end_tid is not None else e.tid)].append((e.end, 0, ("end", e.key)))
    return Counter(tuple(k for _, _, k in sorted(v, key=lambda t: (t[0], t[1]))) for v in per_thread.values())


# ----------------------------------------------------------------------------- reporting
def schema_diff(ours: Trace, theirs: Trace) -> dict:
    """Tables and columns of nsys's export missing from ours (and ours only)."""
    missing_tables = sorted(set(theirs.tables) - set(ours.tables))
    extra_tables = sorted(set(ours.tables) - set(theirs.tables))
    columns = {}
    for t in sorted(set(ours.tables) & set(theirs.tables)):
        miss = [c for c in theirs.tables[t] if c not in ours.tables[t]]
        extra = [c for c in ours.tables[t] if c not in theirs.tables[t]]
        if miss or extra:
            columns[t] = {"missing": miss, "extra": extra}
    return {"missing_tables": missing_tables, "extra_tables": extra_tables, "columns": columns}


def metadata(path: Path) -> dict[str, str]:
    """name -> value of the export metadata table (META_DATA_EXPORT; EXPORT_META_DATA for nsys 2022.4)."""
    with closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as con:
        for table in ("EXPORT_META_DATA", "META_DATA_EXPORT"):
            try:
                return dict(con.execute(f"SELECT name, value FROM {table}"))
            except sqlite3.OperationalError:
                continue
    return {}


def capture_metadata(path: Path) -> dict[str, str]:
    """name -> value of META_DATA_CAPTURE (nsys 2023.4; the first value of a repeated name)."""
    with closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as con:
        out: dict[str, str] = {}
        for name, value in con.execute("SELECT name, value FROM META_DATA_CAPTURE ORDER BY rowid"):
            out.setdefault(name, value)
        return out


def describe(trace: Trace) -> str:
    """One line per key with its count (for assertion messages)."""
    return "\n".join(f"  {k}: {s.count}" for k, s in sorted(summarize(trace).items(), key=repr))


# ----------------------------------------------------------------------------- nsys stats
#: nsys 2022.4's NVTX reports compared on both files (``nsys stats --help-reports``).
NVTX_REPORTS = ("nvtx_sum", "nvtx_pushpop_sum", "nvtx_startend_sum", "nvtx_pushpop_trace")  # nsys 2023.4
LEGACY_NVTX_REPORTS = dict(zip(NVTX_REPORTS, ("nvtxsum", "nvtxppsum", "nvtxsesum", "nvtxpptrace")))  # 2022.4


def nsys_stats(nsys: Path, report: str, sqlite: Path, timeout: float = 120) -> list[dict]:
    """Rows of ``nsys stats -r REPORT -f csv`` on an exported SQLite file (nsys's own report
    scripts run on the file as they are), one dict per row keyed by the CSV header."""
    import csv
    import io

    proc = subprocess.run(
        [str(nsys), "stats", "-q", "-r", report, "-f", "csv", "-o", "-", str(sqlite)],
        env=nsys_env(nsys),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    _check(proc, f"nsys stats -r {report} {sqlite}")
    text = proc.stdout.strip()
    assert text and "does not contain" not in text and "ERROR" not in proc.stderr, (proc.stdout, proc.stderr)
    return list(csv.DictReader(io.StringIO(text)))


# ----------------------------------------------------------------------------- shipped schema
SCHEMA_MODULE = REPO / "nvtx_plugins_tf" / "recorder" / "exports" / "_nsys_schema.py"
# META_DATA_EXPORT keys that describe nsys and its schema (copied into the shipped module);
# the others (time, host, user, files, parameters) describe one export and are computed by ours.
SCHEMA_META_KEYS = (
    "EXPORT_PRODUCT_NAME",
    "EXPORT_PRODUCT_VERSION",
    "EXPORT_PRODUCT_DATE",
    "EXPORT_SCHEMA_VERSION",
    "EXPORT_SCHEMA_VERSION_MAJOR",
    "EXPORT_SCHEMA_VERSION_MINOR",
    "EXPORT_SCHEMA_VERSION_MICRO",
    "EXPORT_SCHEMA_VERSION_CKSUM",
)


def meta_table(con: sqlite3.Connection) -> str:
    """The export metadata table of an nsys SQLite file: META_DATA_EXPORT (2023.4, schema
    3.7) or EXPORT_META_DATA (2022.4, schema 3.0)."""
    names = {n for (n,) in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    return "META_DATA_EXPORT" if "META_DATA_EXPORT" in names else "EXPORT_META_DATA"


#: Tables nsys's recipes read even from an NVTX-only report (2024.2's ``nvtx_pace`` reads
#: the CUDA runtime, kernel, memcpy and memset tables, ``nvtx_gpu_proj_sum`` the CUDA graph
#: ones; nsys's recipe loader exports them with ``--lazy false``, empty): shipped in the
#: Parquet schema with the types nsys gives them.
RECIPE_TABLES = (
    "CUPTI_ACTIVITY_KIND_RUNTIME",
    "CUPTI_ACTIVITY_KIND_KERNEL",
    "CUPTI_ACTIVITY_KIND_MEMCPY",
    "CUPTI_ACTIVITY_KIND_MEMSET",
    "CUPTI_ACTIVITY_KIND_GRAPH_TRACE",
    "CUDA_GRAPH_NODE_EVENTS",
    "CUDA_GRAPH_EVENTS",
)


def export(nsys: Path, rep: Path, out: Path, kind: str, *args: str, timeout: float = 300) -> Path:
    """``nsys export --type KIND [ARGS] -o OUT REP``."""
    proc = subprocess.run(
        [str(nsys), "export", "--type", kind, "-f", "true", *args, "-o", str(out), str(rep)],
        env=nsys_env(nsys), capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip
    _check(proc, f"nsys export --type {kind} {' '.join(args)}")
    return out


def export_parquetdir(nsys: Path, rep: Path, out: Path, timeout: float = 300) -> Path:
    """``nsys export --type parquetdir -o OUT REP``: one TABLE.parquet per table in ``out``."""
    return export(nsys, rep, out, "parquetdir", timeout=timeout)


def arrow_schemas(path: Path) -> dict:
    """table -> (table_desc or None, ((column, Arrow type, nullable, field_desc or None), ...))
    of every stream of an ``--type arrow`` file, or of every TABLE.arrow of an arrowdir."""
    import pyarrow as pa
    import pyarrow.ipc as ipc

    def describe(schema):
        meta = schema.metadata or {}
        desc = meta.get(b"table_desc")
        columns = tuple(
            (f.name, str(f.type), f.nullable, (f.metadata or {}).get(b"field_desc", b"").decode() or None)
            for f in schema
        )
        return meta[b"table_name"].decode(), (desc.decode() if desc is not None else None, columns)

    out = {}
    files = sorted(Path(path).glob("*.arrow")) if Path(path).is_dir() else [Path(path)]
    for file in files:
        with pa.OSFile(str(file)) as source:
            while source.tell() < source.size():
                stream = ipc.open_stream(source)
                stream.read_all()  # (to the stream's end: the next one follows)
                name, value = describe(stream.schema)
                out[name] = value
    return out


def parquet_schemas(directory: Path) -> dict:
    """table -> ((column, Arrow type, nullable), ...) of every TABLE.parquet in ``directory``."""
    import pyarrow.parquet as pq

    return {
        path.stem: tuple((f.name, str(f.type), f.nullable) for f in pq.read_schema(path))
        for path in sorted(Path(directory).glob("*.parquet"))
    }


def real_schema(
    path: Path, parquet_dir: Path | None = None, recipe_dir: Path | None = None, arrow: Path | None = None
) -> dict:
    """What of a real nsys export our exporter ships: every table's DDL (in nsys's order),
    the ENUM_* rows, the schema's metadata values, the metadata key orders, (from
    ``parquet_dir``, nsys's parquetdir export of the same report) each Parquet table's
    columns, plus those of :data:`RECIPE_TABLES` (from ``recipe_dir``, its ``--lazy false``
    parquetdir export), and (from ``arrow``, its ``--type arrow`` export) each Arrow table's
    types and descriptions."""
    with closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as con:
        tables = [
            (n, s) for n, s in con.execute("SELECT name, sql FROM sqlite_master WHERE type = 'table' ORDER BY rowid")
        ]
        enums = {
            n: [tuple(r) for r in con.execute(f'SELECT id, name, label FROM "{n}" ORDER BY id')]
            for n, _ in tables
            if n.startswith("ENUM_")
        }
        meta = list(con.execute(f"SELECT name, value FROM {meta_table(con)} ORDER BY rowid"))
        capture = []
        if any(n == "META_DATA_CAPTURE" for n, _ in tables):
            capture = [n for (n,) in con.execute("SELECT name FROM META_DATA_CAPTURE ORDER BY rowid")]
        others = [
            n
            for n, _ in con.execute("SELECT name, sql FROM sqlite_master WHERE type != 'table'")
            if not n.startswith("sqlite_autoindex")
        ]
    assert not others, f"nsys export has indexes/views we do not ship: {others}"
    values = dict(meta)
    return {
        "tables": tables,
        "enums": enums,
        "meta": {k: values[k] for k in SCHEMA_META_KEYS},
        "meta_keys": [k for k, _ in meta],
        "capture_keys": list(dict.fromkeys(capture)),
        "parquet": parquet_schemas(parquet_dir) if parquet_dir else {},
        "recipe_parquet": (
            {t: c for t, c in parquet_schemas(recipe_dir).items() if t in RECIPE_TABLES} if recipe_dir else {}
        ),
        "arrow": arrow_schemas(arrow) if arrow else {},
    }


def schema_module_source(
    path: Path, parquet_dir: Path | None = None, recipe_dir: Path | None = None, arrow: Path | None = None
) -> str:
    """Text of the shipped schema module generated from the real export ``path`` (and its
    other exports: see :func:`real_schema`)."""
    s = real_schema(path, parquet_dir, recipe_dir, arrow)
    lines = [
        '"""Nsight Systems\' export schema, as ``nsys export`` of Nsight Systems',
        f"{s['meta']['EXPORT_PRODUCT_VERSION']} writes it for an NVTX-only capture (``nsys profile -t nvtx -s none",
        "--cpuctxsw=none``): ``--type sqlite``, ``--type parquetdir`` and ``--type arrow``.",
        "",
        "GENERATED from a real export by ``python tests/nsys_oracle.py --write-schema`` (which runs",
        "that nsys on the native C sample); do not edit by hand. tests/test_sqlite_parity.py checks",
        "that this module still equals what the real nsys writes.",
        "",
        "* :data:`TABLES`: (name, ``CREATE TABLE`` statement) of every SQLite table, in nsys's order;",
        "* :data:`ENUMS`: table name -> the (id, name, label) rows nsys fills it with;",
        "* :data:`SCHEMA_META`: the ``META_DATA_EXPORT`` values that describe nsys and its schema;",
        "* :data:`META_KEYS`: every ``META_DATA_EXPORT`` key nsys writes, in its order;",
        "* :data:`CAPTURE_KEYS`: the ``META_DATA_CAPTURE`` keys nsys writes, in its order (once each);",
        "* :data:`PARQUET`: table -> its (column, Arrow type, nullable) in nsys's ``TABLE.parquet``;",
        "* :data:`RECIPE_PARQUET`: the same for the tables nsys's recipes read even from an NVTX-only",
        "  report (nsys's recipe loader exports them ``--lazy false``: empty);",
        "* :data:`ARROW`: table -> (``table_desc`` or None, its (column, Arrow type, nullable,",
        "  ``field_desc``)) in nsys's ``--type arrow`` streams (types differ from the Parquet ones).",
        '"""',
        "",
        "# fmt: off",
        f"SCHEMA_META = {s['meta']!r}",
        "",
        f"META_KEYS = {tuple(s['meta_keys'])!r}",
        "",
        f"CAPTURE_KEYS = {tuple(s['capture_keys'])!r}",
        "",
        "TABLES = (",
    ]
    for name, sql in s["tables"]:
        lines.append(f"    ({name!r}, {sql!r}),")
    for title, key in (("ENUMS", "enums"), ("PARQUET", "parquet"), ("RECIPE_PARQUET", "recipe_parquet")):
        lines += [")" if title == "ENUMS" else "}", "", f"{title} = {{"]
        for name, rows in s[key].items():
            lines.append(f"    {name!r}: (")
            lines += [f"        {row!r}," for row in rows]
            lines.append("    ),")
    lines += ["}", "", "ARROW = {"]
    for name, (desc, columns) in s["arrow"].items():
        lines.append(f"    {name!r}: ({desc!r}, (")
        lines += [f"        {column!r}," for column in columns]
        lines.append("    )),")
    lines += ["}", ""]
    return "\n".join(lines)


def report_schema_source(nsys: Path, sqlite: Path) -> str:
    """:func:`schema_module_source` of nsys's exports of ``SQLITE``'s report (``.nsys-rep``
    beside it): its parquetdir, ``--lazy false`` parquetdir and arrow exports, written beside it."""
    rep = sqlite.with_suffix(".nsys-rep")
    pqt = export_parquetdir(nsys, rep, sqlite.with_name(sqlite.stem + "_pqtdir"))
    recipe = export(nsys, rep, sqlite.with_name(sqlite.stem + "_nolazy_pqtdir"), "parquetdir", "--lazy", "false")
    arrow = export(nsys, rep, sqlite.with_suffix(".arrows"), "arrow")
    return schema_module_source(sqlite, pqt, recipe, arrow)


def build_native_sample(directory: Path) -> Path:
    """The C sample (tests/native/nvtx_sample.c) built with nsys_safe_nvtx.h, in ``directory``."""
    sys.path.insert(0, str(REPO / "build_tools"))
    try:
        import build_native
    finally:
        sys.path.pop(0)
    exe = Path(directory) / "nvtx_sample"
    proc = subprocess.run(
        [
            "gcc",
            "-O2",
            "-Wall",
            "-Wno-address",
            "-Wno-unused-value",
            f"-I{build_native.nvtx_include_dir()}",
            "-include",
            str(WORKLOADS / "nsys_safe_nvtx.h"),
            str(REPO / "tests" / "native" / "nvtx_sample.c"),
            "-o",
            str(exe),
            "-ldl",
            "-pthread",
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    return exe


def _main(argv=None) -> int:
    import argparse
    import tempfile

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--write-schema",
        action="store_true",
        help=f"regenerate {SCHEMA_MODULE.relative_to(REPO)} from a real nsys export",
    )
    args = parser.parse_args(argv)
    if not args.write_schema:
        parser.print_help()
        return 2
    nsys = fetch_nsys.ensure(fetch_nsys.CURRENT)
    with tempfile.TemporaryDirectory() as tmp:
        exe = build_native_sample(Path(tmp))
        run = run_nsys(nsys, [exe, "basic"], Path(tmp) / "schema")
        SCHEMA_MODULE.write_text(report_schema_source(nsys, run.sqlite))
    print(SCHEMA_MODULE)
    return 0


if __name__ == "__main__":
    sys.exit(_main())
