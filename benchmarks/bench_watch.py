"""`nvtx-tf watch` (issue 47, criteria 2 and 5 at this machine's size): what one read of a rank
costs as its recording grows, and a live job watched against the same job unwatched.

1. One read (``RankSource.read``: ``analyze``'s native mapper over the whole recording) of a
   rank of 200 ranges a step, at 20k, 200k and 1M ranges: CPU seconds (median of 3).
2. RANKS ranks x 10 steps/s x 200 ranges a step for SECONDS s under ``nvtx-tf record``, with
   ``watch --json`` (interval 0.5 s) and without, interleaved (A B A B): the ranks' mean step
   time, watch's CPU (its rusage: % of one core over its run), its peak RSS (VmHWM), and the latency of
   the step lines (arrival - end_ns: median, p95).
3. The terminal view's frame at 1,024 ranks (``render`` of a Board holding 200 steps each).

python benchmarks/bench_watch.py [--ranks 8] [--seconds 15]
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

PACED = """
import sys, time, nvtx
seconds = float(sys.argv[1])
end = time.monotonic() + seconds
i = 0
while time.monotonic() < end:
    with nvtx.annotate(f"step {i}", domain="bench"):
        for k in range(200):
            nvtx.push_range(f"r{k % 20}", domain="bench")
            nvtx.pop_range(domain="bench")
        time.sleep(0.095)
    i += 1
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


def _job(folder: Path, ranks: int, seconds: float, watch: bool) -> dict:
    folder.mkdir()
    script = folder.parent / "paced.py"
    script.write_text(PACED)
    watcher, lines = None, []
    if watch:
        watcher = subprocess.Popen(_cli("watch", folder, "--json", "--until-done"), stdout=subprocess.PIPE, text=True)

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

        hwm: list[int] = []
        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        threading.Thread(target=peak, daemon=True).start()
    procs = [
        subprocess.Popen(
            _cli("record", "-o", folder / f"rank{r}", "--export", "json", "--", sys.executable, script, seconds),
            stdout=subprocess.DEVNULL,
        )  # fmt: skip
        for r in range(ranks)
    ]
    for p in procs:
        p.wait()
    result: dict = {}
    if watcher is not None:
        t0 = time.monotonic()
        _, status, usage = os.wait4(watcher.pid, 0)
        watcher.returncode = os.waitstatus_to_exitcode(status)
        reader.join(timeout=10)
        result["cpu"] = usage.ru_utime + usage.ru_stime
        result["rss_mb"] = max(hwm, default=0) / 1024
        result["after_job_s"] = time.monotonic() - t0
        steps = [(t, o) for t, o in lines if o["kind"] == "step"]
        latency = sorted((t - o["end_ns"]) / 1e9 for t, o in steps)
        result["latency"] = (statistics.median(latency), latency[int(0.95 * (len(latency) - 1))])
        result["lines"] = len(steps)
    # the ranks' step times, from the recordings (analyze's pace)
    out = folder.parent / f"{folder.name}-analysis"
    subprocess.run(_cli("analyze", folder, "-o", out), check=True, capture_output=True)
    import pyarrow.parquet as pq

    durations = pq.read_table(out / "pace.parquet", columns=["Duration"]).column(0).to_pylist()
    result["step_ms"] = statistics.mean(durations) / 1e6
    result["steps"] = len(durations)
    return result


def render_cost() -> float:
    from nvtx_plugins_tf.recorder.watch.view import Board, render

    board = Board()
    for r in range(1024):
        for n in range(200):
            d = 100_000_000 + (r * 7919 + n * 104729) % 5_000_000
            board.add({"kind": "step", "rank": f"rank{r}", "step": n, "duration_ns": d,
                       "ranges": {"bench:data": d // 3, "bench:compute": d // 2}})  # fmt: skip
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        render(board, width=120)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=15.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        print("one read of a rank (analyze's native mapper over the whole recording), CPU s, median of 3")
        for ranges, cpu in read_cost(tmp):
            print(f"  {ranges:>9,} ranges: {cpu:.3f} s ({ranges / max(cpu, 1e-9) / 1e6:.2f} M ranges/s)")
        runs = {"without": [], "with": []}
        for i, watch in enumerate((False, True, False, True)):
            runs["with" if watch else "without"].append(_job(tmp / f"job{i}", args.ranks, args.seconds, watch))
        print(f"\n{args.ranks} ranks x 10 steps/s x 200 ranges a step, {args.seconds:g} s, A B A B")
        base = statistics.mean(r["step_ms"] for r in runs["without"])
        watched = statistics.mean(r["step_ms"] for r in runs["with"])
        print(f"  mean step without watch {base:.2f} ms, with {watched:.2f} ms: {watched / base:.4f}x")
        for r in runs["with"]:
            core = 100 * r["cpu"] / args.seconds
            latency = f"latency median {r['latency'][0]:.3f} s p95 {r['latency'][1]:.3f} s"
            cpu = f"CPU {r['cpu']:.2f} s (~{core:.0f} % of a core over the job), peak RSS {r['rss_mb']:.0f} MiB"
            print(f"  watch: {r['lines']} step lines (analyze: {r['steps']}), {latency}; {cpu}; "
                  f"ended {r['after_job_s']:.2f} s after the job")  # fmt: skip
    print(f"\nterminal frame, 1,024 ranks: {1000 * render_cost():.0f} ms (render to text, median of 3)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
