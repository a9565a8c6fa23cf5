"""Benchmark `nvtx-tf analyze` against NVIDIA's `nsys recipe nvtx_sum` on the same ranks.

Each rank is benchmarks/rank_workload.c run under our recorder (RANGES ranges in STEPS
"step N" ranges, nested data/forward/backward ranges; rank 5 slowed in "data"), exported to
a parquetdir (nsys 2023.4's format: what the recipe reads, with an empty REPORT.nsys-rep
beside each as the recipe's --input needs). Then, for 8 ranks and for all of them, in
interleaved rounds (the order rotated every round; medians and quartiles over the rounds):

* analyze, embedded engine (one process, a thread per core), on the recordings and on the
  parquetdirs: every output (all_stats, rank_stats, pace, stragglers, heatmap.png); on both
  also with ``NVTX_TF_ANALYZE_NATIVE=0`` (the numpy mapper, the reference, instead of the
  native one: parquetdirs streamed into it in batches, nsys_inputs/batches.py);
* ``compare`` (issue 46) of the recordings against a copy of them (copy/rankK.nvtxrec: two
  sides of n ranks of one kind, an A/A pair), and against their packed copies: its time against
  analyze's on the recordings (criterion 7: at most 2x);
* analyze on the recordings packed as `record` leaves them (recording/packed.py): read frame
  by frame, and with ``NVTX_TF_UNPACK_IN_PLACE=0`` unpacked into a copy first (as before);
* analyze on a dask.distributed LocalCluster of 2 worker processes (``--workers 2``), on the
  recordings and on the parquetdirs, against the recipe's ``dask-futures`` mode on a
  LocalCluster of 2 worker processes of one thread (``NSYS_DASK_N_WORKERS=2``,
  ``NSYS_DASK_THREADS_PER_WORKER=1``: the recipe's ``Client(**NSYS_DASK_*)``);
* the same on a cluster of separate processes started once for the run, as on a real
  cluster (``dask scheduler``, two ``dask worker --nworkers 1 --nthreads 1``): ``analyze
  --scheduler ADDRESS`` against the recipe (Nsight Systems 2023.4.4's) on the same cluster
  (Dask's ``DASK_SCHEDULER_ADDRESS``: the recipe's ``NSYS_DASK_ADDRESS`` reaches its ``Client``
  as True, not the string); their workers are not the command's children, so the peak RSS
  shown is the client's only;
* ``nsys recipe nvtx_sum`` in its ``concurrent`` and ``dask-futures`` modes (``--recipe-modes``;
  Nsight Systems' default release, fetched by build_tools/fetch_nsys.py, run with its recipe
  venv; left out with a note when it cannot run here) on the parquetdirs: statistics only;
  each engine's ratio is against the faster mode's ranges/s (the recipe's best), the Dask rows'
  against ``dask-futures`` on the same cluster size;
* DuckDB (when installed: not a dependency) computing rank_stats' columns over the
  parquetdirs in one query, its threads one per core: the engine not chosen, measured.

Each command runs as its own process; peak RSS is the largest of its processes (the Dask
workers' and the recipe's workers' included: getrusage of the waited-for children). The load
average of the (shared) machine is printed before and after.

``--nsys-exports RELEASE`` (repeated; e.g. 2024.2.3, 2023.4.4) also profiles the same program
under that release's ``nsys profile -t nvtx`` (a rank at a time: never two nsys sessions at
once) and times analyze on nsys's own parquetdir and SQLite exports of those reports (``nsys
export --type parquetdir`` / ``sqlite``, in DIR/nsys-RELEASE/; tests/nsys_oracle.py's way) and
the recipe on the reports (their parquetdirs); an engine's ratio is against the recipe on the
same reports.

``--engine REGEX`` (repeated) keeps the engines whose label it matches (``re.search``; for a
long run: ``--ranks 256 --engine "embedded, recordings$" --engine "embedded, parquetdirs$"
--engine concurrent``);
``--json FILE`` writes the rows (and the run's date, command and load) for
benchmarks/plot_analyze_scale.py, which draws time and peak memory against ranks.

    python benchmarks/bench_analyze.py [--ranks 8,64,256] [--ranges 1000000] [--rounds 3] [--keep DIR]
        [--nsys-exports RELEASE ...] [--engine REGEX ...] [--recipe-modes concurrent,dask-futures]
        [--warmup 1] [--json FILE]
"""

