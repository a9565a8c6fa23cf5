"""Where the mappers run (:mod:`.mapper`, one task per input): in this process (the default,
no service: one thread per core), on a ``dask.distributed`` LocalCluster this process starts (``workers``), or on a
running Dask cluster (``scheduler``), as the recipes' ``dask-futures`` mode. ``workers``' cluster
is in-process (its workers are threads of this process: :func:`_client` says why). The results are
the same on every engine: the reducer gets the same partial results, in input order.

An input that cannot be read is left out with one line naming it; the others still count.
"""

from __future__ import annotations

import contextlib
import os
import queue
import re
import sqlite3
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from ..._signals import held
from .mapper import RankResult, StepSpec, map_input
from .rank_result import arrow_memory_kept

__all__ = ["EngineUnavailable", "check_scheduler_address", "embedded_threads", "run_mappers", "scheduler_client"]


def embedded_threads() -> int:
    """The embedded engine's threads: one per core this process may run on."""
    return max(1, len(os.sched_getaffinity(0)))


#: Seconds ``--scheduler`` waits for a first worker (``NVTX_TF_ANALYZE_WORKER_WAIT`` sets it).
WORKER_WAIT_ENV = "NVTX_TF_ANALYZE_WORKER_WAIT"
WORKER_WAIT_S = 60.0

_ADDRESS = re.compile(r"(?:(?:tcp|tls|ws|wss|ucx)://)?(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+):(\d{1,5})")


class EngineUnavailable(RuntimeError):
    """The Dask engine cannot be had: the extra is missing, the scheduler cannot be reached
    or has no worker."""


def check_scheduler_address(address: str) -> None:
    """Raises ValueError (why, in words) unless ``address`` is a Dask scheduler's address
    another process can reach: ``[tcp|tls|ws|wss|ucx://]HOST:PORT``."""
    match = _ADDRESS.fullmatch(address)
    if not match or not 1 <= int(match[2]) <= 65535:
        raise ValueError(f"{address!r}: a Dask scheduler's address is tcp://HOST:PORT (PORT 1 to 65535)")


#: Seconds the scheduler has to greet a new connection (docs/cli.md, ``--scheduler``).
GREETING_WAIT_S = 10.0
_MAX_GREETING = 1 << 20  # (a Dask scheduler's first message: its handshake, some 100 bytes)


def check_speaks_dask(address: str, wait: float = GREETING_WAIT_S) -> None:
    """Raises EngineUnavailable (why, in one line) unless the service at ``address`` (a plain
    ``tcp://`` one: TLS, WebSocket and UCX cannot be told without speaking them) greets a new
    connection as a Dask scheduler does, within ``wait`` seconds: its handshake comes first, one
    message framed by its length (8 bytes), before it reads anything. A web server (a Dask
    dashboard's port) says nothing, or its first bytes make no such length. Nothing is sent;
    a signal ends the wait at once (the socket calls run the handler)."""
    import socket
    import struct

    match = _ADDRESS.fullmatch(address)
    if match is None or (address.partition("://")[0] if "://" in address else "tcp") != "tcp":
        return
    host, port = match[1].strip("[]"), int(match[2])
    why = None
    try:
        with socket.create_connection((host, port), timeout=wait) as sock:
            deadline = time.monotonic() + wait
            head = _receive(sock, 8, deadline)
            size = struct.unpack("<Q", head)[0] if len(head) == 8 else 0
            if len(head) < 8:
                why = f"it said nothing in {wait:g} s" if not head else "it closed the connection"
            elif not 0 < size <= _MAX_GREETING or len(_receive(sock, size, deadline)) < size:
                why = f"its first bytes {head!r} are no Dask message"
    except OSError as exc:
        raise EngineUnavailable(f"cannot reach the Dask scheduler {address}: {exc.strerror or exc}") from None
    if why is not None:
        raise EngineUnavailable(
            f"{address} does not speak Dask's protocol ({why}): give the scheduler's address "
            "(its port is usually 8786; 8787 is its dashboard's web page)"
        )


def _receive(sock, size: int, deadline: float) -> bytes:
    """Up to ``size`` bytes from ``sock`` before ``deadline`` (fewer: it closed, or the time is up)."""
    import socket

    data = bytearray()
    while len(data) < size:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        sock.settimeout(left)
        try:
            chunk = sock.recv(min(size - len(data), 1 << 16))
        except socket.timeout:
            break
        if not chunk:
            break
        data += chunk
    return bytes(data)


def _worker_wait() -> float:
    try:
        return max(0.0, float(os.environ.get(WORKER_WAIT_ENV, WORKER_WAIT_S)))
    except ValueError:
        return WORKER_WAIT_S


