"""analysis/stragglers.py's shortcuts, each equal to what it replaces: ``_distinct``
(``np.unique`` of the stragglers' range names without its import of numpy.ma: 10 ms of the
serial reduce; tests/test_analyze_imports.py checks that ``analyze`` imports no numpy.ma),
``_median0`` (``np.median`` over the ranks) and ``_top_ranges``' two ways of writing the text
(numpy's ``U`` arrays for a small job, Arrow's string kernels from ARROW_TEXT_ROWS rows)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import numpy as np
import pytest
from conftest import _child_env

from nvtx_plugins_tf.recorder.analysis.stragglers import Named, _distinct, _median0, _top_ranges


@pytest.mark.parametrize(
    "values",
    [np.zeros(0, np.int64), np.array([3, 1, 3, 2, 1], np.int64), np.random.default_rng(1).integers(0, 50, 1000)],
    ids=range(3),
)
def test_distinct_is_np_unique(values):
    ours, theirs = _distinct(values), np.unique(values)
    assert ours.dtype == theirs.dtype and ours.tolist() == theirs.tolist()


@pytest.mark.parametrize("shape", [(1, 5), (2, 7), (7, 30, 4), (8, 1000, 12), (9, 3)])
def test_median0_is_np_median(shape):
    rng = np.random.default_rng(sum(shape))
    values = rng.integers(0, 2**40, shape)
    values[-1] = values[0]  # (ties)
    ours, theirs = _median0(values), np.median(values, axis=0)
    assert ours.dtype == theirs.dtype == np.float64 and np.array_equal(ours, theirs)


@pytest.mark.parametrize("seed", range(20))
def test_top_ranges_numpy_and_arrow_write_the_same_text(seed):
    rng = np.random.default_rng(seed)
    rows, names = int(rng.integers(1, 400)), int(rng.integers(1, 6))
    top_ns = -np.sort(-rng.integers(-5, 10**9, (rows, min(3, names))) * (rng.random((rows, 1)) < 0.9), axis=1)
    top = rng.integers(0, names, (rows, min(3, names)))
    rank = np.where(rng.random(rows) < 0.2, -1, rng.integers(0, 8, rows))
    labels = [f"r{i} \u00e9;+{i}" for i in range(names)]
    s = Named(*(np.zeros(rows, np.int64),) * 2, rank, *(np.zeros(rows, np.int64),) * 3, top, top_ns, labels)
    in_numpy = _top_ranges(s, rank < 0, arrow_from=rows + 1).to_pylist()
    in_arrow = _top_ranges(s, rank < 0, arrow_from=0).to_pylist()
    assert in_numpy == in_arrow
    assert all(t == "" for t, r in zip(in_numpy, rank) if r < 0) and any(in_numpy)


# _top_ranges by Arrow's kernels in a fresh process, then whether pandas was imported
_ARROW_TEXT = """
import sys
import numpy as np
from nvtx_plugins_tf.recorder.analysis.stragglers import Named, _top_ranges
rows = 50
top, top_ns, rank = np.zeros((rows, 2), np.int64), np.full((rows, 2), 7, np.int64), np.zeros(rows, np.int64)
s = Named(*(np.zeros(rows, np.int64),) * 2, rank, *(np.zeros(rows, np.int64),) * 3, top, top_ns, ["a", "b"])
text = _top_ranges(s, rank < 0, arrow_from=0).to_pylist()
print(text[0], "pandas" in sys.modules)
"""


@pytest.mark.skipif(importlib.util.find_spec("pandas") is None, reason="pandas not installed: nothing to avoid")
def test_top_ranges_in_arrow_imports_no_pandas():
    """A long job's TopRanges (Arrow's kernels, from ARROW_TEXT_ROWS steps) gives its texts
    to the kernels as Arrow scalars: a Python str would be converted by pyarrow's scalar
    code, which imports pandas (0.3-0.5 s of CPU, the reduce's largest part at 83k steps)."""
    proc = subprocess.run([sys.executable, "-c", _ARROW_TEXT], env=_child_env(), capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["a", "+7;", "a", "+7", "False"], proc.stdout
