"""tf.distribute: ranges from every replica (category = replica id + 1) and every worker."""

from __future__ import annotations

import os
import signal
import socket
import statistics
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from nvtx_plugins_tf.recorder.recording import reader
from nvtx_plugins_tf.recorder.reports.summary import summarize

HERE = Path(__file__).resolve().parent
STEPS = 3
EPOCHS = 2

# Bounds for a loaded 2-core machine; the runs take ~10 s (Mirrored fit) and ~20 s (MWMS).
MWMS_WORKER_TIMEOUT_S = 150  # the launcher kills the workers after this
RECORD_TIMEOUT_S = 600


def _run_bounded(cmd: list[str], timeout: float, env=None) -> subprocess.CompletedProcess:
    """Run ``cmd`` in its own process group; on timeout kill that group (the recorder,
    the launcher and the workers alike) so that no process outlives the test."""
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, start_new_session=True
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        out, err = proc.communicate(timeout=30)
        pytest.fail(f"{cmd[-1]} did not finish within {timeout} s\n{out[-3000:]}{err[-3000:]}")
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def _record(
    tmp_path: Path, script: str, *args: str, env=None, timeout: float = RECORD_TIMEOUT_S, check: bool = True
) -> Path | tuple[Path, subprocess.CompletedProcess]:
    prefix = tmp_path / "run"
    cmd = [
        sys.executable,
        "-m",
        "nvtx_plugins_tf",
        "record",
        "-o",
        str(prefix),
        "--",
        sys.executable,
        str(HERE / "distributed" / script),
        *args,
    ]
    proc = _run_bounded(cmd, timeout, env)
    if not check:
        return prefix, proc
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return prefix


def _within(inner, outer) -> bool:
    return outer.start_ns <= inner.start_ns and inner.end_ns <= outer.end_ns


def test_mirrored_custom_loop_ranges_per_replica(tmp_path):
    prefix = _record(tmp_path, "mirrored_custom_loop.py", str(STEPS))
    ranges = reader.load(str(prefix) + ".nvtxrec").events
    forward = [r for r in ranges if r.message == "replica step" and r.domain == "Forward"]
    backward = [r for r in ranges if r.message == "replica step" and r.domain == "Gradient"]
    by_replica = {}
    for r in forward:
        by_replica[r.category] = by_replica.get(r.category, 0) + 1
    assert by_replica == {1: STEPS, 2: STEPS}
    assert len(backward) == 2 * STEPS
    assert sorted(r.category for r in backward) == [1] * STEPS + [2] * STEPS
    assert all(r.end_ns is not None and r.end_ns > 0 for r in forward + backward)


def test_mirrored_keras3_fit_layers_and_callback(tmp_path):
    """Keras 3 fit under MirroredStrategy (2 logical CPUs): NVTXStart/NVTXEnd ranges of
    both replicas in every step, their backward ranges, NVTXCallback's ranges."""
    prefix = _record(tmp_path, "mirrored_keras_fit.py", str(EPOCHS), str(STEPS))
    rec = reader.load(str(prefix) + ".nvtxrec")
    assert not rec.damage.damaged, rec.damage.describe()
    assert rec.open_ranges == []
    assert len(rec.processes) == 1

    forward = rec.find(message="dense", domain="Forward")
    backward = rec.find(message="dense grad", domain="Backward")
    assert Counter(r.category for r in forward) == {1: EPOCHS * STEPS, 2: EPOCHS * STEPS}
    assert len(backward) == 2 * EPOCHS * STEPS
    assert sorted(r.category for r in backward) == [1] * EPOCHS * STEPS + [2] * EPOCHS * STEPS

    # NVTXCallback: Train > epoch n > batch n, host-side, in the "Keras" domain.
    assert rec.count(message="Train", domain="Keras") == 1
    epochs = [r for r in rec.find(domain="Keras") if r.message.startswith("epoch ")]
    assert sorted(r.message for r in epochs) == [f"epoch {e}" for e in range(EPOCHS)]
    assert [r.payload for r in sorted(epochs, key=lambda r: r.start_ns)] == list(range(EPOCHS))
    batches = [r for r in rec.find(domain="Keras") if r.message.startswith("batch ")]
    assert Counter(r.message for r in batches) == {f"batch {b}": EPOCHS for b in range(STEPS)}
    assert all(r.category_name == "phase: Train" for r in batches)
    train = rec.find(message="Train", domain="Keras")[0]
    assert all(_within(e, train) for e in epochs)
    for epoch in epochs:
        inside = [b for b in batches if _within(b, epoch)]
        assert sorted(b.payload for b in inside) == list(range(STEPS)), epoch

    # Per step: both replicas' forward ranges and two backward ranges run inside the
    # step's batch range (the train function returns when the step has run).
    for batch in batches:
        fwd = [r for r in forward if _within(r, batch)]
        bwd = [r for r in backward if _within(r, batch)]
        assert sorted(r.category for r in fwd) == [1, 2], (batch, fwd)
        assert len(bwd) == 2, (batch, bwd)


