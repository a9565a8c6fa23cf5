"""`nvtx-tf analyze --scheduler` on a Dask cluster started as on a real one (issue 36, Dask):
a ``dask scheduler`` and ``dask worker`` processes of their own (the ``dask`` command of the
'dask' extra), each in another folder than the command's.

* Recordings (``_synth``, as tests/test_analyze_hostile.py writes them) and nsys-format
  parquetdirs (``nvtx-tf export --type parquetdir``) given by relative paths: the tables
  (all_stats, rank_stats, pace, stragglers) and the summary are the embedded run's, value for
  value.
* A worker that cannot see the inputs' folder (started in a mount namespace where a tmpfs
  hides it; root only): named in one warning line, the inputs read by the worker that sees
  them, the tables still the embedded run's; with no worker that sees an input, the input is
  left out in one line naming why.
* Every scheduler and worker process ends with the test, passed or failed (a finalizer kills
  their process groups).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from conftest import _child_env
from test_analyze_hostile import NO_PID, synth_rank

DASK = Path(sys.executable).with_name("dask")
RECORDINGS, EXPORTS = 3, 3  # ranks given as recordings, ranks given as parquetdirs
SLOW = 1  # the rank slowed in "data"
TABLES = ("all_stats", "rank_stats", "pace", "stragglers")

pytestmark = pytest.mark.skipif(not DASK.exists(), reason="the 'dask' extra (its `dask` command)")


def nvtx_tf(*args, cwd=None, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "nvtx_plugins_tf", *map(str, args)],
        env=_child_env(NVTX_TF_ANALYZE_WORKER_WAIT="60"), capture_output=True, text=True, timeout=timeout, cwd=cwd,
    )  # fmt: skip


class Cluster:
    """A scheduler and workers, each a process (group) of its own; :meth:`stop` ends them all."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.procs: list[subprocess.Popen] = []
        self.address = ""

    def _start(self, argv: list[str], name: str, cwd: Path) -> subprocess.Popen:
        log = open(self.folder / f"{name}.log", "w")  # noqa: SIM115 - the process's, closed by it
        proc = subprocess.Popen(argv, cwd=cwd, stdout=log, stderr=subprocess.STDOUT, env=_child_env(),
                                start_new_session=True)  # fmt: skip
        log.close()
        self.procs.append(proc)
        return proc

    def scheduler(self) -> str:
        file = self.folder / "scheduler.json"
        self._start([str(DASK), "scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard",
                     "--scheduler-file", str(file)], "scheduler", self.folder)  # fmt: skip
        self.address = json.loads(self._wait_for(file))["address"]
        return self.address

    def worker(self, name: str, cwd: Path, hide: Path | None = None) -> None:
        """A worker process (its nanny's child) started in ``cwd``; with ``hide``, in a mount
        namespace where an empty tmpfs lies over that folder (it sees no file there)."""
        argv = [str(DASK), "worker", "--scheduler-file", str(self.folder / "scheduler.json"), "--name", name,
                "--nworkers", "1", "--nthreads", "1", "--no-dashboard", "--local-directory", str(cwd)]  # fmt: skip
        if hide is not None:
            argv = ["unshare", "--mount", "--propagation", "private", "sh", "-c",
                    'mount -t tmpfs none "$0" && exec "$@"', str(hide), *argv]  # fmt: skip
        self._start(argv, name, cwd)

    def wait_for_workers(self, n: int) -> dict[str, str]:
        """{worker name: address} once ``n`` workers have joined."""
        import distributed

        with distributed.Client(self.address, timeout="30s") as client:
            client.wait_for_workers(n, timeout=120)
            return {w["name"]: a for a, w in client.scheduler_info(n_workers=-1)["workers"].items()}

    def _wait_for(self, file: Path) -> str:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if file.exists() and file.read_text().strip():
                return file.read_text()
            if any(p.poll() is not None for p in self.procs):
                break
            time.sleep(0.1)
        logs = {p.name: p.read_text()[-1000:] for p in self.folder.glob("*.log")}
        raise RuntimeError(f"the Dask scheduler did not start: {logs}")

    def stop(self) -> None:
        """Each process group ended: SIGTERM, then SIGKILL to what is left after 10 s."""
        for proc in reversed(self.procs):
            for sig in (signal.SIGTERM, signal.SIGKILL):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, sig)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=10)
                deadline = time.monotonic() + 10
                while proc.pid in self.alive() and time.monotonic() < deadline:
                    time.sleep(0.1)
                if proc.pid not in self.alive():
                    break

    def alive(self) -> list[int]:
        """The pids of this cluster's process groups still running."""
        alive = []
        for proc in self.procs:
            try:
                os.killpg(proc.pid, 0)
                alive.append(proc.pid)
            except ProcessLookupError:
                pass
        return alive


