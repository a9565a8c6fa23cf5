"""recorder/_arrays.py: Arrow arrays built from their buffers are pyarrow's own (``pa.array``'s
values, nulls and type), and the Parquet and Arrow exports and ``analyze`` of recordings that
use them never import pandas (``pa.array`` does, 0.15-0.2 s, when pandas is installed)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pytest
from conftest import _child_env

from nvtx_plugins_tf.recorder._arrays import array

MASK = np.array([False, True, False, False, True])
CASES = [
    (np.arange(5), pa.int64(), None),
    (np.arange(5), pa.int32(), MASK),
    (np.arange(5, dtype=np.uint32), pa.int64(), MASK),
    (np.arange(5, dtype=np.int64), pa.uint8(), None),
    (np.linspace(0, 1, 5), pa.float64(), MASK),
    (np.linspace(0, 1, 5).astype(np.float32), pa.float64(), None),
    (np.array([True, False, True, True, False]), pa.bool_(), MASK),
    (np.arange(5)[::2], pa.int64(), None),  # not contiguous
    (np.zeros(0, dtype=np.int64), pa.int64(), None),
    (["a", None, "é", "", "🙂" * 40], pa.string(), None),
    (("x", "y"), pa.large_string(), None),
    ([], pa.string(), None),
    ([], pa.int64(), None),
    ([1, None, 3], pa.int64(), None),
    ([None, None], pa.int32(), None),
    ([1, 2, 2**40], pa.int64(), None),
    ([1.5, None], pa.float64(), None),
    ([1, 2], pa.float64(), None),
    ([True, None, False], pa.bool_(), None),
]


@pytest.mark.parametrize("values,arrow_type,mask", CASES, ids=range(len(CASES)))
def test_the_same_array_as_pa_array(values, arrow_type, mask):
    ours = array(values, arrow_type, mask)
    ours.validate(full=True)
    theirs = pa.array(values, arrow_type, mask=mask) if mask is not None else pa.array(values, arrow_type)
    assert ours.type == theirs.type and ours.null_count == theirs.null_count
    assert ours.equals(theirs), (ours, theirs)


def test_a_value_that_does_not_fit_raises_as_pa_array_does():
    with pytest.raises(pa.ArrowInvalid):
        pa.array(np.array([2**40]), pa.int32())
    with pytest.raises(pa.ArrowInvalid):
        array(np.array([2**40]), pa.int32())
    with pytest.raises(TypeError):
        array([1, "a"], pa.string())


_NO_PANDAS = """
import sys
from nvtx_plugins_tf.recorder.recording._synth import SegmentWriter
from nvtx_plugins_tf.recorder.exports.arrow import export_arrow
from nvtx_plugins_tf.recorder.exports.parquet import export_parquetdir
from nvtx_plugins_tf.recorder.analysis import analyze

folder = sys.argv[1]
seg = SegmentWriter(pid=5)
t = seg.thread(5)
t.string(1, "step 0").string(2, "data").string(3, "step 1")
t.push(10, 1).push(11, 2).pop(15).pop(20).push(30, 3).push(31, 2).pop(40).pop(50).mark(60, 2)
seg.write(folder + "/r.nvtxrec")
export_parquetdir(folder + "/r.nvtxrec", folder + "/r_pqtdir")
export_arrow(folder + "/r.nvtxrec", folder + "/r.arrow")
analyze([folder + "/r.nvtxrec"], folder + "/a1", csv=True)
print(sorted(m for m in sys.modules if m.split(".")[0] == "pandas")[:3])
"""


@pytest.mark.skipif(importlib.util.find_spec("pandas") is None, reason="pandas not installed: nothing to avoid")
def test_exports_and_analyze_of_recordings_do_not_import_pandas(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-c", _NO_PANDAS, str(tmp_path)], env=_child_env(), capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip().splitlines()[-1] == "[]"
    assert (tmp_path / "a1" / "rank_stats.parquet").is_file() and (tmp_path / "a1" / "pace.csv").is_file()
