"""The runs of ``compare`` read from recordings and exports: each command-line run (what
``analyze`` takes: a recording, an export, a folder of them) is expanded and mapped by
``analyze``'s own code (:func:`..analysis.engines.run_mappers`: in this process, or on Dask with
``workers``/``scheduler``), all runs' inputs in one pass, and made a :class:`~.data.Run`: each
rank's step durations and the exclusive and inclusive time of each range in each step
(``step_work``, ``step_incl``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..analysis.engines import run_mappers
from ..analysis.inputs import InputError, expand_inputs
from ..analysis.mapper import RankResult, StepSpec
from ..analysis.ranks import distinct_names, once_each, step_candidates
from ..analysis.run import NothingToAnalyze, StepNotFound
from .data import Run

__all__ = ["Loaded", "load_runs", "range_label"]


@dataclass
class Loaded:
    """What :func:`load_runs` read: the ``baseline`` and ``candidate`` runs, and lines for the
    user: ``notes`` (warnings), ``damaged`` (inputs counted with their intact events only),
    ``left_out`` (inputs that could not be read)."""

    baseline: list[Run]
    candidate: list[Run]
    notes: list[str] = field(default_factory=list)
    damaged: list[str] = field(default_factory=list)
    left_out: list[str] = field(default_factory=list)


def range_label(domain: str, message: str) -> str:
    """A range's name in compare's tables: ``MESSAGE`` in the default domain, else ``MESSAGE@DOMAIN``."""
    return f"{message}@{domain}" if domain else message


def _run(name: str, ranks: list[RankResult], notes: list[str]) -> Run:
    """One run from its ranks' results: every rank's first n steps (n: the fewest a rank has)."""
    stepped = [r for r in ranks if r.n_steps]
    n = min(r.n_steps for r in stepped)
    if max(r.n_steps for r in stepped) != n:
        notes.append(
            f"run {name}: its ranks have {n} to {max(r.n_steps for r in stepped)} steps; the first {n} compared"
        )
    labels = sorted({range_label(*r.names[i]) for r in stepped for i in r.work_rows.tolist()})
    where = {label: j for j, label in enumerate(labels)}
    step = np.empty((len(stepped), n), dtype=np.int64)
    work = np.zeros((len(stepped), n, len(labels)), dtype=np.float64)
    incl = np.zeros_like(work)
    for k, r in enumerate(stepped):
        step[k] = (r.step_end - r.step_start)[:n]
        columns = [where[range_label(*r.names[i])] for i in r.work_rows.tolist()]
        if columns:
            np.add.at(work[k], (slice(None), columns), r.step_work[:n].astype(np.float64))
            np.add.at(incl[k], (slice(None), columns), r.step_incl[:n].astype(np.float64))
    return Run(name, step, work, labels, incl)


def load_runs(
    baseline: list[str],
    candidate: list[str],
    *,
    step: str | None = None,
    workers: int | None = None,
    scheduler: str | None = None,
    progress: Callable[[int, int, int], None] | None = None,
) -> Loaded:
    """The runs named by the command-line values ``baseline`` and ``candidate`` (each value one
    run). Raises :class:`InputError` (a run names nothing readable, or an input on both sides),
    :class:`NothingToAnalyze` (no ranges), :class:`StepNotFound` (a run without steps).
    ``progress(done, inputs, events)``: called as each input is mapped (analyze's progress line)."""
    notes: list[str] = []
    values = [*baseline, *candidate]
    per_run = [expand_inputs([v], notes) for v in values]
    owner: dict[str, int] = {}
    for i, paths in enumerate(per_run):
        for p in paths:
            if str(p) in owner:
                j = owner[str(p)]
                raise InputError(
                    f"{p} is in run {values[j]!r} and in run {values[i]!r}: give each recording to one run"
                )
            owner[str(p)] = i
    spec = StepSpec.parse(step) if step else None
    paths = [p for ps in per_run for p in ps]
    ranks, left_out, engine_notes = run_mappers(
        paths, spec, workers=workers, scheduler=scheduler, progress=progress, inclusive=True
    )
    notes += engine_notes
    if not any(r.events for r in ranks):
        if left_out:
            raise InputError(f"no input could be read ({len(left_out)}); first: {left_out[0]}")
        raise NothingToAnalyze("no NVTX ranges in the inputs: nothing to compare")
    by_run: list[list[RankResult]] = [[] for _ in values]
    for r in ranks:
        by_run[owner[str(Path(r.file))]].append(r)
    for i, mine in enumerate(by_run):  # (a rank twice in one run counts once; a copy on the other side is its own)
        by_run[i], counted_once = once_each(mine)
        notes += counted_once
        distinct_names(by_run[i])
    runs = []
    for value, mine, inputs in zip(values, by_run, per_run):
        if not mine and any(line.startswith(str(p)) for p in inputs for line in left_out):
            raise InputError(f"run {value!r}: none of its inputs could be read; first: {left_out[0]}")
        if not any(r.events for r in mine):
            raise NothingToAnalyze(f"run {value!r}: no NVTX ranges in it: nothing to compare")
        if not any(r.n_steps for r in mine):
            found = step_candidates(spec or StepSpec("step"), mine)
            raise StepNotFound(f"run {value!r} has no steps: {found}; name the step range with --step NAME[@DOMAIN]")
        runs.append(_run(value, mine, notes))
    damaged = list({r.file: f"{r.file}: {r.damage}" for run in by_run for r in run if r.damage}.values())
    return Loaded(runs[: len(baseline)], runs[len(baseline) :], notes, damaged, left_out)
