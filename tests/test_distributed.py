"""tf.distribute: ranges from every replica (category = replica id + 1) and every worker."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from nvtx_plugins_tf.recorder import reader

HERE = Path(__file__).resolve().parent
STEPS = 3


def _record(tmp_path: Path, script: str, *args: str, env=None) -> Path:
    prefix = tmp_path / "run"
    cmd = [sys.executable, "-m", "nvtx_plugins_tf", "record", "-o", str(prefix), "--",
           sys.executable, str(HERE / "distributed" / script), *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return prefix


def test_mirrored_custom_loop_ranges_per_replica(tmp_path):
    prefix = _record(tmp_path, "mirrored_custom_loop.py", str(STEPS))
    ranges = reader.load(str(prefix) + ".nvtxrec").ranges
    forward = [r for r in ranges if r.message == "replica step" and r.domain == "Forward"]
    backward = [r for r in ranges if r.message == "replica step" and r.domain == "Gradient"]
    by_replica = {}
    for r in forward:
        by_replica[r.category] = by_replica.get(r.category, 0) + 1
    assert by_replica == {1: STEPS, 2: STEPS}
    assert len(backward) == 2 * STEPS
    assert all(r.end_ns is not None and r.end_ns > 0 for r in forward + backward)
