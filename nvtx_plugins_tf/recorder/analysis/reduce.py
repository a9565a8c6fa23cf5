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
    ints = {"Count", "Min", "Max", "Sum", "Rank", "Step", "Start", "End", "Duration", "Gap", "StartEpochNs"}

    def table(columns: dict) -> pa.Table:
        return pa.table(
            {
                k: pa.array(v, pa.int64() if k in ints else (pa.string() if k in _TEXT else pa.float64()))
                for k, v in columns.items()
            }
        )

    return Tables(ranks, table(rs), table(al), table(pc), list(left_out or []))


_TEXT = {"Text", "Domain", "RankName", "File", "Name"}


def write_tables(tables: Tables, outdir) -> list[Path]:
    """OUTDIR/{all_stats,rank_stats,pace}.{parquet,csv}; returns the files written."""
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    written = []
    for name in ("all_stats", "rank_stats", "pace"):
        t = getattr(tables, name)
        pq.write_table(t, outdir / f"{name}.parquet")
        pacsv.write_csv(t, outdir / f"{name}.csv")
        written += [outdir / f"{name}.parquet", outdir / f"{name}.csv"]
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
    slow = max(stepped, key=lambda r: medians[r.name])
    excess = (medians[slow.name] / overall - 1) * 100 if overall else 0.0
    lines.append(f"slowest rank: {slow.name} (median step {_ms(medians[slow.name])}, {excess:+.0f}% over the ranks')")
    # the ranges of the slowest rank that take more time per step than on the median rank
    per_step: dict[tuple[str, str], list[float]] = {}
    for r in stepped:
        for s in r.stats:
            per_step.setdefault((s.domain, s.message), []).append(s.sum / len(r.steps))
    # (ranges that occur at least once a step: the work inside steps, not the epoch around them)
    mine = {(s.domain, s.message): s.sum / len(slow.steps) for s in slow.stats if s.count >= len(slow.steps)}
    behind = sorted(
        ((mine[k] - statistics.median(v), k) for k, v in per_step.items() if k in mine and len(v) == len(stepped)),
        reverse=True,
    )
    behind = [(d, k) for d, k in behind if d > 0 and k[1] != "" and not _is_step(k, slow)][:3]
    if behind:
        lines.append(
            "its ranges above the median rank, per step: "
            + ", ".join(f"{(k[0] + ':') if k[0] else ''}{k[1]} +{_ms(d)}" for d, k in behind)
        )
    return lines


def _is_step(key: tuple[str, str], rank: RankResult) -> bool:
    names = {name for _, name, _, _ in rank.steps}
    return key[1] in names
