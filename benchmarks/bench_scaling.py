"""How the costs grow: the recorder with events, threads and processes; the exports with events.

* recorder, CPU ns per push/pop event (benchmarks/recorder_overhead.c under
  libnvtx_recorder.so, its default clock), and the whole run's events per second of wall time:
  - events: 1M, 10M, 100M on one thread;
  - threads: 1, 2, 8, 64 threads of one process sharing 10M events;
  - processes: 1, 8, 64 processes at once sharing 10M events, each its own segment;
* exports: `nvtx-tf export -t TYPE` of a recording of 1M, 10M and 100M push/pop events (the
  first case's recordings), seconds and ns per event, per type (100M: parquetdir only, the
  others take minutes and grow as from 1M to 10M).

Prints one table and draws it (docs/scaling.png with --png PATH). Each figure is the median
of --repeat runs (interleaved per case).

    python benchmarks/bench_scaling.py [--repeat 3] [--png docs/scaling.png]
"""

from __future__ import annotations

import argparse
import os
import shutil
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

from _programs import build_program  # noqa: E402
from _table import print_table  # noqa: E402

EVENTS = (1_000_000, 10_000_000, 100_000_000)
THREADS = (1, 2, 8, 64)
PROCESSES = (1, 8, 64)
SHARED = 10_000_000  # events the threads or the processes share
EXPORTS = {"parquetdir": EVENTS, "sqlite": EVENTS[:2], "json": EVENTS[:2]}


def parse(line: str) -> dict:
    return {k: float(v) for k, v in (item.split("=") for item in line.split())}


def record(exe: Path, env: dict, folder: Path, threads: int, events: int, processes: int = 1) -> dict:
    """One run: ``processes`` copies of the loop at once, ``threads`` each, ``events`` in all;
    CPU ns per event (mean over the processes) and events per second of wall time."""
    shutil.rmtree(folder, ignore_errors=True)
    run_env = dict(env, NVTX_TF_RECORD_DIR=str(folder))
    per_thread = max(2, events // (processes * threads))
    t0 = time.perf_counter()
    procs = [
        subprocess.Popen([str(exe), str(threads), str(per_thread)], env=run_env, stdout=subprocess.PIPE, text=True)
        for _ in range(processes)
    ]
    outs = [parse(p.communicate()[0]) for p in procs]
    wall = time.perf_counter() - t0
    if any(p.returncode for p in procs):
        raise RuntimeError("recorder_overhead failed")
    total = per_thread * threads * processes
    return {"cpu_ns": statistics.mean(o["cpu_ns_per_event"] for o in outs), "events_per_s": total / wall}


def export(recording: Path, kind: str, out: Path) -> float:
    shutil.rmtree(out, ignore_errors=True) if out.is_dir() else out.unlink(missing_ok=True)
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "nvtx_plugins_tf", "export", "-t", kind, "-o", str(out), "-f", "true", str(recording)],
        env=dict(os.environ, PYTHONPATH=str(REPO)), capture_output=True, text=True,
    )  # fmt: skip
    if proc.returncode:
        raise RuntimeError(f"export -t {kind} failed: {proc.stderr.strip()}")
    return time.perf_counter() - t0


def draw(rows: list[tuple], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 4, figsize=(16, 3.6), dpi=100)
    panels = [("recorder: events (1 thread)", "events"), ("recorder: threads (10M events)", "threads"),
              ("recorder: processes (10M events)", "processes"), ("exports: events", "export")]  # fmt: skip
    for ax, (title, case) in zip(axes, panels):
        mine = [r for r in rows if r[0] == case]
        if case == "export":
            for kind in EXPORTS:
                pts = [(r[2], r[3]) for r in mine if r[1] == kind]
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=kind)
            ax.legend(fontsize=8)
            ax.set_ylabel("ns per event")
        else:
            ax.plot([r[2] for r in mine], [r[3] for r in mine], marker="o")
            ax.set_ylabel("CPU ns per event")
            ax.set_ylim(bottom=0)
        ax.set_xscale("log")
        xs = sorted({r[2] for r in mine})
        ax.set_xticks(xs, [f"{x // 1_000_000}M" if x >= 1_000_000 else str(x) for x in xs])
        ax.minorticks_off()
        ax.set_xlabel(case if case != "export" else "events")
        ax.set_title(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="runs per case (default 3)")
    parser.add_argument("--png", type=Path, help="draw the table into this PNG")
    args = parser.parse_args()
    from nvtx_plugins_tf._native_libs import native_library

    with tempfile.TemporaryDirectory(prefix="bench-scaling-") as tmp:
        tmp = Path(tmp)
        exe = build_program("recorder_overhead.c", tmp / "recorder_overhead")
        env = {k: v for k, v in os.environ.items() if not k.startswith(("NVTX_INJECTION", "NVTX_TF_"))}
        env["NVTX_INJECTION64_PATH"] = str(native_library("recorder"))
        cases = [("events", 1, n, 1) for n in EVENTS]
        cases += [("threads", t, SHARED, 1) for t in THREADS] + [("processes", 1, SHARED, p) for p in PROCESSES]
        results: dict[tuple, list[dict]] = {c: [] for c in cases}
        for r in range(args.repeat):
            for case in cases[r % len(cases) :] + cases[: r % len(cases)]:
                kind, threads, events, processes = case
                results[case].append(record(exe, env, tmp / "rec.nvtxrec", threads, events, processes))
        rows = []
        for (kind, threads, events, processes), runs in results.items():
            x = {"events": events, "threads": threads, "processes": processes}[kind]
            cpu = statistics.median(r["cpu_ns"] for r in runs)
            rate = statistics.median(r["events_per_s"] for r in runs)
            rows.append((kind, "push/pop", x, round(cpu, 1), f"{rate / 1e6:.1f}M events/s"))
        # the exports, of one recording per size
        for n in EVENTS:
            rec = tmp / f"e{n}.nvtxrec"
            record(exe, env, rec, 1, n)
            for kind, sizes in EXPORTS.items():
                if n in sizes:
                    seconds = statistics.median(export(rec, kind, tmp / f"out-{kind}") for _ in range(args.repeat))
                    rows.append(("export", kind, n, round(seconds * 1e9 / n, 1), f"{seconds:.2f} s"))
            shutil.rmtree(rec)
    print_table(("grows with", "what", "x", "ns per event", "throughput / time"), rows)
    if args.png:
        draw(rows, args.png)
        print(f"wrote {args.png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
