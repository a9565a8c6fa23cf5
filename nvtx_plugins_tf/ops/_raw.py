"""The raw-op layer: one function per NVTX op, and what decides how ops are built.

Everything above it (ranges.py's public API, the gradients, the tape closer, the Keras
layers) builds ops through these functions; none of them calls the op library directly.
"""

from __future__ import annotations

import functools
import os
import random
import threading
import warnings
import weakref

import tensorflow as tf
from tensorflow.core.framework import attr_value_pb2

from nvtx_plugins_tf.ops import _loader, _structure

_disabled_blocks = 0  # open ranges.disabled() blocks, in any thread
_disabled_lock = threading.Lock()


def annotations_enabled() -> bool:
    """False when ``NVTX_DISABLE`` is set (the ``nvtx`` package's switch) or inside
    ``ops.disabled()``: no ops are added."""
    return not (_disabled_blocks or os.environ.get("NVTX_DISABLE"))


def suspend(delta: int) -> None:
    """Open (+1) or close (-1) an ``ops.disabled()`` block."""
    global _disabled_blocks
    with _disabled_lock:
        _disabled_blocks += delta


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


# Texts of ops run eagerly
# -----------------------
# TensorFlow's eager runtime keeps one kernel per distinct set of attributes of an op, for
# the life of the process (its kernel cache). Built eagerly, an NVTX op therefore takes its
# texts (message, domain, backward names) as a ``text`` input of string scalars, its text
# attributes left empty: a loop naming each step ``f"step {i}"`` reuses one kernel instead of
# building one per name (tens of KB each, never freed, and a kernel build per step).
# In graphs they stay attributes, resolved once when the kernel is built (the hot path),
# readable in a GraphDef, and the form saved graphs use.

#: The texts an op built eagerly takes as its ``text`` input, in that order.
TEXT_INPUTS = {
    "NvtxStart": ("message", "domain_name"),
    "NvtxBackwardStart": ("message", "domain_name"),
    "NvtxMark": ("message", "domain_name"),
    "NvtxEnd": ("domain_name", "grad_message", "grad_domain_name"),
    "NvtxBackwardEnd": ("domain_name",),
}


@functools.lru_cache(maxsize=512)
def _text_tensor(value: str):
    """A string scalar (the recent ones cached: a fixed name costs no tensor per step)."""
    return tf.constant(value, tf.string)


def _texts(op_type: str, **texts: str) -> tuple[list, dict]:
    """``(text input, text attributes)`` of an op of ``op_type`` about to be built: eagerly
    the texts as inputs and empty attributes, else no input and the texts as attributes."""
    if not tf.executing_eagerly():
        return [], texts
    return [_text_tensor(texts[key]) for key in TEXT_INPUTS[op_type]], {key: "" for key in texts}


def op_text(op, name: str) -> str:
    """The text ``name`` of an NVTX op: its attribute, or its ``text`` input when it was
    built eagerly (see _texts)."""
    num_text = op.get_attr("num_text") if name in TEXT_INPUTS.get(op.type, ()) else 0
    value = None
    if num_text:
        # Eagerly a value; a placeholder where a function traces the gradient of an op run
        # eagerly (ForwardAccumulator's JVP): then unknown, and the attribute ('') is used.
        value = tf.get_static_value(op.inputs[len(op.inputs) - num_text + TEXT_INPUTS[op.type].index(name)])
        if hasattr(value, "item"):
            value = value.item()
    if value is None:
        value = op.get_attr(name)
    return value.decode() if isinstance(value, bytes) else value


def num_text(op) -> int:
    """How many ``text`` inputs ``op`` has (its gradient returns None for each)."""
    try:
        return op.get_attr("num_text")
    except ValueError:
        return 0


def start_op(flat, message, domain_name, color, category, payload, name):
    """One NvtxStart. In a compat.v1 graph the range is also registered to be ended when
    the session step ends, in case its NvtxEnd is not among the ops a run executes."""
    device, host, is_host = _structure.split(flat)
    text, texts = _texts("NvtxStart", message=message, domain_name=domain_name)
    out_device, out_host, range_id = _loader.load().nvtx_start(
        device,
        host,
        payload,
        text=text,
        **texts,
        color=color,
        category=category,
        close_at_step_end=tf1_graph_mode(),
        name=name,
    )
    out = _structure.merge(list(out_device), list(out_host), is_host)
    return _structure.carry_keras_state(flat, out), range_id


def backward_start_op(flat, message, domain_name, category, forward_range_id):
    """One NvtxBackwardStart (not stateful: runs only when the gradients it carries are
    used); its payload is the forward range's id, which links the two ranges."""
    device, host, is_host = _structure.split(flat)
    text, texts = _texts("NvtxBackwardStart", message=message, domain_name=domain_name)
    out_device, out_host, range_id = _loader.load().nvtx_backward_start(
        device,
        host,
        [forward_range_id],
        text=text,
        **texts,
        category=category,
        close_at_step_end=tf1_graph_mode(),
    )
    return _structure.merge(list(out_device), list(out_host), is_host), range_id


