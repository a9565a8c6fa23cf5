"""Gradients of the NVTX ops: backward ranges in their own domain.

Backpropagation meets NvtxEnd first: its gradient opens the backward range
(``grad_message`` in ``grad_domain_name``) around the incoming gradients. The
gradient of NvtxStart closes it around the outgoing ones. Both gradient functions
find each other through the forward range id tensor.

Balance: when the gradient of NvtxStart is never built (a region with no trainable
input, e.g. the model's first layer), the backward range is still ended: under a
GradientTape when ``tape.gradient`` returns (see _tape_closer.py); in a compat.v1
graph when the session step ends (NvtxStart's ``close_at_step_end``).
"""

from __future__ import annotations

import collections
import threading

import tensorflow as tf

from nvtx_plugins_tf.ops import _structure, _tape_closer

_MAX_PENDING = 100_000
_pending: "collections.OrderedDict[tuple, tuple]" = collections.OrderedDict()
_pending_lock = threading.Lock()


def _range_key(range_id) -> tuple:
    """Identifies a forward range across the two gradient functions."""
    if tf.is_symbolic_tensor(range_id):
        return ("graph", id(range_id.graph), range_id.op.name, range_id.value_index)
    return ("eager", int(range_id.numpy()))


def _remember(key: tuple, entry: tuple) -> None:
    with _pending_lock:
        _pending[key] = entry
        while len(_pending) > _MAX_PENDING:
            _pending.popitem(last=False)


def take_pending(key: tuple):
    with _pending_lock:
        return _pending.pop(key, None)


def _through(op_fn, grads):
    """Run the non-None, non-resource gradients through ``op_fn``; keep the rest."""
    positions = [i for i, g in enumerate(grads) if g is not None and getattr(g, "dtype", None) != tf.resource]
    selected = [grads[i] for i in positions]
    flat = _structure.flatten(selected, "grads")
    result = op_fn(flat)
    packed = _structure.pack(selected, result)
    out = list(grads)
    for i, value in zip(positions, packed):
        out[i] = value
    return out


@tf.RegisterGradient("NvtxEnd")
def _nvtx_end_grad(op, *grads):
    from nvtx_plugins_tf.ops import ranges

    grads = list(grads)
    grad_message = op.get_attr("grad_message")
    grad_message = grad_message.decode() if isinstance(grad_message, bytes) else grad_message
    if not grad_message or not ranges.enabled():
        return grads + [None]
    grad_domain = op.get_attr("grad_domain_name")
    grad_domain = grad_domain.decode() if isinstance(grad_domain, bytes) else grad_domain
    backward_id = []

    def open_range(flat):
        out, range_id = ranges._start_op(flat, grad_message, grad_domain, 0, ranges.replica_category(), [], None)
        backward_id.append(range_id)
        return out

    out = _through(open_range, grads)
    key = _range_key(op.inputs[-1])
    _remember(key, (backward_id[0], grad_domain))
    _tape_closer.opened(key, backward_id[0], grad_domain)
    return out + [None]


@tf.RegisterGradient("NvtxStart")
def _nvtx_start_grad(op, *grads):
    from nvtx_plugins_tf.ops import ranges

    n = len(op.get_attr("T")) + len(op.get_attr("Thost"))
    num_payload = op.get_attr("num_payload")
    passthrough = list(grads[:n])
    entry = take_pending(_range_key(op.outputs[-1]))
    if entry is not None:
        backward_id, grad_domain = entry
        passthrough = _through(
            lambda flat: ranges._end_op(flat, backward_id, grad_domain, "", "", None), passthrough
        )
    return passthrough + [None] * num_payload


@tf.RegisterGradient("NvtxMark")
def _nvtx_mark_grad(op, *grads):
    return list(grads) + [None] * op.get_attr("num_payload")
