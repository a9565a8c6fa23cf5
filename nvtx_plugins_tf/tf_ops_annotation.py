"""TensorFlow's own per-op NVTX ranges, on demand.

The TensorFlow wheel already wraps every op it executes in an NVTX push/pop range (domain
``TSL``, named ``node_name:op_type``, through ``tsl::profiler::ScopedAnnotation``), but
only while ``tsl::profiler::AnnotationStack`` is enabled, which only TensorFlow's CUPTI GPU
tracer does (``TF_ENABLE_NVTX_RANGES`` is not read by the pip wheel). This module enables
it, resolving the exported symbol at run time; under Nsight Systems, which usually keeps
CUPTI to itself, this is the way to get per-op ranges without a custom TensorFlow build.

    import nvtx_plugins_tf as nvtx_tf
    with nvtx_tf.tf_op_ranges():          # or nvtx_tf.tf_op_ranges(True) for the process
        model.fit(...)

The op ranges fall inside the user's ranges in time (the executor runs a step's ops on its
pool threads, so not necessarily on the thread of the user's range). TensorFlow's GPU tracer
switches the same flag: stopping a TensorFlow GPU profile turns the op ranges off again.
"""

from __future__ import annotations

import ctypes
import os

_ENABLE = "_ZN3tsl8profiler15AnnotationStack6EnableEb"  # tsl::profiler::AnnotationStack::Enable(bool)
_GENERATION = "_ZN3tsl8profiler15AnnotationStack11generation_E"  # odd while enabled
_LIBRARY = "libtensorflow_framework.so.2"


class TFOpRangesUnavailable(RuntimeError):
    """This TensorFlow does not export what enabling its per-op ranges needs."""


def _symbols():
    from nvtx_plugins_tf import _tensorflow

    tf = _tensorflow.require()

    path = os.path.join(tf.sysconfig.get_lib(), _LIBRARY)
    try:
        library = ctypes.CDLL(path)
        enable = getattr(library, _ENABLE)
        generation = ctypes.c_int.in_dll(library, _GENERATION)
    except (OSError, AttributeError, ValueError) as exc:
        raise TFOpRangesUnavailable(
            f"TensorFlow {tf.__version__} has no tsl::profiler::AnnotationStack::Enable in {path}: "
            "its per-op NVTX ranges cannot be switched on (TensorFlow 2.16+ pip wheels have it)"
        ) from exc
    enable.argtypes = [ctypes.c_bool]
    enable.restype = None
    return enable, generation


def tf_op_ranges_enabled() -> bool:
    """Whether TensorFlow currently emits its per-op ranges."""
    _, generation = _symbols()
    return bool(generation.value & 1)


class tf_op_ranges:  # noqa: N801 - a function-like switch that is also a context manager
    """Switch TensorFlow's per-op NVTX ranges on (or off) now; as a context manager,
    restore the previous state on exit.

    Args:
      enabled: ``True`` to emit one NVTX range per executed TensorFlow op.

    Raises:
      TFOpRangesUnavailable: the installed TensorFlow lacks the symbol (one clear line).

    >>> import nvtx_plugins_tf as nvtx_tf
    >>> with nvtx_tf.tf_op_ranges():
    ...     nvtx_tf.tf_op_ranges_enabled()
    True
    >>> nvtx_tf.tf_op_ranges_enabled()
    False
    """

    def __init__(self, enabled: bool = True):
        if not isinstance(enabled, bool):
            raise TypeError(f"enabled must be a bool, got {type(enabled).__name__}")
        self._enable, generation = _symbols()
        self._previous = bool(generation.value & 1)
        self._enable(enabled)

    def __enter__(self) -> "tf_op_ranges":
        return self

    def __exit__(self, *exc) -> None:
        self._enable(self._previous)
