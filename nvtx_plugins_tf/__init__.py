"""nvtx_plugins_tf: NVTX ranges inside TensorFlow graphs.

``import nvtx_plugins_tf as nvtx_tf`` gives the same surface as NVIDIA's old
``nvtx.plugins.tf``: ``nvtx_tf.ops`` (start/end/trace), ``nvtx_tf.keras`` (layers and
callbacks), ``nvtx_tf.hooks`` / ``nvtx_tf.estimator`` (session hooks); plus
``nvtx_tf.recorder`` (read recordings) and ``nvtx_tf.testing`` (capture ranges in tests).

Importing the package does not import TensorFlow (``python -m nvtx_plugins_tf record``
stays light). Once TensorFlow is imported -- before or after this package, in either
order -- the op library is loaded and ``ops`` with it, so that a SavedModel using
``NvtxStart``/``NvtxEnd`` loads after ``import tensorflow`` and ``import nvtx_plugins_tf``.
When the library cannot be loaded (e.g. ``NVTX_TF_NO_AUTO_BUILD=1`` and nothing built),
the import still succeeds: one :class:`OpLibraryWarning` carries the loader's one-line
message with the command that fixes it, and the ops raise ImportError with that line on use.
"""

from __future__ import annotations

import importlib
import importlib.abc
import sys
import threading
import warnings

__version__ = "0.1.0"
__all__ = [
    "ops",
    "keras",
    "hooks",
    "estimator",
    "recorder",
    "testing",
    "tf_op_ranges",
    "tf_op_ranges_enabled",
    "OpLibraryWarning",
    "__version__",
]
_SUBMODULES = ("ops", "keras", "hooks", "estimator", "recorder", "testing")


class OpLibraryWarning(UserWarning):
    """The op library could not be loaded when TensorFlow and nvtx_plugins_tf met."""


def __getattr__(name: str):
    if name in ("tf_op_ranges", "tf_op_ranges_enabled", "TFOpRangesUnavailable"):
        return getattr(importlib.import_module(f"{__name__}.tf_ops_annotation"), name)
    if name in _SUBMODULES:
        module = importlib.import_module(f"{__name__}.{name}")
        globals()[name] = module
        return module
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(list(globals()) + __all__)


# ---------------------------------------------------------------- op library at import
_autoload_lock = threading.Lock()
_autoload_enabled = True


def _tensorflow_imported() -> bool:
    """TensorFlow is in sys.modules and its ``__init__`` has finished."""
    tf = sys.modules.get("tensorflow")
    return tf is not None and not getattr(getattr(tf, "__spec__", None), "_initializing", False)


def _load_op_library() -> None:
    """Import ``ops`` and register the NVTX ops with TensorFlow; warn (never raise) on failure."""
    if not _autoload_enabled:
        return
    from nvtx_plugins_tf.ops import _loader

    if _loader.loading():  # TensorFlow imported by the loader itself: it loads the library
        return
    with _autoload_lock:
        try:  # inside TensorFlow's import: never raise into it (e.g. a TensorFlow too old for ops)
            globals()["ops"] = importlib.import_module(f"{__name__}.ops")
            _loader.load()
        except ImportError as exc:
            warnings.warn(str(exc), OpLibraryWarning, stacklevel=2)


def _disable_autoload() -> None:
    """For ``python -m nvtx_plugins_tf build``: importing TensorFlow must not load (or
    auto-build) the library that is about to be rebuilt."""
    global _autoload_enabled
    _autoload_enabled = False
    for finder in [f for f in sys.meta_path if isinstance(f, _AfterTensorFlowImport)]:
        sys.meta_path.remove(finder)


class _AfterTensorFlowImport(importlib.abc.MetaPathFinder):
    """Loads the op library right after ``import tensorflow`` completes, then removes itself.

    (Not removed by a mere ``importlib.util.find_spec("tensorflow")``: only the import runs
    the wrapped ``exec_module``.)"""

    def find_spec(self, name, path=None, target=None):
        if name != "tensorflow":
            return None
        spec = next(
            (
                s
                for s in (
                    f.find_spec(name, path, target) for f in sys.meta_path if f is not self and hasattr(f, "find_spec")
                )
                if s is not None
            ),
            None,
        )
        loader = getattr(spec, "loader", None)
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        exec_module = loader.exec_module

        def exec_then_load(module):
            exec_module(module)
            if self in sys.meta_path:
                sys.meta_path.remove(self)
            _load_op_library()

        loader.exec_module = exec_then_load
        return spec


if _tensorflow_imported():
    _load_op_library()
elif "tensorflow" not in sys.modules:
    sys.meta_path.insert(0, _AfterTensorFlowImport())
# else: TensorFlow is being imported right now (this import comes from inside it): the
# first use of the ops loads the library.
