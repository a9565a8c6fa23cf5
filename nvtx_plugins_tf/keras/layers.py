"""Keras layers that open (NVTXStart) and close (NVTXEnd) an NVTX range in a model.

The call shapes of NVIDIA's old ``nvtx.plugins.tf.keras.layers``; one training step
records the forward range and the backward one:

>>> import numpy as np
>>> from nvtx_plugins_tf.keras import keras
>>> from nvtx_plugins_tf.keras.layers import NVTXStart, NVTXEnd
>>> from nvtx_plugins_tf.testing import capture
>>> inputs = keras.Input((4,))
>>> x, marker_id, domain_id = NVTXStart(message="Dense 1", domain_name="Forward")(inputs)
>>> x = keras.layers.Dense(8, activation="relu")(x)
>>> x = NVTXEnd(grad_message="Dense 1 grad", grad_domain_name="Backward")([x, marker_id, domain_id])
>>> model = keras.Model(inputs, keras.layers.Dense(1)(x))
>>> model.compile(optimizer="sgd", loss="mse")
>>> with capture() as rec:
...     _ = model.fit(np.ones((4, 4)), np.ones((4, 1)), batch_size=4, verbose=0)
>>> sorted({(r.domain, r.message) for r in rec.ranges if r.message.startswith("Dense 1")})
[('Backward', 'Dense 1 grad'), ('Forward', 'Dense 1')]

``marker_id`` is the range id (an int64 scalar tensor) and ``domain_id`` a string scalar
tensor holding the domain name, read back statically by NVTXEnd (the NvtxEnd op must name
the domain of the range it closes). The forward range opens and closes as the model
runs; the gradient of NVTXEnd opens the backward range (``grad_message`` in
``grad_domain_name``) and the gradient of NVTXStart closes it, also for a model's first
layer: ``trainable`` is accepted for old code but no dummy variable is needed.

Model styles:

* functional models and subclassed models (call the layers in ``call``): supported;
* ``keras.Sequential``: not possible, NVTXStart has three outputs and NVTXEnd three
  inputs. Wrap the layer instead: ``Sequential([NVTXRange(Dense(8)), ...])``
  (:class:`nvtx_plugins_tf.keras.NVTXRange`) or call :func:`nvtx_plugins_tf.keras.annotate`.

Both layers set ``supports_jit = False``: Keras 3 resolves ``jit_compile="auto"`` to XLA on
a GPU unless a layer opts out, and XLA cannot compile the NVTX ops; an explicit
``compile(jit_compile=True)`` falls back to ``jit_compile=False`` with a Keras warning.
"""

from __future__ import annotations

import sys
import threading
import warnings

import tensorflow as tf

from nvtx_plugins_tf import ops as _ops
from nvtx_plugins_tf.keras._compat import keras, register_serializable
from nvtx_plugins_tf.ops import _ends, _raw, _structure, _validation

__all__ = ["NVTXStart", "NVTXEnd"]

_DISABLED_ID = -1

# _NO_AUTOCAST: the package's layers are made with ``autocast=False``. Under a mixed precision
# policy (``mixed_bfloat16``) Keras casts a layer's floating inputs to its compute dtype; an
# NVTXEnd after a float32 softmax head cast the probabilities to bfloat16 before the loss (loss
# 1.7797 plain, 1.7808 annotated at the first step), and NVTXRange cast its wrapped layer's
# inputs. The wrapped layer casts what it needs itself.

_warn_lock = threading.Lock()
_warned_dynamic_domain = False

# Messages of ranges opened eagerly by NVTXStart, by range id, so that an eager NVTXEnd
# without grad_message names the backward range after the forward one (bounded).
_eager_messages: dict[int, str] = {}
_EAGER_MESSAGES_MAX = 4096


def _remember_eager_message(range_id, message: str) -> None:
    if len(_eager_messages) >= _EAGER_MESSAGES_MAX:
        _eager_messages.pop(next(iter(_eager_messages)))
    _eager_messages[int(range_id)] = message


def _forward_message(marker_id) -> str | None:
    """The message of the NvtxStart op that produced ``marker_id`` (graph or eager)."""
    if not tf.is_symbolic_tensor(marker_id):
        try:
            return _eager_messages.get(int(marker_id))
        except (TypeError, ValueError):
            return None
    tensor = marker_id
    for _ in range(16):  # through Identity ops Keras or the user may have put in between
        op = tensor.op
        if op.type == "NvtxStart":
            value = op.get_attr("message")
            return value.decode() if isinstance(value, bytes) else value
        if op.type in ("Identity", "IdentityN", "StopGradient") and op.inputs:
            tensor = op.inputs[tensor.value_index if op.type == "IdentityN" else 0]
            continue
        return None
    return None


