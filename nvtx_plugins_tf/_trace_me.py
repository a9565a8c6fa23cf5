"""The bridge of host-side ranges (:mod:`._host_ranges`) to TensorFlow's profiler: while it
traces, each range is also a TraceMe activity with the same message and the domain and
payload as its metadata, as the ops' ranges are (``cc_ops/tf_ops/trace_me_bridge.h``).
"""

from __future__ import annotations

import sys
import types
import warnings

__all__ = ["TracedRange"]


def _trace_me_api():
    """TensorFlow's TraceMe binding, when TensorFlow is loaded (never imported from here): an
    object with ``TraceMe`` and ``traceme_enabled()``, or None.

    ``_pywrap_traceme.traceme_enabled`` exists from TensorFlow 2.21; before, TensorFlow's own
    ``tf.profiler.experimental.Trace`` reads the ``enabled`` attribute of
    ``tensorflow/python/profiler/trace.py``, which the profiler sets while it traces the host,
    and so does the binding returned here. When neither is there (a TensorFlow this package does
    not know), one warning says that host ranges stay out of TensorFlow's profiler (their NVTX
    ranges are unaffected) and None is returned."""
    if "tensorflow" not in sys.modules:
        return None
    try:
        from tensorflow.python.profiler.internal import _pywrap_traceme
    except ImportError:
        return None
    if hasattr(_pywrap_traceme, "traceme_enabled"):
        return _pywrap_traceme
    try:
        from tensorflow.python.profiler import trace
    except ImportError:
        trace = None
    if trace is not None and isinstance(getattr(trace, "enabled", None), bool):
        return types.SimpleNamespace(TraceMe=_pywrap_traceme.TraceMe, traceme_enabled=lambda: trace.enabled)
    _warn_unavailable()
    return None


_warned = False


def _warn_unavailable() -> None:
    """The one line saying that TensorFlow's profiler does not see host ranges (said once)."""
    global _warned
    if _warned:
        return
    _warned = True
    version = getattr(sys.modules.get("tensorflow"), "__version__", "?")
    warnings.warn(
        f"nvtx_plugins_tf: TensorFlow {version} tells neither through _pywrap_traceme.traceme_enabled nor "
        "through tensorflow.python.profiler.trace.enabled whether its profiler traces: the Keras callback's "
        "and the session hooks' ranges are NVTX ranges only, not also TraceMe events in TensorFlow's profiler",
        RuntimeWarning,
        stacklevel=3,
    )


class TracedRange:
    """A range that TensorFlow's profiler also traces: the NVTX range id (0 without a
    tool) and the TraceMe activity. :meth:`Domain.end` takes it like an id."""

    __slots__ = ("nvtx_id", "trace_me")

    def __init__(self, nvtx_id: int, trace_me):
        self.nvtx_id = nvtx_id
        self.trace_me = trace_me


def _trace_me_kwargs(domain_name: str | None, payload: int | None) -> dict:
    """The TraceMe metadata of a range: as the ops' (``trace_me_bridge.cc``)."""
    if payload is None:
        return {"domain": domain_name or ""}
    return {"domain": domain_name or "", "payload": payload}
