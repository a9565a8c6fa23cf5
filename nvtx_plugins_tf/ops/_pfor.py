"""The NVTX ops under pfor: ``tape.jacobian``, ``tape.batch_jacobian``, ``tf.vectorized_map``.

pfor rewrites a loop body once for all its iterations: each op of the body becomes ops
over "stacked" tensors (one row per iteration). An op type with no converter falls back
to a while_loop that runs the op once per row, and that broke our ranges:

* a paired NvtxStart and NvtxEnd (no range-id edge, _raw.can_pair) then ran in two
  different while loops; the end looks its start's id up under the execution's frame and
  iteration, which differ between the loops, so it never found it: every forward range of
  an annotated model inside ``tf.vectorized_map`` (per-example gradients) stayed open, as
  did those ``tf.recompute_grad`` reruns inside a jacobian;
* every tensor a range carries was sliced, copied and restacked row by row, and TensorFlow
  warned "Using a while_loop for converting NvtxStart" for each op.

The converters below build one op of the same type over the converted tensors, as pfor's
own PrintV2 converter does: one range around the computation of all the rows, which is
how pfor runs them. A paired start and end copied by one pfor get a pair of their own, so
that the copies pair with each other and not with the loop body's original ops (which
TensorFlow still runs once, with the loop variable's default, like any stateful op of a
loop body, e.g. ``tf.print``). Where the rows carry different values that an op needs as
one scalar, the converter either picks one (a payload: the rows' smallest, e.g. the first
step of a ``payload=step``) or, for a range id per row (an end whose start is not
converted), raises ConversionNotImplementedError and pfor falls back to its while loop,
which ends each row's range.
"""

from __future__ import annotations

import threading
import weakref

import tensorflow as tf
from tensorflow.python.ops.parallel_for import pfor as _pfor_lib

from nvtx_plugins_tf.ops import _raw

# PFor converter -> {pair token of an original NvtxStart: token of its copy}.
_tokens: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_tokens_lock = threading.Lock()
_installed = False


def _num_passed(op) -> int:
    return len(op.get_attr("T")) + len(op.get_attr("Thost"))


def _copy(pfor_input, inputs: list):
    """The op being converted, built again over ``inputs`` (same type and attributes; its
    gradient is recorded on the active tapes as pfor does for its own ops)."""
    op = pfor_input.op
    # pylint: disable=protected-access
    return _pfor_lib._create_op(op.type, inputs, [t.dtype for t in op.outputs], attrs=op.node_def.attr)


def _repair(pfor, original, copy) -> None:
    """Give ``copy`` (of a paired NvtxStart or NvtxEnd) its own pair, shared with the copy of
    its partner made by the same pfor. An end whose start this pfor did not copy (the start
    is outside the loop body) keeps the start's token."""
    token = _raw.pair_token(original)
    if not token:
        return
    with _tokens_lock:
        tokens = _tokens.setdefault(pfor, {})
        if original.type == "NvtxStart":
            tokens[token] = _raw.set_pair(copy)
        else:
            _raw.set_pair(copy, tokens.get(token, token))


def _passed_through(copy, wrapped: list) -> list:
    """The copy's pass-through outputs, stacked where their inputs were."""
    return [_pfor_lib.wrap(t, w.is_stacked, w.is_sparse_stacked) for t, w in zip(copy.outputs, wrapped)]


def _one_payload(wrapped):
    """A payload for all the rows: the rows' smallest when it differs per row."""
    return tf.reduce_min(wrapped.t) if wrapped.is_stacked else wrapped.t


def _convert_start(pfor_input):
    """NvtxStart, NvtxBackwardStart: one range over all rows; its range id is loop invariant."""
    n = _num_passed(pfor_input.op)
    passed = list(pfor_input.inputs[:n])
    payload = [_one_payload(w) for w in pfor_input.inputs[n:]]
    copy = _copy(pfor_input, [w.t for w in passed] + payload)
    _repair(pfor_input.pfor, pfor_input.op, copy)
    return _passed_through(copy, passed) + [_pfor_lib.wrap(copy.outputs[n], False)]


def _convert_end(pfor_input):
    """NvtxEnd, NvtxBackwardEnd: ends the one range of its (converted) start."""
    n = _num_passed(pfor_input.op)
    passed = list(pfor_input.inputs[:n])
    ids = pfor_input.inputs[n:]
    if any(w.is_stacked for w in ids):
        raise _pfor_lib.ConversionNotImplementedError(
            f"{pfor_input.op_type} ends a range id per row: each row's range is ended in a loop"
        )
    copy = _copy(pfor_input, [w.t for w in passed] + [w.t for w in ids])
    _repair(pfor_input.pfor, pfor_input.op, copy)
    return _passed_through(copy, passed)


def _convert_mark(pfor_input):
    """NvtxMark: one mark for all rows."""
    n = _num_passed(pfor_input.op)
    passed = list(pfor_input.inputs[:n])
    payload = [_one_payload(w) for w in pfor_input.inputs[n:]]
    return _passed_through(_copy(pfor_input, [w.t for w in passed] + payload), passed)


_CONVERTERS = {
    "NvtxStart": _convert_start,
    "NvtxBackwardStart": _convert_start,
    "NvtxEnd": _convert_end,
    "NvtxBackwardEnd": _convert_end,
    "NvtxMark": _convert_mark,
}


def install() -> None:
    """Register the converters once per process."""
    global _installed
    if _installed:
        return
    registry = _pfor_lib._pfor_converter_registry  # pylint: disable=protected-access
    for op_type, converter in _CONVERTERS.items():
        if op_type not in registry:
            _pfor_lib.RegisterPFor(op_type)(converter)
    _installed = True