def _free_loopback_ports(n: int) -> list[int]:
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _port_clash(logdir: Path) -> bool:
    text = " ".join(p.read_text(errors="replace") for p in logdir.glob("worker*.log"))
    return "Address already in use" in text or "Failed to add port" in text


def test_multi_worker_mirrored_tf_keras_fit_and_custom_loop(tmp_path):
    """MultiWorkerMirroredStrategy, 2 workers on 127.0.0.1 started by one recorded
    launcher: tf_keras fit (NVTXStart/NVTXEnd + NVTXCallback) and a strategy.run custom
    loop (ops.start/end) on each worker, all in one recording."""
    pytest.importorskip("tf_keras")
    logdir = tmp_path / "logs"
    logdir.mkdir()
    for attempt in range(2):  # a port picked here may be taken before the worker binds it
        ports = _free_loopback_ports(2)
        prefix, proc = _record(
            tmp_path,
            "mwms_launcher.py",
            *map(str, ports),
            str(logdir),
            str(MWMS_WORKER_TIMEOUT_S),
            str(EPOCHS),
            str(STEPS),
            timeout=MWMS_WORKER_TIMEOUT_S + 90,
            check=False,
        )
        if proc.returncode == 0 or not _port_clash(logdir) or attempt == 1:
            break
    logs = "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-3000:]}" for p in sorted(logdir.glob("*.log")))
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:] + logs

    rec = reader.load(str(prefix) + ".nvtxrec")
    assert not rec.damage.damaged, rec.damage.describe()
    assert rec.open_ranges == []
    launchers = [p for p in rec.processes.values() if "mwms_launcher.py" in p.cmdline]
    assert len(launchers) == 1, rec.processes
    launcher = launchers[0].pid
    workers = sorted(p.pid for p in rec.processes.values() if p.ppid == launcher and "mwms_worker.py" in p.cmdline)
    assert len(workers) == 2, rec.processes
    assert {r.pid for r in rec.events} == {launcher, *workers}
    assert rec.count(message="launch workers", domain="Launcher") == 1
    assert rec.count(message="wait workers", domain="Launcher") == 1
    assert all(r.pid == launcher for r in rec.find(domain="Launcher"))

    categories = {}
    for pid in workers:
        mine = [r for r in rec.events if r.pid == pid]

        def find(message, domain, mine=mine):
            return [r for r in mine if r.message == message and r.domain == domain]

        # (a) tf_keras fit: our layers' forward/backward ranges, one replica per worker.
        forward = find("dense", "Forward")
        backward = find("dense grad", "Backward")
        assert len(forward) == EPOCHS * STEPS, (pid, forward)
        assert len(backward) == EPOCHS * STEPS, (pid, backward)
        # (b) custom loop with strategy.run and ops.start/end.
        loop_forward = find("worker step", "Forward")
        loop_backward = find("worker step", "Gradient")
        assert len(loop_forward) == STEPS and len(loop_backward) == STEPS, pid
        # The worker's replica (replica_id_in_sync_group + 1) is its ranges' category.
        cats = {r.category for r in forward + loop_forward}
        assert len(cats) == 1, (pid, cats)
        categories[pid] = cats.pop()

        # NVTXCallback on tf_keras, per worker.
        assert len(find("Train", "Keras")) == 1
        epochs = sorted(
            (r for r in mine if r.domain == "Keras" and r.message.startswith("epoch ")), key=lambda r: r.start_ns
        )
        assert [r.message for r in epochs] == [f"epoch {e}" for e in range(EPOCHS)]
        batches = [r for r in mine if r.domain == "Keras" and r.message.startswith("batch ")]
        assert Counter(r.message for r in batches) == {f"batch {b}": EPOCHS for b in range(STEPS)}
        assert all(r.category_name == "phase: Train" for r in batches)
        for batch in batches:  # each fit step's forward/backward range inside its batch range
            assert len([r for r in forward if _within(r, batch)]) == 1, batch
            assert len([r for r in backward if _within(r, batch)]) == 1, batch
        fit_end = max(r.end_ns for r in epochs)
        assert all(r.start_ns > fit_end for r in loop_forward)  # the loop runs after fit
    assert sorted(categories.values()) == [1, 2], categories

    # The summary by process has rows for both workers (and the launcher), from the
    # SQLite export and from the raw recording alike.
    expected = {
        "Forward:dense": EPOCHS * STEPS,
        "Backward:dense grad": EPOCHS * STEPS,
        "Forward:worker step": STEPS,
        "Gradient:worker step": STEPS,
        "Keras:Train": 1,
    }
    for source in (Path(str(prefix) + ".sqlite"), Path(str(prefix) + ".nvtxrec")):
        summary = summarize(source, by_process=True)
        assert summary.by_process
        rows = {(row.pid, row.range): row.instances for row in summary.rows}
        assert {pid for pid, _ in rows} == {launcher, *workers}, (source, rows)
        for pid in workers:
            assert {name: rows.get((pid, name)) for name in expected} == expected, (source, pid)
        assert rows[(launcher, "Launcher:wait workers")] == 1
        text = summary.format()
        assert all(str(pid) in text for pid in workers)