def _safe_map(path: str, step: StepSpec | None, inclusive: bool = False) -> tuple[list[RankResult], str | None]:
    """map_input, its failure as a line instead of an exception (across processes too); on a
    Dask worker, the line names the worker (it may see other files than this host)."""
    try:
        return map_input(path, step, inclusive=inclusive), None
    except (OSError, ValueError, sqlite3.Error) as exc:
        text = str(exc)  # (named once: the loaders' messages often start with the path)
        named = text if text.startswith(f"{path}: ") else f"{path}: {text}"
        return [], named + _on_worker()


def _on_worker() -> str:
    if "distributed" not in sys.modules:
        return ""
    from distributed import get_worker

    try:
        return f" (on the Dask worker {get_worker().address})"
    except ValueError:  # (not in a worker)
        return ""


def _quiet_dask() -> None:
    """Dask's own log lines (heartbeats of starved workers, a worker killed at shutdown, a
    task cancelled by a signal) and its warning that the port of the scheduler's HTTP server
    is taken (another cluster's: it picks another) are not the user's business: critical
    only, here and in the LocalCluster's worker processes (they read the environment when
    they import Dask)."""
    import logging
    import warnings

    os.environ.setdefault("DASK_LOGGING__DISTRIBUTED", "critical")
    logging.getLogger("distributed").setLevel(logging.CRITICAL)
    warnings.filterwarnings("ignore", message="Port .* is already in use", category=UserWarning)


_NO_DASK = "the Dask engine needs the 'dask' extra: pip install 'nvtx_plugins_tf[dask]'"


#: Dask's settings for ``--workers``' in-process cluster: the periodic work its servers do for
#: a dashboard or a long-lived cluster, which takes the GIL from the command's own threads
#: while the tasks run (docs/distributed.md): no statistical profiler in the workers (a thread
#: sampling every thread's stack every 10 ms), the event loops' liveness tick every second
#: instead of every 20 ms (it only warns of a blocked loop), the servers' CPU and memory
#: monitor once a minute instead of every 0.5 s (the dashboard's graphs). With
#: ``memory_limit=0``, the workers' memory monitor (every 0.1 s) is off too: in this process
#: it would measure the command's whole memory, not a worker's.
IN_PROCESS_CONFIG = {
    "distributed.worker.profile.enabled": False,
    "distributed.admin.tick.interval": "1s",
    "distributed.admin.system-monitor.interval": "60s",
}


def _client(workers: int | None, scheduler: str | None):
    _quiet_dask()
    try:
        from distributed import Client, LocalCluster
    except ImportError as exc:
        raise EngineUnavailable(_NO_DASK) from exc
    _quiet_dask()
    if scheduler is not None:
        try:
            return Client(scheduler, timeout=f"{GREETING_WAIT_S:g}s"), None
        except (OSError, TimeoutError) as exc:
            raise EngineUnavailable(f"cannot reach the Dask scheduler {scheduler}: {exc}") from exc
    # workers in this process (threads, one each, talking over Dask's in-process transport):
    # a task's result is handed over, not pickled, and the native mapper leaves the GIL free,
    # so N workers map on N cores as the embedded engine's threads do; the cluster is up in
    # 0.02 s and closed in 0.01 s, where worker processes forked from here took 0.4 s and 0.1 s
    # and each rank's result was pickled and sent over loopback (16 MB a rank at 83k steps;
    # docs/benchmarks.md, "Long jobs"). Still a dask.distributed cluster: a scheduler, N
    # workers, the tasks of --scheduler's path.
    import dask

    with dask.config.set(IN_PROCESS_CONFIG):  # (read as the scheduler and the workers start)
        cluster = LocalCluster(
            n_workers=workers, threads_per_worker=1, processes=False, dashboard_address=None, memory_limit=0
        )
        return Client(cluster), cluster


def _wait_for_workers(client, scheduler: str) -> None:
    """Until the scheduler has a worker (EngineUnavailable after :func:`_worker_wait` seconds);
    outside :func:`held`: a signal ends the wait."""
    wait = _worker_wait()
    try:
        client.wait_for_workers(1, timeout=wait)
    except TimeoutError:
        raise EngineUnavailable(f"no workers at {scheduler} after {wait:g} s") from None


