"""``nvtx-tf watch --scheduler ADDR`` (issue 47, acceptance 4: two "hosts" over loopback):
a real Dask scheduler and two real Dask workers (``dask scheduler``, ``dask worker``
processes), each worker in a folder of its own, its "host" (a relative REC is a path from each
worker's working directory: the same REC ``job`` names each host's own ranks, as the same
path on two machines does). Ranks are sleep-based step loops under ``nvtx-tf record``, written
live while watched.

* The step lines are the local ``watch --json``'s (durations and ranges to the ns, start
  within 1 ms: the ranks met in another order may be put on a clock read tens of ns apart,
  merge's rule) and ``analyze``'s pace Durations; rank2's "load" named; ``--until-done`` ends.
* A rank SIGKILLed on one host is stale; ``--until-done`` still ends.
* SIGINT, SIGTERM: 130, 143, one line, and the cluster is left clean (no task, no actor on a
  worker).
* A folder whose name is no UTF-8 (relative: each host's), ranges named with control
  characters: the lines the local watch prints.
* A worker that joins while the ranks run: its host's ranks are read, every step; a worker
  SIGKILLed: its recordings left out, one warning each, ``--until-done`` ends, exit 6.
* A REC no worker sees: exit 7 (as a missing REC of a local watch), one line naming it.
* ``--web`` through the cluster: the page (real headless Chromium) shows both hosts' ranks and
  names rank2's load; SIGINT: 130, its readers released.

The latency and bytes per rank-step are benchmarks/bench_watch.py's (``--scheduler``).
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

pytest.importorskip("distributed", reason="the 'dask' extra")

from test_watch import RANK, Lines  # noqa: E402

from nvtx_plugins_tf.cli._common import EXIT_INPUT_NOT_FOUND  # noqa: E402

STEPS = 30
#: the ranks of each "host" (rank 2, on hostB, is the slow one)
HOSTS = {"hostA": (0, 1), "hostB": (2, 3)}


def _cli(*args) -> list[str]:
    return [sys.executable, "-m", "nvtx_plugins_tf", *map(str, args)]


def _dask(*args) -> list[str]:
    return [str(Path(sys.executable).parent / "dask"), *args]


def _scheduler(info: Path, env: dict) -> subprocess.Popen:
    argv = _dask("scheduler", "--scheduler-file", str(info), "--port", "0", "--no-dashboard", "--host", "127.0.0.1")
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while not info.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    return proc


def _worker(info: Path, host: str, folder: Path, env: dict) -> subprocess.Popen:
    """A Dask worker named ``host`` whose working directory is ``folder`` (its "host")."""
    argv = _dask("worker", "--scheduler-file", str(info), "--nworkers", "1", "--nthreads", "2", "--name", host,
                 "--no-dashboard", "--no-nanny", "--host", "127.0.0.1")  # fmt: skip
    return subprocess.Popen(argv, cwd=folder, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _stop(procs: list[subprocess.Popen]) -> None:
    for proc in reversed(procs):
        proc.terminate()
    for proc in procs:
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """(scheduler address, {host: its folder}): a scheduler and a worker per host folder."""
    from conftest import _child_env

    base = tmp_path_factory.mktemp("hosts")
    env = _child_env(DASK_LOGGING__DISTRIBUTED="critical")
    info = base / "scheduler.json"
    procs = [_scheduler(info, env)]
    folders = {}
    try:
        for host in HOSTS:
            folders[host] = base / host
            folders[host].mkdir()
            procs.append(_worker(info, host, folders[host], env))
        address = json.loads(info.read_text())["address"]
        from distributed import Client

        with Client(address, timeout="60s") as client:
            client.wait_for_workers(len(HOSTS), timeout=120)
        yield address, folders
    finally:
        _stop(procs)


def _cluster_state(address: str) -> tuple[int, list[int]]:
    """(the scheduler's tasks, each worker's actors)."""
    from distributed import Client

    with Client(address, timeout="60s") as client:
        tasks = client.run_on_scheduler(lambda dask_scheduler: len(dask_scheduler.tasks))
        actors = client.run(lambda dask_worker: len(dask_worker.state.actors))
    return tasks, sorted(actors.values())


def _start_ranks(folders: dict, env: dict, script: Path, job: str, steps=STEPS, slow=2, pid_files=None):
    procs = []
    for host, ranks in HOSTS.items():
        (folders[host] / job).mkdir(exist_ok=True)
        for rank in ranks:
            extra = [pid_files[rank]] if pid_files else []
            argv = _cli("record", "-o", folders[host] / job / f"rank{rank}", "--export", "json", "--",
                        sys.executable, script, rank, steps, slow, *extra)  # fmt: skip
            procs.append(subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE))
    return procs


@pytest.fixture(scope="module")
def watched(cluster, tmp_path_factory):
    """The job (2 ranks a host, 30 steps of 120 ms, rank2's load +60 ms) watched with
    ``--scheduler ADDR job --json --until-done`` from before its ranks start: (folders,
    [(arrival ns, object)], the cluster's state after)."""
    from conftest import _child_env

    address, folders = cluster
    tmp = tmp_path_factory.mktemp("client")  # (the client's folder: no 'job' here)
    script = tmp / "rank.py"
    script.write_text(RANK)
    env = _child_env()
    for host in HOSTS:  # (each host's folder exists before watch starts: as a local watch wants)
        (folders[host] / "job").mkdir()
    watch = subprocess.Popen(
        _cli("watch", "job", "--scheduler", address, "--json", "--until-done", "--interval", "0.5"),
        cwd=tmp, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    reader = Lines(watch)
    time.sleep(1.0)
    ranks = _start_ranks(folders, env, script, "job")
    for proc in ranks:
        assert proc.wait(timeout=300) == 0, proc.stderr.read()
    code = watch.wait(timeout=120)
    reader.join(timeout=10)
    assert code == 0, watch.stderr.read()
    objects = [(t, json.loads(line)) for t, line in reader.lines]
    return folders, objects, _cluster_state(address)


def test_two_hosts_steps_are_the_local_watchs(watched):
    folders, objects, _ = watched
    steps = {(o["rank"], o["step"]): o for _, o in objects if o["kind"] == "step"}
    assert len(steps) == 4 * STEPS == len([o for _, o in objects if o["kind"] == "step"])  # (each once)
    latency = sorted((t - o["end_ns"]) / 1e9 for t, o in objects if o["kind"] == "step")
    p95 = latency[int(0.95 * (len(latency) - 1))]
    print(f"two hosts: latency median {statistics.median(latency):.3f} s, p95 {p95:.3f} s")
    local = subprocess.run(_cli("watch", folders["hostA"] / "job", folders["hostB"] / "job", "--json", "--until-done"),
                           capture_output=True, text=True, timeout=300)  # fmt: skip
    assert local.returncode == 0, local.stderr
    mine = {(o["rank"], o["step"]): o for o in map(json.loads, local.stdout.splitlines()) if o["kind"] == "step"}
    assert mine.keys() == steps.keys()
    for key, o in steps.items():
        assert (o["duration_ns"], o["ranges"], o["end_ns"] - o["start_ns"]) == (
            mine[key]["duration_ns"], mine[key]["ranges"], o["duration_ns"]), key  # fmt: skip
        assert abs(o["start_ns"] - mine[key]["start_ns"]) < 1_000_000, key


def test_two_hosts_steps_are_analyzes_pace(watched, tmp_path):
    folders, objects, _ = watched
    out = tmp_path / "analysis"
    proc = subprocess.run(_cli("analyze", folders["hostA"] / "job", folders["hostB"] / "job", "-o", out),
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    pace = {(p["RankName"], p["Step"]): p["Duration"] for p in pq.read_table(out / "pace.parquet").to_pylist()}
    steps = {(o["rank"], o["step"]): o["duration_ns"] for _, o in objects if o["kind"] == "step"}
    assert steps == pace


def test_two_hosts_name_the_straggler_and_leave_the_cluster_clean(watched):
    _, objects, (tasks, actors) = watched
    named = [o for _, o in objects if o["kind"] == "straggler"]
    assert named and {(o["rank"], o["range"]) for o in named} == {("rank2", "train:load")}
    assert named[0]["step"] <= 5
    assert not [o for _, o in objects if o["kind"] == "stale"]
    assert (tasks, actors) == (0, [0, 0])  # (watch ended: its readers are gone from the cluster)


def test_a_rank_killed_on_one_host_is_stale(cluster, tmp_path, child_env):
    address, folders = cluster
    script = tmp_path / "rank.py"
    script.write_text(RANK)
    env = child_env()
    pids = {r: tmp_path / f"pid{r}" for r in (0, 1, 2, 3)}
    ranks = _start_ranks(folders, env, script, "killed", steps=25, slow=-1, pid_files=pids)
    watch = subprocess.Popen(
        _cli("watch", "killed", "--scheduler", address, "--json", "--until-done", "--interval", "0.3"),
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    reader = Lines(watch)
    deadline = time.monotonic() + 120
    while not any('"rank3", "step": 4' in line for _, line in reader.lines) and time.monotonic() < deadline:
        time.sleep(0.05)
    os.kill(int(pids[3].read_text()), signal.SIGKILL)
    codes = [p.wait(timeout=300) for p in ranks]
    assert codes == [0, 0, 0, 128 + signal.SIGKILL], codes
    assert watch.wait(timeout=120) == 0, watch.stderr.read()
    reader.join(timeout=10)
    objects = [json.loads(line) for _, line in reader.lines]
    assert [o["rank"] for o in objects if o["kind"] == "stale"] == ["rank3"]
    steps = [o for o in objects if o["kind"] == "step"]
    assert sum(o["rank"] == "rank0" for o in steps) == 25 and 5 <= sum(o["rank"] == "rank3" for o in steps) < 25


@pytest.mark.parametrize("signo", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_ends_it_at_once_and_leaves_the_cluster_clean(cluster, tmp_path, child_env, signo):
    address, folders = cluster
    for host in HOSTS:
        (folders[host] / "idle").mkdir(exist_ok=True)
    watch = subprocess.Popen(
        _cli("watch", "idle", "--scheduler", address, "--json"),
        cwd=tmp_path, env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    deadline = time.monotonic() + 120
    while _cluster_state(address)[1] != [1, 1] and time.monotonic() < deadline:  # (a reader on each host)
        time.sleep(0.2)
    assert _cluster_state(address)[1] == [1, 1]
    sent = time.monotonic()
    watch.send_signal(signo)
    out, err = watch.communicate(timeout=60)
    print(f"ended {time.monotonic() - sent:.2f} s after {signal.Signals(signo).name}")
    assert watch.returncode == 128 + signo, err
    (line,) = err.strip().splitlines()
    assert line.startswith("nvtx-tf: error: ") and line.endswith("; stopped watching"), err
    assert out == ""
    while _cluster_state(address) != (0, [0, 0]) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _cluster_state(address) == (0, [0, 0])


def test_a_rec_no_worker_sees_is_one_line(cluster, tmp_path, child_env):
    address, _ = cluster
    proc = subprocess.run(_cli("watch", "nowhere", "--scheduler", address, "--json"), cwd=tmp_path, env=child_env(),
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert proc.returncode == EXIT_INPUT_NOT_FOUND, proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("nvtx-tf: error: no Dask worker sees nowhere (2 asked; the first: ") and "nowhere" in line


def test_a_recording_every_worker_sees_is_read_once(watched, cluster, tmp_path):
    """Absolute paths: both workers see both folders (a shared file system, or two workers of
    one host): each rank-step still comes once, the local watch's."""
    address, folders = cluster
    paths = [folders["hostA"] / "job", folders["hostB"] / "job"]
    proc = subprocess.run(_cli("watch", *paths, "--scheduler", address, "--json", "--until-done"),
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    steps = [o for o in map(json.loads, proc.stdout.splitlines()) if o["kind"] == "step"]
    _, objects, _ = watched
    first = {(o["rank"], o["step"]): o["duration_ns"] for _, o in objects if o["kind"] == "step"}
    assert len(steps) == len(first) and {(o["rank"], o["step"]): o["duration_ns"] for o in steps} == first


def test_a_non_utf8_folder_and_hostile_names_are_the_local_watchs(cluster, tmp_path, child_env):
    from test_watch_hostile import PROGRAM

    address, folders = cluster
    odd = b"run\xff\x1b[31m"
    os.mkdir(os.fsencode(str(folders["hostB"])) + b"/" + odd)
    rec = os.fsencode(str(folders["hostB"])) + b"/" + odd + b"/rank9"
    argv = [*_cli("record", "-o"), rec, *map(str, ["--export", "json", "--", sys.executable, "-c", PROGRAM])]
    assert subprocess.run(argv, env=child_env(), capture_output=True, timeout=300).returncode == 0
    remote = subprocess.run([*_cli("watch", "--scheduler", address, "--json", "--until-done"), odd], cwd=tmp_path,
                            env=child_env(), capture_output=True, timeout=300)  # fmt: skip
    assert remote.returncode == 0, remote.stderr
    local = subprocess.run([*_cli("watch", "--json", "--until-done"), os.path.dirname(rec)], env=child_env(),
                           capture_output=True, timeout=300)  # fmt: skip
    assert len(remote.stdout.splitlines()) == 4 and remote.stdout == local.stdout and remote.stdout.isascii()


def test_the_terminal_view_through_the_cluster(watched, cluster, tmp_path):
    pytest.importorskip("rich", reason="the 'watch' extra")
    address, _ = cluster
    env = {**os.environ, "COLUMNS": "160"}  # (not a terminal: each frame printed, as text)
    proc = subprocess.run(_cli("watch", "job", "--scheduler", address, "--until-done"), cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    frame = proc.stdout.split("nvtx-tf watch (")[-1]
    for rank in range(4):
        row = next(line for line in frame.splitlines() if f" rank{rank} " in line)
        assert f" {STEPS - 1} " in row and "done" in row, row
    assert "straggler: rank2 train:load +" in frame


def test_the_web_page_through_the_cluster(watched, cluster, tmp_path):
    """``--web`` with ``--scheduler``: the page (real headless Chromium) shows the four ranks of
    both hosts at their last step and names rank2's load; SIGINT ends it, 130."""
    pytest.importorskip("bokeh", reason="the 'web' extra")
    pytest.importorskip("websocket", reason="websocket-client: pip install -e '.[test]'")
    from test_viewer import WAIT, Browser, _chromium
    from test_watch_web import DEEP_TEXT, _model

    chromium = _chromium()
    address, _ = cluster
    argv = _cli("watch", "job", "--scheduler", address, "--web", "127.0.0.1:0", "--interval", "0.5")
    watch = subprocess.Popen(argv, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    browser = None
    try:
        first = watch.stdout.readline()
        assert first.startswith("nvtx-tf watch --web: http://127.0.0.1:"), (first, watch.stderr.read())
        browser = Browser(chromium, tmp_path / "profile", tmp_path / "chromium.log")
        browser.call("Page.enable")
        browser.call("Page.navigate", url=first.split()[-1])
        table = _model("ranks") + ".data"
        browser.wait_for(f"window.Bokeh && Bokeh.documents.length > 0 && {table}.rank.length == 4", "the 4 ranks")
        assert sorted(browser.evaluate(f"{table}.rank")) == [f"rank{r}" for r in range(4)]
        browser.wait_for(f"{table}.step.every(s => s == '{STEPS - 1}')", "each rank's last step")
        lines = _model("lines") + ".text"
        browser.wait_for(f"{lines}.includes('straggler: rank2 train:load')", "the straggler line")
        assert browser.wait_for(f"{DEEP_TEXT}.includes('rank3') && {DEEP_TEXT}", "the table drawn")
        watch.send_signal(signal.SIGINT)
        _, err = watch.communicate(timeout=WAIT)
        assert watch.returncode == 130, err
    finally:
        if browser is not None:
            browser.close()
        if watch.poll() is None:
            watch.kill()
            watch.wait()
    assert _cluster_state(address) == (0, [0, 0])  # (its readers released)


def test_a_host_joining_late_is_read_and_one_leaving_is_left_out(tmp_path, child_env):
    """A cluster of its own: hostA's worker only when watch starts, hostB's joins while the ranks
    run (its ranks are read from then on, all their steps), then hostA's worker is SIGKILLed:
    its recordings are left out in one warning and --until-done still ends, exit 6."""
    env = child_env(DASK_LOGGING__DISTRIBUTED="critical")
    info = tmp_path / "scheduler.json"
    folders = {host: tmp_path / host for host in HOSTS}
    for folder in folders.values():
        (folder / "job").mkdir(parents=True)
    procs = [_scheduler(info, env)]
    try:
        procs.append(_worker(info, "hostA", folders["hostA"], env))
        address = json.loads(info.read_text())["address"]
        script = tmp_path / "rank.py"
        script.write_text(RANK)
        watch = subprocess.Popen(
            _cli("watch", "job", "--scheduler", address, "--json", "--until-done", "--interval", "0.3"),
            cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        reader = Lines(watch)
        ranks = _start_ranks(folders, env, script, "job", steps=40, slow=-1)
        deadline = time.monotonic() + 120
        while not any('"rank0", "step": 3' in line for _, line in reader.lines) and time.monotonic() < deadline:
            time.sleep(0.05)
        procs.append(_worker(info, "hostB", folders["hostB"], env))
        while not any('"rank2", "step": ' in line for _, line in reader.lines) and time.monotonic() < deadline:
            time.sleep(0.05)
        procs[1].kill()
        assert [p.wait(timeout=300) for p in ranks] == [0, 0, 0, 0]
        assert watch.wait(timeout=120) == 6, watch.stderr.read()
        reader.join(timeout=10)
        err = watch.stderr.read().splitlines()
    finally:
        _stop(procs)
    steps = [json.loads(line) for _, line in reader.lines]
    for rank in ("rank2", "rank3"):  # (hostB's: every step, though its worker came late)
        assert [o["step"] for o in steps if o["rank"] == rank] == list(range(40))
    assert 4 <= sum(o["rank"] == "rank0" for o in steps) < 40
    assert len(err) == 3 and all(f"job/rank{r}.nvtxrec: its Dask worker tcp://" in err[r] for r in (0, 1)), err
    assert all(line.startswith("nvtx-tf: warning: left out: ") and "is gone" in line for line in err[:2]), err
    assert err[2].startswith("nvtx-tf: error: 2 recording(s) damaged or left out"), err
