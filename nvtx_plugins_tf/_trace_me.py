"""The bridge of host-side ranges (:mod:`._host_ranges`) to TensorFlow's profiler: while it
traces, each range is also a TraceMe activity with the same message and the domain and
payload as its metadata, as the ops' ranges are (``cc_ops/tf_ops/trace_me_bridge.h``).
"""

from __future__ import annotations

import sys

__all__ = ["TracedRange"]


def _trace_me_api():
    """TensorFlow's TraceMe binding, when TensorFlow is loaded (never imported from here)."""
    if "tensorflow" not in sys.modules:
        return None
    try:
        from tensorflow.python.profiler.internal import _pywrap_traceme
    except ImportError:
        return None
    return _pywrap_traceme


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
