"""Keras surface of nvtx_plugins_tf: layers, wrappers and callbacks.

Built on the Keras that ``tf.keras`` is: Keras 3, or ``tf_keras`` when
``TF_USE_LEGACY_KERAS=1`` (see :mod:`nvtx_plugins_tf.keras._compat`).

* ``layers.NVTXStart`` / ``layers.NVTXEnd``: the old package's marker layers
  (functional and subclassed models);
* :class:`NVTXRange`: wrap one layer (works in ``Sequential``);
* :func:`annotate`: annotate every layer of an existing model in place (:func:`unannotate`
  removes it);
* ``callbacks.NVTXCallback``: ranges for fit/evaluate/predict, epochs and batches.
"""

from nvtx_plugins_tf import _tensorflow

_tensorflow.require()  # one line when there is none (or too old), before the modules that import it

from nvtx_plugins_tf.keras import callbacks, layers, wrappers  # noqa: E402
from nvtx_plugins_tf.keras._compat import KERAS3, LEGACY, keras  # noqa: E402
from nvtx_plugins_tf.keras.callbacks import NVTXCallback  # noqa: E402
from nvtx_plugins_tf.keras.layers import NVTXEnd, NVTXStart  # noqa: E402
from nvtx_plugins_tf.keras.wrappers import NVTXRange, annotate, is_annotated, unannotate  # noqa: E402

__all__ = [
    "layers",
    "callbacks",
    "wrappers",
    "NVTXStart",
    "NVTXEnd",
    "NVTXRange",
    "NVTXCallback",
    "annotate",
    "unannotate",
    "is_annotated",
    "keras",
    "KERAS3",
    "LEGACY",
]