def _in_scratch_graph(tensor) -> bool:
    """Whether ``tensor`` is an input of the graph in which tf_keras traces a layer alone, with
    placeholders for its inputs, to infer its output signature (``<layer>_scratch_graph``,
    tf_keras' base_layer): nothing built there runs, so there is no range to close."""
    graph = getattr(tensor, "graph", None)
    return (
        tf.is_symbolic_tensor(tensor)
        and tensor.op.type == "Placeholder"
        and getattr(graph, "name", "").endswith("_scratch_graph")
    )


def _static_domain(domain_id) -> str | None:
    """The domain name ``domain_id`` holds, or None when it is not known at graph build."""
    if isinstance(domain_id, str):
        return domain_id
    if isinstance(domain_id, bytes):
        return domain_id.decode()
    value = tf.get_static_value(domain_id)
    if value is None:
        return None
    if hasattr(value, "item"):
        value = value.item()
    return value.decode() if isinstance(value, bytes) else str(value)


def _resolve_domain(domain_id, known: str | None = None) -> str:
    """The domain name held by ``domain_id``; else ``known`` (the domain this NVTXEnd read
    when it was called in the model: tf_keras' SavedModel export traces each layer alone,
    with a placeholder for domain_id); else the default domain, warning once."""
    global _warned_dynamic_domain
    value = _static_domain(domain_id)
    if value is not None:
        return value
    if known is not None:
        return known
    if _in_scratch_graph(domain_id):
        return ""  # tf_keras inferring the layer's output signature: this graph never runs
    with _warn_lock:
        if not _warned_dynamic_domain:
            _warned_dynamic_domain = True
            warnings.warn(
                "nvtx_plugins_tf: NVTXEnd could not read the domain name from domain_id (not a constant "
                "tensor); closing the range in NVTX's default domain. Pass NVTXStart's domain_id output "
                "unchanged to NVTXEnd.",
                RuntimeWarning,
                stacklevel=3,
            )
    return ""


def _check_call(layer, args, kwargs) -> None:
    """One line naming the fix where Keras would give a long error of its own: a symbolic
    tensor of the other Keras (a model mixing Keras 3 and tf_keras layers)."""
    ours = keras.__name__.split(".")[0]
    for leaf in tf.nest.flatten((args, kwargs)):
        kind = type(leaf)
        if kind.__name__ == "KerasTensor" and kind.__module__.split(".")[0] != ours:
            raise TypeError(
                f"nvtx_plugins_tf: {type(layer).__name__} is a layer of {ours} (the Keras tf.keras is) and got a "
                f"symbolic tensor of {kind.__module__.split('.')[0]}: the model mixes Keras 3 (`import keras`) and "
                "tf_keras (`TF_USE_LEGACY_KERAS=1`, `import tf_keras`) layers; build it with one of them"
            )


def _in_sequential() -> bool:
    """Whether a ``Sequential`` calls the layer: the nearest caller up the stack that is a
    Keras layer (a model that calls NVTXStart in its own ``call`` is not a Sequential's layer)."""
    frame = sys._getframe(2)
    for _ in range(12):
        if frame is None:
            return False
        owner = frame.f_locals.get("self")
        if isinstance(owner, keras.Sequential):
            return True
        if isinstance(owner, keras.layers.Layer):
            return False
        frame = frame.f_back
    return False


