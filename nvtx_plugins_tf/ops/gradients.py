"""Gradients of the NVTX ops: backward ranges in their own domain.

Backpropagation meets NvtxEnd first: its gradient opens the backward range
(``grad_message`` in ``grad_domain_name``) with an NvtxBackwardStart around the incoming
gradients. The gradient of NvtxStart closes it with an NvtxBackwardEnd around the
outgoing ones. Both gradient functions find each other through the forward range id
tensor, which is also the backward range's payload (the link between the two ranges).

The annotated program must be the same program: the backward ops are not stateful, so
TensorFlow runs them only when the gradients they carry are needed, and it still prunes
every gradient it would prune without us (a frozen base model's backward pass, the
gradient with respect to a model's input). Nothing here makes TensorFlow differentiate
anything it would not differentiate anyway.

Balance: when the outgoing gradients of a region are never built or never used (the
model's first layer, the trainable layer just above a frozen base, integer inputs), the
backward range is still ended: under a GradientTape after the region's gradients that
``tape.gradient`` returns (see _tape_closer.py), inside a loop's gradient body or a nested
function's backward graph after the gradients that graph returns; in a compat.v1 graph when
the session step ends (``close_at_step_end``).
"""

from __future__ import annotations

import tensorflow as tf

from nvtx_plugins_tf.ops import _backward, _raw, _structure, _tape_closer, _used_gradients


def _carries_gradient(grad) -> bool:
    return grad is not None and getattr(grad, "dtype", None) != tf.resource


@tf.RegisterGradient("NvtxEnd")
def _nvtx_end_grad(op, *grads):
    extra = [None] * (op.get_attr("num_ids") + _raw.num_text(op))
    return backward_through(op, list(grads)) + extra


def backward_through(op, grads: list) -> list:
    """``grads`` through the NvtxBackwardStart that opens the backward range of the NvtxEnd
    ``op`` (its outputs' gradients; or the gradient of the logits that stand beside its
    output, see :func:`logits_beside`)."""
    num_ids = op.get_attr("num_ids")
    grad_message = _raw.op_text(op, "grad_message")
    if not grad_message or not _raw.annotations_enabled():
        return grads
    grad_domain = _raw.op_text(op, "grad_domain_name")
    forward_id = op.inputs[len(op.outputs)] if num_ids else _raw.paired_range_id(op)
    if forward_id is None:  # a paired end whose start cannot be found: no backward range
        return grads
    key = _backward.range_key(forward_id)
    earlier = _backward.peek(key)
    if earlier is not None and _in_this_graph(earlier):
        # the range's other gradient, after the first opened it (an output's and the logits'
        # beside another output, logits_beside): one backward range, these gradients after
        # its start, not a second range of the same name
        return _after(earlier, grads)
    opened = []

    def open_range(flat):
        out, range_id = _raw.backward_start_op(flat, grad_message, grad_domain, _raw.replica_category(), forward_id)
        opened.append(_backward.BackwardRange(key, range_id, grad_domain))
        return out

    # The backward range opens after its forward range closed, also where the incoming
    # gradient does not depend on the region's output (the forward NvtxEnd runs anyway:
    # waiting for it computes nothing more).
    # (``op`` may be the tape's stand-in; its outputs are the real ones.)
    graph = None if tf.executing_eagerly() else tf.compat.v1.get_default_graph()
    forward_end = [t.op for t in op.outputs[:1] if tf.is_symbolic_tensor(t) and t.graph is graph]
    with tf.control_dependencies(forward_end):
        out = _structure.through_tensors(grads, open_range, _carries_gradient)
    if not opened:  # no gradient came
        return out
    _backward.remember(key, opened[0])
    _tape_closer.opened(opened[0])
    return out


def _in_this_graph(entry: _backward.BackwardRange) -> bool:
    """Whether ``entry`` was opened while building this graph's gradients (eagerly: always;
    its key is the forward range's own id)."""
    if entry.start_op is None:
        return tf.executing_eagerly()
    return not tf.executing_eagerly() and entry.start_op.graph is tf.compat.v1.get_default_graph()


