"""The reducer of ``analyze``: the ranks' partial results (:mod:`.mapper`) into the output
tables, written as Parquet and CSV with pyarrow, and the summary.

* ``rank_stats``: per rank and range, the ``nvtx_sum`` recipe's columns (``Text``, ``Count``,
  ``Mean``, ``Std``, ``Min``, ``Q1``, ``Median``, ``Q3``, ``Max``, ``Sum``, ``Rank``, ``File``)
  plus ``Domain`` and ``RankName``; exact (pandas' sample std and linear quartiles).
* ``all_stats``: per range over all ranks, the recipe's columns (``Std (approx)``, ``Q1
  (approx)`` ... as the recipe names them): Count, Sum, Min, Max and Mean exact; the standard
  deviation exact too (the ranks' parts merged as Chan et al.), where the recipe averages the
  ranks'; the quartiles from the merged sketches, within 1 % of an order statistic next to
  the exact quartile (:mod:`.sketch`), where the recipe takes the min/median/max of the ranks'.
* ``pace``: per rank and step, ``Start``/``End`` in ns from the earliest step of the run (the
  ranks on one wall clock, as ``merge`` aligns them: :func:`.ranks.on_one_clock`),
  ``Duration``, ``Gap`` (from the end of the rank's previous step; 0 for its first),
  ``StartEpochNs``, ``ClockOffsetNs`` (what was added to the rank's monotonic times: a
  recording's clock offset; null for an export, placed by its session's start).
* ``stragglers``: per step (its index, on every rank that has it), the rank the others waited
  for. Under synchronous data parallelism every rank's step lasts as long as the slowest
  one's (the others wait inside the all-reduce), so the step's length cannot name the
  straggler; its work can: for each range name, the part of the step its ranges cover on
  each rank (any thread), against the median of the ranks; a rank's
  ``Excess`` is the sum of what it spends above those medians, and the straggler is the rank
  with the largest excess. ``TopRanges``: the three ranges that account for most of it. No
  rank is named (``Rank``, ``RankName``, ``StepDuration`` and ``Excess`` null) when no rank
  has an excess (identical ranks) or two share the largest: a tie names nobody.
"""

from __future__ import annotations

import os
import re
import statistics
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from ..exports._arrays import Strings, array, repeated_strings
from . import sketch
from .mapper import RankResult
from .outdir import OUTPUTS, TABLES, OutdirError, staged
from .painter import Painter
from .stragglers import Named, named_steps, straggler_columns

__all__ = ["Tables", "reduce_results", "write_tables", "summary_lines"]


@dataclass
class Tables:
    ranks: list[RankResult]
    rank_stats: pa.Table
    all_stats: pa.Table
    pace: pa.Table
    stragglers: pa.Table
    left_out: list[str] = field(default_factory=list)
    named: Named | None = None  #: the stragglers' rows as numbers (the summary reads them)


