"""nvtx_plugins_tf: NVTX ranges inside TensorFlow graphs.

``import nvtx_plugins_tf as nvtx_tf`` gives the same surface as NVIDIA's old
``nvtx.plugins.tf``: ``nvtx_tf.ops`` (start/end/trace), ``nvtx_tf.keras`` (layers and
callbacks), ``nvtx_tf.hooks`` / ``nvtx_tf.estimator`` (session hooks); plus
``nvtx_tf.recorder`` (read recordings) and ``nvtx_tf.testing`` (capture ranges in tests).

Submodules load on first use, so ``python -m nvtx_plugins_tf record`` does not import
TensorFlow; when TensorFlow is already imported, ``ops`` (and with it the op library) is
loaded at once, so that SavedModels using the ops load after ``import nvtx_plugins_tf``.
"""

from __future__ import annotations

import importlib
import sys

__version__ = "0.1.0"
__all__ = ["ops", "keras", "hooks", "estimator", "recorder", "testing", "__version__"]


def __getattr__(name: str):
    if name in __all__:
        module = importlib.import_module(f"{__name__}.{name}")
        globals()[name] = module
        return module
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(list(globals()) + __all__)


# With TensorFlow already imported (the usual order), register the NVTX ops now, so that
# `import nvtx_plugins_tf` is enough to load a SavedModel that uses them.
if "tensorflow" in sys.modules:
    from nvtx_plugins_tf import ops as ops  # noqa: E402,F401  (loads the op library)
