"""README quick start 2 and every docs example that trains, trains bit-identically to its
plain copy (issue 43, "Done means").

The examples: every python block of README.md and docs/*.md that calls ``fit`` (found by
reading the pages, so a new one is in this test as soon as it is written), and the example
scripts the pages run that train with ``fit`` (examples/keras_example.py,
multi_inputs_outputs.py, auto_annotate.py, and train.py under ``nvtx-tf record
--keras-layers``, README quick start 3). Each runs twice from the same seed
(tests/docs_same_program.py): as written, with the recorder attached (the recording must hold
its ranges: the annotation was there), and as its plain copy, where ``nvtx_plugins_tf`` is a
stand-in whose every annotation is the identity. The logs and every weight after every batch
of every ``fit`` must be equal bit for bit.

The custom-loop examples (``ops.start``/``end``, ``ops.trace``) train no ``fit``: the
matrix's custom-loop cells (tests/test_same_program_matrix.py) are their evidence.
"""

from __future__ import annotations

import pickle
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import _child_env
from test_readme import DOCS, _page_blocks

from nvtx_plugins_tf.recorder.recording import reader

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
EXAMPLES = ROOT / "examples"


def _trained_blocks():
    for page, text in DOCS.items():
        for lang, body, kind, _, line in _page_blocks(text):
            if lang == "python" and kind != "skip" and re.search(r"\.fit\(", body):
                yield pytest.param(body, id=f"{page}:line{line}")


#: example -> (arguments, run under ``record --keras-layers``, arithmetic optimizer off in both)
SCRIPTS = {
    "keras_example.py": (["--small"], False, False),
    "multi_inputs_outputs.py": ([], False, False),
    # MobileNetV2: docs/keras.md's documented exception (Grappler's AddOpsRewrite reassociates
    # the plain model's residual sums); compared with the arithmetic optimizer off, as advised
    "auto_annotate.py": ([], False, True),
    "train.py": ([], True, False),
}


def _env(script_text: str, **extra) -> dict:
    """tf_keras for a script that imports it (its code, not a comment naming it)."""
    legacy = re.search(r"^\s*(import tf_keras|os\.environ\[.TF_USE_LEGACY_KERAS.\] = .1.)", script_text, re.M)
    return _child_env(TF_CPP_MIN_LOG_LEVEL="3", **({"TF_USE_LEGACY_KERAS": "1"} if legacy else {}), **extra)


def _run(mode, script: Path, args, tmp: Path, *, keras_layers=False, no_arithmetic=False) -> dict:
    out = tmp / f"{mode}.pickle"
    cmd = [sys.executable, str(HERE / "docs_same_program.py"), *(["--no-arithmetic"] if no_arithmetic else [])]
    cmd += [mode, str(out), str(script), *args]
    recording = tmp / "annotated"
    env = _env(script.read_text())
    if mode == "real":
        if keras_layers:
            record = ["record", "--keras-layers", "-o", str(recording), "--"]
            cmd = [sys.executable, "-m", "nvtx_plugins_tf", *record, *cmd]
        else:
            env = _env(script.read_text(), **_recorder(recording))
    proc = subprocess.run(cmd, cwd=tmp, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, f"{mode}: exit {proc.returncode}\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
    with open(out, "rb") as f:
        result = pickle.load(f)
    assert result["stand-in"] == (mode == "stand-in"), result["stand-in"]
    assert result["fits"] and all(result["fits"]), f"{mode}: no fit trained a batch: {proc.stderr[-3000:]}"
    if mode == "real":
        rec = reader.load(str(recording) + ".nvtxrec")
        assert rec.count(domain="Forward") and not rec.open_ranges, "the annotated run recorded no layer range"
    return result


def _recorder(recording: Path) -> dict:
    from nvtx_plugins_tf import recorder

    return recorder.environment(str(recording) + ".nvtxrec")


def _unwrapped(weights: dict) -> dict:
    """Weights by path, the scope of an NVTXRange around their layer left out (Keras 3's
    paths name it: ``sequential/nvtx_range_dense_3/dense_3/kernel``)."""
    return {re.sub(r"(^|/)nvtx_range_[^/]*/", r"\1", name): value for name, value in weights.items()}


def _first_difference(plain: dict, annotated: dict) -> str | None:
    if len(plain["fits"]) != len(annotated["fits"]):
        return f"{len(plain['fits'])} fits plain, {len(annotated['fits'])} annotated"
    for n, (p, a) in enumerate(zip(plain["fits"], annotated["fits"]), start=1):
        if len(p) != len(a):
            return f"fit {n}: {len(p)} batches plain, {len(a)} annotated"
        for batch, ((logs_p, w_p), (logs_a, w_a)) in enumerate(zip(p, a), start=1):
            w_a = _unwrapped(w_a)
            if logs_p != logs_a:
                return f"fit {n}, batch {batch}: logs {logs_p} plain, {logs_a} annotated"
            if sorted(w_p) != sorted(w_a):
                return f"fit {n}, batch {batch}: weights {sorted(w_p)} plain, {sorted(w_a)} annotated"
            for name, x in w_p.items():
                if x.shape != w_a[name].shape or not np.array_equal(x, w_a[name]):
                    return f"fit {n}, batch {batch}: weight {name} differs"
    return None


def _compare(script: Path, args, tmp: Path, **options) -> None:
    plain = _run("stand-in", script, args, tmp, **options)
    annotated = _run("real", script, args, tmp, **options)
    difference = _first_difference(plain, annotated)
    assert difference is None, f"{script.name}: {difference}"


@pytest.mark.parametrize("body", list(_trained_blocks()))
def test_docs_block_trains_as_its_plain_copy(body, tmp_path):
    """README quick start 2, docs/keras.md's first block, docs/multi-worker.md's worker."""
    script = tmp_path / "block.py"
    script.write_text(body)
    _compare(script, [], tmp_path)


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_example_script_trains_as_its_plain_copy(name, tmp_path):
    args, keras_layers, no_arithmetic = SCRIPTS[name]
    _compare(EXAMPLES / name, args, tmp_path, keras_layers=keras_layers, no_arithmetic=no_arithmetic)


def test_the_docs_blocks_that_train_are_found():
    """README quick start 2 is among them (the search is not vacuous)."""
    bodies = [p.values[0] for p in _trained_blocks()]
    assert len(bodies) >= 3 and any("nvtx_tf.keras.annotate(model)" in b and "Dense(64" in b for b in bodies)