def test_analyze_names_the_worker_slowed_in_its_input_pipeline(tmp_path):
    """A real MultiWorkerMirroredStrategy job (tf_keras, 2 workers on 127.0.0.1), worker 1
    slowed in its input pipeline (40 ms a read, against 2 ms): both workers' steps last about
    as long (the all-reduce waits), yet `nvtx-tf analyze` of the recording names worker 1 as
    the straggler and Data:read as the range behind it, and not worker 0 (issue 24, judge 3)."""
    pytest.importorskip("tf_keras")
    logdir = tmp_path / "logs"
    logdir.mkdir()
    for attempt in range(2):  # a port picked here may be taken before the worker binds it
        ports = _free_loopback_ports(2)
        prefix, proc = _record(
            tmp_path, "mwms_launcher.py", *map(str, ports), str(logdir), str(MWMS_WORKER_TIMEOUT_S), "1", "8",
            "mwms_straggler.py", timeout=MWMS_WORKER_TIMEOUT_S + 90, check=False,
        )  # fmt: skip
        if proc.returncode == 0 or not _port_clash(logdir) or attempt == 1:
            break
    logs = "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-3000:]}" for p in sorted(logdir.glob("*.log")))
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:] + logs
    rec = reader.load(str(prefix) + ".nvtxrec")
    worker_of = {}
    for p in rec.processes.values():
        if "mwms_straggler.py" in p.cmdline and "mwms_launcher.py" not in p.cmdline:
            reads = [r for r in rec.events if r.pid == p.pid and r.message == "read"]
            worker_of[p.pid] = 1 if statistics.median(r.end_ns - r.start_ns for r in reads) > 20e6 else 0
    assert sorted(worker_of.values()) == [0, 1], worker_of
    out = tmp_path / "analysis"
    done = subprocess.run(
        [sys.executable, "-m", "nvtx_plugins_tf", "analyze", str(prefix) + ".nvtxrec", "-o", str(out)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    import pyarrow.parquet as pq

    rows = pq.read_table(out / "stragglers.parquet").to_pylist()
    slow_pid = next(pid for pid, w in worker_of.items() if w == 1)
    named = [int(r["RankName"].rsplit(":", 1)[1]) for r in rows]
    assert len(rows) >= 6 and named.count(slow_pid) >= len(rows) - 1, (named, slow_pid)
    # (the first step traces the model: its own ranges may lead there)
    assert all(r["TopRanges"].startswith("Data:read +") for r, pid in zip(rows[1:], named[1:]) if pid == slow_pid), [
        r["TopRanges"] for r in rows
    ]
    assert f":{slow_pid}, the rank the others waited for" in done.stdout, done.stdout


# docs/multi-worker.md's recipe, run as the page gives it ---------------------------------------

PAGE = HERE.parent / "docs" / "multi-worker.md"
_PAGE_PORTS = ("23456", "23457")  # the ports the page's commands name


def _page_recipe() -> tuple[str, str]:
    """The page's worker script (the block marked ``file mwms_train.py``) and its commands (the
    bash block after it that records the two workers and runs analyze)."""
    import re

    text = PAGE.read_text()
    script = re.search(r"<!-- doc-test: file mwms_train.py -->\n```python\n(.*?)```", text, re.S).group(1)
    commands = re.search(r"<!-- doc-test: skip two workers[^\n]*-->\n```bash\n(.*?)```", text, re.S).group(1)
    return script, commands


def test_the_multi_worker_page_recipe_records_two_workers_and_analyze_reads_them(tmp_path):
    """docs/multi-worker.md: a real MultiWorkerMirroredStrategy job (tf_keras, 2 workers on
    this machine), each worker under its own `nvtx-tf record`, then `nvtx-tf analyze runs/`:
    the page's own script and commands, run by bash as one script; only the two ports are
    replaced by free ones."""
    pytest.importorskip("tf_keras")
    script, commands = _page_recipe()
    assert all(port in commands for port in _PAGE_PORTS) and "nvtx-tf analyze runs/" in commands
    env = {k: v for k, v in os.environ.items() if "proxy" not in k.lower() and k != "TF_CONFIG"}
    env["no_proxy"] = env["NO_PROXY"] = "127.0.0.1,localhost"
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE.parent), env.get("PYTHONPATH")]))
    for attempt in range(2):  # a port picked here may be taken before the worker binds it
        folder = tmp_path / f"try{attempt}"
        folder.mkdir()
        (folder / "mwms_train.py").write_text(script)
        ours = commands
        for documented, free in zip(_PAGE_PORTS, map(str, _free_loopback_ports(2))):
            ours = ours.replace(documented, free)
        (folder / "recipe.sh").write_text(ours)
        proc = subprocess.Popen(
            ["bash", "-e", "recipe.sh"], cwd=folder, env=env, text=True, start_new_session=True,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        )  # fmt: skip
        try:
            out, _ = proc.communicate(timeout=MWMS_WORKER_TIMEOUT_S * 2)
        except subprocess.TimeoutExpired:
            out = ""
        finally:  # (whatever happened: no worker outlives the test)
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()
        worker1 = folder / "worker1.log"
        log = out + (worker1.read_text(errors="replace") if worker1.exists() else "")
        clash = "Address already in use" in log or "Failed to add port" in log
        if proc.returncode == 0 or not clash:
            break
    assert proc.returncode == 0, log[-6000:]

    runs = folder / "runs"
    for worker in ("worker0", "worker1"):
        for suffix in (".nvtxrec", ".json", ".sqlite"):
            assert (runs / (worker + suffix)).exists(), (worker, suffix)
        rec = reader.load(str(runs / f"{worker}.nvtxrec"))
        assert not rec.damage.damaged and rec.open_ranges == []
        batches = [r for r in rec.find(domain="Keras") if r.message.startswith("batch ")]
        assert sorted(r.message for r in batches) == sorted(f"batch {b}" for b in range(8)), worker
        assert rec.count(message="dense", domain="Forward") == 8, worker  # annotate(): every step
    assert "worker 0: 8 steps done" in out
    assert "2 rank(s) in 2 input(s)" in out, out[-3000:]
    import pyarrow.parquet as pq

    pace = pq.read_table(folder / "analysis" / "pace.parquet").to_pylist()
    assert Counter(r["RankName"] for r in pace) == {"worker0": 8, "worker1": 8}
    assert (folder / "analysis" / "heatmap.png").stat().st_size > 0
