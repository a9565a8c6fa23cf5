"""End backward ranges whose NvtxBackwardEnd never runs, when tape.gradient returns.

A GradientTape differentiates only ops that it recorded, and it records an op only when
one of its inputs is watched. A region with no trainable input (the model's first layer)
therefore never gets the gradient of its NvtxStart, and the backward range opened by the
gradient of its NvtxEnd would stay open. The same holds when the gradient of NvtxStart is
built but unused, e.g. the lowest trainable layer above a frozen base: TensorFlow prunes
the gradient with respect to the region's input, and the (stateless) NvtxBackwardEnd on it
with it. NVIDIA's old ``nvtx-plugins`` asked for a dummy trainable variable in the model;
making the tape record NvtxStart, or keeping the input gradient alive, would compute a
gradient nobody asked for, a large step-time cost on the example MLP and on a frozen
MobileNetV2 base (the models whose step time with annotate() ``benchmarks/bench_models.py``
measures).

Instead, ``tf.GradientTape.gradient`` (and so ``jacobian`` and ``batch_jacobian``) and, inside
a ``tf.function``, ``tf.gradients`` are wrapped. A backward range opened during the call
whose NvtxBackwardEnd was not built, or will not run, is ended when the call returns:
eagerly right then; while tracing a graph by an end through which the returned gradients
computed from the backward range's tensors pass, so it runs after them, wherever they are
computed (in a jacobian's pfor: where its vectorized rows are, _pfor.py), and computes
nothing they would not. The end is an NvtxBackwardEnd, which runs exactly when those
gradients are used, hence exactly when the range's start runs; it is a stateful NvtxEnd
where something else may run the start without using them: a stateful op built during the
call, or a tape recording the call (a Hessian). "Will not run" is decided the way
TensorFlow's function runtime prunes: an op runs when a returned tensor or a stateful op
depends on it. (A caller that discards some returned gradients still has them computed for
such a range.)

A loop's gradient is differentiated in a graph of its own: TensorFlow's while_v2 (tf.map_fn,
tf.while_loop, tf.scan, a Keras RNN) builds the body's gradient with its graph differentiator
(``gradients_util._GradientsHelper``), over the loop variables whose gradients are needed;
cond_v2 and a nested tf.function's backward graph do the same. A region there whose input
gradient is not needed (only the weights trainable) gets the gradient of its NvtxEnd, not of
its NvtxStart. Such a call, in a function graph the innermost call above does not build, is
therefore a call of its own: when it returns, the ranges opened in its graph that no end
closes are ended as above, over the gradients it returns (the body's outputs; before: one
backward range per iteration left open). Ends that NvtxStart's gradient builds there stay
stateful (``sees`` is False): a loop variable's gradient may still be pruned after the call.
"""

from __future__ import annotations

import functools
import threading

import tensorflow as tf
from tensorflow.python.eager import backprop, record
from tensorflow.python.framework import func_graph
from tensorflow.python.ops import gradients_util

from nvtx_plugins_tf.ops import _backward, _raw

_local = threading.local()
_installed = False
_install_lock = threading.Lock()


class _Call:
    """Backward ranges opened during one tape.gradient call (or one differentiator call
    building a loop's, a branch's or a function's gradient graph: ``sees_ends`` False)."""

    __slots__ = ("graph", "first_op", "opened", "sees_ends")

    def __init__(self, sees_ends: bool = True):
        self.graph = None if tf.executing_eagerly() else tf.compat.v1.get_default_graph()
        self.first_op = len(self.graph.get_operations()) if self.graph is not None else 0
        self.opened = []  # _backward.BackwardRange
        self.sees_ends = sees_ends


def _stack() -> list:
    if not hasattr(_local, "stack"):
        _local.stack = []
    return _local.stack


def opened(entry) -> bool:
    """Called by NvtxEnd's gradient; False when no tape.gradient call is under way."""
    stack = _stack()
    if not stack:
        return False
    stack[-1].opened.append(entry)
    return True


def sees(graph) -> bool:
    """Whether the innermost tape.gradient call under way builds ``graph`` (so that it can
    tell, when it returns, which of the ops built there TensorFlow will run)."""
    stack = _stack()
    return bool(stack) and stack[-1].sees_ends and stack[-1].graph is graph


