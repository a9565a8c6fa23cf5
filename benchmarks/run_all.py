"""`make bench`: every benchmark, side by side in one run, each printing its table.

python benchmarks/run_all.py [--quick]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
BENCHMARKS = [
    "bench_recorder_native.py",
    "bench_exports.py",
    "bench_export_nsys.py",
    "bench_end_to_end.py",
    "bench_analyze.py",
    "bench_watch.py",
    "bench_watch_poll.py",
    "bench_watch_aa.py",
    "bench_watch_web.py",
    "bench_watch_hosts.py",
    "bench_scaling.py",
    "bench_ops.py",
    "bench_tf_op_ranges.py",
    "bench_keras.py",
    "bench_models.py",
    "bench_eager_names.py",
]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("only", nargs="*", help="run only these scripts")
    args = parser.parse_args()
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=str(HERE.parent))
    failures = 0
    for script in args.only or BENCHMARKS:
        print(f"\n=== {script} ===", flush=True)
        t0 = time.perf_counter()
        proc = subprocess.run([sys.executable, str(HERE / script)], env=env)
        print(f"({script}: {time.perf_counter() - t0:.0f} s, exit {proc.returncode})", flush=True)
        failures += proc.returncode != 0
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
