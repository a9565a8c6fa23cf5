"""Overhead of the native NVTX recorder on the hot path (push/pop and start/end).

Compiles benchmarks/recorder_overhead.c and runs it with no NVTX tool attached and with
libnvtx_recorder.so injected under each of its clocks (NVTX_TF_RECORDER_CLOCK=tsc: the TSC
converted to CLOCK_MONOTONIC ns; =monotonic: clock_gettime), 1 and 2 threads. The
configurations run interleaved, in a rotating order, --repeat times each; every figure is
a median over those runs (the machine may be shared: never the best run). Prints:

* the recorder with the clock it picks by default on this machine: ns/event with no tool
  and with the recorder, the overhead, the peak RSS growth over the timed loop and the
  bytes the recording takes on disk per event (allocated blocks and apparent file size),
  raw as the program writes it and packed as `record` leaves it;
* each clock side by side: ns/event and CPU ns/event, median and quartiles, and the
  overhead over no tool (with --before-lib, also that library, e.g. an older build);
* where an event's time goes: NVTX's dispatch (benchmarks/null_tool.c, a tool that does
  nothing), the clock read and the record store alone (benchmarks/event_parts.c), the rest;
* Nsight Systems 2023.4 (fetched by build_tools/fetch_nsys.py) on the same loop, 1 thread.

    python benchmarks/bench_recorder_native.py [--events N] [--repeat R] [--lib PATH] [--before-lib PATH]
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

REPO = Path(__file__).resolve().parents[1]
KINDS = {"pushpop": "push/pop", "startend": "start/end"}  # recorder_overhead.c's loops
sys.path.insert(0, str(REPO / "build_tools"))
import build_native  # noqa: E402
import fetch_nsys  # noqa: E402
from _programs import build_program, quartiles  # noqa: E402

from nvtx_plugins_tf.recorder.recording.packed import pack_recording  # noqa: E402


def run(exe: Path, threads: int, events: int, env: dict, kind: str = "pushpop") -> dict:
    proc = subprocess.run(
        [str(exe), str(threads), str(events), kind], env=env, capture_output=True, text=True, check=True
    )
    return {k: float(v) for k, v in (item.split("=") for item in proc.stdout.split())}


def disk_usage(folder: Path) -> tuple[int, int]:
    allocated = apparent = 0
    for path in folder.glob("*.nvtxseg"):
        st = path.stat()
        allocated += st.st_blocks * 512
        apparent += st.st_size
    return allocated, apparent


def median_run(runs: list[dict]) -> dict:
    """Each field's median over the runs."""
    return {key: statistics.median(r[key] for r in runs) for key in runs[0]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=10_000_000, help="events per thread (default 10M)")
    parser.add_argument("--repeat", type=int, default=7, help="interleaved runs per configuration (default 7)")
    parser.add_argument("--lib", type=Path, help="libnvtx_recorder.so to use (default: fresh build)")
    parser.add_argument("--before-lib", type=Path, help="another libnvtx_recorder.so to compare with (its own clock)")
    parser.add_argument("--nsys-events", type=int, default=2_000_000, help="events in each nsys run (default 2M)")
    parser.add_argument("--nsys-repeat", type=int, default=3, help="nsys runs per loop (default 3; 0: none)")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="nvtx_bench_") as tmp:
        tmp = Path(tmp)
        lib = args.lib or build_native.build_recorder(tmp / "lib")
        exe = build_program("recorder_overhead.c", tmp / "recorder_overhead")
        null_tool = build_program("null_tool.c", tmp / "null_tool.so", "-shared", "-fPIC", "-fvisibility=hidden")
        parts_exe = build_program("event_parts.c", tmp / "event_parts")
        base_env = {k: v for k, v in os.environ.items() if not k.startswith(("NVTX_INJECTION", "NVTX_TF_"))}
        # The clock the recorder picks by default here (NVTX_TF_RECORDER_CLOCK unset).
        probe = run(exe, 1, 1000, dict(base_env, NVTX_INJECTION64_PATH=str(lib), NVTX_TF_RECORD_DIR=str(tmp / "p")))
        default_clock = "tsc" if probe["clock_tsc"] == 1 else "clock_gettime"
        configs = {"no tool": None, "null tool": ("null", null_tool), "tsc": ("tsc", lib),
                   "clock_gettime": ("monotonic", lib)}  # fmt: skip
        if args.before_lib:
            configs["before"] = (None, args.before_lib)
        # start/end: the recorder with its default clock (an ordered TSC read) against no tool.
        start_end_configs = [name for name in configs if name in ("no tool", "null tool", default_clock, "before")]
        runs = {(kind, threads, name): [] for kind in KINDS for threads in (1, 2) for name in configs}
        parts: list[dict] = []
        for i in range(args.repeat):
            for kind in KINDS:
                for threads in (1, 2):
                    names = list(configs) if kind == "pushpop" else start_end_configs
                    shift = (i + threads) % len(names)
                    for name in names[shift:] + names[:shift]:  # a rotating order: no config always first
                        if configs[name] is None:
                            runs[kind, threads, name].append(run(exe, threads, args.events, base_env, kind))
                            continue
                        clock, path = configs[name]
                        rec_dir = tmp / f"rec_{threads}_{i}"
                        env = dict(base_env, NVTX_INJECTION64_PATH=str(path), NVTX_TF_RECORD_DIR=str(rec_dir))
                        if clock and clock != "null":
                            env["NVTX_TF_RECORDER_CLOCK"] = clock
                        result = run(exe, threads, args.events, env, kind)
                        result["allocated"], result["apparent"] = disk_usage(rec_dir)
                        if name == default_clock:  # the recording as `record` leaves it: packed
                            started = time.perf_counter()
                            result["packed"] = pack_recording(rec_dir).packed_bytes
                            result["pack_s"] = time.perf_counter() - started
                        shutil.rmtree(rec_dir, ignore_errors=True)
                        if clock == "tsc" and result["clock_tsc"] != 1:
                            print("note: NVTX_TF_RECORDER_CLOCK=tsc fell back to clock_gettime (no invariant TSC)")
                        runs[kind, threads, name].append(result)
            parts.append(run_parts(parts_exe, args.events))
        nsys = fetch_nsys.nsys_path()
        nsys_runs = {kind: [] for kind in KINDS}
        for i in range(args.nsys_repeat if nsys else 0):  # nsys 2023.4 on the same loop (1 thread)
            for kind in KINDS:
                nsys_runs[kind].append(run_under_nsys(nsys, exe, args.nsys_events, kind, tmp / f"nsys{i}"))

    print(f"push/pop with an ASCII message, {args.events:,} events per thread, medians of {args.repeat} runs")
    print("ns/ev = per-thread wall time / events; cpu = per-thread CPU time (user+sys) / events")
    print(f"recorder with its default clock here: {default_clock}")
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
    for threads in (1, 2):
        baseline = median_run(runs["pushpop", threads, "no tool"])
        rec = median_run(runs["pushpop", threads, default_clock])
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
    print()
    print("disk per event, the default clock: raw = as written while the program runs (apparent size,")
    print("allocated blocks); packed = as `record` leaves it (recording/packed.py); pack = its time per event")
    print(" | ".join(("events", "threads", "raw B/ev (size)", "raw B/ev (alloc)", "packed B/ev", "pack ns/ev")))
    for kind in KINDS:
        for threads in (1, 2):
            rec = median_run(runs[kind, threads, default_clock])
            total = rec["events"]
            print(
                " | ".join(
                    [
                        f"{KINDS[kind]:>9}",
                        f"{threads:>7}",
                        f"{rec['apparent'] / total:>15.3f}",
                        f"{rec['allocated'] / total:>16.3f}",
                        f"{rec['packed'] / total:>11.3f}",
                        f"{rec['pack_s'] * 1e9 / total:>10.2f}",
                    ]
                )
            )
    print()
    print("clocks side by side: median [first quartile - third quartile]; overhead = median - no tool median")
    print(
        " | ".join(("events", "threads", "configuration", "ns/ev", "cpu ns/ev", "overhead ns/ev", "overhead cpu ns/ev"))
    )
    for kind in KINDS:
        for threads in (1, 2):
            none = median_run(runs[kind, threads, "no tool"])
            for name in configs:
                if not runs[kind, threads, name]:
                    continue
                wall = quartiles([r["ns_per_event"] for r in runs[kind, threads, name]])
                cpu = quartiles([r["cpu_ns_per_event"] for r in runs[kind, threads, name]])
                print(
                    " | ".join(
                        [
                            f"{KINDS[kind]:>9}",
                            f"{threads:>7}",
                            f"{name:>13}",
                            f"{wall[1]:5.1f} [{wall[0]:5.1f} - {wall[2]:5.1f}]",
                            f"{cpu[1]:5.1f} [{cpu[0]:5.1f} - {cpu[2]:5.1f}]",
                            f"{wall[1] - none['ns_per_event']:>14.1f}",
                            f"{cpu[1] - none['cpu_ns_per_event']:>18.1f}",
                        ]
                    )
                )
    print_breakdown(runs, parts, default_clock, nsys_runs, nsys)
    return 0


