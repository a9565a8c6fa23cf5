"""nsys_inputs/batches.py reads a parquetdir whose row groups are small (nsys's own exports
write 2,048 rows a group) several groups at a time, their chunks combined and their text
dictionaries unified: the same rank results as the file written in large groups, whatever
the group size (groups of other texts, a group larger than a batch, one row a group)."""

from __future__ import annotations

import shutil

import numpy as np
import pyarrow.parquet as pq
import pytest
from test_analyze_exports import _by_name
from test_analyze_native import _assert_same, _write_process

from nvtx_plugins_tf.recorder.analysis import mapper
from nvtx_plugins_tf.recorder.exports.parquet import export_parquetdir
from nvtx_plugins_tf.recorder.nsys_inputs import batches


@pytest.mark.parametrize("group_rows", [1, 97, 400, 1200])
def test_small_row_groups_give_the_same_results(tmp_path, monkeypatch, group_rows):
    monkeypatch.setattr(batches, "BATCH_ROWS", 1000)  # (so 1,200 rows a group is larger than a batch)
    rng = np.random.default_rng(group_rows)
    rec = tmp_path / "rank.nvtxrec"
    _write_process(rec, rng, 100, 1_700_000_000 * 10**9, {1: "train"}, 3000)
    export_parquetdir(rec, tmp_path / "big_pqtdir")
    shutil.copytree(tmp_path / "big_pqtdir", tmp_path / "small_pqtdir")
    events = pq.read_table(tmp_path / "big_pqtdir" / "NVTX_EVENTS.parquet")
    pq.write_table(events, tmp_path / "small_pqtdir" / "NVTX_EVENTS.parquet", row_group_size=group_rows)
    groups = pq.ParquetFile(tmp_path / "small_pqtdir" / "NVTX_EVENTS.parquet").metadata.num_row_groups
    assert groups == -(-events.num_rows // group_rows) > 1
    monkeypatch.setenv("NVTX_TF_ANALYZE_NATIVE", "1")
    big, small = ([_by_name(r) for r in mapper.map_input(tmp_path / f"{n}_pqtdir")] for n in ("big", "small"))
    for r in small:
        r.name, r.file = r.name.replace("small_pqtdir", "big_pqtdir"), str(tmp_path / "big_pqtdir")
    assert big and all(r.n_steps for r in big)
    _assert_same(small, big)
