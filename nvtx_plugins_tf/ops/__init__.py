"""NVTX ranges that open and close while the graph executes.

Same calls as NVIDIA's old ``nvtx.plugins.tf.ops``: a forward range in ``Forward`` and,
where the tape differentiates the region, a backward range in ``Gradient``
(:func:`nvtx_plugins_tf.testing.capture` reads back what the recorder got):

>>> import tensorflow as tf
>>> import nvtx_plugins_tf as nvtx_tf
>>> from nvtx_plugins_tf.testing import capture
>>> dense = tf.keras.layers.Dense(16)
>>> with capture() as rec:
...     with tf.GradientTape() as tape:
...         x, ctx = nvtx_tf.ops.start(tf.ones([2, 8]), message="Dense 1", domain_name="Forward",
...                                    grad_domain_name="Gradient")
...         x = dense(x)
...         x = nvtx_tf.ops.end(x, ctx)
...     grads = tape.gradient(x, dense.trainable_variables)
>>> x.shape
TensorShape([2, 16])
>>> sorted((r.domain, r.message) for r in rec.ranges if r.message == "Dense 1")
[('Forward', 'Dense 1'), ('Gradient', 'Dense 1')]

plus :func:`mark`, the :func:`range` context manager, and ``color``/``category``/``payload``.
"""

from nvtx_plugins_tf import _tensorflow

_tensorflow.require()  # one line when there is none (or too old), before the modules that import it

from nvtx_plugins_tf.ops import _dead_ranges, _ordering, _pfor, _tape_closer, _used_gradients  # noqa: E402
from nvtx_plugins_tf.ops import gradients as _gradients  # noqa: E402, F401  (registers gradients)
from nvtx_plugins_tf.ops._loader import library_path  # noqa: E402
from nvtx_plugins_tf.ops._loader import load as load_library  # noqa: E402
from nvtx_plugins_tf.ops.ranges import NvtxContext, disabled, enabled, end, mark, range, start, trace  # noqa: E402

_tape_closer.install()
_ordering.install()
_pfor.install()
_dead_ranges.install()
_used_gradients.install()

__all__ = [
    "start",
    "end",
    "trace",
    "mark",
    "range",
    "enabled",
    "disabled",
    "NvtxContext",
    "load_library",
    "library_path",
]
