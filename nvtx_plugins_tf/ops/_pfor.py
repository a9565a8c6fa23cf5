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
# PFor converter -> {pair token: the paired NvtxEnd ops of its loop body}.
_paired_ends: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
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


def _passed_through(copy, wrapped: list):
    """The copy's pass-through outputs, stacked where their inputs were; the copy itself when
    it has none (pfor's convention for an op with no output)."""
    if not copy.outputs:
        return copy
    return [_pfor_lib.wrap(t, w.is_stacked, w.is_sparse_stacked) for t, w in zip(copy.outputs, wrapped)]


def _one_payload(wrapped):
    """A payload for all the rows: the rows' smallest when it differs per row."""
    return tf.reduce_min(wrapped.t) if wrapped.is_stacked else wrapped.t


def _ends(pfor, start) -> list:
    """The (stateful) NvtxEnd ops of the loop body that end ``start``'s range: through its
    range id, or paired with it."""
    ends = [op for op in start.outputs[-1].consumers() if op.type == "NvtxEnd"]
    token = _raw.pair_token(start)
    if token:
        with _tokens_lock:
            by_token = _paired_ends.get(pfor)
            if by_token is None:  # once per pfor: every paired end of its loop body
                by_token = {}
                for op in pfor._pfor_ops:  # pylint: disable=protected-access
                    if op.type == "NvtxEnd" and _raw.pair_token(op):
                        by_token.setdefault(_raw.pair_token(op), []).append(op)
                _paired_ends[pfor] = by_token
        ends += by_token.get(token, [])
    return [op for op in ends if pfor.op_is_inside_loop(op)]


def _convert_start(pfor_input):
    """NvtxStart, NvtxBackwardStart: one range over all rows; its range id is loop invariant.

    pfor copies only the ops that the loop's outputs need, but a stateful NvtxEnd runs also
    where nothing uses it (a range with no tensor, ``ops.range`` or ``trace``; an end whose
    tensors are unused): its copy is made with its start's, or the copied range never ends.
    """
    pfor, start = pfor_input.pfor, pfor_input.op
    n = _num_passed(start)
    passed = list(pfor_input.inputs[:n])
    payload = [_one_payload(w) for w in pfor_input.inputs[n:]]
    copy = _copy(pfor_input, [w.t for w in passed] + payload)
    _repair(pfor, start, copy)
    outputs = _passed_through(copy, passed) + [_pfor_lib.wrap(copy.outputs[n], False)]
    ends = _ends(pfor, start)
    if ends:
        # pylint: disable=protected-access
        for old, new in zip(start.outputs, outputs):
            pfor._add_conversion(old, new)  # (what pfor does with them when this returns)
        for end in ends:
            pfor._convert_helper(end.outputs[0] if end.outputs else end)
    return outputs


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
