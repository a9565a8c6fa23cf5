"""``nvtx-tf watch`` on real jobs (issue 47, acceptance 1 and 4): ranks are sleep-based step
loops under ``nvtx-tf record``, watched while they run.

1. 4 ranks x 30 steps of 120 ms, rank 2's "load" 60 ms longer: at least half the step lines
   arrive before the job ends; a straggler line names rank2 and its "load" range by its 6th
   step, and no other rank; after the job every rank-step's ``duration_ns`` is ``analyze``'s
   pace Duration to the ns (and ``start_ns`` its StartEpochNs); ``--until-done`` ends after the
   job (within the issue's 5 s of it). The latency figures (p95 of arrival - end_ns) are
   printed, not asserted: they are benchmarks/bench_watch.py's.
4. A rank SIGKILLed mid-run is marked stale, and ``--until-done`` still ends.

Plus the terminal view of the same job (as text: not a terminal), a folder whose recordings
start after ``watch`` did, and ``record --watch``.
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

RANK = """
import os, sys, time, nvtx
rank, steps, slow = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
if len(sys.argv) > 4:
    open(sys.argv[4], "w").write(str(os.getpid()))
for i in range(steps):
    with nvtx.annotate(f"step {i}", domain="train"):
        with nvtx.annotate("load", domain="train"):
            time.sleep(0.030 + (0.060 if rank == slow else 0.0))
        with nvtx.annotate("compute", domain="train"):
            time.sleep(0.090)
"""
RANKS, STEPS, SLOW = 4, 30, 2


def _cli(*args) -> list[str]:
    return [sys.executable, "-m", "nvtx_plugins_tf", *map(str, args)]


class Lines(threading.Thread):
    """A process's stdout, line by line, each with its arrival time (time.time_ns)."""

    def __init__(self, proc: subprocess.Popen):
        super().__init__(daemon=True)
        self.proc, self.lines = proc, []
        self.start()

    def run(self):
        for line in self.proc.stdout:
            self.lines.append((time.time_ns(), line))


def _start_ranks(folder: Path, env: dict, script: Path, steps=STEPS, slow=SLOW, pid_files=None):
    procs = []
    for rank in range(RANKS):
        extra = [pid_files[rank]] if pid_files else []
        argv = _cli("record", "-o", folder / f"rank{rank}", "--export", "json", "--", sys.executable, script)
        argv += [str(rank), str(steps), str(slow), *map(str, extra)]
        procs.append(subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE))
    return procs


