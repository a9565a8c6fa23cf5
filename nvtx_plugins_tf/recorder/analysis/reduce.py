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
  ranks on one wall clock: each input's anchor), ``Duration``, ``Gap`` (from the end of the
  rank's previous step; 0 for its first), ``StartEpochNs``.
* ``stragglers``: per step (its index, on every rank that has it), the rank the others waited
  for. Under synchronous data parallelism every rank's step lasts as long as the slowest
  one's (the others wait inside the all-reduce), so the step's length cannot name the
  straggler; its work can: for each range name, the part of the step its ranges cover on
  each rank (any thread), against the median of the ranks; a rank's
  ``Excess`` is the sum of what it spends above those medians, and the straggler is the rank
  with the largest excess. ``TopRanges``: the three ranges that account for most of it.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from . import sketch
from .mapper import RankResult

__all__ = ["Tables", "reduce_results", "write_tables", "summary_lines"]


@dataclass
class Tables:
    ranks: list[RankResult]
    rank_stats: pa.Table
    all_stats: pa.Table
    pace: pa.Table
    stragglers: pa.Table
    left_out: list[str] = field(default_factory=list)


def _std(n: int, m2: float) -> float:
    return math.sqrt(m2 / (n - 1)) if n > 1 else math.nan


def reduce_results(ranks: list[RankResult], left_out: list[str] | None = None) -> Tables:
    ranks = sorted(ranks, key=lambda r: (r.file, r.pid))
    rs = {k: [] for k in ("Text", "Domain", "Count", "Mean", "Std", "Min", "Q1", "Median", "Q3", "Max", "Sum")}
    rs.update(Rank=[], RankName=[], File=[])
    merged: dict[tuple[str, str], dict] = {}
    for index, rank in enumerate(ranks):
        for s in rank.stats:
            for key, value in (
                ("Text", s.message), ("Domain", s.domain), ("Count", s.count), ("Mean", s.sum / s.count),
                ("Std", _std(s.count, s.m2)), ("Min", s.min), ("Q1", s.q1), ("Median", s.median), ("Q3", s.q3),
                ("Max", s.max), ("Sum", s.sum), ("Rank", index), ("RankName", rank.name), ("File", rank.file),
            ):  # fmt: skip
                rs[key].append(value)
            m = merged.setdefault((s.domain, s.message), {"n": 0, "sum": 0, "min": s.min, "max": s.max, "m2": 0.0})
            # Chan et al.: the two parts' squared deviations plus the shift between their means
            if m["n"]:
                delta = s.sum / s.count - m["sum"] / m["n"]
                m["m2"] += s.m2 + delta * delta * m["n"] * s.count / (m["n"] + s.count)
            else:
                m["m2"] = s.m2
            m["n"] += s.count
            m["sum"] += s.sum
            m["min"], m["max"] = min(m["min"], s.min), max(m["max"], s.max)
            m.setdefault("sketches", []).append(s.sketch)
    al = {k: [] for k in ("Text", "Domain", "Count", "Mean", "Std (approx)", "Min")}
    al.update({"Q1 (approx)": [], "Median (approx)": [], "Q3 (approx)": [], "Max": [], "Sum": []})
    for (domain, message), m in sorted(merged.items(), key=lambda kv: -kv[1]["sum"]):
        sk = sketch.merge(m["sketches"])
        for key, value in (
            ("Text", message), ("Domain", domain), ("Count", m["n"]), ("Mean", m["sum"] / m["n"]),
            ("Std (approx)", _std(m["n"], m["m2"])), ("Min", m["min"]), ("Q1 (approx)", sketch.quantile(sk, 0.25)),
            ("Median (approx)", sketch.quantile(sk, 0.5)), ("Q3 (approx)", sketch.quantile(sk, 0.75)),
            ("Max", m["max"]), ("Sum", m["sum"]),
        ):  # fmt: skip
            al[key].append(value)
    first = min((s[2] for r in ranks for s in r.steps), default=0)
    pc = {k: [] for k in ("Rank", "RankName", "File", "Step", "Name", "Start", "End", "Duration", "Gap")}
    pc["StartEpochNs"] = []
    for index, rank in enumerate(ranks):
        previous_end = None
        for step, name, start, end in rank.steps:
            for key, value in (
                ("Rank", index), ("RankName", rank.name), ("File", rank.file), ("Step", step), ("Name", name),
                ("Start", start - first), ("End", end - first), ("Duration", end - start),
                ("Gap", 0 if previous_end is None else start - previous_end), ("StartEpochNs", start),
            ):  # fmt: skip
                pc[key].append(value)
            previous_end = end
    st = _stragglers(ranks)
    ints = {"Count", "Min", "Max", "Sum", "Rank", "Step", "Start", "End", "Duration", "Gap", "StartEpochNs"}
    ints |= {"Ranks", "StepDuration", "MedianStepDuration", "Excess"}

    def table(columns: dict) -> pa.Table:
        return pa.table(
            {
                k: pa.array(v, pa.int64() if k in ints else (pa.string() if k in _TEXT else pa.float64()))
                for k, v in columns.items()
            }
        )

    return Tables(ranks, table(rs), table(al), table(pc), table(st), list(left_out or []))