def run_parts(exe: Path, events: int) -> dict:
    proc = subprocess.run([str(exe), str(events)], capture_output=True, text=True, check=True)
    return {k: float(v) for k, v in (item.split("=") for item in proc.stdout.split())}


def run_under_nsys(nsys: Path, exe: Path, events: int, kind: str, prefix: Path) -> dict:
    """The loop (1 thread) under ``nsys profile -t nvtx``: the program's own figures."""
    proc = subprocess.run(
        [str(nsys), "profile", "-t", "nvtx", "-s", "none", "--cpuctxsw=none", "-f", "true", "-o", str(prefix),
         str(exe), "1", str(events), kind],
        env=fetch_nsys.run_env(), capture_output=True, text=True, check=True,
    )  # fmt: skip
    line = next(x for x in proc.stdout.splitlines() if x.startswith("threads="))
    return {k: float(v) for k, v in (item.split("=") for item in line.split())}


def print_breakdown(runs: dict, parts: list[dict], default_clock: str, nsys_runs: dict, nsys) -> None:
    """Where an event's time goes (1 thread, medians): NVTX's dispatch to a tool (a tool that
    does nothing, over no tool), the clock read and the 16-byte record store measured alone
    (event_parts.c), and the rest of the recorder (its string-id lookup, nesting and range
    bookkeeping, chunk checks): the recorder's total less those. Then nsys on the same loop."""
    part = {k: statistics.median(p[k] for p in parts) for k in parts[0]}
    print()
    print(f"where an event's time goes (1 thread, medians; clock: {default_clock}), ns per event:")
    print(" | ".join(("events", "no tool", "NVTX dispatch", "clock read", "record store", "the rest", "recorder")))
    for kind in KINDS:
        none = median_run(runs[kind, 1, "no tool"])["ns_per_event"]
        null = median_run(runs[kind, 1, "null tool"])["ns_per_event"]
        total = median_run(runs[kind, 1, default_clock])["ns_per_event"]
        if default_clock == "tsc":
            clock = part["tsc"] if kind == "pushpop" else part["tsc_ordered"]
        else:
            clock = part["monotonic"]
        rest = total - null - clock - part["store16"]
        print(" | ".join((f"{KINDS[kind]:>9}", f"{none:7.2f}", f"{null - none:13.2f}", f"{clock:10.2f}",
                          f"{part['store16']:12.2f}", f"{rest:8.2f}", f"{total:8.2f}")))  # fmt: skip
    if nsys is None:
        print(f"nsys: left out ({fetch_nsys.why_not()}; python build_tools/fetch_nsys.py)")
        return
    for kind in KINDS:
        if nsys_runs[kind]:
            wall = quartiles([r["ns_per_event"] for r in nsys_runs[kind]])
            ours = median_run(runs[kind, 1, default_clock])["ns_per_event"]
            print(f"nsys {fetch_nsys.CURRENT}, {KINDS[kind]}, 1 thread: {wall[1]:.1f} ns/event "
                  f"[{wall[0]:.1f} - {wall[2]:.1f}], the recorder {ours:.1f} ({ours / wall[1]:.3f}x)")  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