from __future__ import annotations

import argparse
import compileall
import contextlib
import datetime
import importlib.util
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "build_tools"))

import fetch_nsys  # noqa: E402
from _programs import build_program, quartiles  # noqa: E402
from _table import print_table  # noqa: E402

SLOW_RANK, SLOW_NS = 5, 20_000
# the recipe on a cluster of separate processes: its workers run this Python, which 2023.4.4's
# recipe modules import into (2024.2.3's want the numpy < 2 of their own venv)
CLUSTER_RECIPE_RELEASE = "2023.4.4"
CLUSTER = "--scheduler: dask scheduler + 2 dask workers"  # (the rows on a cluster of separate processes)
# Runs a command, then prints its wall time, the peak RSS of its largest process (KiB) and the
# CPU seconds of all its processes (user + system: what the load of a shared machine changes least).
_MEASURE = (
    "import resource, subprocess, sys, time\n"
    "t = time.perf_counter()\n"
    "p = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)\n"
    "dt = time.perf_counter() - t\n"
    "sys.stderr.write(p.stderr[-2000:] if p.returncode else '')\n"
    "u = resource.getrusage(resource.RUSAGE_CHILDREN)\n"
    "print(p.returncode, dt, u.ru_maxrss, u.ru_utime + u.ru_stime)\n"
)


# The per-rank statistics (rank_stats' columns, exact quartiles) by DuckDB over the parquetdirs,
# its threads one per core: what the embedded engine would cost with DuckDB for that part.
_DUCKDB = (
    "import duckdb, glob, os, sys\n"
    "files = sorted(glob.glob(os.path.join(sys.argv[1], '*_pqtdir', 'NVTX_EVENTS.parquet')))\n"
    "con = duckdb.connect()\n"
    "con.sql(f'SET threads={len(os.sched_getaffinity(0))}')\n"
    "d = '\"end\" - start'\n"
    "con.sql(f'SELECT filename, text, count(*), sum({d}), min({d}), max({d}), stddev_samp({d}), '\n"
    "        f'quantile_cont({d}, [0.25, 0.5, 0.75]) FROM read_parquet({files!r}, filename=true) '\n"
    "        f'WHERE eventType IN (59, 60) AND \"end\" IS NOT NULL GROUP BY ALL').to_arrow_table()\n"
)


def make_ranks(folder: Path, ranks: int, ranges: int, steps: int) -> None:
    """rankK.nvtxrec (recorded) and rankK_pqtdir (+ the recipe's stand-in rankK.nsys-rep); the
    ranks made by an earlier run (their parquetdir there) are kept."""
    from nvtx_plugins_tf.recorder.exports.parquet import export_parquetdir

    exe = build_program("rank_workload.c", folder / "rank_workload")
    from nvtx_plugins_tf._native_libs import native_library

    library = native_library("recorder")
    for k in range(ranks):
        rec = folder / f"rank{k:03d}.nvtxrec"
        if (folder / f"rank{k:03d}_pqtdir" / "NVTX_EVENTS.parquet").is_file():
            continue
        shutil.rmtree(rec, ignore_errors=True)  # (a recording left by an earlier run would get a second segment)
        env = dict(os.environ, NVTX_INJECTION64_PATH=str(library), NVTX_TF_RECORD_DIR=str(rec))
        slow = SLOW_NS if k == SLOW_RANK else 0
        subprocess.run([str(exe), str(ranges), str(steps), str(slow)], env=env, check=True)
        (folder / f"rank{k:03d}.nsys-rep").touch()  # older than the export, as the recipe wants
        export_parquetdir(rec, folder / f"rank{k:03d}_pqtdir")


