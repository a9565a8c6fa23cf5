"""NVTXCallback on data of unknown length (issue 37, row 6): the batch ranges of each pass.

Run in-process (Keras 3, tests/test_keras_callback_unknown_length.py) or as a script (tf_keras:
``TF_USE_LEGACY_KERAS=1``, under the recorder), which prints ``RESULT {json}``.
"""

from __future__ import annotations

import json

import numpy as np
import tensorflow as tf

from nvtx_plugins_tf.keras import keras
from nvtx_plugins_tf.keras.callbacks import NVTXCallback
from nvtx_plugins_tf.testing import capture


def _dataset(batches_per_pass):
    """A tf.data pipeline of unknown length: ``batches_per_pass[i]`` batches on its i-th pass
    (the last count repeats)."""
    passes = []

    def generate():
        n = batches_per_pass[min(len(passes), len(batches_per_pass) - 1)]
        passes.append(n)
        for _ in range(n):
            yield np.ones((4, 3), "float32"), np.ones((4, 1), "float32")

    spec = (tf.TensorSpec((4, 3), tf.float32), tf.TensorSpec((4, 1), tf.float32))
    return tf.data.Dataset.from_generator(generate, output_signature=spec)


def _passes(rec, outer: str, phase: str) -> list[list[int]]:
    """Batch payloads inside each ``outer`` range (an epoch prefix, or Test), in time order."""
    outers = sorted(
        (r for r in rec.find(domain="Keras") if r.message.startswith(outer) and r.category_name is None),
        key=lambda r: r.start_ns,
    )
    batches = sorted(rec.find(domain="Keras", category=f"phase: {phase}"), key=lambda r: r.start_ns)
    return [[b.payload for b in batches if o.start_ns <= b.start_ns and b.end_ns <= o.end_ns] for o in outers]


def run() -> dict:
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    results = {}
    with capture() as rec:
        model.fit(_dataset([6]), validation_data=_dataset([3]), epochs=3, verbose=0, callbacks=[NVTXCallback()])
    results["fit"] = {"train": _passes(rec, "epoch ", "Train"), "test": _passes(rec, "Test", "Test")}
    results["fit_open"] = len(rec.open_ranges)
    callback = NVTXCallback()  # one callback for both calls: evaluate() data are new data
    with capture() as rec:
        model.evaluate(_dataset([3]), verbose=0, callbacks=[callback])
        model.evaluate(_dataset([3]), verbose=0, callbacks=[callback])
    results["evaluate"] = _passes(rec, "Test", "Test")
    with capture() as rec:
        model.fit(_dataset([6, 7]), epochs=3, verbose=0, callbacks=[NVTXCallback()])
    results["growing"] = _passes(rec, "epoch ", "Train")
    results["growing_open"] = len(rec.open_ranges)
    return results


if __name__ == "__main__":
    import warnings

    warnings.simplefilter("ignore")  # Keras warns that the input ran out of data
    print("RESULT", json.dumps(run()))
