"""``nvtx-tf watch``'s chronic-lag rule on recorded ranks (issue 47, acceptance 3 in short
form): real processes stepping under ``nvtx-tf record``, read live by ``watch --json
--until-done``, the same code on every rank.

* A rank slowed 20 % in one named range from step K is named, with that range, within 3 steps
  of K (its 1st, 2nd or 3rd slow step), and no other rank is.
* An A/A job of the same length names no one.

The steps last 600 ms ("data" 150, "compute" 300, "comm" 150: sleeps, relative, as a step's
work): the length of a training step, and long beside what a loaded machine does to a sleep (a
wake-up some ms late): the rule tells 20 % (120 ms a step) from that jitter, as it must on a
cluster's busy hosts. The ranks start their steps together (a file says go once all are up).
The 30-minute A/A run at 120 ms steps is benchmarks/bench_watch_aa.py's.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

RANK = """
import os, sys, time, nvtx
ready, go, steps, slow_from = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
open(ready, "w").close()
while not os.path.exists(go):
    time.sleep(0.01)
for i in range(steps):
    with nvtx.annotate(f"step {i}", domain="train"):
        with nvtx.annotate("data", domain="train"):
            time.sleep(0.150)
        with nvtx.annotate("compute", domain="train"):
            time.sleep(0.300 + (0.120 if 0 <= slow_from <= i else 0.0))
        with nvtx.annotate("comm", domain="train"):
            time.sleep(0.150)
"""
RANKS, STEPS, SLOW, SLOW_FROM = 4, 16, 1, 6


def _cli(*args) -> list[str]:
    return [sys.executable, "-m", "nvtx_plugins_tf", *map(str, args)]


def _job(tmp: Path, slow_rank: int) -> list[dict]:
    """RANKS ranks x STEPS steps under ``record`` (rank SLOW_RANK's "compute" 120 ms longer from
    step SLOW_FROM; -1: none), watched from before they start: watch's objects."""
    from conftest import _child_env

    script, folder, ready, go = tmp / "rank.py", tmp / "job", tmp / "ready", tmp / "go"
    script.write_text(RANK)
    folder.mkdir()
    ready.mkdir()
    env = _child_env()
    watch = subprocess.Popen(_cli("watch", folder, "--json", "--until-done", "--interval", "0.5"),
                             env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    ranks = []
    for r in range(RANKS):
        slow_from = SLOW_FROM if r == slow_rank else -1
        argv = _cli("record", "-o", folder / f"rank{r}", "--export", "json", "--", sys.executable, script,
                    ready / str(r), go, STEPS, slow_from)  # fmt: skip
        ranks.append(subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True))
    deadline = time.monotonic() + 300
    while len(list(ready.iterdir())) < RANKS:
        assert time.monotonic() < deadline and all(p.poll() is None for p in ranks), "a rank did not start"
        time.sleep(0.05)
    go.touch()
    for proc in ranks:
        assert proc.wait(timeout=300) == 0, proc.stderr.read()
    out, err = watch.communicate(timeout=300)
    assert watch.returncode == 0, err
    objects = [json.loads(line) for line in out.splitlines()]
    steps = [o for o in objects if o["kind"] == "step"]
    assert len(steps) == RANKS * STEPS  # (every step judged)
    ms = sorted(o["duration_ns"] / 1e6 for o in steps)
    print(f"step ms: min {ms[0]:.1f}, median {ms[len(ms) // 2]:.1f}, max {ms[-1]:.1f}")
    return objects


def test_a_rank_slowed_20_percent_in_one_range_is_named_with_it_within_3_steps(tmp_path):
    objects = _job(tmp_path, SLOW)
    named = [o for o in objects if o["kind"] == "straggler"]
    print(named)
    assert [(o["rank"], o["range"]) for o in named] == [(f"rank{SLOW}", "train:compute")]
    assert SLOW_FROM <= named[0]["step"] <= SLOW_FROM + 2  # its 1st, 2nd or 3rd slow step
    assert 60e6 < named[0]["excess_ns"] < 240e6  # (120 ms a step, give or take a loaded machine)


def test_an_a_a_job_of_the_same_length_names_no_one(tmp_path):
    objects = _job(tmp_path, -1)
    assert [o for o in objects if o["kind"] == "straggler"] == []
