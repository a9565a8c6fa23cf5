"""Which input gradients of an op the graph differentiator under way will use.

TensorFlow's graph differentiator (``gradients_util._GradientsHelper``: ``tf.gradients``, the
body of a while loop's or a cond's gradient, a function's backward graph) calls an op's
gradient function for every input, but passes on only the gradients of inputs that lie
between its ``xs`` and ``ys``; the others are left unused and pruned. NvtxStart's gradient
ends the backward range over the gradients it returns, and one op over several of them
keeps all alive: in an annotated RNN cell the gradient of the cell's input (one MatMul per
step, unused when the sequence's gradient is not asked for) was computed because the state
gradients, needed, shared its NvtxBackwardEnd.

The differentiator's own bookkeeping says which inputs lie between: ``_PendingCount`` returns
a count keyed by every op between ``xs`` and ``ys`` that feeds another (the ops whose gradient
function will run). Both functions are wrapped (once per process) to keep that count, per
thread, while a call is under way. Where the wrapped functions are absent (another
TensorFlow), nothing is known and every gradient is taken as used.
"""

from __future__ import annotations

import threading

from tensorflow.python.ops import gradients_util
from tensorflow.python.util import object_identity

_local = threading.local()
_installed = False
_install_lock = threading.Lock()


def _frames() -> list:
    if not hasattr(_local, "frames"):
        _local.frames = []
    return _local.frames


def used_inputs(op) -> list[bool] | None:
    """Per input of ``op``, whether the innermost differentiator call that differentiates
    ``op`` passes its gradient on; None when no such call is under way (a GradientTape's
    gradient functions get ``op.skip_input_indices`` instead)."""
    for frame in reversed(_frames()):
        if frame is None:
            continue
        pending, xs = frame
        try:
            if op not in pending:
                continue
        except TypeError:  # an op that cannot be a key (a tape's stand-in)
            return None
        inputs = getattr(gradients_util, "_Inputs", lambda o, _xs: list(o.inputs))(op, xs)
        return [t in xs or t.op in pending for t in inputs]
    return None


def install() -> None:
    """Wrap ``_GradientsHelper`` and ``_PendingCount`` of TensorFlow's ``gradients_util``."""
    global _installed
    with _install_lock:
        if _installed:
            return
        helper = getattr(gradients_util, "_GradientsHelper", None)
        pending_count = getattr(gradients_util, "_PendingCount", None)
        if helper is None or pending_count is None:
            _installed = True
            return

        def _GradientsHelper(*args, **kwargs):  # noqa: N802 - the name it replaces
            frames = _frames()
            frames.append(None)
            try:
                return helper(*args, **kwargs)
            finally:
                frames.pop()

        def _PendingCount(*args, **kwargs):  # noqa: N802 - the name it replaces
            result = pending_count(*args, **kwargs)
            frames = _frames()
            xs = [a for a in (*args, *kwargs.values()) if isinstance(a, object_identity.ObjectIdentitySet)]
            if frames and frames[-1] is None and len(xs) == 1 and isinstance(result, tuple) and len(result) == 3:
                frames[-1] = (result[1], xs[0])
            return result

        gradients_util._GradientsHelper = _GradientsHelper  # noqa: SLF001
        gradients_util._PendingCount = _PendingCount  # noqa: SLF001
        _installed = True
