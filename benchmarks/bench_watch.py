"""`nvtx-tf watch` (issue 47, criteria 2 and 5 at this machine's size): what one read of a rank
costs as its recording grows, and a live job watched against the same job unwatched.

1. One read (``RankSource.read``: ``analyze``'s native mapper over the whole recording) of a
   rank of 200 ranges a step, at 20k, 200k and 1M ranges: CPU seconds (median of 3).
2. Criterion 2: RANKS ranks (64) x 10 steps/s x 200 ranges a step for SECONDS s, each rank a
   sleep-based step loop in C (benchmarks/paced_rank.c: 64 Python interpreters would not fit 2
   cores, 64 C processes that sleep do) under its own ``nvtx-tf record``, all starting their
   steps together once all are up; PAIRS pairs of runs without and with ``watch --json
   --until-done`` (interval 0.5 s), interleaved (A B A B ...): the ranks' mean step time
   (``analyze``'s pace) with / without, per pair, and its median and quartiles over the pairs;
   watch's CPU while the ranks step (/proc, % of one core), its peak RSS (VmHWM), and the
   latency of the step lines (arrival - end_ns: median, p95). ``--whole-too``: a third run in
   each pair, watch reading every rank whole at every read (``NVTX_TF_WATCH_LIVE=0``, as
   before the reads in parts), the same figures.
3. Criterion 5: the terminal view's frame at 1,024 ranks (``render`` of a Board holding 200
   steps each into a string: rich's Console on a StringIO), median and p95 of 21 frames.

python benchmarks/bench_watch.py [--ranks 64] [--seconds 15] [--pairs 3] [--whole-too] [--frame-only]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from _programs import build_program, quartiles, start_ranks  # noqa: E402

BURST = """
import sys, nvtx
steps = int(sys.argv[1])
for i in range(steps):
    nvtx.push_range(f"step {i}")
    for k in range(200):
        nvtx.push_range("work")
        nvtx.pop_range()
    nvtx.pop_range()