@pytest.fixture
def cluster(tmp_path, request):
    """A :class:`Cluster` in tmp_path/cluster; its processes end with the test, whatever its fate."""
    pytest.importorskip("distributed", reason="the 'dask' extra")
    folder = tmp_path / "cluster"
    folder.mkdir()
    made = Cluster(folder)
    request.addfinalizer(made.stop)
    return made


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> Path:
    """jobs/: rank0..2.nvtxrec (recordings) and rank3..5_pqtdir (parquetdirs exported from
    recordings kept elsewhere); rank SLOW 3 ms slower in each step's data range."""
    root = tmp_path_factory.mktemp("job")
    for r in range(RECORDINGS + EXPORTS):
        rec = root / ("jobs" if r < RECORDINGS else "sources") / f"rank{r}.nvtxrec"
        synth_rank(rec, NO_PID + r, steps=20, slow=3_000_000 if r == SLOW else 0)
        if r >= RECORDINGS:
            proc = nvtx_tf("export", "--type", "parquetdir", "-o", root / "jobs" / f"rank{r}_pqtdir", rec)
            assert proc.returncode == 0, proc.stderr
    return root


@pytest.fixture(scope="module")
def embedded(inputs) -> tuple[Path, str]:
    proc = nvtx_tf("analyze", "jobs", "-o", "embedded", cwd=inputs)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"{RECORDINGS + EXPORTS} rank(s) in {RECORDINGS + EXPORTS} input(s)"), proc.stdout
    return inputs / "embedded", proc.stdout


def _rows(outdir: Path, name: str) -> list[tuple]:
    """A table's rows, NaN as None so that rows compare equal."""
    return [
        tuple(None if v != v else v for v in row.values())
        for row in pq.read_table(outdir / f"{name}.parquet").to_pylist()
    ]


def _same_as_embedded(out: Path, stdout: str, embedded: tuple[Path, str]) -> None:
    for name in TABLES:
        assert _rows(out, name) == _rows(embedded[0], name), name
    assert stdout.splitlines()[:-1] == embedded[1].splitlines()[:-1]  # (the last line names OUTDIR)


def test_a_cluster_of_separate_processes_gives_the_embedded_tables(cluster, inputs, embedded, tmp_path):
    address = cluster.scheduler()
    for k in range(2):
        (tmp_path / f"w{k}").mkdir()
        cluster.worker(f"w{k}", tmp_path / f"w{k}")  # (another folder than the command's)
    cluster.wait_for_workers(2)
    proc = nvtx_tf("analyze", "jobs", "-o", "on-dask", "--scheduler", address, cwd=inputs)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    assert f"straggler: rank{SLOW}" in proc.stdout
    _same_as_embedded(inputs / "on-dask", proc.stdout, embedded)
    cluster.stop()
    assert cluster.alive() == []


def test_a_worker_that_cannot_see_the_inputs_is_named_in_one_line(cluster, inputs, embedded, tmp_path):
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("a worker in a mount namespace of its own needs root and unshare")
    address = cluster.scheduler()
    (tmp_path / "sees").mkdir()
    (tmp_path / "blind").mkdir()
    cluster.worker("sees", tmp_path / "sees")
    cluster.worker("blind", tmp_path / "blind", hide=inputs)
    workers = cluster.wait_for_workers(2)
    proc = nvtx_tf("analyze", "jobs", "-o", "half-blind", "--scheduler", address, cwd=inputs)
    assert proc.returncode == 0, proc.stderr
    n = RECORDINGS + EXPORTS
    assert proc.stderr.splitlines() == [
        f"nvtx-tf: warning: the Dask worker {workers['blind']} cannot see {n} of the {n} inputs "
        f"(first: {inputs / 'jobs' / 'rank0.nvtxrec'}: No such file or directory): they are read by the workers "
        "that see them; give inputs on a path every worker sees"
    ], proc.stderr
    _same_as_embedded(inputs / "half-blind", proc.stdout, embedded)


def test_an_input_no_worker_sees_is_left_out_in_one_line(cluster, inputs, tmp_path):
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("a worker in a mount namespace of its own needs root and unshare")
    address = cluster.scheduler()
    (tmp_path / "blind").mkdir()
    cluster.worker("blind", tmp_path / "blind", hide=inputs)
    (worker,) = cluster.wait_for_workers(1).values()
    proc = nvtx_tf("analyze", "jobs/rank0.nvtxrec", "-o", tmp_path / "out", "--scheduler", address, cwd=inputs)
    assert proc.returncode == 7, proc.stderr
    assert proc.stderr.splitlines() == [
        f"nvtx-tf: error: no input could be read (1); first: {inputs / 'jobs' / 'rank0.nvtxrec'}: no Dask worker "
        f"sees it ({worker} cannot): give inputs on a path every worker sees"
    ], proc.stderr
    assert not (tmp_path / "out").exists()


