"""NVTXCallback on data of unknown length (issue 37, row 6).

Keras learns that such data ended only by beginning one batch more and finding nothing:
``on_train_batch_begin(6)`` for 6 batches, with no ``on_train_batch_end``. An NVTX range
cannot be taken back, so the first pass keeps that extra range; later passes of the same
``fit`` (epochs, validations) begin none past the count learned. Keras 3 begins the extra
batch in every epoch and every validation; tf_keras only in the first (it learns the count
itself), and both in every ``evaluate``/``predict`` call (one pass each).
"""

import json
import subprocess
import sys
import warnings
from pathlib import Path

import keras_unknown_length as ku
import pytest

HERE = Path(__file__).resolve().parent
SIX, THREE = list(range(6)), list(range(3))


def _check_common(results):
    # epoch 0 and the first validation keep the batch past the end (the documented limit)
    assert results["fit"]["train"] == [SIX + [6], SIX, SIX]
    assert results["fit"]["test"] == [THREE + [3], THREE, THREE]
    assert results["evaluate"] == [THREE + [3], THREE + [3]]  # one pass per call: nothing learned
    assert results["fit_open"] == results["growing_open"] == 0


def test_keras3_no_batch_range_past_the_end_after_the_first_pass():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Keras: "Your input ran out of data"
        results = ku.run()
    _check_common(results)
    # data that grows from 6 to 7 batches: Keras 3 runs 7 steps in epochs 1 and 2 (it runs as
    # many as it saw begun); batch 6 of epoch 1 turns out to have data but got no range, and
    # the count is forgotten
    assert results["growing"] == [SIX + [6], SIX, SIX + [6]]


def test_tf_keras_no_batch_range_past_the_end_after_the_first_pass(tmp_path, child_env):
    pytest.importorskip("tf_keras")
    env = child_env(tmp_path, TF_USE_LEGACY_KERAS="1")
    proc = subprocess.run(
        [sys.executable, str(HERE / "keras_unknown_length.py")], env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    assert line, proc.stdout[-2000:]
    results = json.loads(line[-1][len("RESULT ") :])
    _check_common(results)
    assert results["growing"] == [SIX + [6], SIX, SIX]  # tf_keras runs the 6 steps it learned
