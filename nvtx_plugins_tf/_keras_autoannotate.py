"""Annotate every Keras model of an unmodified script (``record --keras-layers``).

``patch_model_class`` wraps ``compile``, ``fit``, ``evaluate`` and ``predict`` of a Keras
``Model`` class so that each model is annotated with
:func:`nvtx_plugins_tf.keras.annotate` (forward and backward range per layer) the first
time one of them is called. Installed in a recorded child by ``_site/sitecustomize.py``
when Keras (or tf_keras) is imported; importing this module imports nothing heavy.
"""

from __future__ import annotations

import functools

METHODS = ("compile", "fit", "evaluate", "predict")
_MARK = "_nvtx_tf_auto_annotate"


def _wrap(original):
    @functools.wraps(original)
    def method(self, *args, **kwargs):
        from nvtx_plugins_tf.keras import annotate

        annotate(self)  # idempotent: a layer is annotated once
        return original(self, *args, **kwargs)

    setattr(method, _MARK, True)
    return method


def patch_model_class(model_class) -> None:
    """Make every model of ``model_class`` annotate itself before compile/fit/evaluate/predict."""
    for name in METHODS:
        original = getattr(model_class, name, None)
        if original is None or getattr(original, _MARK, False):
            continue
        setattr(model_class, name, _wrap(original))
