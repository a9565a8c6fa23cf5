"""The ``rank_stats`` and ``all_stats`` tables of ``analyze`` (:mod:`.reduce` describes their
columns), from the ranks' partial results: per rank and name as the ranks computed them, over
the ranks merged exactly (the quartiles from the merged sketches, :mod:`.sketch`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from .._arrays import Strings, repeated_strings
from . import sketch
from .mapper import RankResult

__all__ = ["Names", "cat", "name_ids", "per_rank", "stats_columns"]


@dataclass
class Names:
    """Every range name across the ranks (``keys``: (domain, message), in the order first met),
    each rank's rows' indexes in them (``gid``; ``g``: all ranks' at once), and their messages
    and domains encoded for string columns."""

    keys: list[tuple[str, str]]
    gid: list[np.ndarray]
    g: np.ndarray
    messages: Strings
    domains: Strings


def _std(n: np.ndarray, m2: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(n > 1, np.sqrt(m2 / np.maximum(n - 1, 1)), np.nan)


def cat(parts: list[np.ndarray], dtype) -> np.ndarray:
    return np.concatenate(parts).astype(dtype, copy=False) if parts else np.zeros(0, dtype=dtype)


def per_rank(ranks: list[RankResult], counts: list[int]) -> tuple[pa.Array, pa.Array]:
    """The RankName and File columns of tables whose rows come a rank after another, rank i's
    ``counts[i]`` rows: each rank's strings tiled (no Python string, nor gather, per row)."""
    return repeated_strings([r.name for r in ranks], counts), repeated_strings([r.file for r in ranks], counts)


def name_ids(ranks: list[RankResult]) -> Names:
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
    keys = list(key_of)
    return Names(keys, gid, cat(gid, np.int64), Strings([m for _, m in keys]), Strings([d for d, _ in keys]))


def stats_columns(ranks: list[RankResult], names: Names) -> tuple[dict, dict]:
    """(rank_stats' columns, all_stats' columns): numpy arrays, or Arrow arrays for text."""
    count, total = cat([r.count for r in ranks], np.int64), cat([r.sum for r in ranks], np.int64)
    m2 = cat([r.m2 for r in ranks], np.float64)
    rank_of = cat([np.full(len(r.names), i) for i, r in enumerate(ranks)], np.int64)
    g, k, gid = names.g, len(names.keys), names.gid
    rs_names, rs_files = per_rank(ranks, [len(r.names) for r in ranks])
    messages, domains = names.messages, names.domains
    rs = {
        "Text": messages.take(g),
        "Domain": domains.take(g),
        "Count": count,
        "Mean": total / np.maximum(count, 1),
        "Std": _std(count, m2),
        "Min": cat([r.min for r in ranks], np.int64),
        "Q1": cat([r.q1 for r in ranks], np.float64),
        "Median": cat([r.median for r in ranks], np.float64),
        "Q3": cat([r.q3 for r in ranks], np.float64),
        "Max": cat([r.max for r in ranks], np.int64),
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
    sketch_g = cat([gid[i][r.sketch_row] for i, r in enumerate(ranks)], np.int64)
    quartiles = sketch.merged_quantiles(
        sketch_g, cat([r.sketch_key for r in ranks], np.int64), cat([r.sketch_count for r in ranks], np.int64),
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
    return rs, al
