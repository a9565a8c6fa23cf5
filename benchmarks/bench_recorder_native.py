"""Overhead of the native NVTX recorder on the hot path.

Compiles benchmarks/recorder_overhead.c, runs it with no NVTX tool attached and with
libnvtx_recorder.so injected (1 and 2 threads), and prints ns/event for both, the
recorder's overhead, the peak RSS growth over the timed loop and the bytes the recording
takes on disk per event (allocated blocks and apparent file size).

    python benchmarks/bench_recorder_native.py [--events N] [--repeat R] [--lib PATH]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "build_tools"))
import build_native  # noqa: E402


def run(exe: Path, threads: int, events: int, env: dict) -> dict:
    proc = subprocess.run([str(exe), str(threads), str(events)], env=env, capture_output=True, text=True, check=True)
    return {k: float(v) for k, v in (item.split("=") for item in proc.stdout.split())}


def disk_usage(folder: Path) -> tuple[int, int]:
    allocated = apparent = 0
    for path in folder.glob("*.nvtxseg"):
        st = path.stat()
        allocated += st.st_blocks * 512
        apparent += st.st_size
    return allocated, apparent


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=10_000_000, help="events per thread (default 10M)")
    parser.add_argument("--repeat", type=int, default=3, help="runs per configuration; the fastest counts")
    parser.add_argument("--lib", type=Path, help="libnvtx_recorder.so to use (default: fresh build)")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="nvtx_bench_") as tmp:
        tmp = Path(tmp)
        lib = args.lib or build_native.build_recorder(tmp / "lib")
        exe = tmp / "recorder_overhead"
        subprocess.run(
            [
                "gcc",
                "-O2",
                f"-I{build_native.nvtx_include_dir()}",
                str(REPO / "benchmarks" / "recorder_overhead.c"),
                "-o",
                str(exe),
                "-ldl",
                "-pthread",
            ],
            check=True,
        )
        base_env = {k: v for k, v in os.environ.items() if not k.startswith(("NVTX_INJECTION", "NVTX_TF_"))}
        rows = []
        for threads in (1, 2):
            baseline = min(
                (run(exe, threads, args.events, base_env) for _ in range(args.repeat)), key=lambda r: r["ns_per_event"]
            )
            best = None
            for i in range(args.repeat):
                rec_dir = tmp / f"rec_{threads}_{i}"
                env = dict(base_env, NVTX_INJECTION64_PATH=str(lib), NVTX_TF_RECORD_DIR=str(rec_dir))
                result = run(exe, threads, args.events, env)
                result["allocated"], result["apparent"] = disk_usage(rec_dir)
                shutil.rmtree(rec_dir)
                if best is None or result["ns_per_event"] < best["ns_per_event"]:
                    best = result
            rows.append((threads, baseline, best))

    print(f"push/pop with an ASCII message, {args.events:,} events per thread, best of {args.repeat}")
    print("ns/ev = per-thread wall time / events; cpu = per-thread CPU time (user+sys) / events")
    header = (
        "threads",
        "no tool ns/ev",
        "recorder ns/ev",
        "overhead ns/ev",
        "overhead cpu ns/ev",
        "RSS growth KiB",
        "disk B/ev (alloc)",
        "disk B/ev (size)",
    )
    print(" | ".join(header))
    for threads, baseline, rec in rows:
        total = rec["events"]
        print(
            " | ".join(
                [
                    f"{threads:>7}",
                    f"{baseline['ns_per_event']:>13.1f}",
                    f"{rec['ns_per_event']:>14.1f}",
                    f"{rec['ns_per_event'] - baseline['ns_per_event']:>14.1f}",
                    f"{rec['cpu_ns_per_event'] - baseline['cpu_ns_per_event']:>18.1f}",
                    f"{rec['hwm_growth_kb']:>14.0f}",
                    f"{rec['allocated'] / total:>17.2f}",
                    f"{rec['apparent'] / total:>16.2f}",
                ]
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
