"""`nvtx-tf watch --scheduler` (issue 47, criterion 4's "two hosts over loopback ≤ 1.5 s
latency and ≤ 1 KB per rank-step"): a real Dask scheduler and two real workers (``dask
scheduler``, ``dask worker --nworkers 1``), each in a folder of its own (its "host": the REC
``job`` is a path from each worker's working directory), RANKS ranks (half a host) of
benchmarks/paced_rank.c (10 steps/s, 200 ranges a step of 20 names) under ``nvtx-tf record``
for SECONDS s, all starting together; the client loop of ``watch --json`` (interval 0.5 s:
:class:`Watch` over a :class:`HostsTailer`, as the command runs it) in this process, and side
by side a local ``watch --json`` of the same recordings (this machine sees both "hosts").

Printed: the step lines and their latency (arrival - end_ns: median, p95); the readers'
answers in bytes per rank-step (their payload, exact), and the bytes the client's sockets to
the scheduler and workers received while the ranks stepped (``ss -ti``'s bytes_received:
Dask's framing of each call and its heartbeats too).

python benchmarks/bench_watch_hosts.py [--ranks 8] [--seconds 15]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from _programs import build_program  # noqa: E402

HOSTS = ("hostA", "hostB")


def _cli(*args) -> list[str]:
    return [sys.executable, "-m", "nvtx_plugins_tf", *map(str, args)]


def _dask(*args) -> list[str]:
    return [str(Path(sys.executable).parent / "dask"), *args]


def start_cluster(tmp: Path) -> tuple[str, list[subprocess.Popen]]:
    """A scheduler and a worker per host folder (tmp/hostA, tmp/hostB): (address, processes)."""
    env = {**os.environ, "DASK_LOGGING__DISTRIBUTED": "critical"}
    info = tmp / "scheduler.json"
    quiet = {"env": env, "stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    procs = [subprocess.Popen(_dask("scheduler", "--scheduler-file", info, "--port", "0", "--no-dashboard",
                                    "--host", "127.0.0.1"), **quiet)]  # fmt: skip
    while not info.exists():
        time.sleep(0.1)
    for host in HOSTS:
        (tmp / host / "job").mkdir(parents=True)
        procs.append(subprocess.Popen(_dask("worker", "--scheduler-file", info, "--nworkers", "1", "--nthreads", "2",
                                            "--name", host, "--no-dashboard", "--no-nanny", "--host", "127.0.0.1"),
                                      cwd=tmp / host, **quiet))  # fmt: skip
    return json.loads(info.read_text())["address"], procs


def wire_bytes(ports: set[int]) -> int:
    """Bytes this process's TCP sockets to ``ports`` have received (``ss -tinp``'s bytes_received)."""
    out = subprocess.run(["ss", "-tinpH", "state", "established"], capture_output=True, text=True).stdout
    total, peer = 0, None
    for line in out.splitlines():
        if not line.startswith((" ", "\t")):
            fields = line.split()
            mine = f"pid={os.getpid()}," in line
            peer = int(fields[3].rsplit(":", 1)[1]) if mine and len(fields) > 3 else None
        elif peer in ports:
            found = re.search(r"bytes_received:(\d+)", line)
            total += int(found[1]) if found else 0
    return total


def run(tmp: Path, ranks: int, seconds: float) -> None:
    from nvtx_plugins_tf.recorder.analysis.engines import scheduler_client
    from nvtx_plugins_tf.recorder.watch import Watch
    from nvtx_plugins_tf.recorder.watch.hosts import HostsTailer

    exe = build_program("paced_rank.c", tmp / "paced_rank")
    address, cluster = start_cluster(tmp)
    ready, go = tmp / "ready", tmp / "go"
    ready.mkdir()
    try:
        with scheduler_client(address) as client:
            client.wait_for_workers(len(HOSTS), timeout=120)
            tailer = HostsTailer(client, ["job"])
            watch = Watch([], tailer=tailer)
            procs = [
                subprocess.Popen(
                    _cli(
                        "record",
                        "-o",
                        tmp / HOSTS[r % 2] / "job" / f"rank{r}",
                        "--export",
                        "json",
                        "--",
                        exe,
                        ready / str(r),
                        go,
                        seconds,
                    ),
                    stdout=subprocess.DEVNULL,
                )  # fmt: skip
                for r in range(ranks)
            ]
            # side by side: a local watch of the same recordings (this machine sees both "hosts")
            local = subprocess.Popen(_cli("watch", tmp / "hostA" / "job", tmp / "hostB" / "job", "--json",
                                          "--until-done"), stdout=subprocess.PIPE, text=True)  # fmt: skip
            local_lines: list[tuple[int, str]] = []
            reader = threading.Thread(target=lambda: local_lines.extend((time.time_ns(), x) for x in local.stdout))
            reader.start()
            while len(os.listdir(ready)) < ranks:
                time.sleep(0.05)
            # (the scheduler's port too: a client that is not direct to its workers calls actors through it)
            ports = {int(a.rsplit(":", 1)[1]) for a in [address, *tailer.readers]}
            wire0, steps0 = wire_bytes(ports), tailer.steps
            go.touch()
            load = os.getloadavg()[0]
            arrivals = []
            while not watch.done:
                began = time.monotonic()
                for obj in watch.poll():
                    if obj["kind"] == "step":
                        arrivals.append(time.time_ns() - obj["end_ns"])
                time.sleep(max(0.0, 0.5 - (time.monotonic() - began)))
            wire = wire_bytes(ports) - wire0
            for p in procs:
                p.wait()
            tailer.close()
            local.wait()
            reader.join()
    finally:
        for p in cluster:
            p.terminate()
        for p in cluster:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
    latency = sorted(a / 1e9 for a in arrivals)
    p95 = latency[int(0.95 * (len(latency) - 1))]
    steps = [(t, json.loads(x)) for t, x in local_lines]
    mine = sorted((t - o["end_ns"]) / 1e9 for t, o in steps if o["kind"] == "step")
    print(f"{ranks} ranks on 2 hosts x 10 steps/s x 200 ranges a step (20 names), {seconds:g} s, load {load:.1f}")
    print(f"  --scheduler: {len(latency)} step lines; latency median {statistics.median(latency):.3f} s, "
          f"p95 {p95:.3f} s")  # fmt: skip
    print(f"  a local watch of the same recordings, at once: {len(mine)} step lines; latency median "
          f"{statistics.median(mine):.3f} s, p95 {mine[int(0.95 * (len(mine) - 1))]:.3f} s")  # fmt: skip
    print(f"  readers' answers: {tailer.received:,} bytes for {tailer.steps} rank-steps: "
          f"{tailer.received / max(tailer.steps, 1):.0f} bytes a rank-step")  # fmt: skip
    stepped = max(tailer.steps - steps0, 1)
    print(f"  the client's sockets to the scheduler and workers received {wire:,} bytes while the ranks stepped "
          f"(Dask's framing, heartbeats too): {wire / stepped:.0f} bytes a rank-step")  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=15.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        run(Path(tmp), args.ranks, args.seconds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