"""


def _cli(*args) -> list[str]:
    return [sys.executable, "-m", "nvtx_plugins_tf", *map(str, args)]


def read_cost(tmp: Path) -> list[tuple[int, float]]:
    from nvtx_plugins_tf.recorder.watch.tail import RankSource

    out = []
    for steps in (100, 1000, 5000):
        prefix = tmp / f"burst{steps}"
        subprocess.run(_cli("record", "-o", prefix, "--export", "json", "--", sys.executable, "-c", BURST, steps),
                       check=True, capture_output=True)  # fmt: skip
        times = []
        for _ in range(3):
            source = RankSource(Path(f"{prefix}.nvtxrec"))
            t0 = time.process_time()
            source.read()
            times.append(time.process_time() - t0)
        ranges = sum(r.events for r in source.results)
        out.append((ranges, statistics.median(times)))
    return out


def _cpu_s(pid: int) -> float:
    """The CPU seconds (user + system) of process ``pid`` so far, from /proc (0 once it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _job(folder: Path, exe: Path, ranks: int, seconds: float, watch: bool, whole: bool = False) -> dict:
    """One run of the job: RANKS ranks (benchmarks/paced_rank.c, each under its own ``nvtx-tf
    record``, a recording each in FOLDER) that start their steps together once all are up,
    with ``watch FOLDER --json --until-done`` running from before the first rank or not
    (``whole``: its ranks read whole at every read, ``NVTX_TF_WATCH_LIVE=0``, as before the
    reads in parts)."""
    folder.mkdir()
    ready, go = folder.parent / f"{folder.name}-ready", folder.parent / f"{folder.name}-go"
    ready.mkdir()
    watcher, lines, hwm = None, [], []
    if watch:
        env = dict(os.environ, NVTX_TF_WATCH_LIVE="0") if whole else None
        watcher = subprocess.Popen(
            _cli("watch", folder, "--json", "--until-done"), stdout=subprocess.PIPE, text=True, env=env
        )

        def read():
            for line in watcher.stdout:
                lines.append((time.time_ns(), json.loads(line)))

        def peak():  # (watch's own VmHWM: wait4's ru_maxrss keeps the high mark of this process, before exec)
            while True:
                try:
                    with open(f"/proc/{watcher.pid}/status") as f:
                        found = [int(line.split()[1]) for line in f if line.startswith("VmHWM:")]
                except OSError:
                    return
                if not found:  # (a zombie: it ended)
                    return
                hwm.extend(found)
                time.sleep(0.1)

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        threading.Thread(target=peak, daemon=True).start()
    procs = start_ranks(
        [_cli("record", "-o", folder / f"rank{r}", "--export", "json", "--", exe, ready / str(r), go, seconds)
         for r in range(ranks)],
        ready,
    )  # fmt: skip
    cpu0 = _cpu_s(watcher.pid) if watcher else 0.0
    go.touch()
    t_go, go_ns = time.monotonic(), time.time_ns()
    time.sleep(seconds)
    cpu1 = _cpu_s(watcher.pid) if watcher else 0.0  # (the steps' time: before the ranks' exports)
    t_steps = time.monotonic() - t_go
    for p in procs:
        p.wait()
    result: dict = {}
    if watcher is not None:
        t0 = time.monotonic()
        _, status, usage = os.wait4(watcher.pid, 0)
        watcher.returncode = os.waitstatus_to_exitcode(status)
        reader.join(timeout=10)
        result["cpu"] = usage.ru_utime + usage.ru_stime
        result["cpu_steps"] = (cpu1 - cpu0) / t_steps
        result["rss_mb"] = max(hwm, default=0) / 1024
        result["after_job_s"] = time.monotonic() - t0
        steps = [(t, o) for t, o in lines if o["kind"] == "step"]
        latency = sorted((t - o["end_ns"]) / 1e9 for t, o in steps)
        result["latency"] = (statistics.median(latency), latency[int(0.95 * (len(latency) - 1))])
        result["lines"] = len(steps)
        result["objects"], result["go_ns"] = lines, go_ns
        result["stragglers"] = sum(o["kind"] == "straggler" for _, o in lines)
    # the ranks' step times, from the recordings (analyze's pace)
    out = folder.parent / f"{folder.name}-analysis"
    subprocess.run(_cli("analyze", folder, "-o", out), check=True, capture_output=True)
    import pyarrow.parquet as pq

    durations = pq.read_table(out / "pace.parquet", columns=["Duration"]).column(0).to_pylist()
    result["step_ms"] = statistics.mean(durations) / 1e6
    result["steps"] = len(durations)
    return result


def render_cost(frames: int = 21) -> tuple[float, float]:
    """The terminal view's frame at 1,024 ranks of 200 steps each: ``render`` into a string
    (rich's Console writing to a StringIO), ``frames`` times: (median, p95) seconds."""
    from nvtx_plugins_tf.recorder.watch.view import Board, render

    board = Board()
    for r in range(1024):
        for n in range(200):
            d = 100_000_000 + (r * 7919 + n * 104729) % 5_000_000
            board.add({"kind": "step", "rank": f"rank{r}", "step": n, "duration_ns": d,
                       "ranges": {"bench:data": d // 3, "bench:compute": d // 2}})  # fmt: skip
    times = []
    for _ in range(frames):
        t0 = time.perf_counter()
        render(board, width=120)
        times.append(time.perf_counter() - t0)
    times.sort()
    return statistics.median(times), times[int(0.95 * (len(times) - 1))]


def _watched(b: dict, seconds: float) -> str:
    """One watched run's figures as a line: its step lines, their latency (all; and those of the
    steps that ended 3 s or more before the ranks stopped, apart from the end of the job, when
    64 ``record`` processes write their exports at once), watch's CPU and peak RSS."""
    end = b["go_ns"] + int((seconds - 3) * 1e9)
    steady = sorted((t - o["end_ns"]) / 1e9 for t, o in b["objects"] if o["kind"] == "step" and o["end_ns"] < end)
    p95 = steady[int(0.95 * (len(steady) - 1))] if steady else float("nan")
    return (
        f"watch: {b['lines']} step lines (analyze: {b['steps']}), {b['stragglers']} straggler lines; latency median "
        f"{b['latency'][0]:.3f} s, p95 {b['latency'][1]:.3f} s (steps ended 3 s or more before the ranks stopped: "
        f"p95 {p95:.3f} s); CPU {100 * b['cpu_steps']:.1f} % of a core while the ranks stepped ({b['cpu']:.2f} s "
        f"in all); peak RSS {b['rss_mb']:.0f} MiB; ended {b['after_job_s']:.2f} s after the job; "
        f"load {os.getloadavg()[0]:.1f}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=64)
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--pairs", type=int, default=3, help="A/B pairs (without, with watch), interleaved")
    parser.add_argument("--frame-only", action="store_true", help="only the terminal frame at 1,024 ranks (3.)")
    parser.add_argument(
        "--whole-too",
        action="store_true",
        help="a third run in each pair: watch reading every rank whole at every read (NVTX_TF_WATCH_LIVE=0)",
    )
    args = parser.parse_args()
    if args.frame_only:
        median, p95 = render_cost()
        print(f"terminal frame, 1,024 ranks: median {1000 * median:.0f} ms, p95 {1000 * p95:.0f} ms (21 frames)")
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        print("one read of a rank (analyze's native mapper over the whole recording), CPU s, median of 3")
        for ranges, cpu in read_cost(tmp):
            print(f"  {ranges:>9,} ranges: {cpu:.3f} s ({ranges / max(cpu, 1e-9) / 1e6:.2f} M ranges/s)")
        exe = build_program("paced_rank.c", tmp / "paced_rank")
        print(f"\n{args.ranks} ranks x 10 steps/s x 200 ranges a step, {args.seconds:g} s, {args.pairs} pairs A B "
              f"(without, with watch) interleaved; load before: {os.getloadavg()[0]:.1f}")  # fmt: skip
        ratios = []
        for i in range(args.pairs):
            a = _job(tmp / f"job{i}a", exe, args.ranks, args.seconds, False)
            b = _job(tmp / f"job{i}b", exe, args.ranks, args.seconds, True)
            ratios.append(b["step_ms"] / a["step_ms"])
            print(f"  pair {i}: step {a['step_ms']:.2f} ms without, {b['step_ms']:.2f} ms with: {ratios[-1]:.4f}x")
            print("    " + _watched(b, args.seconds))
            if args.whole_too:
                c = _job(tmp / f"job{i}c", exe, args.ranks, args.seconds, True, whole=True)
                print(f"    whole reads (NVTX_TF_WATCH_LIVE=0): step {c['step_ms']:.2f} ms, "
                      f"{c['step_ms'] / a['step_ms']:.4f}x; " + _watched(c, args.seconds))  # fmt: skip
        q1, q2, q3 = quartiles(ratios)
        print(f"  step time with / without watch: median {q2:.4f}x (quartiles {q1:.4f}-{q3:.4f}), {len(ratios)} pairs")
    median, p95 = render_cost()
    print(f"\nterminal frame, 1,024 ranks: median {1000 * median:.0f} ms, p95 {1000 * p95:.0f} ms (21 frames)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