def _returned_tensors(result) -> list:
    return [t for t in tf.nest.flatten(result, expand_composites=True) if tf.is_symbolic_tensor(t)]


def _live(created: list, returned: list) -> tuple[set, set]:
    """(ops, tensor refs) of ``created`` that TensorFlow computes: what a returned tensor
    or a stateful op depends on, the rule of its function runtime's pruning. An IdentityN
    (custom gradients wrap their results in one) needs only the inputs of its used outputs:
    Grappler drops the others."""
    members = set(created)
    ops, tensors, whole = set(), set(), set()  # whole: ops all of whose inputs are needed
    work = [("tensor", t) for t in returned]
    work += [("op", op) for op in created if op._is_stateful]  # pylint: disable=protected-access
    while work:
        kind, item = work.pop()
        if kind == "tensor":
            if item.ref() in tensors or item.op not in members:
                continue
            tensors.add(item.ref())
            if item.op.type != "IdentityN":
                work.append(("op", item.op))
                continue
            work.append(("tensor", item.op.inputs[item.value_index]))
            if item.op not in ops:
                ops.add(item.op)
                work.extend(("op", c) for c in item.op.control_inputs)
            continue
        if item not in members or item in whole:
            continue
        whole.add(item)
        ops.add(item)
        work.extend(("tensor", t) for t in item.inputs)
        work.extend(("op", c) for c in item.control_inputs)
    return ops, tensors


def _downstream(members: set, start_op) -> set:
    """Ops of ``members`` fed, directly or not, by ``start_op`` (itself included)."""
    seen, frontier = {start_op}, [start_op]
    while frontier:
        op = frontier.pop()
        for out in op.outputs:
            for consumer in out.consumers():
                if consumer in members and consumer not in seen:
                    seen.add(consumer)
                    frontier.append(consumer)
    return seen


def _narrow(call: _Call, entry, needed: set, returned: set) -> None:
    """Rebuild a live NvtxBackwardEnd over just the gradients that are used.

    One NvtxBackwardEnd carries every gradient leaving a region; when only some of them
    are used (a Concatenate whose other input is frozen), it would keep the unused ones
    alive. The consumers of the used ones are moved to a new NvtxBackwardEnd over them
    alone, and the old op, now unused, is pruned with the gradients nobody needs.
    """
    end = entry.end_op
    outputs = list(end.outputs)
    used = [i for i, t in enumerate(outputs) if t.ref() in needed]
    if len(used) == len(outputs) or not used or any(t.ref() in returned for t in outputs):
        return
    with call.graph.as_default():
        narrowed = _raw.backward_end_op([end.inputs[i] for i in used], entry.range_id, entry.domain)
    for i, new in zip(used, narrowed):
        old = outputs[i]
        for consumer in list(old.consumers()):
            for index, tensor in enumerate(consumer.inputs):
                if tensor is old:
                    consumer._update_input(index, new)  # pylint: disable=protected-access
    entry.end_op = narrowed[0].op


