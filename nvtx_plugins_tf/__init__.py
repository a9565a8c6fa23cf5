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

Likewise, once TensorFlow and the Keras that ``tf.keras`` is (Keras 3, or ``tf_keras`` with
``TF_USE_LEGACY_KERAS=1``) are both imported, ``nvtx_plugins_tf.keras`` is imported, which
registers ``NVTXStart``/``NVTXEnd``/``NVTXRange`` with Keras: a ``.keras``, ``.h5`` or tf_keras
SavedModel using them loads after ``import nvtx_plugins_tf``. This package never imports
Keras itself (a program without Keras does not pay for it).
"""

from __future__ import annotations

import importlib
import os
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
    for finder in [f for f in sys.meta_path if isinstance(f, _AfterImport)]:
        sys.meta_path.remove(finder)


# ------------------------------------------------------- Keras serializables at import
# A model saved with NVTXStart/NVTXEnd/NVTXRange (.keras, .h5, tf_keras SavedModel) loads
# after ``import nvtx_plugins_tf``: once TensorFlow and the Keras that ``tf.keras`` is are
# both imported (in any order, before or after this package), ``nvtx_plugins_tf.keras`` is
# imported, which registers the layers under ``nvtx_plugins_tf>``. Keras itself is never
# imported by this package's import: a program that does not use Keras does not pay for it.


def _keras_module_name() -> str:
    """The package ``tf.keras`` resolves to (TensorFlow's own rule: TF_USE_LEGACY_KERAS)."""
    legacy = os.environ.get("TF_USE_LEGACY_KERAS", None) in ("true", "True", "1")
    return "tf_keras" if legacy else "keras"


def _imported(name: str) -> bool:
    """``name`` is in sys.modules and its ``__init__`` has finished."""
    module = sys.modules.get(name)
    return module is not None and not getattr(getattr(module, "__spec__", None), "_initializing", False)


_keras_registered = False


def _register_keras_serializables(*, keras_done: bool = False, tensorflow_done: bool = False) -> None:
    """Import ``nvtx_plugins_tf.keras`` when TensorFlow and tf.keras's Keras are imported
    (``keras_done``/``tensorflow_done``: called from the hook at the end of that import, where
    the module is still marked as initializing); warn, never raise, when it cannot be imported.

    TensorFlow 2.16+ imports Keras 3 from inside its own ``__init__``: the hook at the end of
    Keras's import then finds TensorFlow still initializing and leaves the registration to the
    hook at the end of TensorFlow's import (``import nvtx_plugins_tf`` before ``tensorflow``)."""
    global _keras_registered
    if _keras_registered or not _autoload_enabled or not (tensorflow_done or _tensorflow_imported()):
        return
    if not (keras_done or _imported(_keras_module_name())):
        return
    _keras_registered = True
    try:
        globals()["keras"] = importlib.import_module(f"{__name__}.keras")
    except Exception as exc:  # noqa: BLE001 - the user's import must not fail because of ours
        warnings.warn(
            f"nvtx_plugins_tf: the Keras layers could not be registered ({type(exc).__name__}: {exc}); "
            "models saved with NVTXStart/NVTXEnd/NVTXRange load after `import nvtx_plugins_tf.keras`",
            OpLibraryWarning,
            stacklevel=2,
        )


def _after_tensorflow() -> None:
    _load_op_library()
    _register_keras_serializables(tensorflow_done=True)


class _AfterImport:
    """Runs ``callback`` right after ``import <name>`` completes, then removes itself.

    (Not removed by a mere ``importlib.util.find_spec(name)``: only the import runs the
    wrapped ``exec_module``.) A meta path finder is any object with ``find_spec``: not a
    subclass of ``importlib.abc.MetaPathFinder``, whose import (``importlib.resources``,
    ``tempfile``, ``typing``...) was a tenth of ``nvtx-tf analyze``'s start-up before its
    work begins."""

    def __init__(self, name: str, callback):
        self.name = name
        self.callback = callback

    def find_spec(self, name, path=None, target=None):
        if name != self.name:
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

        def exec_then_callback(module):
            exec_module(module)
            if self in sys.meta_path:
                sys.meta_path.remove(self)
            self.callback()

        loader.exec_module = exec_then_callback
        return spec


if _tensorflow_imported():
    _load_op_library()
elif "tensorflow" not in sys.modules:
    sys.meta_path.insert(0, _AfterImport("tensorflow", _after_tensorflow))
# else: TensorFlow is being imported right now (this import comes from inside it): the
# first use of the ops loads the library.
if _imported(_keras_module_name()):
    _register_keras_serializables()
elif _keras_module_name() not in sys.modules:
    sys.meta_path.insert(0, _AfterImport(_keras_module_name(), lambda: _register_keras_serializables(keras_done=True)))
