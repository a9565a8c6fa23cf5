"""From launch to a file on disk: 1M push/pop ranges recorded and exported, ours against
Nsight Systems 2023.4.4 on the same program, in one run.

The program is benchmarks/recorder_overhead.c (one thread, RANGES push/pop pairs). Timed
from launch to exit of each command line, in interleaved rounds (the order rotated every
round, the first round dropped), medians and quartiles:

* ``nvtx-tf record --export sqlite -o P -- PROGRAM``: the recording and its SQLite file;
* ``nvtx-tf record -o P -- PROGRAM``: the default exports (what a user gets);
* ``nsys profile -t nvtx -s none --cpuctxsw=none -o P PROGRAM`` then
  ``nsys export --type sqlite P.nsys-rep`` (nsys fetched by build_tools/fetch_nsys.py; left
  out with a note when it cannot run here).

    python benchmarks/bench_end_to_end.py [--ranges 1000000] [--rounds 3]
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
sys.path.insert(0, str(REPO / "build_tools"))

import fetch_nsys  # noqa: E402
from _programs import build_program, quartiles  # noqa: E402
from _table import print_table  # noqa: E402


def timed(commands: list[list[str]], env: dict) -> float:
    t0 = time.perf_counter()
    for command in commands:
        proc = subprocess.run(command, env=env, capture_output=True, text=True)
        if proc.returncode:
            raise RuntimeError(f"{' '.join(command[:3])}... failed: {proc.stderr.strip()[-500:]}")
    return time.perf_counter() - t0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranges", type=int, default=1_000_000, help="push/pop ranges (default 1M)")
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds (default 3; one more is dropped)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-e2e-") as tmp:
        tmp = Path(tmp)
        exe = build_program("recorder_overhead.c", tmp / "recorder_overhead")
        program = [str(exe), "1", str(2 * args.ranges)]
        env = {k: v for k, v in os.environ.items() if not k.startswith(("NVTX_INJECTION", "NVTX_TF_"))}
        env["PYTHONPATH"] = str(REPO)
        nvtx_tf = [sys.executable, "-m", "nvtx_plugins_tf", "record"]
        cases = {
            "nvtx-tf record --export sqlite": [[*nvtx_tf, "--export", "sqlite", "-o", str(tmp / "a"), "--", *program]],
            "nvtx-tf record (default exports: json,sqlite)": [[*nvtx_tf, "-o", str(tmp / "b"), "--", *program]],
        }
        nsys = fetch_nsys.nsys_path()
        if nsys is not None:
            rep = tmp / "n"
            cases["nsys profile + nsys export --type sqlite"] = [
                [str(nsys), "profile", "-t", "nvtx", "-s", "none", "--cpuctxsw=none", "-f", "true", "-o", str(rep),
                 *program],
                [str(nsys), "export", "--type", "sqlite", "-f", "true", "-o", str(tmp / "n.sqlite"), f"{rep}.nsys-rep"],
            ]  # fmt: skip
        nsys_env = fetch_nsys.run_env(env=env)
        times: dict[str, list[float]] = {name: [] for name in cases}
        names = list(cases)
        for r in range(args.rounds + 1):
            for name in names[r % len(names) :] + names[: r % len(names)]:
                for leftover in tmp.glob("[abn]*"):
                    shutil.rmtree(leftover) if leftover.is_dir() else leftover.unlink()
                seconds = timed(cases[name], nsys_env if name.startswith("nsys") else env)
                if r:
                    times[name].append(seconds)
    reference = statistics.median(times[names[-1]]) if nsys is not None else None
    rows = []
    for name, values in times.items():
        q1, med, q3 = quartiles(values)
        ratio = f"{med / reference:.2f}x" if reference else "-"
        rows.append((name, f"{med:.2f} s ({q1:.2f}-{q3:.2f})", ratio))
    print(f"{args.ranges:,} push/pop ranges (1 thread), from launch to exit, medians of {args.rounds} rounds:")
    print_table(("command", "seconds (quartiles)", "against nsys"), rows)
    if nsys is None:
        print(f"note: nsys left out: {fetch_nsys.why_not()} (python build_tools/fetch_nsys.py)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