def _close(call: _Call, result):
    """Ends the ranges of ``call`` that nothing else ends; returns ``result``, in a graph with
    the returned gradients that such a range's tensors feed passed through its (stateful)
    NvtxEnd. Passing them through, rather than hanging the end beside them, makes the end
    part of whatever computes them: tape.jacobian's pfor, which keeps only the ops its
    outputs reach, runs it once per row as it runs the range's start (before: 6 backward
    ranges of a jacobian left open)."""
    if call.graph is None:
        for entry in call.opened:
            _backward.take(entry.key)
            if entry.end_op is None:  # (eagerly, a stateless op with no output never runs)
                _raw.end_op([], entry.range_id, entry.domain)
        return result
    created = call.graph.get_operations()[call.first_op :]
    members = set(created)
    returned = _returned_tensors(result)
    returned_refs = {t.ref() for t in returned}
    live, needed = _live(created, returned)
    kept_by_state, _ = _live(created, [])
    recorded = record.could_possibly_record()  # by a tape or a forward accumulator
    current = {t.ref(): t for t in returned}  # each returned tensor as passed through the ends so far
    for entry in call.opened:
        _backward.take(entry.key)
        if entry.end_op is _backward.ALWAYS_RUNS or entry.start_op not in live:
            continue  # ended by an end that always runs, or never opens
        if entry.end_op is not None and any(t.ref() in needed for t in entry.end_op.outputs):
            _narrow(call, entry, needed, returned_refs)
            continue  # its NvtxBackwardEnd ends it
        after = _downstream(members, entry.start_op)
        fed = [t for t in returned if t.op in after]
        # Stateless where only the returned gradients can keep the range's start alive: the
        # end then runs exactly when the start does. A stateful end would also run where
        # nothing asks for those gradients, and compute them: once more per jacobian (pfor
        # runs a loop body's stateful ops once with the loop variable's default, _pfor.py).
        # Stateful where a stateful op built during the call needs the start, or where a tape
        # records the call: a gradient of these gradients (a Hessian) may need the start
        # without them.
        end = _raw.end_op if recorded or entry.start_op in kept_by_state else _raw.backward_end_op
        with call.graph.as_default():
            ended = end([current[t.ref()] for t in fed], entry.range_id, entry.domain)
        for t, out in zip(fed, ended):
            current[t.ref()] = out
    return tf.nest.map_structure(
        lambda leaf: current.get(leaf.ref(), leaf) if tf.is_symbolic_tensor(leaf) else leaf,
        result,
        expand_composites=True,
    )


def _wrap(original, call_graph_ok=lambda: True, sees_ends: bool = True):
    """``original`` (a function computing gradients) run inside a _Call: the backward ranges
    opened meanwhile are ended when it returns (see the module docstring)."""

    @functools.wraps(original)
    def gradient(*args, **kwargs):
        if not call_graph_ok():
            return original(*args, **kwargs)
        call = _Call(sees_ends)
        _stack().append(call)
        try:
            result = original(*args, **kwargs)
        except BaseException:
            _stack().pop()
            if call.graph is None:
                _close(call, None)  # ranges opened eagerly before the error still end
            raise
        _stack().pop()
        outer = _stack()[-1] if _stack() else None
        if call.opened and call.graph is not None and outer is not None and outer.graph is call.graph:
            # A gradient inside a gradient (tf.recompute_grad, a custom gradient): what
            # this call returns may still be unused by the outer one, which decides.
            outer.opened.extend(call.opened)
            return result
        if call.opened:
            return _close(call, result)
        return result

    gradient.__wrapped_by_nvtx_plugins_tf__ = True
    return gradient


def _in_graph_of_its_own() -> bool:
    """Whether a differentiator call now builds a function graph (a loop's, a branch's or a
    function's gradient) that the innermost call under way does not build."""
    if tf.executing_eagerly():
        return False
    graph = tf.compat.v1.get_default_graph()
    stack = _stack()
    return isinstance(graph, func_graph.FuncGraph) and not (stack and stack[-1].graph is graph)


def install() -> None:
    """Wrap ``tf.GradientTape.gradient`` and ``tf.gradients`` once per process. ``tf.gradients``
    only outside compat.v1 graphs (inside a ``tf.function``): in a compat.v1 graph the
    ranges a session step leaves open are ended when it ends (``close_at_step_end``). And
    TensorFlow's graph differentiator where it builds a function graph of its own (a loop's
    gradient body, module docstring)."""
    global _installed
    with _install_lock:
        if _installed:
            return
        backprop.GradientTape.gradient = _wrap(backprop.GradientTape.gradient)
        in_function = lambda: not _raw.tf1_graph_mode() and not tf.executing_eagerly()
        for namespace in (tf, tf.compat.v2):
            if not getattr(namespace.gradients, "__wrapped_by_nvtx_plugins_tf__", False):
                namespace.gradients = _wrap(namespace.gradients, in_function)
        helper = getattr(gradients_util, "_GradientsHelper", None)
        if helper is not None and not getattr(helper, "__wrapped_by_nvtx_plugins_tf__", False):
            gradients_util._GradientsHelper = _wrap(helper, _in_graph_of_its_own, sees_ends=False)  # noqa: SLF001
        _installed = True
