"""Many ranks at once: ``nvtx-tf analyze`` (:func:`analyze`). Each input (a recording, or an
export: ours or nsys's) is mapped to its ranks' partial results where it is read
(:mod:`.mapper`, one task per input: in this process, or on Dask: :mod:`.engines`), and one
reducer makes the tables (:mod:`.reduce`): ``all_stats`` and ``rank_stats`` as the
``nvtx_sum`` recipe's, ``pace`` as the ``nvtx_pace`` recipe's, and a summary naming the
slowest rank. The same code on one process or a cluster, as NVIDIA's recipes.
"""

from __future__ import annotations

from pathlib import Path

from . import heatmap
from .engines import EngineUnavailable, run_mappers, terminal_progress
from .inputs import InputError, expand_inputs
from .mapper import DEFAULT_STEPS, StepSpec
from .reduce import Tables, reduce_results, summary_lines, write_tables

__all__ = [
    "analyze",
    "Analysis",
    "StepSpec",
    "DEFAULT_STEPS",
    "InputError",
    "EngineUnavailable",
    "expand_inputs",
    "terminal_progress",
]


class Analysis:
    """What :func:`analyze` made: the ``tables`` (:class:`~.reduce.Tables`), the files
    ``written`` and the ``summary`` lines."""

    def __init__(self, tables: Tables, written: list[Path]):
        self.tables = tables
        self.written = written
        self.summary = summary_lines(tables)


def analyze(
    inputs: list,
    outdir,
    *,
    step: str | None = None,
    workers: int | None = None,
    scheduler: str | None = None,
    progress=None,
) -> Analysis:
    """Analyze the ``inputs`` (paths or command-line values: see :func:`.inputs.expand_inputs`)
    into ``outdir``. ``step``: ``NAME[@DOMAIN]`` of the step ranges (default: the first of
    :data:`DEFAULT_STEPS` present). ``workers``: a LocalCluster of that many processes;
    ``scheduler``: a running Dask cluster. Raises InputError when no input is readable."""
    paths = expand_inputs([str(i) for i in inputs])
    spec = StepSpec.parse(step) if step else None
    heatmap.preload()
    ranks, left_out = run_mappers(paths, spec, workers=workers, scheduler=scheduler, progress=progress)
    if not ranks and left_out:
        raise InputError(f"no input could be read ({len(left_out)}); first: {left_out[0]}")
    tables = reduce_results(ranks, left_out)
    return Analysis(tables, write_tables(tables, outdir))