def make_nsys_ranks(folder: Path, ranks: int, ranges: int, steps: int, release: str) -> Path:
    """DIR/nsys-RELEASE/rankK.nsys-rep and rankK_pqtdir: the ranks' program profiled by nsys
    RELEASE and exported by it (the ranks made by an earlier run are kept)."""
    sys.path.insert(0, str(REPO / "tests"))
    import nsys_oracle

    nsys = fetch_nsys.nsys_path(release)
    if nsys is None:
        raise SystemExit(f"nsys {release}: {fetch_nsys.why_not(release)} (python build_tools/fetch_nsys.py)")
    exe = build_program("rank_workload.c", folder / "rank_workload")
    out = folder / f"nsys-{release}"
    out.mkdir(exist_ok=True)
    for k in range(ranks):
        prefix = out / f"rank{k:03d}"
        if (out / f"rank{k:03d}_pqtdir" / "NVTX_EVENTS.parquet").is_file():
            continue
        slow = SLOW_NS if k == SLOW_RANK else 0
        nsys_oracle.run_nsys(nsys, [exe, ranges, steps, slow], prefix, timeout=1800)
        nsys_oracle.export_parquetdir(nsys, prefix.with_suffix(".nsys-rep"), out / f"rank{k:03d}_pqtdir", timeout=1800)
    return out


def _inputs_of(engine: str) -> str:
    """The inputs an engine's label names, for the recipe to compare with: nsys RELEASE's
    exports (parquetdirs or SQLite files: the recipe reads the reports' parquetdirs), or ours
    (the recordings and their parquetdirs: the same ranges)."""
    found = re.search(r"nsys (\S+) (parquetdirs|SQLite)", engine)
    return found[1] if found else ""


def _same_inputs(f: dict, g: dict) -> bool:
    """Two rows timed on the same inputs: ranks, steps, and whose exports."""
    return (f["ranks"], f["steps"], _inputs_of(f["engine"])) == (g["ranks"], g["steps"], _inputs_of(g["engine"]))


def make_packed(folder: Path, ranks: int) -> None:
    """packed/rankK.nvtxrec: the recordings packed, as `record` leaves them."""
    from nvtx_plugins_tf.recorder.recording.packed import pack_recording

    for k in range(ranks):
        name = f"rank{k:03d}.nvtxrec"
        shutil.rmtree(folder / "packed" / name, ignore_errors=True)
        shutil.copytree(folder / name, folder / "packed" / name)
        pack_recording(folder / "packed" / name)


def make_copies(folder: Path, ranks: int) -> None:
    """copy/rankK.nvtxrec: the recordings copied (compare's second side, of the same kind)."""
    for k in range(ranks):
        name = f"rank{k:03d}.nvtxrec"
        shutil.rmtree(folder / "copy" / name, ignore_errors=True)
        shutil.copytree(folder / name, folder / "copy" / name)


def subset(folder: Path, kind: str, ranks: int) -> Path:
    """A directory of links to the first ``ranks`` inputs of one kind (recordings, parquetdirs
    with their stand-in reports; ``nsys-RELEASE``: nsys's parquetdirs with its reports,
    ``sqlite-RELEASE``: its SQLite exports)."""
    out = folder / f"{kind}-{ranks}"
    if out.exists():
        return out
    out.mkdir()
    home = {"packed": "packed", "copy": "copy", "rec": "", "pqt": ""}.get(kind, kind.replace("sqlite-", "nsys-"))
    for k in range(ranks):
        if kind in ("rec", "packed", "copy"):
            names = [f"rank{k:03d}.nvtxrec"]
        elif kind.startswith("sqlite-"):
            names = [f"rank{k:03d}.sqlite"]  # (run_nsys's export of the report)
        else:
            names = [f"rank{k:03d}_pqtdir", f"rank{k:03d}.nsys-rep"]
        for name in names:
            (out / name).symlink_to(folder / home / name)
    return out


