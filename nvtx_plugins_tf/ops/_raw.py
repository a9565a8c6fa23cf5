"""The raw-op layer: one function per NVTX op, and what decides how ops are built.

Everything above it (ranges.py's public API, the gradients, the tape closer, the Keras
layers) builds ops through these functions; none of them calls the op library directly.
"""

from __future__ import annotations

import os
import threading
import warnings

import tensorflow as tf

from nvtx_plugins_tf.ops import _loader, _structure


def annotations_enabled() -> bool:
    """False when ``NVTX_DISABLE`` is set (the ``nvtx`` package's switch): no ops are added."""
    return not os.environ.get("NVTX_DISABLE")


_xla_warning_lock = threading.Lock()
_xla_warned = False


def in_xla_context() -> bool:
    """True while tracing a function compiled with XLA (``jit_compile=True``)."""
    from tensorflow.python.ops import control_flow_util

    if tf.executing_eagerly():
        return False
    graph = tf.compat.v1.get_default_graph()
    if control_flow_util.GraphOrParentsInXlaContext(graph):
        return True
    while graph is not None:
        if getattr(graph, "_xla_compile", False) or getattr(graph, "is_xla_compiled", False):
            return True
        graph = getattr(graph, "outer_graph", None)
    return False


def skip_for_xla(message: str) -> bool:
    """Our ops cannot be compiled by XLA: drop the range, warn once per process."""
    global _xla_warned
    if not in_xla_context():
        return False
    with _xla_warning_lock:
        if not _xla_warned:
            _xla_warned = True
            warnings.warn(
                f"nvtx_plugins_tf: NVTX range {message!r} (and every other one) is dropped inside an "
                "XLA-compiled function (jit_compile=True): XLA cannot compile the NvtxStart/NvtxEnd ops. "
                "Compile without XLA to see the ranges.",
                RuntimeWarning,
                stacklevel=4,
            )
    return True


def replica_category() -> int:
    """``replica_id_in_sync_group + 1`` inside a replica of a multi-replica
    ``tf.distribute`` strategy, else 0: the default NVTX category of ranges built there,
    so each replica's ranges are told apart (``Range.category``; nsys "Category")."""
    context = tf.distribute.get_replica_context()
    if context is None or context.num_replicas_in_sync <= 1:
        return 0
    replica = tf.get_static_value(context.replica_id_in_sync_group)
    return int(replica) + 1 if replica is not None else 0


def current_graph():
    return None if tf.executing_eagerly() else tf.compat.v1.get_default_graph()


def tf1_graph_mode() -> bool:
    return not tf.compat.v1.executing_eagerly_outside_functions()


def start_op(flat, message, domain_name, color, category, payload, name):
    """One NvtxStart. In a compat.v1 graph the range is also registered to be ended when
    the session step ends, in case its NvtxEnd is not among the ops a run executes."""
    device, host, is_host = _structure.split(flat)
    out_device, out_host, range_id = _loader.load().nvtx_start(
        device,
        host,
        payload,
        message=message,
        domain_name=domain_name,
        color=color,
        category=category,
        close_at_step_end=tf1_graph_mode(),
        name=name,
    )
    return _structure.merge(list(out_device), list(out_host), is_host), range_id


def backward_start_op(flat, message, domain_name, category, forward_range_id):
    """One NvtxBackwardStart (not stateful: runs only when the gradients it carries are
    used); its payload is the forward range's id, which links the two ranges."""
    device, host, is_host = _structure.split(flat)
    out_device, out_host, range_id = _loader.load().nvtx_backward_start(
        device,
        host,
        [forward_range_id],
        message=message,
        domain_name=domain_name,
        category=category,
        close_at_step_end=tf1_graph_mode(),
    )
    return _structure.merge(list(out_device), list(out_host), is_host), range_id


def backward_end_op(flat, range_id, domain_name):
    """One NvtxBackwardEnd (not stateful, see backward_start_op)."""
    device, host, is_host = _structure.split(flat)
    out_device, out_host = _loader.load().nvtx_backward_end(
        device, host, range_id, domain_name=domain_name, close_at_step_end=tf1_graph_mode()
    )
    return _structure.merge(list(out_device), list(out_host), is_host)


def end_op(flat, range_id, domain_name, grad_message="", grad_domain_name="", name=None):
    device, host, is_host = _structure.split(flat)
    out_device, out_host = _loader.load().nvtx_end(
        device,
        host,
        range_id,
        domain_name=domain_name,
        grad_message=grad_message,
        grad_domain_name=grad_domain_name,
        close_at_step_end=tf1_graph_mode(),
        name=name,
    )
    return _structure.merge(list(out_device), list(out_host), is_host)


def mark_op(flat, message, domain_name, color, category, payload, name):
    """One NvtxMark."""
    device, host, is_host = _structure.split(flat)
    out_device, out_host = _loader.load().nvtx_mark(
        device, host, payload, message=message, domain_name=domain_name, color=color, category=category, name=name
    )
    return _structure.merge(list(out_device), list(out_host), is_host)