@register_serializable
class NVTXStart(keras.layers.Layer):
    """Opens an NVTX range; returns ``(inputs, marker_id, domain_id)``.

    Args:
      message: the range's name.
      domain_name: NVTX domain of the range (``None``: NVTX's default domain).
      trainable: accepted for old code (the old package needed a trainable dummy
        variable to balance backward ranges of a first layer; this one does not).
      color, category: NVTX attributes of the forward range.
      enabled: ``False`` adds no op (``marker_id`` is then -1 and NVTXEnd does nothing).
      **kwargs: ``name``, ``dtype`` ... of ``keras.layers.Layer``.
    """

    def __init__(
        self, message, domain_name=None, trainable=False, *, color=None, category=None, enabled=True, **kwargs
    ):
        kwargs.setdefault("autocast", False)  # an identity: never cast (see _NO_AUTOCAST)
        super().__init__(trainable=trainable, **kwargs)
        self.message = _validation.name(message, "message")
        self.domain_name = domain_name if domain_name is None else _validation.message(domain_name, "domain_name")
        self.color = color
        self.category = category
        self._color_value = _validation.color(color)
        _validation.category(category)
        self.enabled = bool(enabled)
        self.supports_jit = False
        self.supports_masking = True

    def __call__(self, *args, **kwargs):
        _check_call(self, args, kwargs)
        if _in_sequential():
            raise TypeError(
                "nvtx_plugins_tf: NVTXStart returns three tensors (inputs, marker_id, domain_id) and cannot be a "
                "layer of a Sequential; wrap the layer instead: Sequential([..., NVTXRange(Dense(8)), ...]), or "
                "call nvtx_plugins_tf.keras.annotate(model)"
            )
        return super().__call__(*args, **kwargs)

    def call(self, inputs):
        domain = self.domain_name or ""
        domain_id = tf.constant(domain, dtype=tf.string)
        if not (self.enabled and _raw.annotations_enabled()):
            return inputs, tf.constant(_DISABLED_ID, dtype=tf.int64), domain_id
        outputs, ctx = _ops.start(
            inputs, message=self.message, domain_name=domain, color=self.color, category=self.category
        )
        if not ctx.enabled:  # dropped (XLA-compiled function)
            return inputs, tf.constant(_DISABLED_ID, dtype=tf.int64), domain_id
        if tf.executing_eagerly():
            _remember_eager_message(ctx.range_id, self.message)
        return outputs, ctx.range_id, domain_id

    def compute_output_shape(self, input_shape):
        return input_shape, (), ()

    def compute_mask(self, inputs, mask=None):
        return mask, None, None

    def get_config(self):
        config = super().get_config()
        config.update(
            message=self.message,
            domain_name=self.domain_name,
            color=self.color,
            category=self.category,
            enabled=self.enabled,
        )
        return config


@register_serializable
class NVTXEnd(keras.layers.Layer):
    """Closes the range of an :class:`NVTXStart`: call it on ``[inputs, marker_id, domain_id]``.

    Args:
      grad_message: name of the backward range (default: the forward range's message).
      grad_domain_name: its domain (default: the forward range's domain).
      trainable: accepted for old code.
      **kwargs: ``name``, ``dtype`` ... of ``keras.layers.Layer``.

    Returns ``inputs`` (same structure and values).
    """

    def __init__(self, grad_message=None, grad_domain_name=None, trainable=False, **kwargs):
        kwargs.setdefault("autocast", False)  # an identity: never cast (see _NO_AUTOCAST)
        super().__init__(trainable=trainable, **kwargs)
        self.grad_message = grad_message if grad_message is None else _validation.message(grad_message, "grad_message")
        self.grad_domain_name = (
            grad_domain_name if grad_domain_name is None else _validation.message(grad_domain_name, "grad_domain_name")
        )
        self.supports_jit = False
        self.supports_masking = True

    def __call__(self, *args, **kwargs):
        _check_call(self, args, kwargs)
        return super().__call__(*args, **kwargs)

    @staticmethod
    def _split(inputs):
        if not isinstance(inputs, (list, tuple)) or len(inputs) != 3:
            raise ValueError(
                "NVTXEnd is called on [inputs, marker_id, domain_id], the three outputs of NVTXStart; "
                f"got {type(inputs).__name__}"
                + (f" of length {len(inputs)}" if isinstance(inputs, (list, tuple)) else "")
            )
        return inputs[0], inputs[1], inputs[2]

    def call(self, inputs):
        x, marker_id, domain_id = self._split(inputs)
        static_id = tf.get_static_value(marker_id)
        if static_id is not None and int(static_id) == _DISABLED_ID:
            return x
        if not _raw.annotations_enabled() or _raw.skip_for_xla("NVTXEnd"):
            return x
        known = getattr(self, "_nvtx_known_domain", None)
        domain = _resolve_domain(domain_id, known)
        if known is None and _static_domain(domain_id) is not None:
            object.__setattr__(self, "_nvtx_known_domain", domain)  # (not a tracked attribute)
        grad_message = (
            self.grad_message if self.grad_message is not None else (_forward_message(marker_id) or self.name)
        )
        grad_domain = self.grad_domain_name if self.grad_domain_name is not None else domain
        range_id = tf.cast(marker_id, tf.int64)
        return _structure.through_tensors(
            x, lambda flat: _ends.end_op(flat, range_id, domain, grad_message, grad_domain)
        )

    def compute_output_shape(self, input_shape):
        return input_shape[0]

    def compute_mask(self, inputs, mask=None):
        if isinstance(mask, (list, tuple)) and mask:
            return mask[0]
        return None

    def get_config(self):
        config = super().get_config()
        config.update(grad_message=self.grad_message, grad_domain_name=self.grad_domain_name)
        return config
