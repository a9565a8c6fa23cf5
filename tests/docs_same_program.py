"""Runs a docs example and pickles what its ``fit`` calls trained: a helper of
tests/test_docs_same_program.py (issue 43: "README quick start 2 and every docs example
trains bit-identically to its plain copy").

    python docs_same_program.py real|stand-in OUT SCRIPT [ARG ...]

``real``: SCRIPT runs as written (the package annotates it). ``stand-in``: SCRIPT is its plain
copy: ``nvtx_plugins_tf`` is replaced, before SCRIPT runs, by a stand-in whose every
annotation is the identity (``annotate(m)`` returns ``m``, ``NVTXRange(layer)`` is ``layer``,
``NVTXStart(...)(x)`` gives ``x``, ``NVTXEnd(...)([x, ...])`` gives ``x``, ``NVTXCallback()`` is
a callback that does nothing); nothing of the package is imported. An API the stand-in lacks
raises AttributeError: give the stand-in that name (its identity) when an example uses it.

Both runs are seeded alike (``keras.utils.set_random_seed(0)``, which seeds Python, NumPy
and TensorFlow) and record, for each ``fit`` of the process, the logs and every weight (by
name) after each batch. ``--no-arithmetic`` (before ``real``/``stand-in``) turns Grappler's
arithmetic optimizer off: the control of docs/keras.md's documented exception (MobileNetV2's
residual sums).
"""

from __future__ import annotations

import os
import pickle
import runpy
import sys
import types

import numpy as np

FITS: list = []


def _keras():
    if os.environ.get("TF_USE_LEGACY_KERAS") == "1":
        import tf_keras as keras
    else:
        import keras
    return keras


_SUBMODULES = ("nvtx_plugins_tf.keras.layers", "nvtx_plugins_tf.keras.callbacks")


def _stand_in(keras) -> None:
    """Modules named like the package's, holding identities of its annotation API."""

    class NVTXStart:
        def __init__(self, *args, **kwargs):
            pass

        def __call__(self, inputs, *args, **kwargs):
            return inputs, None, None

    class NVTXEnd:
        def __init__(self, *args, **kwargs):
            pass

        def __call__(self, inputs, *args, **kwargs):
            return inputs[0]

    class NVTXCallback(keras.callbacks.Callback):
        def __init__(self, *args, **kwargs):
            super().__init__()

    names = {
        "keras": keras,
        "KERAS3": not keras.__version__.startswith("2."),
        "annotate": lambda model, *args, **kwargs: model,
        "is_annotated": lambda layer: False,
        "NVTXRange": lambda layer, *args, **kwargs: layer,
        "NVTXStart": NVTXStart,
        "NVTXEnd": NVTXEnd,
        "NVTXCallback": NVTXCallback,
    }
    package, keras_module, layers, callbacks = (
        types.ModuleType(name) for name in ("nvtx_plugins_tf", "nvtx_plugins_tf.keras", *_SUBMODULES)
    )
    package.__path__, keras_module.__path__ = [], []
    package.keras, keras_module.layers, keras_module.callbacks = keras_module, layers, callbacks
    package.STAND_IN = True
    vars(keras_module).update(names)
    layers.NVTXStart, layers.NVTXEnd, callbacks.NVTXCallback = NVTXStart, NVTXEnd, NVTXCallback
    sys.modules.update({m.__name__: m for m in (package, keras_module, layers, callbacks)})


def _record_fits(keras) -> None:
    """Every ``fit`` of the process gets a callback keeping each batch's logs and weights."""
    fit = keras.Model.fit

    def recorded_fit(model, *args, **kwargs):
        steps: list = []
        FITS.append(steps)

        class Record(keras.callbacks.Callback):
            def on_train_batch_end(self, batch, logs=None):
                logs = {k: float(np.asarray(v)) for k, v in (logs or {}).items()}
                names = [getattr(w, "path", None) or w.name for w in model.weights]
                steps.append((logs, dict(zip(names, (np.array(w) for w in model.get_weights())))))

        kwargs["callbacks"] = [*(kwargs.get("callbacks") or []), Record()]
        return fit(model, *args, **kwargs)

    keras.Model.fit = recorded_fit


def main(argv: list[str]) -> None:
    no_arithmetic = argv[:1] == ["--no-arithmetic"]
    mode, out, script, *args = argv[1:] if no_arithmetic else argv
    import tensorflow as tf

    if no_arithmetic:
        tf.config.optimizer.set_experimental_options({"arithmetic_optimization": False})
    keras = _keras()
    if mode == "stand-in":
        _stand_in(keras)
    _record_fits(keras)
    keras.utils.set_random_seed(0)
    sys.argv = [script, *args]
    try:
        runpy.run_path(script, run_name="__main__")
    finally:
        package = sys.modules.get("nvtx_plugins_tf")
        with open(out, "wb") as f:
            pickle.dump({"fits": FITS, "stand-in": bool(getattr(package, "STAND_IN", False))}, f)


if __name__ == "__main__":
    main(sys.argv[1:])
