"""Benchmark `nvtx-tf analyze` against NVIDIA's `nsys recipe nvtx_sum` on the same ranks.

Each rank is benchmarks/rank_workload.c run under our recorder (RANGES ranges in STEPS
"step N" ranges, nested data/forward/backward ranges; rank 5 slowed in "data"), exported to
a parquetdir (nsys 2023.4's format: what the recipe reads, with an empty REPORT.nsys-rep
beside each as the recipe's --input needs). Then, for 8 ranks and for all of them, in
interleaved rounds (the order rotated every round; medians and quartiles over the rounds):

* analyze, embedded engine (one process, a thread per core), on the recordings and on the
  parquetdirs: every output (all_stats, rank_stats, pace, stragglers, heatmap.png); on both
  also with ``NVTX_TF_ANALYZE_NATIVE=0`` (the numpy mapper, the reference, instead of the
  native one: parquetdirs streamed into it in batches, reports/_export_batches.py);
* analyze on a dask.distributed LocalCluster of 2 worker processes (``--workers 2``), on the
  recordings;
* ``nsys recipe nvtx_sum --mode concurrent`` (Nsight Systems 2023.4.4, fetched by
  build_tools/fetch_nsys.py; left out with a note when it cannot run here) on the
  parquetdirs: statistics only;
* DuckDB (when installed: not a dependency) computing rank_stats' columns over the
  parquetdirs in one query, its threads one per core: the engine not chosen, measured.

Each command runs as its own process; peak RSS is the largest of its processes (the Dask
workers' and the recipe's workers' included: getrusage of the waited-for children).

    python benchmarks/bench_analyze.py [--ranks 8,64] [--ranges 1000000] [--rounds 3] [--keep DIR]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
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
# Runs a command, then prints its wall time and the peak RSS of its largest process (KiB).
_MEASURE = (
    "import resource, subprocess, sys, time\n"
    "t = time.perf_counter()\n"
    "p = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)\n"
    "dt = time.perf_counter() - t\n"
    "sys.stderr.write(p.stderr[-2000:] if p.returncode else '')\n"
    "print(p.returncode, dt, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
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


def make_packed(folder: Path, ranks: int) -> None:
    """packed/rankK.nvtxrec: the recordings packed, as `record` leaves them."""
    from nvtx_plugins_tf.recorder.recording.packed import pack_recording

    for k in range(ranks):
        name = f"rank{k:03d}.nvtxrec"
        shutil.rmtree(folder / "packed" / name, ignore_errors=True)
        shutil.copytree(folder / name, folder / "packed" / name)
        pack_recording(folder / "packed" / name)


def subset(folder: Path, kind: str, ranks: int) -> Path:
    """A directory of links to the first ``ranks`` inputs of one kind (recordings, parquetdirs
    with their stand-in reports)."""
    out = folder / f"{kind}-{ranks}"
    if out.exists():
        return out
    out.mkdir()
    for k in range(ranks):
        names = (
            [f"rank{k:03d}.nvtxrec"] if kind in ("rec", "packed") else [f"rank{k:03d}_pqtdir", f"rank{k:03d}.nsys-rep"]
        )
        for name in names:
            (out / name).symlink_to(folder / ("packed" if kind == "packed" else "") / name)
    return out


def measure(command: list[str], env: dict) -> tuple[float, float]:
    """(seconds, peak RSS MiB) of one run of ``command``."""
    proc = subprocess.run([sys.executable, "-c", _MEASURE, *command], env=env, capture_output=True, text=True)
    fields = proc.stdout.split()
    if proc.returncode or not fields or fields[0] != "0":
        raise RuntimeError(f"{' '.join(command[:4])}... failed: {proc.stderr.strip()[-800:]}")
    return float(fields[1]), int(fields[2]) / 1024


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", default="8,64", help="rank counts to time (default 8,64)")
    parser.add_argument("--ranges", type=int, default=1_000_000, help="ranges per rank (default 1M)")
    parser.add_argument("--steps", type=int, default=1000, help="steps per rank (default 1000)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default 3)")
    parser.add_argument("--keep", type=Path, help="keep (and reuse) the ranks in this directory")
    args = parser.parse_args()
    counts = sorted({int(c) for c in args.ranks.split(",")})
    folder = args.keep or Path(tempfile.mkdtemp(prefix="bench-analyze-"))
    folder.mkdir(parents=True, exist_ok=True)
    try:
        if not (folder / f"rank{max(counts) - 1:03d}_pqtdir").is_dir():
            t = time.perf_counter()
            make_ranks(folder, max(counts), args.ranges, args.steps)
            print(f"made {max(counts)} ranks x {args.ranges:,} ranges in {time.perf_counter() - t:.0f} s")
        if not (folder / "packed" / f"rank{max(counts) - 1:03d}.nvtxrec").is_dir():
            make_packed(folder, max(counts))
        env = dict(os.environ, PYTHONPATH=str(REPO))
        nvtx_tf = [sys.executable, "-m", "nvtx_plugins_tf", "analyze"]
        nsys = fetch_nsys.nsys_path()
        why = fetch_nsys.why_not() if nsys is None else None
        recipe_env = fetch_nsys.run_env(env=dict(env, PATH=f"{Path(sys.executable).parent}:{env['PATH']}"))
        rows = []
        for n in counts:
            rec, pqt, packed = subset(folder, "rec", n), subset(folder, "pqt", n), subset(folder, "packed", n)
            out = folder / "out"
            engines = {
                "analyze, embedded, recordings": ([*nvtx_tf, str(rec), "-o", str(out)], env),
                # the numpy mapper the native one replaced for recordings (the fallback)
                "analyze, embedded, recordings, NVTX_TF_ANALYZE_NATIVE=0": (
                    [*nvtx_tf, str(rec), "-o", str(out)],
                    dict(env, NVTX_TF_ANALYZE_NATIVE="0"),
                ),
                # the recordings as `record` leaves them (recording/packed.py): unpacked as they are read
                "analyze, embedded, packed recordings": ([*nvtx_tf, str(packed), "-o", str(out)], env),
                "analyze, embedded, parquetdirs": ([*nvtx_tf, str(pqt), "-o", str(out)], env),
                "analyze, embedded, parquetdirs, NVTX_TF_ANALYZE_NATIVE=0": (
                    [*nvtx_tf, str(pqt), "-o", str(out)],
                    dict(env, NVTX_TF_ANALYZE_NATIVE="0"),
                ),
                "analyze, Dask 2 workers, recordings": ([*nvtx_tf, str(rec), "-o", str(out), "--workers", "2"], env),
            }
            if importlib.util.find_spec("duckdb") is not None:  # the engine not chosen, measured
                label = "DuckDB, rank_stats' columns only, parquetdirs"
                engines[label] = ([sys.executable, "-c", _DUCKDB, str(pqt)], env)
            if nsys is not None:
                recipe = [str(nsys), "recipe", "nvtx_sum", "--mode", "concurrent", "--input", str(pqt)]
                label = "nsys recipe nvtx_sum (concurrent), parquetdirs"
                engines[label] = ([*recipe, "--output", str(out)], recipe_env)
            times: dict[str, list[tuple[float, float]]] = {name: [] for name in engines}
            names = list(engines)
            for r in range(args.rounds + 1):
                for name in names[r % len(names) :] + names[: r % len(names)]:
                    shutil.rmtree(out, ignore_errors=True)
                    result = measure(*engines[name])
                    if r:  # the first round warms the page cache and imports
                        times[name].append(result)
            for name, results in times.items():
                seconds = [t for t, _ in results]
                q1, med, q3 = quartiles(seconds)
                rate = n * args.ranges / med / 1e6
                peak = max(m for _, m in results)
                rows.append((name, n, f"{med:.1f} ({q1:.1f}-{q3:.1f})", f"{rate:.2f}M", f"{peak:.0f}"))
        print_table(("engine", "ranks", "seconds, median (quartiles)", "ranges/s", "peak RSS MiB"), rows)
        recipe_rows = {(r[1]): r for r in rows if r[0].startswith("nsys")}
        for row in rows:
            if not row[0].startswith("nsys") and row[1] in recipe_rows:
                ratio = float(row[3][:-1]) / float(recipe_rows[row[1]][3][:-1])
                print(f"{row[0]}, {row[1]} ranks: {ratio:.2f}x the recipe's ranges/s")
        if why:
            print(f"note: nsys recipe left out: {why} (python build_tools/fetch_nsys.py)")
    finally:
        if args.keep is None:
            shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
