"""Disk per hour of a recorded training job, with and without a capture window.

Runs tests/capture/keras_profile_script.py (a small Keras fit with NVTXCallback, optionally
every layer annotated with ``record --keras-layers``) under ``record``: whole, for N and 3N
steps, and with ``--capture-range profile@Keras`` (the callback's ``profile_batches=(10, 20)``
window) for 3N steps. Prints events per step, the disk one more step takes (allocated bytes,
3N minus N runs: the fixed costs -- definitions, the last prefault window of each thread --
cancel out) and per event, and one hour of a 100-step/s job: the whole recording grows with
the job, the windowed one does not (11 steps plus the definitions).

    python benchmarks/bench_capture_range.py [--steps N] [--keras-layers]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "tests" / "capture" / "keras_profile_script.py"


def disk(folder: Path) -> tuple[int, int]:
    """(allocated, apparent) bytes of the segment files."""
    allocated = apparent = 0
    for path in folder.glob("*.nvtxseg"):
        st = path.stat()
        allocated += st.st_blocks * 512
        apparent += st.st_size
    return allocated, apparent


def record(prefix: Path, steps: int, flags: list[str]) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NVTX_INJECTION", "NVTX_TF_"))}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    cmd = [sys.executable, "-m", "nvtx_plugins_tf", "record", "-o", str(prefix), *flags, "--"]
    cmd += [sys.executable, str(SCRIPT), "10,20", "1", str(steps)]
    subprocess.run(cmd, env=env, check=True, capture_output=True)
    from nvtx_plugins_tf.recorder.recording import load

    rec = load(prefix.with_name(prefix.name + ".nvtxrec"))
    events = sum(1 if r.kind == "mark" else 2 for r in rec.events)
    allocated, apparent = disk(prefix.with_name(prefix.name + ".nvtxrec"))
    return {"events": events, "allocated": allocated, "apparent": apparent}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2000, help="training steps of the whole run (default 2000)")
    parser.add_argument("--keras-layers", action="store_true", help="also annotate every layer (record --keras-layers)")
    args = parser.parse_args()
    extra = ["--keras-layers"] if args.keras_layers else []
    with tempfile.TemporaryDirectory(prefix="nvtx_bench_capture_") as tmp:
        short = record(Path(tmp) / "short", args.steps, extra)
        whole = record(Path(tmp) / "whole", 3 * args.steps, extra)
        window = record(Path(tmp) / "window", 3 * args.steps, [*extra, "--capture-range", "profile@Keras"])
    # allocated: the files are sparse past what is written
    step_bytes = (whole["allocated"] - short["allocated"]) / (2 * args.steps)
    per_step = (whole["events"] - short["events"]) / (2 * args.steps)
    per_event = step_bytes / per_step
    per_hour = step_bytes * 100 * 3600 / 2**20
    print(f"{args.steps} and {3 * args.steps} steps{' with --keras-layers' if extra else ''}:")
    print(f"  whole:  {whole['events']} events, {whole['apparent']} B ({whole['allocated']} B allocated)")
    print(f"  window: {window['events']} events, {window['apparent']} B ({window['allocated']} B allocated)")
    print(f"  {per_step:.2f} events/step, {step_bytes:.1f} B/step allocated ({per_event:.1f} B/event)")
    print(f"  100 steps/s for 1 h: whole {per_hour:.1f} MiB, window {window['allocated'] / 2**10:.0f} KiB (any length)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
