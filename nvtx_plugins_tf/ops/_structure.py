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
    if structure is None:
        return None
    return tf.nest.pack_sequence_as(structure, flat, expand_composites=True)


def split(flat: list[tf.Tensor]) -> tuple[list[tf.Tensor], list[tf.Tensor], list[bool]]:
    """(device tensors, host tensors, is_host per position)."""
    is_host = [t.dtype in HOST_DTYPES for t in flat]
    device = [t for t, h in zip(flat, is_host) if not h]
    host = [t for t, h in zip(flat, is_host) if h]
    return device, host, is_host


def merge(device: list[tf.Tensor], host: list[tf.Tensor], is_host: list[bool]) -> list[tf.Tensor]:
    d, h = iter(device), iter(host)
    return [next(h) if flag else next(d) for flag in is_host]


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