_TEXT = {"Text", "Domain", "RankName", "File", "Name", "TopRanges"}


def _label(key: tuple[str, str]) -> str:
    return f"{key[0]}:{key[1]}" if key[0] else key[1]


def _stragglers(ranks: list[RankResult]) -> dict[str, list]:
    out = {k: [] for k in ("Step", "Ranks", "Rank", "RankName", "StepDuration", "MedianStepDuration", "Excess")}
    out["TopRanges"] = []
    steps = max((len(r.steps) for r in ranks), default=0)
    for i in range(steps):
        present = [(index, r) for index, r in enumerate(ranks) if i < len(r.steps) and i < len(r.step_work)]
        if len(present) < 2:
            continue
        keys = set().union(*(r.step_work[i] for _, r in present))
        medians = {k: statistics.median(r.step_work[i].get(k, 0) for _, r in present) for k in keys}
        best = None
        for index, r in present:
            above = {k: r.step_work[i].get(k, 0) - medians[k] for k in keys}
            excess = sum(v for v in above.values() if v > 0)
            if best is None or excess > best[0]:
                best = (excess, index, r, above)
        excess, index, r, above = best
        top = sorted(((v, k) for k, v in above.items() if v > 0), reverse=True)[:3]
        durations = [rr.steps[i][3] - rr.steps[i][2] for _, rr in present]
        for key, value in (
            ("Step", i), ("Ranks", len(present)), ("Rank", index), ("RankName", r.name),
            ("StepDuration", r.steps[i][3] - r.steps[i][2]), ("MedianStepDuration", int(statistics.median(durations))),
            ("Excess", int(excess)), ("TopRanges", "; ".join(f"{_label(k)} +{int(v)}" for v, k in top)),
        ):  # fmt: skip
            out[key].append(value)
    return out


def write_tables(tables: Tables, outdir) -> list[Path]:
    """OUTDIR/{all_stats,rank_stats,pace,stragglers}.{parquet,csv} and heatmap.png (with
    matplotlib, when there are steps); returns the files written."""
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    written = []
    for name in ("all_stats", "rank_stats", "pace", "stragglers"):
        t = getattr(tables, name)
        pq.write_table(t, outdir / f"{name}.parquet")
        pacsv.write_csv(t, outdir / f"{name}.csv")
        written += [outdir / f"{name}.parquet", outdir / f"{name}.csv"]
    stepped = [r for r in tables.ranks if r.steps]
    if stepped:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            return written  # (the 'plot' extra: no heatmap)
        from .heatmap import draw_heatmap

        durations = [[e - s for _, _, s, e in r.steps] for r in stepped]
        title = f"{len(stepped)} ranks, steps {stepped[0].step_name!r}: duration against the step's median"
        written.append(draw_heatmap(durations, [r.name for r in stepped], outdir / "heatmap.png", title))
    return written


def _ms(ns: float) -> str:
    return f"{ns / 1e6:,.2f} ms"


def summary_lines(tables: Tables) -> list[str]:
    """At most ten lines: the run, its steps, the slowest rank and the ranges behind it."""
    ranks = tables.ranks
    events = sum(r.events for r in ranks)
    files = len({r.file for r in ranks})
    lines = [f"{len(ranks)} rank(s) in {files} input(s), {events:,} ranges" + (
        f"; {len(tables.left_out)} input(s) left out (first: {tables.left_out[0]})" if tables.left_out else ""
    )]  # fmt: skip
    stepped = [r for r in ranks if r.steps]
    if not stepped:
        lines.append("no step ranges (--step NAME[@DOMAIN] names them): no pace")
        return lines
    medians = {r.name: statistics.median(e - s for _, _, s, e in r.steps) for r in stepped}
    overall = statistics.median(medians.values())
    steps = max(len(r.steps) for r in stepped)
    lines.append(f"steps: {stepped[0].step_name!r}, up to {steps} per rank; median step {_ms(overall)}")
    st = tables.stragglers.to_pydict()
    if not st["Step"]:
        lines.append("one rank with steps: no straggler to name")
        return lines
    counts: dict[int, int] = {}
    for rank in st["Rank"]:
        counts[rank] = counts.get(rank, 0) + 1
    worst = max(counts, key=counts.get)
    name = st["RankName"][st["Rank"].index(worst)]
    mine = [i for i, rank in enumerate(st["Rank"]) if rank == worst]
    excess = statistics.median(st["Excess"][i] for i in mine)
    lines.append(
        f"straggler: {name}, the rank the others waited for in {counts[worst]} of {len(st['Step'])} steps "
        f"(median excess {_ms(excess)} a step)"
    )
    ranges: dict[str, int] = {}
    for i in mine:
        for part in filter(None, st["TopRanges"][i].split("; ")):
            label, _, value = part.rpartition(" +")
            ranges[label] = ranges.get(label, 0) + int(value)
    top = sorted(ranges.items(), key=lambda kv: -kv[1])[:3]
    if top:
        lines.append(
            "its ranges above the median rank, per step: "
            + ", ".join(f"{label} +{_ms(total / len(mine))}" for label, total in top)
        )
    return lines
