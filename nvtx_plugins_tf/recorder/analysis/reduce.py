"""The reducer of ``analyze``: the ranks' partial results (:mod:`.mapper`) into the output
tables, column by column: ``rank_stats`` and ``all_stats`` (:mod:`.stats`), ``pace``
(:mod:`.pace`), ``stragglers`` (:mod:`.stragglers`); written by :mod:`.writing`, summed up by
:mod:`.summary`.

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

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import pyarrow as pa

from .._arrays import array
from .mapper import RankResult
from .pace import pace_columns
from .stats import name_ids, stats_columns
from .stragglers import Named, named_steps, straggler_columns

__all__ = ["Tables", "heatmap_job", "reduce_results"]


@dataclass
class Tables:
    ranks: list[RankResult]
    rank_stats: pa.Table
    all_stats: pa.Table
    pace: pa.Table
    stragglers: pa.Table
    left_out: list[str] = field(default_factory=list)
    named: Named | None = None  #: the stragglers' rows as numbers (the summary reads them)


def reduce_results(ranks: list[RankResult], left_out: list[str] | None = None) -> Tables:
    """The ranks' partial results (in any order) into the four tables."""
    ranks = _in_order(ranks)
    # every rank's rows, and each row's range across the ranks (its first appearance's order)
    names = name_ids(ranks)
    # the stragglers' numpy passes over [rank, step, name] (they leave the GIL free) and their
    # text column (Arrow's kernels, pyarrow.compute imported there when a long job needs it) in
    # a thread beside the statistics and the pace: the reduce is the run's one serial part
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="nvtx-tf-stragglers") as pool:
        stragglers = pool.submit(_stragglers, ranks, names)
        rs, al = stats_columns(ranks, names)
        pc = pace_columns(ranks, names)
        named, st = stragglers.result()
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


_TEXT = {"Text", "Domain", "RankName", "File", "Name", "TopRanges"}


def _stragglers(ranks: list[RankResult], names) -> tuple[Named, dict]:
    """The stragglers' rows as numbers (:class:`Named`) and as the table's columns."""
    named = named_steps(ranks, names.gid, names.keys)
    return named, straggler_columns(ranks, named)


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