def backward_end_op(flat, range_id, domain_name):
    """One NvtxBackwardEnd (not stateful, see backward_start_op)."""
    device, host, is_host = _structure.split(flat)
    text, texts = _texts("NvtxBackwardEnd", domain_name=domain_name)
    out_device, out_host = _loader.load().nvtx_backward_end(
        device, host, [range_id], text=text, **texts, close_at_step_end=tf1_graph_mode()
    )
    return _structure.merge(list(out_device), list(out_host), is_host)


def end_op(flat, range_id, domain_name, grad_message="", grad_domain_name="", name=None):
    """One NvtxEnd of the range ``range_id``. Where :func:`can_pair` holds for the
    range's NvtxStart, the end takes no ``range_id`` input: it pairs with its start through
    their ``pair`` attribute (cc_ops/tf_ops/range_pairing.h), one edge less per range. The
    end of a range around the user's tensors keeps what Keras reads of them: _ends.end_op."""
    start = range_id.op if tf.is_symbolic_tensor(range_id) else None
    paired = start is not None and start.type == "NvtxStart" and can_pair(flat, start)
    device, host, is_host = _structure.split(flat)
    text, texts = _texts(
        "NvtxEnd", domain_name=domain_name, grad_message=grad_message, grad_domain_name=grad_domain_name
    )
    out_device, out_host = _loader.load().nvtx_end(
        device,
        host,
        [] if paired else [range_id],
        text=text,
        **texts,
        close_at_step_end=tf1_graph_mode(),
        name=name,
    )
    if paired:
        _pair(start, (list(out_device) + list(out_host))[0].op)
    return _structure.merge(list(out_device), list(out_host), is_host)


# Pairing a start and its end without the range-id edge
# -----------------------------------------------------
# Sound only where the end is sure to run after its start in the same execution of the
# same graph: inside a tf.function graph (not eagerly, where each op is an execution of
# its own; not in a compat.v1 graph, whose session may run the end without the start),
# in the same control-flow context, with an input of the end computed from an output of
# the start (TensorFlow then runs the end after the start). Everything else keeps the edge.

_pair_tokens = random.Random()  # seeded from os.urandom: tokens differ across processes
_paired_ids: weakref.WeakValueDictionary = weakref.WeakValueDictionary()  # token -> start's range_id


def can_pair(flat, start) -> bool:
    """Whether the NvtxEnd over ``flat`` may find ``start``'s range through a pair (above)."""
    if tf.executing_eagerly() or tf1_graph_mode() or not flat:
        return False
    graph = tf.compat.v1.get_default_graph()
    if start.graph is not graph or start._get_control_flow_context() is not graph._get_control_flow_context():
        return False
    # Walk back from the end's inputs; an op built before the start cannot depend on it.
    first = start._id
    seen = set()
    stack = [t.op for t in flat if tf.is_symbolic_tensor(t) and t.graph is graph]
    while stack:
        op = stack.pop()
        if op is start:
            return True
        if op._id < first or op._id in seen:
            continue
        seen.add(op._id)
        stack.extend(t.op for t in op.inputs)
        stack.extend(op.control_inputs)
    return False


def _set_pair(op, value: str) -> None:
    op._set_attr("pair", attr_value_pb2.AttrValue(s=value.encode()))


def _pair(start, end) -> None:
    set_pair(end, set_pair(start))


def set_pair(op, token: str | None = None) -> str:
    """Pairs ``op`` (an NvtxStart or NvtxEnd) under ``token`` (a new one when None) and its own
    node name; returns the token. Also for the copies pfor makes (_pfor.py)."""
    if token is None:
        token = f"{_pair_tokens.getrandbits(64):016x}"
    _set_pair(op, f"{token}@{op.name}")
    if op.type == "NvtxStart":
        _paired_ids[token] = op.outputs[-1]
    return token


def pair_token(op) -> str:
    """The token of ``op``'s pair ('' when it has none)."""
    try:
        return op.get_attr("pair").decode().split("@")[0]
    except ValueError:  # an op type without the attribute
        return ""


def paired_range_id(end):
    """The range_id output of the NvtxStart that the paired NvtxEnd ``end`` ends (for the
    backward range's link), or None when it cannot be found."""
    # ``end`` may be the tape's stand-in, whose attributes are those the op was built with.
    real = end.outputs[0].op if end.outputs and tf.is_symbolic_tensor(end.outputs[0]) else end
    try:
        token = real.get_attr("pair").decode().split("@")[0]
    except ValueError:  # not the NvtxEnd itself: ForwardAccumulator's JVP graph hands its own op
        return None
    found = _paired_ids.get(token)
    if found is not None:
        return found
    for op in real.graph.get_operations():  # a graph built elsewhere (a loaded SavedModel)
        if op.type == "NvtxStart" and op.get_attr("pair").decode().split("@")[0] == token:
            return op.outputs[-1]
    return None


def mark_op(flat, message, domain_name, color, category, payload, name):
    """One NvtxMark."""
    device, host, is_host = _structure.split(flat)
    text, texts = _texts("NvtxMark", message=message, domain_name=domain_name)
    out_device, out_host = _loader.load().nvtx_mark(
        device, host, payload, text=text, **texts, color=color, category=category, name=name
    )
    return _structure.carry_keras_state(flat, _structure.merge(list(out_device), list(out_host), is_host))
