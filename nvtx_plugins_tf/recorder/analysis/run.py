"""One analysis: the inputs mapped (:mod:`.engines`), reduced (:mod:`.reduce`), summed up
(:mod:`.summary`), checked and written (:mod:`.writing`): :func:`compute`, :func:`analyze` and
what they make, :class:`Analysis`."""

from __future__ import annotations

import importlib
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from . import painter
from .engines import run_mappers
from .inputs import InputError, expand_inputs
from .mapper import StepSpec
from .ranks import distinct_names, on_one_clock, once_each, step_candidates

if TYPE_CHECKING:
    from .reduce import Tables

#: what the reduce and the writing import (pyarrow.parquet, the tables' modules), imported by
#: :func:`compute` in a thread while the inputs are mapped (the mappers leave the GIL free),
#: started once every input is given out: on Dask, after its import and its cluster's start,
#: which hold the GIL and would wait for this thread's imports
_AFTER_MAPPING = ("reduce", "summary", "writing")


def _import_after_mapping() -> None:
    for name in _AFTER_MAPPING:
        importlib.import_module(f".{name}", __package__)


__all__ = ["Analysis", "NothingToAnalyze", "StepNotFound", "analyze", "compute"]


class NothingToAnalyze(ValueError):
    """The inputs hold no NVTX range (nothing is written)."""


class StepNotFound(ValueError):
    """``step`` names no range of the inputs (the message lists the step-like names there)."""


class Analysis:
    """What :func:`compute` made: the ``tables`` (:class:`~.reduce.Tables`), the ``summary``
    lines, the ``damaged`` inputs ("PATH: what", their intact events counted), the inputs
    ``counted_once`` (the same rank as an earlier input: "PATH: ..."), and after
    :meth:`write`, the files ``written``; ``notes``: lines on the engine (a Dask worker that
    cannot see some inputs: the others read them)."""

    def __init__(self, tables: Tables, damaged: list[str], counted_once: list[str], step: StepSpec | None = None):
        self.tables = tables
        self.damaged = damaged
        self.counted_once = counted_once
        self.step = step
        self.notes: list[str] = []
        self.written: list[Path] = []
        from .summary import summary_lines

        self.summary = summary_lines(tables)
        self.painter: painter.Painter | None = None  #: drawing the heatmap of these tables

    def check(self) -> None:
        """Raises :class:`NothingToAnalyze` without a range, :class:`StepNotFound` when the
        step asked for names no range: nothing is written then."""
        ranks = self.tables.ranks
        if not ranks or not any(r.events for r in ranks):
            raise NothingToAnalyze("no NVTX ranges in the inputs: nothing to analyze")
        if self.step is not None and not any(r.n_steps for r in ranks):
            raise StepNotFound(f"--step {str(self.step)!r}: {step_candidates(self.step, ranks)}")

    def write(self, outdir, *, csv: bool = False) -> list[Path]:
        """The tables (as .parquet, and .csv with ``csv``) and heatmap.png into ``outdir``, all
        at once (:func:`.writing.write_tables`)."""
        from .writing import write_tables

        self.written = write_tables(self.tables, outdir, self.painter, csv=csv)
        return self.written


def compute(
    inputs: list,
    *,
    step: str | None = None,
    workers: int | None = None,
    scheduler: str | None = None,
    progress=None,
) -> Analysis:
    """Map and reduce the ``inputs`` (paths or command-line values: see
    :func:`.inputs.expand_inputs`) without writing anything. ``step``: ``NAME[@DOMAIN]`` of
    the step ranges (default: the first of :data:`DEFAULT_STEPS` present). ``workers``: a
    LocalCluster in this process, of that many one-thread workers (closed once every result
    is in); ``scheduler``: a running Dask cluster. Raises
    InputError when no input is readable. A rank met twice (one file by two paths, a
    recording and its export) counts once; ranks of equal names from different folders are
    told apart by their folders (``hostA/rank0``); the recordings' ranks are put on one
    wall clock by merge's rule (:func:`.ranks.on_one_clock`)."""
    input_notes: list[str] = []
    paths = expand_inputs([str(i) for i in inputs], input_notes)
    spec = StepSpec.parse(step) if step else None
    importing = threading.Thread(target=_import_after_mapping, name="nvtx-tf-analyze-imports", daemon=True)
    ranks, left_out, notes = run_mappers(
        paths, spec, workers=workers, scheduler=scheduler, progress=progress, given_out=importing.start
    )
    if importing.ident is None:  # (no input given out: every input was left out at once)
        importing.start()
    importing.join()
    from .reduce import heatmap_job, reduce_results

    if not ranks and left_out:
        raise InputError(f"no input could be read ({len(left_out)}); first: {left_out[0]}")
    ranks, counted_once = once_each(ranks)
    distinct_names(ranks)
    on_one_clock(ranks)
    damaged = list({r.file: f"{r.file}: {r.damage}" for r in ranks if r.damage}.values())
    child = painter.current()
    if child is not None:  # (the heatmap drawn while the ranks are reduced and the tables written)
        job = heatmap_job(ranks)  # (the ranks in the tables' order)
        if job is None or not child.paint(*job):
            painter.stop()  # (nothing for it to draw: drawn here, if at all)
            child = None
    analysis = Analysis(reduce_results(ranks, left_out), damaged, counted_once, spec)
    analysis.notes = input_notes + notes
    analysis.painter = child
    return analysis


def analyze(
    inputs: list,
    outdir,
    *,
    step: str | None = None,
    workers: int | None = None,
    scheduler: str | None = None,
    progress=None,
    csv: bool = False,
) -> Analysis:
    """:func:`compute`, :meth:`Analysis.check`, then the outputs written into ``outdir`` all
    at once (:meth:`Analysis.write`; the tables as .csv too with ``csv``): nothing is written
    when an error is raised."""
    analysis = compute(inputs, step=step, workers=workers, scheduler=scheduler, progress=progress)
    analysis.check()
    analysis.write(outdir, csv=csv)
    return analysis
