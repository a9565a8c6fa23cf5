"""`nvtx-tf watch` (issue 47, criterion 3): an A/A job watched for 30 minutes names no one.

RANKS ranks (4), the same code on each (benchmarks/step_rank.c: steps of about 120 ms, a
"data" 30 ms, "compute" 60 ms and "comm" 30 ms range each, sleeps), each under its own
``nvtx-tf record``, all starting their steps together once all are up, stepping for MINUTES
minutes (30), watched by ``watch FOLDER --json --until-done`` from before the first rank. The
machine's load average (1 minute) is sampled every 10 s while the ranks step: the job runs
beside whatever else the machine does, as a real job's analysis would.

Prints the step lines, the straggler lines (each), the load's range, and writes every line
``watch`` printed (with its arrival time) to OUT/lines.jsonl and the load samples to
OUT/load.tsv. ``--replay OUT/lines.jsonl`` judges the step lines of such a run again with this
tree's detector (nvtx_plugins_tf/recorder/watch/detect.py), in the order they arrived
(``--threshold T``: with the CUSUM's threshold T instead of its own, e.g. an earlier one).

python benchmarks/bench_watch_aa.py [--ranks 4] [--minutes 30] [--out DIR] [--replay LINES [--threshold T]]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
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

from _programs import build_program, start_ranks  # noqa: E402


def _cli(*args) -> list[str]:
    return [sys.executable, "-m", "nvtx_plugins_tf", *map(str, args)]


def replay(lines: Path, threshold: float | None = None) -> list[dict]:
    """The straggler lines this tree's detector (its CUSUM's threshold ``threshold`` if given)
    gives for the step lines of LINES (a run's lines.jsonl), fed in the order they arrived."""
    from nvtx_plugins_tf.recorder.watch.detect import THRESHOLD, Detector
    from nvtx_plugins_tf.recorder.watch.steps import StepRecord

    detector, out = Detector(threshold=THRESHOLD if threshold is None else threshold), []
    for line in lines.read_text().splitlines():
        obj = json.loads(line)["object"]
        if obj["kind"] == "step":
            fields = {k: obj[k] for k in ("rank", "step", "start_ns", "end_ns", "duration_ns", "ranges")}
            out.extend(vars(s) for s in detector.add(StepRecord(**fields)))
        elif obj["kind"] == "stale":
            out.extend(vars(s) for s in detector.leave(obj["rank"]))
    return out


def run(folder: Path, exe: Path, ranks: int, seconds: float, out: Path) -> dict:
    """The A/A job watched: its lines (arrival ns, object) and the load samples (s, load)."""
    folder.mkdir()
    ready, go = folder.parent / "ready", folder.parent / "go"
    ready.mkdir()
    watcher = subprocess.Popen(_cli("watch", folder, "--json", "--until-done"), stdout=subprocess.PIPE, text=True)
    lines: list[tuple[int, dict]] = []

    def read():
        with open(out / "lines.jsonl", "w") as f:
            for line in watcher.stdout:
                t, obj = time.time_ns(), json.loads(line)
                lines.append((t, obj))
                f.write(json.dumps({"arrival_ns": t, "object": obj}) + "\n")
                f.flush()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    procs = start_ranks(
        [_cli("record", "-o", folder / f"rank{r}", "--export", "arrow", "--", exe, ready / str(r), go, seconds)
         for r in range(ranks)],
        ready,
    )  # fmt: skip
    go.touch()
    t0, loads = time.monotonic(), []
    with open(out / "load.tsv", "w") as f:
        while any(p.poll() is None for p in procs):
            loads.append((time.monotonic() - t0, os.getloadavg()[0]))
            f.write(f"{loads[-1][0]:.0f}\t{loads[-1][1]:.2f}\n")
            f.flush()
            for _ in range(100):
                if all(p.poll() is not None for p in procs):
                    break
                time.sleep(0.1)
    codes = [p.wait() for p in procs]
    watch_code = watcher.wait(timeout=600)
    reader.join(timeout=30)
    return {"lines": lines, "loads": loads, "codes": codes, "watch": watch_code}


def report(lines: list[tuple[int, dict]], loads: list[tuple[float, float]]) -> None:
    steps = [o for _, o in lines if o["kind"] == "step"]
    named = [o for _, o in lines if o["kind"] == "straggler"]
    ranks = sorted({o["rank"] for o in steps})
    per_rank = [sum(o["rank"] == r for o in steps) for r in ranks]
    ms = sorted(o["duration_ns"] / 1e6 for o in steps)
    print(f"step lines: {len(steps)} ({len(ranks)} ranks, {min(per_rank)}-{max(per_rank)} steps each); step ms "
          f"median {statistics.median(ms):.1f}, p99 {ms[int(0.99 * (len(ms) - 1))]:.1f}, max {ms[-1]:.1f}")  # fmt: skip
    print(f"straggler lines: {len(named)}")
    for o in named:
        print(f"  {o['rank']} {o['range']} step {o['step']} +{o['excess_ns'] / 1e6:.1f} ms")
    if loads:
        values = [v for _, v in loads]
        print(f"load average (1 min), {len(values)} samples every 10 s: min {min(values):.1f}, median "
              f"{statistics.median(values):.1f}, max {max(values):.1f}")  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--out", type=Path, help="where lines.jsonl and load.tsv go (default: a temporary folder)")
    parser.add_argument("--replay", type=Path, help="judge a run's lines.jsonl again with this tree's detector")
    parser.add_argument("--threshold", type=float, help="with --replay: the CUSUM's threshold (default: the tree's)")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # (the temporary folder removed on the way out)
    if args.replay:
        named = replay(args.replay, args.threshold)
        print(
            f"replayed {args.replay}: {len(named)} straggler lines with this tree's detector"
            + (f", threshold {args.threshold:g}" if args.threshold is not None else "")
        )
        for s in named:
            since, excess = s["first_step"], s["excess_ns"] / 1e6
            print(f"  {s['rank']} {s['range']} step {s['step']} (since {since}) +{excess:.1f} ms")
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        out = args.out or tmp
        out.mkdir(parents=True, exist_ok=True)
        exe = build_program("step_rank.c", tmp / "step_rank")
        print(f"A/A: {args.ranks} ranks x ~8 steps/s (120 ms: data 30, compute 60, comm 30), {args.minutes:g} min, "
              f"watch --json --until-done; load before: {os.getloadavg()[0]:.1f}", flush=True)  # fmt: skip
        result = run(tmp / "job", exe, args.ranks, args.minutes * 60, out)
        print(f"ranks' exit codes {result['codes']}, watch's {result['watch']}")
        report(result["lines"], result["loads"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
