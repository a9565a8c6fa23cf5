"""analyze's native mapper (cc_ops/reader/rank_stats.cc) on exports whose rows come in other
orders than nsys writes them, against the numpy mapper (the reference), value for value: a
thread's push/pop ranges are given their parents as they come while they come in start order
(an export's) or each after the ranges inside it (a recording's), and sorted only when neither
holds; here each way fails part way through a thread, after some parents were given."""

from __future__ import annotations

import numpy as np
import pyarrow.parquet as pq
import pytest
from test_analyze_exports import _mapped
from test_analyze_native import _assert_same, _write_process

from nvtx_plugins_tf.recorder.exports.parquet import export_parquetdir


def _reorder(table, order: str, rng):
    """The NVTX_EVENTS rows ``table`` in another order (see the cases below)."""
    n = table.num_rows
    rows = np.arange(n)
    if order == "slice reversed":  # in start order, then not, then again
        rows[n // 3 : n // 2] = rows[n // 3 : n // 2][::-1]
    elif order == "by end":  # a recording's order (a range after those inside it), then by start
        end = table.column("end").to_numpy(zero_copy_only=False)
        end = np.where(np.isnan(end.astype(np.float64)), np.inf, end.astype(np.float64))
        head = rows[: n // 2][np.argsort(end[: n // 2], kind="stable")]
        rows = np.concatenate([head, rows[n // 2 :]])
    else:  # a few rows moved later
        moved = rng.choice(n, size=max(1, n // 50), replace=False)
        rows = np.concatenate([np.delete(rows, moved), moved])
    return table.take(rows)


@pytest.mark.parametrize("order", ["slice reversed", "by end", "rows moved"])
@pytest.mark.parametrize("seed", range(2))
def test_native_mapper_on_export_rows_out_of_order(tmp_path, monkeypatch, seed, order):
    rng = np.random.default_rng(seed)
    rec = tmp_path / "rank.nvtxrec"
    _write_process(rec, rng, 100, 1_700_000_000 * 10**9, {1: "train"}, 3000)
    export = tmp_path / "rank_pqtdir"
    export_parquetdir(rec, export)
    events = export / "NVTX_EVENTS.parquet"
    pq.write_table(_reorder(pq.read_table(events), order, rng), events)
    native, reference = _mapped(export, monkeypatch, True), _mapped(export, monkeypatch, False)
    assert reference and all(r.n_steps for r in reference)
    assert sum(r.step_work.size for r in reference) > 0
    _assert_same(native, reference)
