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
            raise TypeError(f"{argument} must hold tensors (or values convertible to tensors); "
                            f"got {type(leaf).__name__}") from exc
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