def test_local_workers_are_a_cluster_in_this_process(tmp_path):
    """``--workers N``' cluster (engines._client): a real dask.distributed cluster of N workers
    of one thread, each running in the command's own process (a task's result handed over, not
    pickled; docs/distributed.md), and the command's signal handlers left as they were."""
    pytest.importorskip("distributed", reason="the 'dask' extra")
    script = """
import os, signal, threading
from nvtx_plugins_tf.recorder.analysis import engines
def the_commands(*_):
    pass
signal.signal(signal.SIGTERM, the_commands)
client, cluster = engines._client(3, None)
try:
    got = client.run(lambda: (os.getpid(), threading.current_thread() is not threading.main_thread()))
    info = client.scheduler_info(n_workers=-1)["workers"]
    threads = sorted(w["nthreads"] for w in info.values())
finally:
    client.close()
    cluster.close()
print(len(got), set(got.values()) == {(os.getpid(), True)}, threads, signal.getsignal(signal.SIGTERM) is the_commands)
"""
    proc = subprocess.run([sys.executable, "-c", script], env=_child_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["3", "True", "[1,", "1,", "1]", "True"], proc.stdout


def test_local_workers_do_no_dashboard_work_and_leave_dask_config_alone(tmp_path):
    """``--workers N``' in-process cluster (engines.IN_PROCESS_CONFIG) starts without the
    periodic work that takes the GIL from the mappers: no profiler and no memory monitor in its
    workers, its servers' tick every second; a task still runs and returns; and the caller's
    Dask settings are the same after it as before."""
    pytest.importorskip("distributed", reason="the 'dask' extra")
    script = """
import copy, dask, distributed
from nvtx_plugins_tf.recorder.analysis import engines
before = copy.deepcopy(dask.config.get("distributed"))
client, cluster = engines._client(2, None)
try:
    workers = list(cluster.workers.values())
    callbacks = sorted({name for w in workers for name in w.periodic_callbacks})
    ticks = sorted({w._tick_interval for w in workers} | {cluster.scheduler._tick_interval})
    task = client.submit(sum, [1, 2]).result()
    print(len(workers), "profile" in callbacks, "memory_monitor" in callbacks, ticks, task)
finally:
    client.close()
    cluster.close()
print(dask.config.get("distributed") == before, dask.config.get("distributed.worker.profile.enabled"))
"""
    proc = subprocess.run([sys.executable, "-c", script], env=_child_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["2", "False", "False", "[1]", "3", "True", "True"], proc.stdout


@pytest.mark.parametrize("workers", [None, 2])
def test_given_out_is_called_once_the_inputs_are_given_to_the_mappers(inputs, workers):
    """``run_mappers(given_out=...)`` (compute starts its imports for the reduce there): called
    once, before the first result; on Dask, once its cluster is up and the tasks are submitted
    (the imports would otherwise hold the GIL while Dask is imported and started)."""
    pytest.importorskip("distributed", reason="the 'dask' extra")
    script = f"""
import sys
from pathlib import Path
from nvtx_plugins_tf.recorder.analysis import engines
seen = []
def given_out():
    client = None
    if "distributed" in sys.modules:
        from distributed import default_client
        client = default_client()
    seen.append(("given", client is not None and len(client.scheduler_info()["workers"])))
def progress(done, total, events):
    seen.append(("result", done))
paths = sorted(Path({str(inputs / "jobs")!r}).iterdir())
ranks, left_out, _ = engines.run_mappers(paths, workers={workers!r}, progress=progress, given_out=given_out)
print(len(ranks), len(left_out), seen[:2], sum(1 for s in seen if s[0] == "given"))
"""
    proc = subprocess.run([sys.executable, "-c", script], env=_child_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    n = RECORDINGS + EXPORTS
    first = "('given', False)" if workers is None else f"('given', {workers})"
    assert proc.stdout.strip() == f"{n} 0 [{first}, ('result', 1)] 1", proc.stdout


def test_local_cluster_is_closed_beside_the_reduce(inputs):
    """``--workers``' in-process cluster is closed by a thread of its own once every result is
    in (engines._closing, not waited for by the caller): it ends closed, its scheduler and
    workers stopped, the results those of the embedded engine."""
    pytest.importorskip("distributed", reason="the 'dask' extra")
    script = f"""
from pathlib import Path
from nvtx_plugins_tf.recorder.analysis import engines
paths = sorted(Path({str(inputs / "jobs")!r}).iterdir())
made = []
start = engines._client
engines._client = lambda *a: made.append(start(*a)) or made[-1]  # (the real one, its cluster kept)
ranks, _, _ = engines.run_mappers(paths, workers=2)
closing = engines._closing
closing.join(30)
cluster = made[0][1]
embedded, _, _ = engines.run_mappers(paths)
same = [(r.file, r.events, r.n_steps) for r in ranks] == [(r.file, r.events, r.n_steps) for r in embedded]
print(closing.name, closing.is_alive(), cluster.status.name, cluster.scheduler.status.name, same, len(ranks))
"""
    proc = subprocess.run([sys.executable, "-c", script], env=_child_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["nvtx-tf-dask-close", "False", "closed", "closed", "True", "6"], proc.stdout