def _std(n: np.ndarray, m2: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(n > 1, np.sqrt(m2 / np.maximum(n - 1, 1)), np.nan)


def _cat(parts: list[np.ndarray], dtype) -> np.ndarray:
    return np.concatenate(parts).astype(dtype, copy=False) if parts else np.zeros(0, dtype=dtype)


def _per_rank(ranks: list[RankResult], counts: list[int]) -> tuple[pa.Array, pa.Array]:
    """The RankName and File columns of tables whose rows come a rank after another, rank i's
    ``counts[i]`` rows: each rank's strings tiled (no Python string, nor gather, per row)."""
    return repeated_strings([r.name for r in ranks], counts), repeated_strings([r.file for r in ranks], counts)


def _name_ids(ranks: list[RankResult]) -> tuple[list[tuple[str, str]], list[np.ndarray]]:
    """(every range name across the ranks, in the order first met; each rank's rows' indexes
    in it). A rank whose names are the previous rank's, in the same order (the ranks of one
    program, mostly), takes its indexes: no lookup per name."""
    key_of: dict[tuple[str, str], int] = {}
    gid: list[np.ndarray] = []
    for i, r in enumerate(ranks):
        if i and r.names == ranks[i - 1].names:
            gid.append(gid[-1])
            continue
        fresh = [name for name in dict.fromkeys(r.names) if name not in key_of]
        key_of.update(zip(fresh, range(len(key_of), len(key_of) + len(fresh))))
        gid.append(np.fromiter(map(key_of.__getitem__, r.names), dtype=np.int64, count=len(r.names)))
    return list(key_of), gid


def reduce_results(ranks: list[RankResult], left_out: list[str] | None = None) -> Tables:
    ranks = _in_order(ranks)
    # every rank's rows, and each row's range across the ranks (its first appearance's order)
    # (looked up by C loops: a name a row, as many as the steps when each step's range is named
    # after it, 'step 123')
    keys, gid = _name_ids(ranks)
    count, total = _cat([r.count for r in ranks], np.int64), _cat([r.sum for r in ranks], np.int64)
    m2 = _cat([r.m2 for r in ranks], np.float64)
    rank_of = _cat([np.full(len(r.names), i) for i, r in enumerate(ranks)], np.int64)
    g, k = _cat(gid, np.int64), len(keys)
    rs_names, rs_files = _per_rank(ranks, [len(r.names) for r in ranks])
    pace_names, pace_files = _per_rank(ranks, [r.n_steps for r in ranks])
    messages, domains = Strings([m for _, m in keys]), Strings([d for d, _ in keys])
    rs = {
        "Text": messages.take(g),
        "Domain": domains.take(g),
        "Count": count,
        "Mean": total / np.maximum(count, 1),
        "Std": _std(count, m2),
        "Min": _cat([r.min for r in ranks], np.int64),
        "Q1": _cat([r.q1 for r in ranks], np.float64),
        "Median": _cat([r.median for r in ranks], np.float64),
        "Q3": _cat([r.q3 for r in ranks], np.float64),
        "Max": _cat([r.max for r in ranks], np.int64),
        "Sum": total,
        "Rank": rank_of,
        "RankName": rs_names,
        "File": rs_files,
    }
    # all ranks: count, sum, min, max exact; m2 by the parallel-axis theorem (Chan et al.):
    # the ranks' squared deviations plus each rank's count times its mean's distance to the mean
    n = np.bincount(g, weights=count, minlength=k).astype(np.int64)
    sums = np.zeros(k, dtype=np.int64)
    np.add.at(sums, g, total)
    mins, maxs = np.full(k, np.iinfo(np.int64).max), np.full(k, np.iinfo(np.int64).min)
    np.minimum.at(mins, g, rs["Min"])
    np.maximum.at(maxs, g, rs["Max"])
    mean = sums / np.maximum(n, 1)
    spread = np.bincount(g, weights=m2 + count * np.square(rs["Mean"] - mean[g]), minlength=k)
    sketch_g = _cat([gid[i][r.sketch_row] for i, r in enumerate(ranks)], np.int64)
    quartiles = sketch.merged_quantiles(
        sketch_g, _cat([r.sketch_key for r in ranks], np.int64), _cat([r.sketch_count for r in ranks], np.int64),
        k, (0.25, 0.5, 0.75),
    )  # fmt: skip
    order = np.argsort(-sums, kind="stable")
    al = {
        "Text": messages.take(order),
        "Domain": domains.take(order),
        "Count": n[order],
        "Mean": mean[order],
        "Std (approx)": _std(n, spread)[order],
        "Min": mins[order],
        "Q1 (approx)": quartiles[order, 0],
        "Median (approx)": quartiles[order, 1],
        "Q3 (approx)": quartiles[order, 2],
        "Max": maxs[order],
        "Sum": sums[order],
    }
    first = min((int(r.step_start.min()) for r in ranks if r.n_steps), default=0)
    gaps = [np.concatenate([[0], r.step_start[1:] - r.step_end[:-1]]) if r.n_steps else _I64 for r in ranks]
    offsets = np.cumsum([0] + [len(r.names) for r in ranks])[:-1]  # each rank's first row in rs
    pc = {
        "Rank": _cat([np.full(r.n_steps, i) for i, r in enumerate(ranks)], np.int64),
        "RankName": pace_names,
        "File": pace_files,
        "Step": _cat([np.arange(r.n_steps) for r in ranks], np.int64),
        "Name": messages.take(g[_cat([r.step_row + o for r, o in zip(ranks, offsets)], np.int64)]),
        "Start": _cat([r.step_start - first for r in ranks], np.int64),
        "End": _cat([r.step_end - first for r in ranks], np.int64),
        "Duration": _cat([r.step_end - r.step_start for r in ranks], np.int64),
        "Gap": _cat(gaps, np.int64),
        "StartEpochNs": _cat([r.step_start for r in ranks], np.int64),
        "ClockOffsetNs": array(
            _cat([np.full(r.n_steps, r.clock_offset or 0) for r in ranks], np.int64),
            pa.int64(),
            _cat([np.full(r.n_steps, r.clock_offset is None) for r in ranks], bool),
        ),
    }
    named = named_steps(ranks, gid, keys)
    st = straggler_columns(ranks, named)
    ints = {"Count", "Min", "Max", "Sum", "Rank", "Step", "Start", "End", "Duration", "Gap", "StartEpochNs"}
    ints |= {"Ranks", "StepDuration", "MedianStepDuration", "Excess"}

    def table(columns: dict) -> pa.Table:
        return pa.table(
            {
                k: v
                if isinstance(v, pa.Array)
                else array(v, pa.int64() if k in ints else (pa.string() if k in _TEXT else pa.float64()))
                for k, v in columns.items()
            }
        )

    return Tables(ranks, table(rs), table(al), table(pc), table(st), list(left_out or []), named)


_I64 = np.zeros(0, dtype=np.int64)
_TEXT = {"Text", "Domain", "RankName", "File", "Name", "TopRanges"}


def write_tables(tables: Tables, outdir, painter: Painter | None = None) -> list[Path]:
    """OUTDIR/{all_stats,rank_stats,pace,stragglers}.{parquet,csv} and heatmap.png (with
    Pillow, when there are steps), all at once (:mod:`.outdir`: an error, a full disk or a
    signal leaves OUTDIR as it was; an earlier run's heatmap.png goes when this one draws
    none); returns the files written. The heatmap is drawn while the tables are written: by
    ``painter``, the command's process sent these tables' :func:`heatmap_job` (:mod:`.painter`),
    else in a thread (pyarrow's writers leave the GIL free). Raises
    :class:`.outdir.OutdirError` naming the output that could not be written."""
    outdir = Path(outdir)
    job = painter.sent if painter is not None else heatmap_job(tables.ranks)
    with staged(outdir) as (folder, commit):
        names = []
        output = folder / "heatmap.png"
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="nvtx-tf-heatmap") as pool:
            heatmap = pool.submit(_draw_here, job, output) if job is not None and painter is None else None
            try:
                names += _write_files(tables, folder)
                if job is not None:
                    names.append("heatmap.png")  # (named before it is written: an error names it)
                    if not (_painted(painter, job, output) if painter is not None else heatmap.result()):
                        names.pop()  # (no Pillow)
            except OSError as exc:
                name = exc.filename if isinstance(exc.filename, str) and exc.filename in OUTPUTS else names[-1]
                raise OutdirError(f"cannot write {outdir / name}: {_reason(exc)}") from exc
            finally:
                if heatmap is not None:
                    heatmap.cancel()
                if painter is not None:
                    painter.close()  # (killed and reaped, if need be, before the hidden folder goes)
        commit(names)
    return [outdir / name for name in names]


