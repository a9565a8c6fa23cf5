"""`record --keras-layers` annotates every layer of an unmodified Keras script."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from nvtx_plugins_tf.recorder.recording import reader

SCRIPT = Path(__file__).resolve().parent / "keras_layers_script.py"


@pytest.mark.parametrize("legacy", [False, True], ids=["keras3", "tf_keras"])
def test_keras_layers_flag_annotates_unmodified_script(tmp_path, legacy):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    if legacy:
        env["TF_USE_LEGACY_KERAS"] = "1"
    prefix = tmp_path / "run"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "nvtx_plugins_tf",
            "record",
            "--keras-layers",
            "-o",
            str(prefix),
            "--",
            sys.executable,
            str(SCRIPT),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    rec = reader.load(str(prefix) + ".nvtxrec")
    steps = 3  # 12 samples, batch 4, 1 epoch
    for layer in ("hidden", "out"):
        assert rec.count(message=layer, domain="Forward") == steps, layer
        assert rec.count(message=layer, domain="Backward") == steps, layer
    assert not rec.open_ranges


def test_without_flag_no_layer_ranges(tmp_path):
    prefix = tmp_path / "run"
    code = (
        "import nvtx, runpy, sys; nvtx.mark('started'); sys.argv=[sys.argv[1]]; "
        "runpy.run_path(sys.argv[0], run_name='__main__')"
    )
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "nvtx_plugins_tf",
            "record",
            "-o",
            str(prefix),
            "--",
            sys.executable,
            "-c",
            code,
            str(SCRIPT),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    rec = reader.load(str(prefix) + ".nvtxrec")
    assert rec.count(message="hidden") == 0
