"""Export, per format, against Nsight Systems: ``nvtx-tf export -t TYPE`` of our recording of a
program and ``nsys export --type TYPE`` of nsys 2023.4.4's report of the same program.

The program is ``benchmarks/recorder_overhead.c`` on one thread, EVENTS push/pop events (the
same message), run once under our recorder (``NVTX_INJECTION64_PATH``) and once under ``nsys
profile -t nvtx``. Then, per type (sqlite, json, parquetdir, arrow), the two exports alternate
(the order flipped every round, a first round dropped) and the table shows the medians with
quartiles and our time against nsys's. "all four" is ``nvtx-tf export -t
sqlite,json,parquetdir,arrow`` (one decode) against nsys's four exports one after another
(``nsys export`` takes one type per run). Each time is a whole command, from launch to exit.

    python benchmarks/bench_export_nsys.py [--events 10000000] [--rounds 3]

Needs nsys (``python build_tools/fetch_nsys.py``); without it, says so and measures ours only.
"""

from __future__ import annotations

import argparse
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

TYPES = ("sqlite", "json", "parquetdir", "arrow")
ALL = ",".join(TYPES)


def run(commands: list[list[str]], env: dict) -> float:
    """Seconds to run ``commands`` one after another (each must succeed)."""
    t0 = time.perf_counter()
    for command in commands:
        proc = subprocess.run(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if proc.returncode:
            raise RuntimeError(f"{' '.join(command[:4])}... failed: {proc.stderr.strip()[-500:]}")
    return time.perf_counter() - t0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=10_000_000, help="push/pop events (default 10M)")
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds (default 3; one more is dropped)")
    args = parser.parse_args()
    from nvtx_plugins_tf._native_libs import native_library

    with tempfile.TemporaryDirectory(prefix="bench-export-nsys-") as tmp:
        tmp = Path(tmp)
        exe = build_program("recorder_overhead.c", tmp / "recorder_overhead")
        program = [str(exe), "1", str(args.events)]
        env = {k: v for k, v in os.environ.items() if not k.startswith(("NVTX_INJECTION", "NVTX_TF_"))}
        env["PYTHONPATH"] = str(REPO)
        rec = tmp / "ours.nvtxrec"
        recorder_env = dict(env, NVTX_INJECTION64_PATH=str(native_library("recorder")), NVTX_TF_RECORD_DIR=str(rec))
        run([program], recorder_env)
        nsys = fetch_nsys.nsys_path()
        nsys_env = fetch_nsys.run_env(env=env)
        report = tmp / "theirs.nsys-rep"
        if nsys is not None:
            profile = [str(nsys), "profile", "-t", "nvtx", "-s", "none", "--cpuctxsw=none", "-f", "true"]
            run([[*profile, "-o", str(report.with_suffix("")), *program]], nsys_env)

        def ours(types: str) -> list[list[str]]:
            out = str(tmp / "out" / "ours")
            return [[sys.executable, "-m", "nvtx_plugins_tf", "export", "-t", types, "-f", "true", "-o", out, str(rec)]]

        def theirs(types: str) -> list[list[str]]:
            out = tmp / "out" / "theirs"
            return [[str(nsys), "export", "--type", t, "-f", "true", "-o", f"{out}.{t}", str(report)]
                    for t in types.split(",")]  # fmt: skip

        cases = {}
        for types in (*TYPES, ALL):
            label = "all four" if types == ALL else types
            cases[(label, "nvtx-tf")] = (ours(types), env)
            if nsys is not None:
                cases[(label, "nsys")] = (theirs(types), nsys_env)
        times: dict[tuple, list[float]] = {case: [] for case in cases}
        names = list(cases)
        for r in range(args.rounds + 1):
            order = names if r % 2 == 0 else names[::-1]
            for case in order:
                shutil.rmtree(tmp / "out", ignore_errors=True)
                (tmp / "out").mkdir()
                seconds = run(*cases[case])
                if r:
                    times[case].append(seconds)
    rows = []
    for label in (*TYPES, "all four"):
        q1, med, q3 = quartiles(times[(label, "nvtx-tf")])
        row = [label, f"{med:.2f} s ({q1:.2f}-{q3:.2f})"]
        if nsys is not None:
            n1, nmed, n3 = quartiles(times[(label, "nsys")])
            row += [f"{nmed:.2f} s ({n1:.2f}-{n3:.2f})", f"{med / nmed:.2f}x"]
        else:
            row += ["-", "-"]
        rows.append(row)
    print(f"{args.events:,} push/pop events (1 thread), export from launch to exit, medians of {args.rounds} rounds:")
    print_table(("type", "nvtx-tf export", "nsys export (2023.4.4)", "ours / nsys"), rows)
    if nsys is None:
        print(f"note: nsys left out: {fetch_nsys.why_not()} (python build_tools/fetch_nsys.py)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
