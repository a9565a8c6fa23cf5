"""Where the mappers run (:mod:`.mapper`, one task per input): in this process (the default,
no service: one thread per core), on a ``dask.distributed`` LocalCluster this process starts (``workers``), or on a
running Dask cluster (``scheduler``), as the recipes' ``dask-futures`` mode. The results are
the same on every engine: the reducer gets the same partial results, in input order.

An input that cannot be read is left out with one line naming it; the others still count.
"""

from __future__ import annotations

import concurrent.futures
import os
import sqlite3
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from .mapper import RankResult, StepSpec, map_input

__all__ = ["EngineUnavailable", "run_mappers", "embedded_threads"]


def embedded_threads() -> int:
    """The embedded engine's threads: one per core this process may run on."""
    return max(1, len(os.sched_getaffinity(0)))


class EngineUnavailable(RuntimeError):
    """The Dask engine cannot be had: the extra is missing or the scheduler cannot be reached."""


def _safe_map(path: str, step: StepSpec | None) -> tuple[list[RankResult], str | None]:
    """map_input, its failure as a line instead of an exception (across processes too)."""
    try:
        return map_input(path, step), None
    except (OSError, ValueError, sqlite3.Error) as exc:
        text = str(exc)  # (named once: the loaders' messages often start with the path)
        return [], text if text.startswith(f"{path}: ") else f"{path}: {text}"


def _client(workers: int | None, scheduler: str | None):
    try:
        from distributed import Client, LocalCluster
    except ImportError as exc:
        raise EngineUnavailable("the Dask engine needs the 'dask' extra: pip install 'nvtx_plugins_tf[dask]'") from exc
    if scheduler:
        try:
            return Client(scheduler, timeout="10s"), None
        except (OSError, TimeoutError) as exc:
            raise EngineUnavailable(f"cannot reach the Dask scheduler {scheduler}: {exc}") from exc
    cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None)
    return Client(cluster), cluster


def run_mappers(
    inputs: list[Path],
    step: StepSpec | None = None,
    *,
    workers: int | None = None,
    scheduler: str | None = None,
    progress: Callable[[int, int, int], None] | None = None,
) -> tuple[list[RankResult], list[str]]:
    """(every rank's results in input order, the lines of the inputs left out)."""
    paths = [str(p) for p in inputs]
    results: list[tuple[list[RankResult], str | None] | None] = [None] * len(paths)
    done = events = 0
    local = workers is None and scheduler is None
    for i, result in _in_threads(paths, step) if local else _on_dask(paths, step, workers, scheduler):
        results[i] = result
        done += 1
        events += sum(r.events for r in result[0])
        if progress:
            progress(done, len(paths), events)
    ranks = [r for res in results for r in res[0]]
    left_out = [res[1] for res in results if res[1]]
    return ranks, left_out


def _in_threads(paths: list[str], step: StepSpec | None):
    """(input index, its result) as each is done, mapped by threads of this process: the
    reading (native decoder, pyarrow) and numpy's sorts release the GIL, so two cores give
    1.7x one's ranges/s (benchmarks/bench_analyze.py); memory is that of as many inputs as
    threads."""
    with ThreadPoolExecutor(max_workers=embedded_threads()) as pool:
        futures = {pool.submit(_safe_map, path, step): i for i, path in enumerate(paths)}
        for future in concurrent.futures.as_completed(futures):
            yield futures[future], future.result()


def _on_dask(paths: list[str], step: StepSpec | None, workers: int | None, scheduler: str | None):
    """(input index, its result) as each is done, mapped by one Dask task each."""
    from distributed import as_completed

    client, cluster = _client(workers, scheduler)
    try:
        futures = client.map(_safe_map, paths, step=step, pure=False)
        index = {f.key: i for i, f in enumerate(futures)}
        for future in as_completed(futures):
            yield index[future.key], future.result()
    finally:
        client.close()
        if cluster is not None:
            cluster.close()


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
