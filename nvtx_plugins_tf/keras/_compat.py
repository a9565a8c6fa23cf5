"""Which Keras to build on: the one ``tf.keras`` is.

TensorFlow 2.16+ makes ``tf.keras`` Keras 3, or ``tf_keras`` (Keras 2) when
``TF_USE_LEGACY_KERAS=1``. Layers and callbacks must subclass the classes of the Keras
the user's models are built with, so this module resolves ``tf.keras`` once and exposes
the matching top-level package as :data:`keras` (``keras`` for Keras 3, which has the full
public API such as ``keras.saving`` and ``Model.export``; ``tf_keras`` for Keras 2).
"""

from __future__ import annotations

import tensorflow as tf

_tf_keras_module = tf.keras
LEGACY: bool = _tf_keras_module.__name__.startswith("tf_keras")

if LEGACY:
    import tf_keras as keras  # noqa: F401
else:
    import keras  # noqa: F401  (Keras 3; tf.keras is a subset of the same objects)

KERAS_VERSION: str = getattr(keras, "__version__", "2")
KERAS3: bool = not LEGACY and KERAS_VERSION.split(".")[0] == "3"


def register_serializable(cls):
    """``register_keras_serializable(package="nvtx_plugins_tf")`` in either Keras."""
    saving = getattr(keras, "saving", None)
    register = getattr(saving, "register_keras_serializable", None) or keras.utils.register_keras_serializable
    return register(package="nvtx_plugins_tf")(cls)


def flatten_layers(layer, include_self: bool = False):
    """Every sub-layer of ``layer`` (recursively, nested models included), deduplicated."""
    if hasattr(layer, "_flatten_layers"):
        return list(layer._flatten_layers(include_self=include_self, recursive=True))
    layers = [layer] if include_self else []
    for sub in getattr(layer, "layers", []):
        layers.append(sub)
        layers.extend(flatten_layers(sub))
    return layers
