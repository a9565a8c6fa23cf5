"""`nvtx-tf watch` (issue 47): the CPU of one poll of one rank on a long recording, with nothing
new since the last poll and with 1 s of new steps: read in parts (watch's reads, where the
last one stopped: analysis/live_mapper.py), and read whole with the "nothing new" check
(nvtx_plugins_tf/recorder/watch/unchanged.py) and without it (every poll maps the whole
recording again, as before both), side by side in one run.

The rank (under ``nvtx-tf record``) writes RANGES ranges at once (steps of 200 ranges), then
blocks of 1 s of steps (10 steps of 200 ranges, a 0.1 s sleep each), each block when told; the
three readers (a :class:`RankSource` each) are brought up to date before each block, then after
it polled once (1 s of new steps) and again (nothing new), in turns (A B C, C B A, ...). CPU by
``time.process_time``; medians over BLOCKS blocks.

Then the mapping of one read (RankSource.read's map_input call) of one rank of 23k and of 1M
ranges (raw segments, as a live rank's), with analyze's per-name statistics (as before watch
asked for none) and without them (``name_stats=False``, watch's reads since), in turns, CPU
median of READS reads each.

python benchmarks/bench_watch_poll.py [--ranges 1000000] [--blocks 5] [--reads 15]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

RANK = """
import os, sys, time, nvtx
here, burst, blocks = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
def step(i):
    nvtx.push_range(f"step {i}", domain="bench")
    for k in range(199):
        nvtx.push_range(f"r{k % 20}", domain="bench")
        nvtx.pop_range(domain="bench")
    nvtx.pop_range(domain="bench")
for i in range(burst):
    step(i)
i = burst
for b in range(blocks):
    open(os.path.join(here, f"ready{b}"), "w").close()
    while not os.path.exists(os.path.join(here, f"go{b}")):
        time.sleep(0.005)
    for _ in range(10):
        step(i)
        i += 1
        time.sleep(0.1)
open(os.path.join(here, f"ready{blocks}"), "w").close()
"""


def _wait(path: Path, proc: subprocess.Popen) -> None:
    while not path.exists():
        if proc.poll() is not None:
            raise RuntimeError(f"the rank ended ({proc.returncode}): {proc.stderr.read()}")
        time.sleep(0.01)


def _cpu(source) -> float:
    t0 = time.process_time()
    source.read()
    return time.process_time() - t0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranges", type=int, default=1_000_000)
    parser.add_argument("--blocks", type=int, default=5)
    parser.add_argument("--reads", type=int, default=15)
    args = parser.parse_args()
    from nvtx_plugins_tf.recorder.watch import tail

    class Before(tail.RankSource):
        """Every poll maps the whole recording again (the check off: as before it)."""

        def read(self) -> bool:
            real, tail.fingerprint = tail.fingerprint, _no_check
            try:
                return super().read()
            finally:
                tail.fingerprint = real

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        (tmp / "rank.py").write_text(RANK)
        proc = subprocess.Popen(
            [sys.executable, "-m", "nvtx_plugins_tf", "record", "-o", str(tmp / "rank0"), "--export", "json", "--",
             sys.executable, str(tmp / "rank.py"), str(tmp), str(args.ranges // 200), str(args.blocks)],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        _wait(tmp / "ready0", proc)
        path = tmp / "rank0.nvtxrec"
        whole = "whole reads (the benchmark's comparison)"
        readers = {
            "whole, without the check": Before(path, live_off=whole),
            "whole, with the check": tail.RankSource(path, live_off=whole),
            "in parts (watch's reads now)": tail.RankSource(path),
        }
        cost: dict[str, dict[str, list[float]]] = {k: {"new": [], "none": []} for k in readers}
        for b in range(args.blocks):
            for source in readers.values():
                source.read()
            (tmp / f"go{b}").touch()
            _wait(tmp / f"ready{b + 1}", proc)
            order = list(readers.items()) if b % 2 == 0 else list(readers.items())[::-1]
            for name, source in order:
                cost[name]["new"].append(_cpu(source))
            for name, source in order:
                cost[name]["none"].append(_cpu(source))
        proc.wait()
        ranges = sum(r.events for r in readers["whole, with the check"].results)
        print(f"one poll of one rank of {ranges:,} ranges, CPU ms, median of {args.blocks} "
              f"(load {os.getloadavg()[0]:.1f})")  # fmt: skip
        for name, c in cost.items():
            print(f"  {name}: 1 s of new steps {1000 * statistics.median(c['new']):.2f} ms, "
                  f"nothing new {1000 * statistics.median(c['none']):.3f} ms")  # fmt: skip
        _reads(tmp, [23_000, args.ranges], args.reads)
    return 0


def _reads(tmp: Path, sizes: list[int], reads: int) -> None:
    """The CPU of one read's mapping of a rank of each size, with and without analyze's
    per-name statistics, in turns (see the module docstring)."""
    from nvtx_plugins_tf.recorder import library_path
    from nvtx_plugins_tf.recorder.analysis.mapper import StepSpec, map_input

    print(f"one read of one rank (its mapping), CPU ms, median of {reads}")
    for size in sizes:
        rec = tmp / f"raw{size}.nvtxrec"
        rec.mkdir()
        env = dict(os.environ, NVTX_INJECTION64_PATH=str(library_path()), NVTX_TF_RECORD_DIR=str(rec))
        # (the burst only, no block: not under record, its segment stays raw)
        subprocess.run([sys.executable, str(tmp / "rank.py"), str(tmp), str(size // 200), "0"], env=env, check=True)
        spec = StepSpec.parse(map_input(rec, name_stats=False)[0].step_name)  # (then kept, as watch does)
        cost: dict[bool, list[float]] = {True: [], False: []}
        for i in range(reads):
            for stats in (True, False) if i % 2 == 0 else (False, True):
                t0 = time.process_time()
                results = map_input(rec, spec, name_stats=stats)
                cost[stats].append(time.process_time() - t0)
        ranges = sum(r.events for r in results)
        full, light = (1000 * statistics.median(cost[k]) for k in (True, False))
        print(f"  {ranges:,} ranges (load {os.getloadavg()[0]:.1f}): with the statistics {full:.2f} ms, "
              f"without {light:.2f} ms ({light / full:.2f}x)")  # fmt: skip


def _no_check(segments, before=None):
    raise OSError("the check is off")


if __name__ == "__main__":
    sys.exit(main())