@contextlib.contextmanager
def dask_cluster(folder: Path, env: dict, workers: int = 2):
    """The address of a Dask cluster of separate processes, as on a real cluster: ``dask
    scheduler`` and ``workers`` ``dask worker`` processes of one thread each, in ``env``
    (None without the ``dask`` command); all of them ended on leaving."""
    dask = Path(sys.executable).with_name("dask")
    if not dask.exists():
        yield None
        return
    file = folder / "scheduler.json"
    file.unlink(missing_ok=True)
    procs = []
    start = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL, "start_new_session": True, "cwd": folder,
             "env": env}  # fmt: skip
    try:
        procs.append(subprocess.Popen([str(dask), "scheduler", "--host", "127.0.0.1", "--port", "0",
                                       "--no-dashboard", "--scheduler-file", str(file)], **start))  # fmt: skip
        for _ in range(workers):
            procs.append(subprocess.Popen([str(dask), "worker", "--scheduler-file", str(file), "--nworkers", "1",
                                           "--nthreads", "1", "--no-dashboard"], **start))  # fmt: skip
        import distributed

        deadline = time.monotonic() + 120
        while not (file.exists() and file.read_text().strip()) and time.monotonic() < deadline:
            time.sleep(0.1)
        address = json.loads(file.read_text())["address"]
        with distributed.Client(address, timeout="60s") as client:
            client.wait_for_workers(workers, timeout=120)
        yield address
    finally:
        for proc in reversed(procs):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def measure(command: list[str], env: dict, made: Path) -> tuple[float, float, float]:
    """(seconds, peak RSS MiB, CPU seconds) of one run of ``command``, which must make ``made``
    (the recipe exits 0 when it made nothing)."""
    proc = subprocess.run([sys.executable, "-c", _MEASURE, *command], env=env, capture_output=True, text=True)
    fields = proc.stdout.split()
    if proc.returncode or not fields or fields[0] != "0" or not made.exists():
        raise RuntimeError(f"{' '.join(command[:4])}... failed: {proc.stderr.strip()[-800:]}")
    return float(fields[1]), int(fields[2]) / 1024, float(fields[3])


def _unwind(signum, _frame) -> None:
    """SIGTERM or SIGHUP as SIGINT is: an exception, so that every ``with`` unwinds (the Dask
    cluster's processes ended, the run being timed killed by ``subprocess.run``, the
    temporary ranks removed) and the exit status says which signal."""
    raise SystemExit(128 + signum)


