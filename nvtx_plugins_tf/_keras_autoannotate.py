"""Annotate every Keras model of an unmodified script (``record --keras-layers``).

``patch_model_class`` wraps ``compile``, ``fit``, ``evaluate`` and ``predict`` of a Keras
``Model`` class so that each model is annotated with
:func:`nvtx_plugins_tf.keras.annotate` (forward and backward range per layer) the first
time one of them is called. Installed in a recorded child by ``_site/sitecustomize.py``
when Keras (or tf_keras) is imported; importing this module imports nothing heavy.
Where :mod:`nvtx_plugins_tf.keras` cannot be imported (an interpreter without its
dependencies), the methods run unannotated after one warning: the flag never changes
the fate of the program.
"""

from __future__ import annotations

import functools
import sys

METHODS = ("compile", "fit", "evaluate", "predict")
_MARK = "_nvtx_tf_auto_annotate"
_unavailable: list[str] = []  # the import error, once seen


def _annotate(model) -> None:
    if _unavailable:
        return
    try:
        from nvtx_plugins_tf.keras import annotate
    except ImportError as exc:
        _unavailable.append(str(exc))
        print(
            f"nvtx_plugins_tf: warning: --keras-layers: Keras models of this process are not annotated ({exc})",
            file=sys.stderr,
            flush=True,
        )
        return
    annotate(model)  # idempotent: a layer is annotated once


def _wrap(original):
    @functools.wraps(original)
    def method(self, *args, **kwargs):
        _annotate(self)
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