@contextlib.contextmanager
def scheduler_client(scheduler: str):
    """A ``distributed.Client`` of the running Dask scheduler at ``scheduler`` that has a
    worker, checked as ``analyze --scheduler`` checks it (ValueError: not an address;
    :class:`EngineUnavailable`: no extra, it cannot be reached, it does not speak Dask's
    protocol, no worker came), closed quietly on leaving (its futures released: the tasks
    and actors it made are forgotten by the cluster)."""
    check_scheduler_address(scheduler)
    check_speaks_dask(scheduler)  # (before Dask's client, whose waits hold no signal)
    client = None
    try:
        with held():  # (a signal while Dask is imported or connects: handled once it can be closed)
            client, _ = _client(None, scheduler)
        _wait_for_workers(client, scheduler)
        yield client
    finally:
        if client is not None:
            with held(), contextlib.suppress(Exception):
                client.close(timeout=1)


def run_mappers(
    inputs: list[Path],
    step: StepSpec | None = None,
    *,
    workers: int | None = None,
    scheduler: str | None = None,
    progress: Callable[[int, int, int], None] | None = None,
    inclusive: bool = False,
    given_out: Callable[[], None] | None = None,
) -> tuple[list[RankResult], list[str], list[str]]:
    """(every rank's results in input order, the lines of the inputs left out, the lines of
    the Dask workers that cannot see some inputs: those are read by the others). Inputs are
    given to the workers as absolute paths. ``inclusive``: the ranks carry ``step_incl``
    (compare's; analyze does not ask: it is neither computed nor shipped). ``given_out``:
    called once every input is given to a mapper (the embedded engine's threads started, or
    Dask's tasks submitted: its cluster is up), before the first result is awaited."""
    paths = [os.path.abspath(p) for p in inputs]
    results: list[tuple[list[RankResult], str | None] | None] = [None] * len(paths)
    done = events = 0
    notes: list[str] = []
    local = workers is None and scheduler is None
    if local:
        mapped = _in_threads(paths, step, inclusive, given_out)
    else:
        mapped = _on_dask(paths, step, inclusive, workers, scheduler, notes, given_out)
    for i, result in mapped:
        results[i] = result
        done += 1
        events += sum(r.events for r in result[0])
        if progress:
            progress(done, len(paths), events)
    ranks = [r for res in results for r in res[0]]
    left_out = [res[1] for res in results if res[1]]
    return ranks, left_out, notes


def _in_threads(
    paths: list[str], step: StepSpec | None, inclusive: bool = False, given_out: Callable[[], None] | None = None
):
    """(input index, its result) as each is done, mapped by threads of this process: the
    reading (native decoder, pyarrow) and numpy's sorts release the GIL, so two cores give
    1.7x one's ranges/s (benchmarks/bench_analyze.py); memory is that of as many inputs as
    threads. The threads are daemons taking inputs from a queue: when the caller stops (a
    signal), no queued input is started and the process need not wait for the ones being
    read (they only read)."""
    todo: queue.SimpleQueue = queue.SimpleQueue()
    done: queue.SimpleQueue = queue.SimpleQueue()
    for item in enumerate(paths):
        todo.put(item)
    stop = threading.Event()

    def work() -> None:
        with arrow_memory_kept():  # (reused from one input to the next, handed back at the end)
            while not stop.is_set():
                try:
                    i, path = todo.get_nowait()
                except queue.Empty:
                    return
                try:
                    done.put((i, _safe_map(path, step, inclusive), None))
                except BaseException as exc:  # noqa: BLE001 - raised again by the caller's thread
                    done.put((i, None, exc))

    for k in range(min(embedded_threads(), len(paths))):
        threading.Thread(target=work, name=f"nvtx-tf-analyze-{k}", daemon=True).start()
    if given_out is not None:
        given_out()
    try:
        for _ in paths:
            i, result, exc = done.get()
            if exc is not None:
                raise exc
            yield i, result
    finally:
        stop.set()


#: what a Dask worker that misses inputs is told to do (docs/distributed.md, the path rule)
PATH_RULE = "give inputs on a path every worker sees"


def _unseen(paths: list[str]) -> tuple[list[int], str]:
    """On a worker: (the indexes of the ``paths`` it cannot see, why for the first)."""
    missing, why = [], ""
    for i, path in enumerate(paths):
        try:
            os.stat(path)
        except OSError as exc:
            missing.append(i)
            why = why or (exc.strerror or str(exc))
    return missing, why


def _where_seen(client, paths: list[str], notes: list[str]) -> tuple[list[list[str] | None], list[str]]:
    """(per input, the workers that see it (None: every worker does; []: none), the workers
    asked). A worker that misses some inputs is named in one line of ``notes``."""
    unseen = client.run(_unseen, paths)  # {worker address: (indexes, why)}: the workers there now
    blind = {w: set(m) for w, (m, _) in unseen.items() if m}
    for w, (missing, why) in sorted(unseen.items()):
        if missing:
            notes.append(
                f"the Dask worker {w} cannot see {len(missing)} of the {len(paths)} inputs (first: "
                f"{paths[missing[0]]}: {why}): they are read by the workers that see them; {PATH_RULE}"
            )
    if not blind:
        return [None] * len(paths), sorted(unseen)
    return [[w for w in sorted(unseen) if i not in blind.get(w, ())] for i in range(len(paths))], sorted(unseen)