@pytest.fixture(scope="module")
def watched(tmp_path_factory):
    """The job of acceptance 1 watched with --json --until-done from before its ranks start:
    (folder, [(arrival ns, object)], watch's exit code, its end, the last rank's end)."""
    from conftest import _child_env

    tmp = tmp_path_factory.mktemp("watch")
    script = tmp / "rank.py"
    script.write_text(RANK)
    folder = tmp / "job"
    folder.mkdir()
    env = _child_env()
    watch = subprocess.Popen(
        _cli("watch", folder, "--json", "--until-done", "--interval", "0.5"),
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    reader = Lines(watch)
    time.sleep(1.0)  # (watch polls the empty folder first: the ranks join as they start)
    ranks = _start_ranks(folder, env, script)
    for proc in ranks:
        assert proc.wait(timeout=300) == 0, proc.stderr.read()
    job_end = time.time_ns()
    code = watch.wait(timeout=120)
    watch_end = time.time_ns()
    reader.join(timeout=10)
    assert code == 0, watch.stderr.read()
    objects = [(t, json.loads(line)) for t, line in reader.lines]
    return folder, objects, watch_end, job_end


def test_steps_arrive_while_the_job_runs(watched):
    _, objects, _, _ = watched
    steps = [(t, o) for t, o in objects if o["kind"] == "step"]
    assert len(steps) == RANKS * STEPS
    assert {(o["rank"], o["step"]) for _, o in steps} == {(f"rank{r}", n) for r in range(RANKS) for n in range(STEPS)}
    job_end = max(o["end_ns"] for _, o in steps)  # (the last step of the last rank: the job's end)
    early = sum(t < job_end for t, _ in steps)
    latency = sorted((t - o["end_ns"]) / 1e9 for t, o in steps)
    p95 = latency[int(0.95 * (len(latency) - 1))]
    print(f"arrived before the job ended: {early}/{len(steps)}; latency median {statistics.median(latency):.3f} s, "
          f"p95 {p95:.3f} s")  # fmt: skip
    assert early >= len(steps) / 2
    for rank in range(RANKS):  # each rank's steps in order, each once
        mine = [o["step"] for _, o in steps if o["rank"] == f"rank{rank}"]
        assert mine == list(range(STEPS))


def test_the_straggler_is_rank2_and_its_load_range_by_its_6th_step(watched):
    _, objects, _, _ = watched
    named = [o for _, o in objects if o["kind"] == "straggler"]
    assert named, "no straggler line"
    assert {(o["rank"], o["range"]) for o in named} == {("rank2", "train:load")}
    assert named[0]["step"] <= 5
    assert 40e6 < named[0]["excess_ns"] < 120e6  # (60 ms a step, give or take a loaded machine)
    assert not [o for _, o in objects if o["kind"] == "stale"]


def test_every_step_is_analyzes_pace_to_the_ns(watched, tmp_path):
    folder, objects, _, _ = watched
    out = tmp_path / "analysis"
    proc = subprocess.run(_cli("analyze", folder, "-o", out), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    pace = {(p["RankName"], p["Step"]): p for p in pq.read_table(out / "pace.parquet").to_pylist()}
    steps = {(o["rank"], o["step"]): o for _, o in objects if o["kind"] == "step"}
    assert steps.keys() == pace.keys()
    for key, o in steps.items():
        assert o["duration_ns"] == pace[key]["Duration"], key
        assert o["end_ns"] - o["start_ns"] == o["duration_ns"]
        # one clock across ranks, as analyze's (ranks met in another order than analyze's may
        # be put on a clock read tens of ns apart: merge's rule, within 1 ms)
        assert abs(o["start_ns"] - pace[key]["StartEpochNs"]) < 1_000_000, key
    stragglers = pq.read_table(out / "stragglers.parquet").to_pylist()
    for row in stragglers:  # the ranges' work: the stragglers table's TopRanges, as watch names them
        top = row["TopRanges"].split(" +")[0]
        assert top in steps[(row["RankName"], row["Step"])]["ranges"]


def test_until_done_ends_after_the_job(watched):
    _, _, watch_end, job_end = watched
    print(f"watch ended {(watch_end - job_end) / 1e9:+.2f} s after the last record")
    assert watch_end - job_end < 5e9


def test_a_killed_rank_is_stale(tmp_path, child_env):
    script = tmp_path / "rank.py"
    script.write_text(RANK)
    folder = tmp_path / "job"
    folder.mkdir()
    env = child_env()
    pids = [tmp_path / f"pid{r}" for r in range(RANKS)]
    ranks = _start_ranks(folder, env, script, steps=25, slow=-1, pid_files=pids)
    watch = subprocess.Popen(
        _cli("watch", folder, "--json", "--until-done", "--interval", "0.3"),
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    reader = Lines(watch)
    deadline = time.monotonic() + 120
    while not (pids[1].exists() and pids[1].read_text()) and time.monotonic() < deadline:
        time.sleep(0.05)
    while not any('"rank1", "step": 4' in line for _, line in reader.lines) and time.monotonic() < deadline:
        time.sleep(0.05)
    os.kill(int(pids[1].read_text()), signal.SIGKILL)
    killed = time.time_ns()
    codes = [p.wait(timeout=300) for p in ranks]
    assert codes[1] == 128 + signal.SIGKILL and codes[0] == codes[2] == codes[3] == 0, codes
    assert watch.wait(timeout=120) == 0, watch.stderr.read()
    reader.join(timeout=10)
    objects = [(t, json.loads(line)) for t, line in reader.lines]
    stale = [(t, o) for t, o in objects if o["kind"] == "stale"]
    assert [o["rank"] for _, o in stale] == ["rank1"]
    print(f"stale {(stale[0][0] - killed) / 1e9:.2f} s after the SIGKILL (interval 0.3 s)")
    steps = [o for _, o in objects if o["kind"] == "step"]
    assert sum(o["rank"] == "rank0" for o in steps) == 25 and 5 <= sum(o["rank"] == "rank1" for o in steps) < 25
    assert not [o for _, o in objects if o["kind"] == "straggler"]


def test_the_terminal_view_of_a_finished_job(watched):
    pytest.importorskip("rich", reason="the 'watch' extra")
    folder, _, _, _ = watched
    env = {**os.environ, "COLUMNS": "160"}  # (not a terminal: rich's 80 columns would squeeze the table)
    proc = subprocess.run(_cli("watch", folder, "--until-done"), env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    frame = proc.stdout.split("nvtx-tf watch (")[-1]  # (not a terminal: each frame printed; the last)
    for rank in range(RANKS):
        row = next(line for line in frame.splitlines() if f" rank{rank} " in line)
        assert " 29 " in row and "done" in row and ("train:compute" in row or "train:load" in row)
    assert "straggler: rank2 train:load +" in frame


def test_record_watch_shows_the_steps_of_its_command(tmp_path, child_env):
    pytest.importorskip("rich", reason="the 'watch' extra")
    script = tmp_path / "rank.py"
    script.write_text(RANK)
    argv = _cli("record", "--watch", "-o", tmp_path / "rank0", "--export", "json", "--", sys.executable, script)
    argv += ["0", "6", "-1"]
    proc = subprocess.run(argv, env=child_env(COLUMNS=160), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    frames = proc.stdout.split("nvtx-tf watch (")
    assert len(frames) >= 2, proc.stdout  # (not a terminal: a frame per update)
    row = next(line for line in frames[-1].splitlines() if " rank0 " in line)
    assert " 5 " in row and "done" in row, row
    assert "NVTX range summary" in proc.stdout  # (then record goes on as without --watch)


def test_a_rank_in_a_time_namespace_is_placed_on_the_wall_clock(tmp_path):
    """rank1 runs in its own time namespace (CLOCK_MONOTONIC 3000 s ahead), rank0 on this
    host, at once: watched live, their steps land side by side on the wall clock, each at
    analyze's StartEpochNs to the ns (each its own clock, by its realtime anchor)."""
    from conftest import _child_env, needs_time_namespaces

    needs_time_namespaces()
    script = tmp_path / "rank.py"
    script.write_text(RANK)
    folder = tmp_path / "job"
    folder.mkdir()
    watch = subprocess.Popen(_cli("watch", folder, "--json", "--until-done", "--interval", "0.3"),
                             env=_child_env(), stdout=subprocess.PIPE, text=True)  # fmt: skip
    reader = Lines(watch)
    procs = []
    for rank in range(2):
        ns = ["unshare", "--time", "--fork", "--monotonic=3000"] if rank == 1 else []
        env = _child_env(folder / f"rank{rank}.nvtxrec")
        procs.append(subprocess.Popen([*ns, sys.executable, str(script), str(rank), "10", "-1"], env=env))
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    assert watch.wait(timeout=120) == 0
    reader.join(timeout=10)
    steps = {(o["rank"], o["step"]): o for o in (json.loads(line) for _, line in reader.lines) if o["kind"] == "step"}
    assert len(steps) == 20
    for n in range(10):  # (started together: a step apart at most on a loaded machine)
        assert abs(steps[("rank1", n)]["start_ns"] - steps[("rank0", n)]["start_ns"]) < 2e9
    out = tmp_path / "analysis"
    proc = subprocess.run(_cli("analyze", folder, "-o", out), env=_child_env(), capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    for p in pq.read_table(out / "pace.parquet").to_pylist():
        o = steps[(p["RankName"], p["Step"])]
        assert (o["start_ns"], o["duration_ns"]) == (p["StartEpochNs"], p["Duration"])


def test_a_rank_that_stops_writing_is_stale_and_live_again_when_it_writes(tmp_path):
    """--stale-after: a rank whose writer runs but writes no range for that long is stale;
    once it writes again it may be stale again later (said again)."""
    from conftest import _child_env

    from nvtx_plugins_tf.recorder.watch import Watch

    program = (
        "import time, nvtx\n"
        "for pause in (0.0, 2.5, 0.0, 2.5, 0.0):\n"
        "    with nvtx.annotate('step'):\n"
        "        time.sleep(0.05)\n"
        "    time.sleep(pause)\n"
    )
    rec = tmp_path / "rank0.nvtxrec"
    proc = subprocess.Popen([sys.executable, "-c", program], env=_child_env(rec))
    deadline = time.monotonic() + 60
    while not rec.is_dir() and time.monotonic() < deadline:  # (made by the recorder as it starts)
        time.sleep(0.02)
    watch = Watch([str(rec)], stale_after=1.0)
    seen = []
    while True:
        seen += [o["kind"] for o in watch.poll() if o["kind"] != "straggler"]
        if watch.done:
            break
        time.sleep(0.2)
    assert proc.wait(timeout=60) == 0
    assert seen.count("step") == 5
    # (each pause: one stale, after the steps before it)
    assert seen.count("stale") == 2 and seen.index("stale") > seen.index("step"), seen