def _after(entry: _backward.BackwardRange, grads: list) -> list:
    """``grads``, each after ``entry``'s NvtxBackwardStart (eagerly: as they are, it ran)."""
    if entry.start_op is None:
        return grads
    with tf.control_dependencies([entry.start_op]):
        return [tf.identity(g) if _carries_gradient(g) and tf.is_tensor(g) else g for g in grads]


def logits_beside(logits, end_op):
    """``logits`` for ``_keras_logits`` of an output of the NvtxEnd ``end_op``: the same
    tensor in value, through a stateless identity (pruned where nothing reads it, so the op
    that made the logits keeps its one consumer and Grappler fuses it as in the plain model:
    MatMul+BiasAdd+Sigmoid) whose gradient opens ``end_op``'s backward range, as the
    gradient of the output would have (the loss computes from the logits)."""

    @tf.custom_gradient
    def identity(t):
        def grad(upstream):
            return backward_through(end_op, [upstream])[0]

        return tf.identity(t), grad

    return identity(logits)


@tf.RegisterGradient("NvtxStart")
def _nvtx_start_grad(op, *grads):
    n = len(op.get_attr("T")) + len(op.get_attr("Thost"))
    num_payload = op.get_attr("num_payload")
    passthrough = list(grads[:n])
    entry = _backward.take(_backward.range_key(op.outputs[-1]))
    # Only the gradients the differentiator passes on go through the end: one op over an
    # unused one too would keep it alive (an RNN cell's input gradient, _used_gradients.py).
    carried = [g for g in passthrough if _carries_gradient(g)]
    used = _used_gradients.used_inputs(op)
    if used is not None and any(used[i] for i, g in enumerate(passthrough) if _carries_gradient(g)):
        carried = [g for i, g in enumerate(passthrough) if _carries_gradient(g) and used[i]]
    carried_ids = {id(g) for g in carried}
    if entry is not None and carried:
        # Where the tape closer can see whether the gradients are used (this graph is the
        # one a tape.gradient call builds), the end is stateless and runs only if they are.
        # In another graph (the backward function of a nested tf.function, tf.gradients)
        # nobody can tell before TensorFlow prunes it, so the end is stateful: it always
        # runs, and keeps the gradients it carries alive (as every end did before).
        prunable = _tape_closer.sees(tf.compat.v1.get_default_graph()) if not tf.executing_eagerly() else True
        ended = []

        def close_range(flat):
            if prunable:
                out = _raw.backward_end_op(flat, entry.range_id, entry.domain)
            else:
                out = _raw.end_op(flat, entry.range_id, entry.domain)
            ended.append(out[0].op if tf.is_symbolic_tensor(out[0]) and prunable else _backward.ALWAYS_RUNS)
            return out

        passthrough = _structure.through_tensors(passthrough, close_range, lambda g: id(g) in carried_ids)
        entry.end_op = ended[0]
    # Otherwise no gradient leaves the region: the tape closer ends the range.
    return passthrough + [None] * (num_payload + _raw.num_text(op))


@tf.RegisterGradient("NvtxMark")
def _nvtx_mark_grad(op, *grads):
    return list(grads) + [None] * (op.get_attr("num_payload") + _raw.num_text(op))


@tf.RegisterGradient("NvtxBackwardStart")
def _nvtx_backward_start_grad(op, *grads):
    """Second-order gradients pass through unannotated."""
    n = len(op.get_attr("T")) + len(op.get_attr("Thost"))
    return list(grads[:n]) + [None] * (op.get_attr("num_payload") + _raw.num_text(op))


@tf.RegisterGradient("NvtxBackwardEnd")
def _nvtx_backward_end_grad(op, *grads):
    return list(grads) + [None] * (op.get_attr("num_ids") + _raw.num_text(op))