def _write_files(tables: Tables, folder: Path) -> list[str]:
    """The tables as Parquet and CSV files in ``folder``, the largest first, in a thread a core
    (pyarrow's writers leave the GIL free); their names, in :data:`~.outdir.OUTPUTS`' order.
    An OSError is raised with ``filename`` the file's name."""
    jobs = [(f"{name}.{suffix}", getattr(tables, name), write) for name in TABLES for suffix, write in _WRITERS]

    def write_one(job) -> None:
        name, table, write = job
        try:
            # (a file of Python's: a path of any bytes, as Linux has them; pyarrow's own
            # opening wants UTF-8)
            with open(folder / name, "wb") as file:
                write(table, file)
        except OSError as exc:
            exc.filename = name
            raise

    largest_first = sorted(jobs, key=lambda job: -job[1].num_rows)
    with ThreadPoolExecutor(max_workers=max(1, min(2, len(os.sched_getaffinity(0))))) as pool:
        for done in [pool.submit(write_one, job) for job in largest_first]:
            done.result()
    return [name for name, _, _ in jobs]


_WRITERS = (("parquet", pq.write_table), ("csv", pacsv.write_csv))


def heatmap_job(ranks: list[RankResult]) -> tuple[list, list[str], str] | None:
    """heatmap.png's (step durations per rank, rank names, title), the ranks in the tables'
    order (:func:`_in_order`); None when no rank has steps. :mod:`.run` sends it to the
    painter process (:mod:`.painter`) as soon as the inputs are mapped."""
    stepped = [r for r in _in_order(ranks) if r.n_steps]
    if not stepped:
        return None
    durations = [r.step_end - r.step_start for r in stepped]
    title = f"{len(stepped)} ranks, steps {stepped[0].step_name!r}: duration against the step's median"
    return durations, [r.name for r in stepped], title


def _in_order(ranks: list[RankResult]) -> list[RankResult]:
    """The ranks in the tables' order: by input, then process."""
    return sorted(ranks, key=lambda r: (r.file, r.pid))


def _painted(painter: Painter, job: tuple, output: Path) -> bool:
    """heatmap.png written from the PNG ``painter`` drew, or drawn here when it could not (as
    without it); False without Pillow."""
    png = painter.wait()
    if png is None:
        return _draw_here(job, output)
    output.write_bytes(png)
    return True


def _draw_here(job: tuple, output: Path) -> bool:
    """heatmap.png drawn by the calling thread; False without Pillow."""
    from . import heatmap

    if not heatmap.available():
        return False
    heatmap.draw_heatmap(job[0], job[1], output, job[2])
    return True


