"""analyze's native mapper on exports in nsys's schema (nsys_inputs/batches.py streaming
a parquetdir's or an SQLite file's NVTX_EVENTS into cc_ops/reader/rank_stats.h) against the
numpy mapper (analysis/mapper.py, ``NVTX_TF_ANALYZE_NATIVE=0``, the reference), value for
value, and against the recording the export was made of: the same rank results, so the same
tables. The recordings are tests/test_analyze_native.py's (random nesting over threads,
two domains, open ranges, registered strings, steps inside an epoch). The two mappers number
a rank's names in another order (the numpy one by first appearance in the file, the native
one by (domain, message)): results are compared by name.
"""

from __future__ import annotations

import numpy as np
import pytest
from test_analyze_native import _assert_same, _write_process

from nvtx_plugins_tf.recorder.analysis import mapper, native_mapper
from nvtx_plugins_tf.recorder.exports.parquet import export_parquetdir
from nvtx_plugins_tf.recorder.exports.sqlite import export_sqlite


def _by_name(r: mapper.RankResult) -> mapper.RankResult:
    """``r`` with its names in ascending order (its per-name columns, sketch rows, steps'
    rows and work columns renumbered alike)."""
    order = sorted(range(len(r.names)), key=lambda i: r.names[i])
    new = np.empty(len(order), dtype=np.int64)
    new[order] = np.arange(len(order))
    r.names = [r.names[i] for i in order]
    for f in ("count", "sum", "min", "max", "m2", "q1", "median", "q3"):
        setattr(r, f, getattr(r, f)[order])
    rows = new[r.sketch_row]
    by = np.lexsort((r.sketch_key, rows))
    r.sketch_row, r.sketch_key, r.sketch_count = rows[by], r.sketch_key[by], r.sketch_count[by]
    r.step_row = new[r.step_row]
    work = new[r.work_rows]
    by = np.argsort(work, kind="stable")
    r.work_rows, r.step_work = work[by], r.step_work[:, by]
    if r.step_incl.shape[1:] == (len(by),):  # (else not asked for: map_input's inclusive, empty)
        r.step_incl = r.step_incl[:, by]
    return r


def _mapped(path, monkeypatch, native: bool, step=None) -> list[mapper.RankResult]:
    monkeypatch.setenv("NVTX_TF_ANALYZE_NATIVE", "1" if native else "0")
    return [_by_name(r) for r in mapper.map_input(path, step, inclusive=True)]


def _renamed(results, name: str) -> list[mapper.RankResult]:
    """``results`` named as the recording's, without what only a recording knows (its
    monotonic clock's offset: an export's times are its session's)."""
    for r in results:
        r.name, r.file, r.clock_offset = r.name.replace(name, "rank"), "", None
    return results


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("kind", ["parquetdir", "sqlite", "sqlite-module"])
def test_native_mapper_on_exports_is_the_numpy_mapper(tmp_path, monkeypatch, seed, kind):
    """sqlite: the file read natively (cc_ops/reader/sqlite_ranges.h); sqlite-module: no
    SQLite library to open there, read through Python's sqlite3 module in batches."""
    if kind == "sqlite-module":
        monkeypatch.setattr(native_mapper, "LIBSQLITE3", "libno-such-sqlite.so")
    rng = np.random.default_rng(seed)
    rec = tmp_path / "rank.nvtxrec"
    _write_process(rec, rng, 100, 1_700_000_000 * 10**9, {1: "train"}, 3000)
    if seed % 2:  # a second process, "train" its local domain 2
        _write_process(rec, rng, 200, 1_700_000_000 * 10**9, {1: "other", 2: "train"}, 3000)
    export = tmp_path / ("rank_pqtdir" if kind == "parquetdir" else "rank.sqlite")
    (export_parquetdir if kind == "parquetdir" else export_sqlite)(rec, export)
    native, reference = _mapped(export, monkeypatch, True), _mapped(export, monkeypatch, False)
    assert reference and all(r.n_steps for r in reference) and any(r.open_ranges for r in reference)
    assert sum(r.step_work.size for r in reference) > 0
    _assert_same(native, reference)
    for step in ("x@train", "nothing"):
        spec = mapper.StepSpec.parse(step)
        _assert_same(_mapped(export, monkeypatch, True, spec), _mapped(export, monkeypatch, False, spec))
    # the recording itself gives the same results (the export's name aside)
    recorded = _renamed(_mapped(rec, monkeypatch, True), "rank")
    _assert_same(_renamed(native, export.stem), recorded)


def test_native_mapper_on_an_export_without_ranges_or_strings(tmp_path, monkeypatch):
    """A parquetdir of marks only (no range, no StringIds rows): no rank, as the numpy path."""
    from nvtx_plugins_tf.recorder.recording._synth import SegmentWriter

    rec = tmp_path / "marks.nvtxrec"
    seg = SegmentWriter(pid=5)
    seg.thread(5).string(1, "m").mark(10, 1).mark(20, 1)
    seg.write(rec)
    export = tmp_path / "marks_pqtdir"
    export_parquetdir(rec, export)
    assert _mapped(export, monkeypatch, True) == _mapped(export, monkeypatch, False) == []
