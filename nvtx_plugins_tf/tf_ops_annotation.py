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
# TensorFlow 2.16 and 2.17: Enable is inline, over this exported std::atomic<int> (non-zero while enabled)
_ENABLED_FLAG = "_ZN3tsl8profiler8internal20g_annotation_enabledE"
_LIBRARY = "libtensorflow_framework.so.2"


class TFOpRangesUnavailable(RuntimeError):
    """This TensorFlow does not export what enabling its per-op ranges needs."""


def _symbols():
    """(enable(bool), enabled() -> bool) over the running TensorFlow's AnnotationStack."""
    from nvtx_plugins_tf import _tensorflow

    tf = _tensorflow.require()
    if not tf.test.is_built_with_cuda():  # TSL's ScopedAnnotation makes NVTX calls only in CUDA builds
        raise TFOpRangesUnavailable(
            f"TensorFlow {tf.__version__} is built without CUDA (tensorflow-cpu?): it makes no NVTX ranges of "
            "its own to switch on; the tensorflow package (or tf-nightly) does"
        )

    path = os.path.join(tf.sysconfig.get_lib(), _LIBRARY)
    try:
        library = ctypes.CDLL(path)
    except OSError as exc:
        raise _unavailable(tf, path) from exc
    try:
        enable = getattr(library, _ENABLE)
        generation = ctypes.c_int.in_dll(library, _GENERATION)
    except (AttributeError, ValueError):
        try:  # before 2.18: an aligned int store is what the inline Enable's atomic store compiles to on x86-64
            flag = ctypes.c_int.in_dll(library, _ENABLED_FLAG)
        except (AttributeError, ValueError) as exc:
            raise _unavailable(tf, path) from exc

        def enable_flag(on: bool) -> None:
            flag.value = int(on)

        return enable_flag, lambda: flag.value != 0
    enable.argtypes = [ctypes.c_bool]
    enable.restype = None
    return enable, lambda: bool(generation.value & 1)


def _unavailable(tf, path: str) -> TFOpRangesUnavailable:
    return TFOpRangesUnavailable(
        f"TensorFlow {tf.__version__} has no tsl::profiler::AnnotationStack::Enable in {path}: "
        "its per-op NVTX ranges cannot be switched on (TensorFlow 2.16+ pip wheels have it)"
    )


def tf_op_ranges_enabled() -> bool:
    """Whether TensorFlow currently emits its per-op ranges."""
    _, enabled = _symbols()
    return enabled()


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
        self._enable, is_enabled = _symbols()
        self._previous = is_enabled()
        self._enable(enabled)

    def __enter__(self) -> "tf_op_ranges":
        return self

    def __exit__(self, *exc) -> None:
        self._enable(self._previous)
