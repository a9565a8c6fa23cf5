"""Nested structures in and out of the ops: flatten, split host/device, pack back.

The ops take two tensor lists: ``inputs`` (device memory on a GPU) and ``host_inputs``
(int32, string and resource tensors, which TensorFlow keeps in host memory on a GPU).
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf

HOST_DTYPES = frozenset({tf.int32, tf.string, tf.resource})


def flatten(structure: Any, argument: str = "inputs") -> list[tf.Tensor]:
    """Tensors of ``structure`` (composites expanded); [] for None."""
    if structure is None:
        return []
    flat = tf.nest.flatten(structure, expand_composites=True)
    tensors = []
    for leaf in flat:
        if isinstance(leaf, tf.Tensor):
            tensors.append(leaf)
            continue
        try:
            tensors.append(tf.convert_to_tensor(leaf))
        except (TypeError, ValueError) as exc:
            hint = ""
            if type(leaf).__name__ == "KerasTensor":
                hint = (
                    " -- a symbolic tensor of the other Keras: the model mixes Keras 3 (`import keras`) and "
                    "tf_keras (`TF_USE_LEGACY_KERAS=1`, `import tf_keras`) layers; build it with one of them"
                )
            raise TypeError(
                f"{argument} must hold tensors (or values convertible to tensors); got {type(leaf).__name__}{hint}"
            ) from exc
    return tensors


def pack(structure: Any, flat: list[tf.Tensor]) -> Any:
    """``flat`` packed as ``structure``; Keras's state on each leaf (a composite tensor is
    one leaf) carried over from the leaf of ``structure`` it replaces."""
    if structure is None:
        return None
    packed = tf.nest.pack_sequence_as(structure, flat, expand_composites=True)
    carry_keras_state(tf.nest.flatten(structure), tf.nest.flatten(packed))
    return packed


def split(flat: list[tf.Tensor]) -> tuple[list[tf.Tensor], list[tf.Tensor], list[bool]]:
    """(device tensors, host tensors, is_host per position)."""
    is_host = [t.dtype in HOST_DTYPES for t in flat]
    device = [t for t, h in zip(flat, is_host) if not h]
    host = [t for t, h in zip(flat, is_host) if h]
    return device, host, is_host


def merge(device: list[tf.Tensor], host: list[tf.Tensor], is_host: list[bool]) -> list[tf.Tensor]:
    d, h = iter(device), iter(host)
    return [next(h) if flag else next(d) for flag in is_host]


# What Keras hangs on a tensor for later code to read, carried from each input of an NVTX op to
# its output (the ops are identities: annotated and plain models must compute the same):
# ``_keras_logits`` (Keras 3 and tf_keras softmax/sigmoid activations; their crossentropies
# read it and compute from the logits) and ``_keras_mask`` (the mask of a layer's output,
# read by the next layer and by the loss). ``_keras_history`` and its kin are structural
# (which layer made a symbolic tensor) and must not be copied.
KERAS_STATE = ("_keras_logits", "_keras_mask")

# Keras's crossentropies compute from logits where they can: from ``_keras_logits``, or,
# without it, from ``output.op.inputs[0]`` when ``output.op.type`` is ``"Softmax"``
# (categorical) or ``"Sigmoid"`` (binary): tf.nn.softmax in a custom layer, tf_keras's
# Softmax layer. The end of a range must keep both readings and keep the logits' gradient
# flowing through the range's end (its gradient opens the backward range), so
# :func:`keep_producer` hands ``_keras_logits`` on through a stateless identity whose
# gradient opens the backward range (gradients.logits_beside: no second consumer of the
# logits survives where nothing reads them, so Grappler still fuses MatMul+BiasAdd+Sigmoid,
# whose bits differ from a Sigmoid of its own), and, where there is no such attribute, sends
# a Softmax/Sigmoid output's input through the NvtxEnd and applies the same op after it.
_ACTIVATION_OPS = {
    "Softmax": lambda x: tf.raw_ops.Softmax(logits=x),
    "Sigmoid": lambda x: tf.raw_ops.Sigmoid(x=x),
}


def copy_keras_state(source: Any, target: Any) -> None:
    """Copy the attributes of :data:`KERAS_STATE` that ``source`` has and ``target`` has not
    (what :func:`keep_producer` set stays) onto ``target``."""
    if source is target:
        return
    for attr in KERAS_STATE:
        if hasattr(target, attr):
            continue
        try:
            value = getattr(source, attr)
        except Exception:  # noqa: BLE001 - absent, or not readable: nothing to carry
            continue
        try:
            setattr(target, attr, value)
        except (AttributeError, TypeError):  # a C type (some EagerTensor builds) takes no attribute
            pass


def carry_keras_state(inputs: list, outputs: list) -> list:
    """``outputs`` (the identities of ``inputs``, position by position) with Keras's state
    on each tensor copied from its input."""
    for source, target in zip(inputs, outputs):
        copy_keras_state(source, target)
    return outputs


def _same_place(a: Any, b: Any) -> bool:
    """Both eager, or both symbolic in the graph being built."""
    if not (isinstance(a, tf.Tensor) and isinstance(b, tf.Tensor)):
        return False
    if tf.is_symbolic_tensor(a) != tf.is_symbolic_tensor(b):
        return False
    if not tf.is_symbolic_tensor(a):
        return True
    graph = tf.compat.v1.get_default_graph()
    return getattr(a, "graph", None) is graph and getattr(b, "graph", None) is graph


def _activation_input(tensor: Any):
    """The input of the Softmax/Sigmoid op that made ``tensor`` when a crossentropy reads
    its logits from there (the tensor has no ``_keras_logits``), else None."""
    if not tf.is_symbolic_tensor(tensor) or not isinstance(tensor, tf.Tensor):
        return None
    try:
        op = tensor.op
        if op.type not in _ACTIVATION_OPS or len(op.inputs) != 1 or len(op.outputs) != 1:
            return None
        logits = op.inputs[0]
    except (AttributeError, ValueError):
        return None
    if logits.dtype != tensor.dtype or not _same_place(tensor, logits):
        return None
    if hasattr(tensor, "_keras_logits"):
        return None  # read from the attribute: sent through beside the tensor
    return logits


def keep_producer(flat: list, op_fn, beside=None) -> list:
    """``op_fn(flat)`` (an identity op on a list of tensors), placed so that a model reads
    the same from its outputs as from its inputs (the annotated model computes what the
    plain one does, bit for bit): Keras's state attributes carried across; ``_keras_logits``
    in a graph set to ``beside(logits, raw outputs of op_fn)`` (eagerly, or without
    ``beside``: passed through ``op_fn`` beside their tensor); the output of a Softmax/Sigmoid
    without that attribute passed as that op's input through ``op_fn`` and the op applied
    again after it (the same kernel on the same values; the first one is then unused and
    pruned)."""
    routed = list(flat)
    again = {}  # position -> the activation op to apply after op_fn
    through = []  # (position, logits) sent through op_fn as extra inputs
    later = []  # (position, logits) given to ``beside``
    for i, tensor in enumerate(flat):
        logits = _activation_input(tensor)
        if logits is not None:
            again[i] = tensor.op.type
            routed[i] = logits
            continue
        attached = getattr(tensor, "_keras_logits", None) if isinstance(tensor, tf.Tensor) else None
        if attached is not None and _same_place(tensor, attached):
            (later if beside is not None and tf.is_symbolic_tensor(attached) else through).append((i, attached))
    raw = list(op_fn(routed + [logits for _, logits in through]))
    extra, out = raw[len(flat) :], raw[: len(flat)]
    for i, kind in again.items():
        out[i] = _ACTIVATION_OPS[kind](out[i])
    for i, tensor in enumerate(out):
        copy_keras_state(flat[i], tensor)
    for (i, _), logits in zip(through, extra):
        _set_logits(out[i], logits)
    for i, logits in later:
        _set_logits(out[i], beside(logits, raw))
    return out


def _set_logits(tensor, logits) -> None:
    try:
        tensor._keras_logits = logits
    except (AttributeError, TypeError):
        pass


def is_tensor_leaf(value: Any) -> bool:
    """A leaf of a nested structure that carries tensors through an NVTX op."""
    return isinstance(value, (tf.Tensor, tf.SparseTensor, tf.RaggedTensor, tf.Variable))


def through_tensors(structure: Any, op_fn, select=is_tensor_leaf) -> Any:
    """``structure`` with its selected leaves replaced by what ``op_fn`` makes of them.

    The selected leaves (composites expanded into their tensors) go through ``op_fn`` in
    one call, ``flat tensors -> flat tensors``; every other leaf is kept as it is.
    """
    leaves = tf.nest.flatten(structure)
    positions = [i for i, leaf in enumerate(leaves) if select(leaf)]
    selected = [leaves[i] for i in positions]
    for i, value in zip(positions, pack(selected, op_fn(flatten(selected)))):
        leaves[i] = value
    return tf.nest.pack_sequence_as(structure, leaves)
