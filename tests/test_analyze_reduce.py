"""analysis/stragglers.py's ``_distinct``: ``np.unique`` of the stragglers' range names without
its import of numpy.ma (10 ms of the serial reduce; tests/test_analyze_imports.py checks
that ``analyze`` imports no numpy.ma)."""

from __future__ import annotations

import numpy as np
import pytest

from nvtx_plugins_tf.recorder.analysis.stragglers import _distinct


@pytest.mark.parametrize(
    "values",
    [np.zeros(0, np.int64), np.array([3, 1, 3, 2, 1], np.int64), np.random.default_rng(1).integers(0, 50, 1000)],
    ids=range(3),
)
def test_distinct_is_np_unique(values):
    ours, theirs = _distinct(values), np.unique(values)
    assert ours.dtype == theirs.dtype and ours.tolist() == theirs.tolist()
