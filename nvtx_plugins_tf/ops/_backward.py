"""Backward ranges between the two gradient functions that open and end them.

NvtxEnd's gradient opens a backward range and remembers it under the forward range's id;
NvtxStart's gradient takes it to end it; the tape closer (_tape_closer.py) ends those that
NvtxStart's gradient could not. Bounded: entries never taken are dropped oldest first.
"""

from __future__ import annotations

import collections
import threading

import tensorflow as tf

# BackwardRange.end_op of an end that always runs (eagerly, or a stateful end).
ALWAYS_RUNS = "always runs"


class BackwardRange:
    """A backward range opened by NvtxEnd's gradient, until NvtxStart's gradient ends it.

    ``end_op`` is the NvtxBackwardEnd built by NvtxStart's gradient (in a graph, it runs
    only if its gradients are used), ALWAYS_RUNS, or None while no gradient of NvtxStart
    was built.
    """

    __slots__ = ("key", "range_id", "domain", "start_op", "end_op")

    def __init__(self, key: tuple, range_id, domain: str):
        self.key = key
        self.range_id = range_id
        self.domain = domain
        self.start_op = None if tf.executing_eagerly() else range_id.op
        self.end_op = None


_MAX_PENDING = 100_000
_pending: "collections.OrderedDict[tuple, BackwardRange]" = collections.OrderedDict()
_pending_lock = threading.Lock()


def range_key(range_id) -> tuple:
    """Identifies a forward range across the two gradient functions."""
    if tf.is_symbolic_tensor(range_id):
        return ("graph", id(range_id.graph), range_id.op.name, range_id.value_index)
    return ("eager", int(range_id.numpy()))


def remember(key: tuple, entry: BackwardRange) -> None:
    with _pending_lock:
        _pending[key] = entry
        while len(_pending) > _MAX_PENDING:
            _pending.popitem(last=False)


def peek(key: tuple) -> BackwardRange | None:
    """The backward range remembered under ``key``, left in place."""
    with _pending_lock:
        return _pending.get(key)


def take(key: tuple) -> BackwardRange | None:
    with _pending_lock:
        return _pending.pop(key, None)
