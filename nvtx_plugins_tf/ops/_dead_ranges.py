"""Ranges around dead code run nothing: annotation never keeps alive work TensorFlow prunes.

The forward ops are stateful, so TensorFlow's function runtime always runs them, and
NvtxEnd runs only once the tensors it carries are computed. Around code whose results
nothing uses (Keras 3's RNN calls its cell once more only to learn the output shapes;
a dead branch of a model) that would compute the region, which TensorFlow prunes in the
unannotated program: an annotated Keras 3 LSTM ran inference at 1.9x its plain copy.

When ``tf.function`` finishes tracing a graph (the exit of its automatic control
dependencies, when the returned tensors are known), a range is *dead* when neither its
NvtxStart, nor its NvtxEnd, nor anything the end carries is needed by a returned tensor or
by a stateful op other than the forward NVTX ops -- the rule by which TensorFlow's function
runtime prunes. Each tensor input of a dead range's two ops is then replaced by an empty
tensor (a range without tensors, ``ops.range``/``trace``: its end loses its control inputs) and
both get ``emit=false`` (forward the tensors, emit nothing): the region loses its only consumer
and is pruned as in the unannotated program, and no range is recorded for work that does not
run. Graphs built otherwise (compat.v1 sessions, which prune by fetches
alone) are left as they are.
"""

from __future__ import annotations

import tensorflow as tf
from tensorflow.core.framework import attr_value_pb2
from tensorflow.python.framework import auto_control_deps, errors

from nvtx_plugins_tf.ops import _raw

_FORWARD_RANGE_OPS = frozenset({"NvtxStart", "NvtxEnd"})
_installed = False


def _num_passed(op) -> int:
    return len(op.get_attr("T")) + len(op.get_attr("Thost"))


def _start_of(end):
    """The NvtxStart whose range ``end`` closes, in ``end``'s graph, or None."""
    if end.get_attr("num_ids"):
        producer = end.inputs[_num_passed(end)].op
        return producer if producer.type == "NvtxStart" else None
    range_id = _raw.paired_range_id(end)
    return range_id.op if range_id is not None and range_id.graph is end.graph else None


def _live_ops(graph, returned) -> set:
    """Ids of the ops a returned tensor or a stateful op other than NvtxStart/NvtxEnd needs."""
    stack = [t.op for t in returned if hasattr(t, "op") and t.graph is graph]
    stack += [op for op in graph.get_operations() if op._is_stateful and op.type not in _FORWARD_RANGE_OPS]  # noqa: SLF001
    live = set()
    while stack:
        op = stack.pop()
        if op._id in live:  # noqa: SLF001
            continue
        live.add(op._id)  # noqa: SLF001
        stack.extend(t.op for t in op.inputs)
        stack.extend(op.control_inputs)
    return live


#: Name scope of the empty tensors that replace a silenced range's inputs.
EMPTY_SCOPE = "nvtx_silenced"


def _empty(dtype, cache: dict):
    """A tensor of ``dtype`` with no elements and an unknown static shape (so that it may
    replace any input), one per dtype in ``cache``; None for dtypes without a constant."""
    if dtype in (tf.resource, tf.variant):
        return None
    if dtype not in cache:
        with tf.control_dependencies(None), tf.name_scope(EMPTY_SCOPE):
            cache[dtype] = tf.compat.v1.placeholder_with_default(tf.zeros([0], dtype), shape=None)
    return cache[dtype]


def _silence(ops, cache: dict) -> bool:
    """Empty tensor inputs and ``emit=false`` for ``ops``; False (nothing changed) when some
    input cannot be replaced."""
    plans = []
    for op in ops:
        for index in range(_num_passed(op)):
            plans.append((op, index, op.inputs[index].dtype))
    empties = [_empty(dtype, cache) for _, _, dtype in plans]
    if any(e is None for e in empties):
        return False
    try:
        for (op, index, _), empty in zip(plans, empties):
            op._update_input(index, empty)  # noqa: SLF001
    except (errors.InvalidArgumentError, ValueError):
        return False
    for op in ops:
        op._set_attr("emit", attr_value_pb2.AttrValue(b=False))  # noqa: SLF001
    return True


def silence_dead_ranges(graph, first_op: int, returned) -> int:
    """Silence the dead ranges (module docstring) among the ops ``graph`` got from index
    ``first_op`` on; returns how many."""
    ends = [op for op in graph.get_operations()[first_op:] if op.type == "NvtxEnd"]
    ends = [op for op in ends if op.get_attr("emit") and (_num_passed(op) or op.control_inputs)]
    if not ends:
        return 0
    live = _live_ops(graph, returned)
    silenced = 0
    cache = {}
    with graph.as_default():
        for end in ends:
            if end._id in live:  # noqa: SLF001
                continue
            start = _start_of(end)
            if start is None or not start.get_attr("emit"):
                continue
            # (Without tensors, a stateful op of the block, a variable read say, depends on the
            # start by a control edge: that alone does not make the block's results used.)
            if start._id in live and _num_passed(end):  # noqa: SLF001
                continue
            if any(t.op._id in live for t in end.inputs[: _num_passed(end)]):  # noqa: SLF001
                continue  # the region's results are used elsewhere: the range stays
            if any(op._id in live for op in end.control_inputs):  # noqa: SLF001
                continue
            if not _num_passed(end):  # ops.range/trace without a tensor: ordered by control edges
                if all(op is start for op in end.control_inputs):
                    continue  # an empty block: the range itself is what was asked for
                end._remove_all_control_inputs()  # noqa: SLF001
            silenced += _silence([start, end], cache)
    return silenced


def install() -> None:
    """Run :func:`silence_dead_ranges` when tf.function's automatic control dependencies
    close (once per process)."""
    global _installed
    if _installed:
        return
    acd = auto_control_deps.AutomaticControlDependencies
    original_exit = acd.__exit__

    def __exit__(self, exc_type, exc_value, traceback):  # noqa: N807 - the method it wraps
        if exc_type is None and not tf.executing_eagerly() and self._graph is tf.compat.v1.get_default_graph():
            silence_dead_ranges(
                self._graph, self._n_operations, tf.nest.flatten(list(self._returned_tensors), expand_composites=True)
            )
        return original_exit(self, exc_type, exc_value, traceback)

    acd.__exit__ = __exit__
    _installed = True