def _retry(client, path: str, step: StepSpec | None, inclusive: bool, seen: list[str] | None):
    """A task for ``path`` on the workers that see it and are still there, strictly, after it
    failed: the loose restriction lets a busy scheduler give it to a worker that does not see
    it. None when every worker sees it (its failure is the input's) or none of those is left."""
    if not seen:
        return None
    present = [w for w in seen if w in client.scheduler_info(n_workers=-1)["workers"]]
    if not present:
        return None
    return client.submit(_safe_map, path, step, inclusive, workers=present, allow_other_workers=False, pure=False)


def _on_dask(
    paths: list[str],
    step: StepSpec | None,
    inclusive: bool,
    workers: int | None,
    scheduler: str | None,
    notes: list[str],
    given_out: Callable[[], None] | None = None,
):
    """(input index, its result) as each is done, mapped by one Dask task each, on the
    workers that see the input; on leaving early (a signal), the tasks not done are
    cancelled and the cluster closed quietly."""
    global _closing
    try:  # (the first import of Dask here: without the extra, exit 15 and the hint, not exit 1)
        from distributed import as_completed
    except ImportError as exc:
        raise EngineUnavailable(_NO_DASK) from exc

    client = cluster = None
    futures = []
    try:
        if scheduler is not None:  # (checked before Dask's client, whose waits hold no signal)
            check_scheduler_address(scheduler)
            check_speaks_dask(scheduler)
        with held():  # (a signal while Dask is imported or starts: handled once it can be closed quietly)
            client, cluster = _client(workers, scheduler)
        if scheduler is not None:
            _wait_for_workers(client, scheduler)
        seen_by, everyone = _where_seen(client, paths, notes) if scheduler is not None else ([None] * len(paths), [])
        if all(s is None for s in seen_by):
            futures = client.map(_safe_map, paths, step=step, inclusive=inclusive, pure=False)
            index = {f.key: i for i, f in enumerate(futures)}
        else:
            index = {}
            for i, (path, seen) in enumerate(zip(paths, seen_by)):
                if not seen:
                    yield i, ([], f"{path}: no Dask worker sees it ({', '.join(everyone)} cannot): {PATH_RULE}")
                    continue
                # (loose: should every worker that sees it leave, a task runs elsewhere and its
                # failure names that worker, rather than waiting for ever; a busy scheduler may
                # also give it to a blind worker: a failed task is tried once more, strictly on
                # the workers that see it still there, _retry)
                futures.append(
                    client.submit(_safe_map, path, step, inclusive, workers=seen, allow_other_workers=True, pure=False)
                )
                index[futures[-1].key] = i
        if given_out is not None:
            given_out()
        retried: set[int] = set()
        done = as_completed(futures)
        for future in done:
            i, (results, failure) = index[future.key], future.result()
            retry = _retry(client, paths[i], step, inclusive, seen_by[i]) if failure and i not in retried else None
            if retry is not None:
                retried.add(i)
                futures.append(retry)
                index[retry.key] = i
                done.add(retry)
                continue
            yield i, (results, failure)
        if cluster is not None:  # (every result in: the in-process cluster closes beside the reduce)
            _closing = threading.Thread(target=_close, args=(client, cluster), name="nvtx-tf-dask-close", daemon=True)
            _closing.start()
            client = cluster = None
    finally:
        if client is not None:
            with contextlib.suppress(Exception):
                client.cancel([f for f in futures if not f.done()])
        _close(client, cluster)


#: the thread closing the last ``--workers`` cluster whose results are all in (0.015 s of
#: GIL-bound work, not waited for before the reduce; on a signal it is closed at once)
_closing: threading.Thread | None = None


def _close(client, cluster) -> None:
    for closable in (client, cluster):
        if closable is not None:
            with contextlib.suppress(Exception):
                closable.close()


def terminal_progress(stream=sys.stderr) -> Callable[[int, int, int], None] | None:
    """A progress line on ``stream`` (inputs done / total, ranges/s) if it is a terminal."""
    if not stream.isatty():
        return None
    t0 = time.monotonic()

    def show(done: int, total: int, events: int) -> None:
        rate = events / max(time.monotonic() - t0, 1e-9)
        end = "\n" if done == total else ""
        stream.write(f"\rnvtx-tf: analyzed {done}/{total} inputs ({rate / 1e6:.1f}M ranges/s)\033[K{end}")
        stream.flush()

    return show