def main() -> int:
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _unwind)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", default="8,64", help="rank counts to time (default 8,64)")
    parser.add_argument("--ranges", type=int, default=1_000_000, help="ranges per rank (default 1M)")
    parser.add_argument(
        "--steps", default="1000", help="steps per rank, one or more (default 1000; 1000,10000,83334: rows for each)"
    )
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default 3)")
    parser.add_argument("--keep", type=Path, help="keep (and reuse) the ranks in this directory")
    parser.add_argument("--nsys-exports", action="append", default=[], help="nsys release profiling the ranks too")
    parser.add_argument("--engine", action="append", help="only the engines whose label this matches (repeated)")
    parser.add_argument("--recipe-modes", default="concurrent,dask-futures", help="the recipe's modes to run")
    parser.add_argument("--warmup", type=int, default=1, help="rounds run first and not counted (default 1)")
    parser.add_argument("--json", type=Path, help="write the rows to this JSON file (plot_analyze_scale.py)")
    args = parser.parse_args()
    started = datetime.datetime.now(datetime.timezone.utc)
    loads = [os.getloadavg()]
    print(f"load average before: {loads[0][0]:.1f} {loads[0][1]:.1f} {loads[0][2]:.1f} ({os.cpu_count()} cores)")
    counts = sorted({int(c) for c in args.ranks.split(",")})
    folder = args.keep or Path(tempfile.mkdtemp(prefix="bench-analyze-"))
    folder.mkdir(parents=True, exist_ok=True)
    with contextlib.ExitStack() as stack:
        if args.keep is None:
            stack.callback(shutil.rmtree, folder, ignore_errors=True)
        step_counts = [int(c) for c in args.steps.split(",")]
        # (one step count: the ranks in DIR itself, as before; several: DIR/steps-N each)
        homes = {steps: folder if len(step_counts) == 1 else folder / f"steps-{steps}" for steps in step_counts}
        for steps, home in homes.items():
            home.mkdir(exist_ok=True)
            if not (home / f"rank{max(counts) - 1:03d}_pqtdir").is_dir():
                t = time.perf_counter()
                make_ranks(home, max(counts), args.ranges, steps)
                took = time.perf_counter() - t
                print(f"made {max(counts)} ranks x {args.ranges:,} ranges, {steps:,} steps a rank, in {took:.0f} s")
            if not (home / "packed" / f"rank{max(counts) - 1:03d}.nvtxrec").is_dir():
                make_packed(home, max(counts))
            if not (home / "copy" / f"rank{max(counts) - 1:03d}.nvtxrec").is_dir():
                make_copies(home, max(counts))
            for release in args.nsys_exports:
                t = time.perf_counter()
                make_nsys_ranks(home, max(counts), args.ranges, steps, release)
                print(f"nsys {release}: {max(counts)} ranks profiled and exported in {time.perf_counter() - t:.0f} s")
        env = dict(os.environ, PYTHONPATH=str(REPO))
        # the package as `pip install` leaves it, its modules' bytecode compiled: with
        # PYTHONDONTWRITEBYTECODE set (this machine sets it) and a checkout's modules never
        # compiled, every run of analyze would compile them anew (25-45 ms of CPU an 8-rank
        # run, which no installed copy spends); Python reads the files whatever that variable.
        # The recipe's packages too, below.
        compileall.compile_dir(str(REPO / "nvtx_plugins_tf"), quiet=1)
        nvtx_tf = [sys.executable, "-m", "nvtx_plugins_tf", "analyze"]
        nsys = fetch_nsys.nsys_path()
        why = fetch_nsys.why_not() if nsys is None else None
        for release in (None, CLUSTER_RECIPE_RELEASE):  # (the recipe's modules alike: compiled once)
            found = fetch_nsys.nsys_path(release) if release else nsys
            if found is not None and (found.parent / "python" / "packages").is_dir():
                compileall.compile_dir(str(found.parent / "python" / "packages"), quiet=2)
        recipe_env = fetch_nsys.recipe_env(env=env)
        recipe_dask = dict(recipe_env, NSYS_DASK_N_WORKERS="2", NSYS_DASK_THREADS_PER_WORKER="1")
        address = cluster_nsys = None
        cluster_rows = f"analyze {CLUSTER}; nsys recipe nvtx_sum (dask-futures, {CLUSTER})"
        if importlib.util.find_spec("distributed") is not None and (
            not args.engine or any(re.search(w, cluster_rows) for w in args.engine)
        ):
            # (the recipe's tasks name its modules, nsys_recipe and nvtx_sum.nvtx_sum: the scheduler
            # and the workers unpickle them, nsys's Python packages on their path, as on a cluster)
            cluster_nsys = fetch_nsys.nsys_path(CLUSTER_RECIPE_RELEASE)
            packages = cluster_nsys.parent / "python" / "packages" if cluster_nsys is not None else None
            packages = [str(packages), str(packages / "nsys_recipe" / "recipes")] if packages else []
            worker_env = dict(env, PYTHONPATH=os.pathsep.join([*packages, env["PYTHONPATH"]]))
            address = stack.enter_context(dask_cluster(folder, worker_env))
        rows, found = [], []
        for steps, n in ((steps, n) for steps in step_counts for n in counts):
            home = homes[steps]
            rec, pqt, packed = subset(home, "rec", n), subset(home, "pqt", n), subset(home, "packed", n)
            copy = subset(home, "copy", n)
            out = folder / f"out-{os.getpid()}"  # (its own: two runs on one --keep DIR never share it)
            engines = {
                "analyze, embedded, recordings": ([*nvtx_tf, str(rec), "-o", str(out)], env),
                # the tables as CSV too (the recipes write them with --csv only, as analyze now does)
                "analyze --csv, embedded, recordings": ([*nvtx_tf, str(rec), "-o", str(out), "--csv"], env),
                # the numpy mapper the native one replaced for recordings (the fallback)
                "analyze, embedded, recordings, NVTX_TF_ANALYZE_NATIVE=0": (
                    [*nvtx_tf, str(rec), "-o", str(out)],
                    dict(env, NVTX_TF_ANALYZE_NATIVE="0"),
                ),
                # the recordings as `record` leaves them (recording/packed.py): unpacked as they are read,
                # frame by frame (cc_ops/reader/packed_segment.h); before: into a copy first
                "analyze, embedded, packed recordings": ([*nvtx_tf, str(packed), "-o", str(out)], env),
                "analyze, embedded, packed recordings, NVTX_TF_UNPACK_IN_PLACE=0": (
                    [*nvtx_tf, str(packed), "-o", str(out)],
                    dict(env, NVTX_TF_UNPACK_IN_PLACE="0"),
                ),
                "analyze, embedded, parquetdirs": ([*nvtx_tf, str(pqt), "-o", str(out)], env),
                # issue 46: two sides of n ranks each (the recordings against a copy of them, and
                # against their packed copies: A/A pairs), at most 2x analyze's time on one side
                # (like for like: the copy's row), its peak under 1 GiB
                "compare, embedded, recordings vs a copy": (
                    [*nvtx_tf[:-1], "compare", str(rec), "--vs", str(copy), "-o", str(out), "--seed", "1"],
                    env,
                ),
                "compare, embedded, recordings vs packed recordings": (
                    [*nvtx_tf[:-1], "compare", str(rec), "--vs", str(packed), "-o", str(out), "--seed", "1"],
                    env,
                ),
                "analyze, embedded, parquetdirs, NVTX_TF_ANALYZE_NATIVE=0": (
                    [*nvtx_tf, str(pqt), "-o", str(out)],
                    dict(env, NVTX_TF_ANALYZE_NATIVE="0"),
                ),
                "analyze, Dask 2 workers, recordings": ([*nvtx_tf, str(rec), "-o", str(out), "--workers", "2"], env),
                "analyze, Dask 2 workers, parquetdirs": ([*nvtx_tf, str(pqt), "-o", str(out), "--workers", "2"], env),
            }
            if address is not None:  # a cluster of separate processes, started once
                for kind, inputs in (("recordings", rec), ("parquetdirs", pqt)):
                    label = f"analyze {CLUSTER}, {kind}"
                    engines[label] = ([*nvtx_tf, str(inputs), "-o", str(out), "--scheduler", address], env)
            if importlib.util.find_spec("duckdb") is not None:  # the engine not chosen, measured
                label = "DuckDB, rank_stats' columns only, parquetdirs"
                engines[label] = ([sys.executable, "-c", _DUCKDB, str(pqt)], env)
            theirs = {f"nsys {r} parquetdirs": subset(home, f"nsys-{r}", n) for r in args.nsys_exports}
            for label, inputs in theirs.items():
                engines[f"analyze, embedded, {label}"] = ([*nvtx_tf, str(inputs), "-o", str(out)], env)
            for r in args.nsys_exports:  # (nsys's SQLite exports of the same reports)
                inputs = subset(home, f"sqlite-{r}", n)
                engines[f"analyze, embedded, nsys {r} SQLite"] = ([*nvtx_tf, str(inputs), "-o", str(out)], env)
            for mode in filter(None, args.recipe_modes.split(",")) if nsys is not None else ():
                for label, inputs in {"parquetdirs": pqt, **theirs}.items():
                    recipe = [str(nsys), "recipe", "nvtx_sum", "--mode", mode, "--input", str(inputs)]
                    mode_env = recipe_dask if mode == "dask-futures" else recipe_env
                    engines[f"nsys recipe nvtx_sum ({mode}), {label}"] = ([*recipe, "--output", str(out)], mode_env)
                    if mode == "concurrent":
                        # the pace of one step only: the recipe's --name is a range's whole text and
                        # these steps are "step N" (analyze reads "step" as "step" or "step N"); what
                        # reading the inputs costs it, a lower bound of the pace over every step
                        pace = [str(nsys), "recipe", "nvtx_pace", "--mode", mode, "--input", str(inputs)]
                        engines[f"nsys recipe nvtx_pace ({mode}, one step), {label}"] = (
                            [*pace, "--name", "step 1", "--output", str(out)],
                            mode_env,
                        )
            if address is not None and cluster_nsys is not None:
                recipe = [str(cluster_nsys), "recipe", "nvtx_sum", "--mode", "dask-futures", "--input", str(pqt)]
                # (DASK_SCHEDULER_ADDRESS: the recipe turns NSYS_DASK_ADDRESS's string into True)
                here = dict(env, PATH=f"{Path(sys.executable).parent}:{env['PATH']}", DASK_SCHEDULER_ADDRESS=address)
                cluster_env = fetch_nsys.run_env(CLUSTER_RECIPE_RELEASE, env=here)
                label = f"nsys recipe nvtx_sum (dask-futures, {CLUSTER}), parquetdirs"
                engines[label] = ([*recipe, "--output", str(out)], cluster_env)
            if args.engine:
                engines = {k: v for k, v in engines.items() if any(re.search(w, k) for w in args.engine)}
            if not engines:
                print(f"{n} ranks: no engine's label matches --engine {args.engine} (the inputs are made)")
                continue
            times: dict[str, list[tuple[float, float, float]]] = {name: [] for name in engines}
            names = list(engines)
            for r in range(args.rounds + args.warmup):
                for name in names[r % len(names) :] + names[: r % len(names)]:
                    shutil.rmtree(out, ignore_errors=True)
                    made = out / "rank_stats.parquet"  # (what each makes: the recipes' own files)
                    made = out / "pace_duration.parquet" if "nvtx_pace" in name else made
                    made = Path(sys.executable) if name.startswith("DuckDB") else made
                    made = out / "compare.parquet" if name.startswith("compare") else made
                    result = measure(*engines[name], made)
                    if r >= args.warmup:  # the first rounds warm the page cache and imports
                        times[name].append(result)
            shutil.rmtree(out, ignore_errors=True)
            for name, results in times.items():
                seconds = [t for t, _, _ in results]
                cpu = statistics.median(c for _, _, c in results)
                q1, med, q3 = quartiles(seconds)
                rate = n * args.ranges / med / 1e6
                peak = max(m for _, m, _ in results)
                rows.append(
                    (name, n, steps, f"{med:.2f} ({q1:.2f}-{q3:.2f})", f"{rate:.2f}M", f"{cpu:.1f}", f"{peak:.0f}")
                )
                found.append({
                    "engine": name, "ranks": n, "steps": steps, "seconds": seconds, "median": med, "cpu": cpu,
                    "peak_mib": peak,
                })  # fmt: skip
            loads.append(os.getloadavg())
        header = (
            "engine",
            "ranks",
            "steps a rank",
            "seconds, median (quartiles)",
            "ranges/s",
            "CPU s, median",
            "peak RSS MiB",
        )
        print_table(header, rows)

        def recipe_rows(f: dict) -> list[dict]:
            """The recipe's rows an engine's row is held to: on the same inputs, in the same
            mode for the Dask rows (dask-futures on the same cluster), else every local mode."""
            same = [
                g
                for g in found
                if g["engine"].startswith("nsys recipe nvtx_sum")
                and _same_inputs(f, g)
                and (CLUSTER in g["engine"]) == (CLUSTER in f["engine"])
            ]
            if "Dask 2 workers" in f["engine"]:
                same = [g for g in same if "(dask-futures)" in g["engine"]]
            return same

        for f in found:
            theirs = recipe_rows(f) if not f["engine"].startswith("nsys") else []
            if theirs:
                best = min(theirs, key=lambda g: g["median"])
                f["ratio"] = best["median"] / f["median"]
                print(
                    f"{f['engine']}, {f['ranks']} ranks, {f['steps']:,} steps: {f['ratio']:.2f}x the recipe's ranges/s "
                    f"({best['engine']})"
                )
                pace = [g for g in found if g["engine"].startswith("nsys recipe nvtx_pace") and _same_inputs(f, g)]
                if pace and "Dask" not in f["engine"] and CLUSTER not in f["engine"]:
                    f["ratio_sum_pace"] = (best["median"] + pace[0]["median"]) / f["median"]
                    print(f"    {f['ratio_sum_pace']:.2f}x nvtx_sum + nvtx_pace (one step: a lower bound of its pace)")
                cpus = ", ".join(f"{g['cpu']:.1f}" for g in theirs)
                print(f"    CPU seconds: {f['cpu']:.1f} against the recipe's {cpus}")
        print("load average after each rank count: " + ", ".join(f"{a:.1f} {b:.1f} {c:.1f}" for a, b, c in loads[1:]))
        if args.json:
            record = {
                "date": started.strftime("%Y-%m-%d %H:%M UTC"),
                "command": " ".join(["python", "benchmarks/bench_analyze.py", *sys.argv[1:]]),
                "ranges": args.ranges,
                "load": loads,
                "rows": found,
            }
            args.json.write_text(json.dumps(record, indent=1) + "\n")
        if why:
            print(f"note: nsys recipe left out: {why} (python build_tools/fetch_nsys.py)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