def _reason(exc: OSError) -> str:
    """An OSError's reason in the system's words (pyarrow's carry the errno in their text)."""
    found = re.search(r"\[errno (\d+)\]", str(exc), re.IGNORECASE)
    number = exc.errno or (int(found[1]) if found else None)
    return os.strerror(number) if number else str(exc)


def _ms(ns: float) -> str:
    return f"{ns / 1e6:,.2f} ms"


def _clock_lines(stepped: list[RankResult]) -> list[str]:
    """A line when the recordings' ranks ran on several clocks (hosts, time namespaces): how
    many, and each one's offset (realtime - monotonic) against the first rank's (up to three);
    one naming the ranks without a wall-clock anchor among others that have one."""
    first: dict[int, str] = {}
    for rank in stepped:
        if rank.clock_offset is not None:
            first.setdefault(rank.clock_offset, rank.name)
    lines = []
    if len(first) >= 2:
        (base, base_name), *others = first.items()
        apart = ", ".join(f"{name} {(offset - base) / 1e9:+,.6f} s" for offset, name in others[:3])
        more = f" and {len(others) - 3} more" if len(others) > 3 else ""
        lines.append(
            f"clocks: {len(first)}, on one wall clock by their realtime anchors as merge aligns them "
            f"(pace's ClockOffsetNs); against {base_name}'s: {apart}{more}"
        )
    lost = [r.name for r in stepped if not r.aligned]
    if lost and len(lost) < len(stepped):
        more = f" and {len(lost) - 3} more" if len(lost) > 3 else ""
        lines.append(
            f"no wall-clock anchor (an older recorder, or a garbled header): {', '.join(lost[:3])}{more}; "
            "their pace times are their own sessions', not on the others' timeline"
        )
    return lines


def summary_lines(tables: Tables) -> list[str]:
    """At most ten lines: the run, its steps, the slowest rank and the ranges behind it."""
    ranks = tables.ranks
    events = sum(r.events for r in ranks)
    files = len({r.file for r in ranks})
    lines = [f"{len(ranks)} rank(s) in {files} input(s), {events:,} ranges" + (
        f"; {len(tables.left_out)} input(s) left out (first: {tables.left_out[0]})" if tables.left_out else ""
    )]  # fmt: skip
    stepped = [r for r in ranks if r.n_steps]
    if not stepped:
        lines.append("no step ranges (--step NAME[@DOMAIN] names them): no pace")
        return lines
    medians = {r.name: statistics.median((r.step_end - r.step_start).tolist()) for r in stepped}
    overall = statistics.median(medians.values())
    steps = max(r.n_steps for r in stepped)
    lines.append(f"steps: {stepped[0].step_name!r}, up to {steps} per rank; median step {_ms(overall)}")
    lines += _clock_lines(stepped)
    named = tables.named
    if named is None or not len(named.step):
        lines.append("one rank with steps: no straggler to name")
        return lines
    total = len(named.step)
    rows = np.flatnonzero(named.rank >= 0)
    if not len(rows):
        lines.append(f"no straggler: in none of {total} steps was one rank's work above the others'")
        return lines
    counts = np.bincount(named.rank[rows], minlength=len(ranks))
    first = np.full(len(ranks), total)  # (the step each rank is first named in: ties in that order)
    np.minimum.at(first, named.rank[rows], rows)
    most = int(counts.max())
    tied = np.flatnonzero(counts == most)
    tied = tied[np.argsort(first[tied], kind="stable")]
    if len(tied) > 1:
        names = ", ".join(ranks[int(rank)].name for rank in tied.tolist())
        lines.append(f"no single straggler: {names} each the rank the others waited for in {most} of {total} steps")
        return lines
    worst = int(tied[0])
    mine = named.rank == worst
    lines.append(
        f"straggler: {ranks[worst].name}, the rank the others waited for in {most} of {total} steps "
        f"(median excess {_ms(statistics.median(named.excess[mine].tolist()))} a step)"
    )
    # the ns of each range above the median, summed over the rank's steps by the label shown
    # (first met first among equal sums, as a dictionary fills)
    above = named.top_ns[mine]
    shown = above > 0
    if shown.any():
        label_of: dict[str, int] = {}
        ids = np.array([label_of.setdefault(label, len(label_of)) for label in named.labels], dtype=np.int64)
        labels = list(label_of)
        which = ids[named.top[mine][shown]]
        sums = np.bincount(which, weights=above[shown].astype(np.int64), minlength=len(labels))
        met = np.full(len(labels), len(which))
        np.minimum.at(met, which, np.arange(len(which)))
        top = [i for i in np.lexsort((met, -sums)).tolist() if met[i] < len(which)][:3]
        lines.append(
            "its ranges above the median rank, per step: "
            + ", ".join(f"{labels[i]} +{_ms(int(sums[i]) / int(mine.sum()))}" for i in top)
        )
    return lines
