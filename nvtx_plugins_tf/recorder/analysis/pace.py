"""The ``pace`` table of ``analyze`` (:mod:`.reduce` describes its columns): each rank's
steps on one wall clock, as columns (no Python work per step)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from .._arrays import array
from .mapper import RankResult
from .stats import Names, cat, per_rank

__all__ = ["pace_columns"]

_I64 = np.zeros(0, dtype=np.int64)


def pace_columns(ranks: list[RankResult], names: Names) -> dict:
    """pace's columns: numpy arrays, or Arrow arrays for text and the nullable column."""
    rank_names, files = per_rank(ranks, [r.n_steps for r in ranks])
    first = min((int(r.step_start.min()) for r in ranks if r.n_steps), default=0)
    gaps = [np.concatenate([[0], r.step_start[1:] - r.step_end[:-1]]) if r.n_steps else _I64 for r in ranks]
    offsets = np.cumsum([0] + [len(r.names) for r in ranks])[:-1]  # each rank's first row in rank_stats
    return {
        "Rank": cat([np.full(r.n_steps, i) for i, r in enumerate(ranks)], np.int64),
        "RankName": rank_names,
        "File": files,
        "Step": cat([np.arange(r.n_steps) for r in ranks], np.int64),
        "Name": names.messages.take(names.g[cat([r.step_row + o for r, o in zip(ranks, offsets)], np.int64)]),
        "Start": cat([r.step_start - first for r in ranks], np.int64),
        "End": cat([r.step_end - first for r in ranks], np.int64),
        "Duration": cat([r.step_end - r.step_start for r in ranks], np.int64),
        "Gap": cat(gaps, np.int64),
        "StartEpochNs": cat([r.step_start for r in ranks], np.int64),
        "ClockOffsetNs": array(
            cat([np.full(r.n_steps, r.clock_offset or 0) for r in ranks], np.int64),
            pa.int64(),
            cat([np.full(r.n_steps, r.clock_offset is None) for r in ranks], bool),
        ),
    }
