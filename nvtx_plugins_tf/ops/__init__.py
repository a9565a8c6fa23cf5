"""NVTX ranges that open and close while the graph executes.

Same calls as NVIDIA's old ``nvtx.plugins.tf.ops``::

    import nvtx_plugins_tf as nvtx_tf
    x, ctx = nvtx_tf.ops.start(x, message="Dense 1", domain_name="Forward",
                               grad_domain_name="Gradient")
    x = tf.keras.layers.Dense(1024)(x)
    x = nvtx_tf.ops.end(x, ctx)

plus :func:`mark`, the :func:`range` context manager, and ``color``/``category``/``payload``.
"""

from nvtx_plugins_tf.ops import _ordering, _tape_closer
from nvtx_plugins_tf.ops import gradients as _gradients  # noqa: F401  (registers gradients)
from nvtx_plugins_tf.ops._loader import library_path
from nvtx_plugins_tf.ops._loader import load as load_library
from nvtx_plugins_tf.ops.ranges import NvtxContext, enabled, end, mark, range, start, trace

_tape_closer.install()
_ordering.install()

__all__ = ["start", "end", "trace", "mark", "range", "enabled", "NvtxContext", "load_library", "library_path"]
