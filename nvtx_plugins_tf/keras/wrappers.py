"""Annotate Keras layers without threading marker ids: :class:`NVTXRange` and :func:`annotate`.

``NVTXRange(layer)`` is a ``keras.layers.Wrapper``: a forward range around the layer's
call and a backward range around its gradient, named after the layer. It works in
``Sequential`` models too:

>>> import numpy as np
>>> from nvtx_plugins_tf.keras import NVTXRange, annotate, keras
>>> from nvtx_plugins_tf.testing import capture
>>> hidden = NVTXRange(keras.layers.Dense(8, name="hidden"))
>>> model = keras.Sequential([keras.Input((4,)), hidden, keras.layers.Dense(1)])
>>> with capture() as rec:
...     model.predict(np.ones((2, 4)), verbose=0).shape
(2, 1)
>>> [(r.domain, r.message) for r in rec.ranges if r.domain == "Forward"]
[('Forward', 'hidden')]

``annotate(model)`` annotates every layer of an existing (possibly pre-built, e.g.
``annotate(keras.applications.MobileNetV2(weights=None))``) model in place, nested models
included (their ranges nest):

>>> model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, name="a"), keras.layers.Dense(1, name="b")])
>>> model = annotate(model)
>>> with capture() as rec:
...     model.predict(np.ones((2, 4)), verbose=0).shape
(2, 1)
>>> [r.message for r in sorted(rec.ranges, key=lambda r: r.start_ns) if r.domain == "Forward"]
['a', 'b']
"""

from __future__ import annotations

import functools
import inspect
import warnings
from typing import Callable

import tensorflow as tf

from nvtx_plugins_tf import ops as _ops
from nvtx_plugins_tf.keras._compat import flatten_layers, keras, register_serializable
from nvtx_plugins_tf.keras.layers import NVTXEnd, NVTXStart
from nvtx_plugins_tf.ops import _validation

__all__ = ["NVTXRange", "annotate", "unannotate", "is_annotated", "DEFAULT_FORWARD_DOMAIN", "DEFAULT_BACKWARD_DOMAIN"]

DEFAULT_FORWARD_DOMAIN = "Forward"
DEFAULT_BACKWARD_DOMAIN = "Backward"

_ANNOTATED = "_nvtx_plugins_tf_annotation"


@register_serializable
class NVTXRange(keras.layers.Wrapper):
    """Wraps one layer in a forward range and a backward range.

    Args:
      layer: the layer to wrap.
      message: forward range name (default: the layer's name).
      domain_name: forward domain (default ``"Forward"``).
      grad_message: backward range name (default: ``message``).
      grad_domain_name: backward domain (default ``"Backward"``).
      color, category: NVTX attributes of the forward range.
    """

    def __init__(
        self,
        layer,
        message=None,
        domain_name=DEFAULT_FORWARD_DOMAIN,
        grad_message=None,
        grad_domain_name=DEFAULT_BACKWARD_DOMAIN,
        *,
        color=None,
        category=None,
        **kwargs,
    ):
        kwargs.setdefault("name", f"nvtx_range_{layer.name}")
        kwargs.setdefault("autocast", False)  # the wrapped layer casts its inputs itself (layers._NO_AUTOCAST)
        super().__init__(layer, **kwargs)
        self.message = message if message is None else _validation.name(message, "message")
        self.domain_name = domain_name if domain_name is None else _validation.message(domain_name, "domain_name")
        self.grad_message = grad_message if grad_message is None else _validation.message(grad_message, "grad_message")
        self.grad_domain_name = (
            grad_domain_name if grad_domain_name is None else _validation.message(grad_domain_name, "grad_domain_name")
        )
        self.color = color
        self.category = category
        _validation.color(color)
        _validation.category(category)
        self.supports_jit = False
        self.supports_masking = getattr(layer, "supports_masking", False)

    def build(self, input_shape=None):
        """``Wrapper.build``: the wrapped layer built with the first input's shape; a layer
        whose ``build`` wants more shapes than that (``MultiHeadAttention``: query's and
        value's) builds itself at its first call instead, with all of them."""
        if not self.layer.built:
            try:
                super().build(input_shape)
            except TypeError as exc:
                if "required positional argument" not in str(exc):
                    raise
        self.built = True

    def call(self, inputs, *args, **kwargs):
        message = self.message or self.layer.name
        traced = _ops.trace(
            message,
            domain_name=self.domain_name,
            grad_message=self.grad_message or message,
            grad_domain_name=self.grad_domain_name,
            color=self.color,
            category=self.category,
        )(self.layer.__call__)
        return traced(inputs, *args, **kwargs)

    def compute_output_shape(self, input_shape):
        return self.layer.compute_output_shape(input_shape)

    def compute_output_spec(self, *args, **kwargs):
        if not self.layer.built:  # (see build: Keras 3 builds from the call's shapes, by name)
            self._build_from_call(args, kwargs)
        return self.layer.compute_output_spec(*args, **kwargs)

    def _build_from_call(self, args, kwargs) -> None:
        """Build the wrapped layer as Keras 3 builds a layer at its first call: each
        ``build`` argument ``<name>_shape`` gets the shape of the call argument ``<name>``
        (``MultiHeadAttention.build(query_shape, value_shape)``). Without it the layer was
        built only inside the first traced train step, with other initial weights."""
        try:
            bound = inspect.signature(self.layer.call).bind_partial(*args, **kwargs).arguments
            params = inspect.signature(self.layer.build).parameters
        except (TypeError, ValueError):
            return
        shapes = {
            name: tf.nest.map_structure(lambda t: tuple(t.shape), bound[name[: -len("_shape")]])
            for name in params
            if name.endswith("_shape") and bound.get(name[: -len("_shape")]) is not None
        }
        if shapes:
            self.layer.build(**shapes)

    def compute_mask(self, inputs, mask=None):
        if hasattr(self.layer, "compute_mask"):
            return self.layer.compute_mask(inputs, mask)
        return mask

    def get_config(self):
        config = super().get_config()
        config.update(
            message=self.message,
            domain_name=self.domain_name,
            grad_message=self.grad_message,
            grad_domain_name=self.grad_domain_name,
            color=self.color,
            category=self.category,
        )
        return config


def _is_input_layer(layer) -> bool:
    return type(layer).__name__ == "InputLayer"


def _wrap_call(layer, message, domain_name, grad_message, grad_domain_name, color, category):
    original = layer.call
    traced = _ops.trace(
        message,
        domain_name=domain_name,
        grad_message=grad_message,
        grad_domain_name=grad_domain_name,
        color=color,
        category=category,
    )(original)

    @functools.wraps(original)
    def call(*args, **kwargs):
        return traced(*args, **kwargs)

    call._nvtx_original_call = original  # type: ignore[attr-defined]
    call._nvtx_supports_jit = getattr(layer, "supports_jit", True)  # type: ignore[attr-defined]
    object.__setattr__(layer, "call", call)
    object.__setattr__(layer, _ANNOTATED, (message, domain_name, grad_message, grad_domain_name, color, category))
    layer.supports_jit = False


def _unwrap_call(layer) -> bool:
    """Undo :func:`_wrap_call`; False when ``layer`` was not annotated by it."""
    call = layer.__dict__.get("call")
    original = getattr(call, "_nvtx_original_call", None)
    if original is None:
        return False
    if getattr(original, "__self__", None) is layer and original.__func__ is getattr(type(layer), "call", None):
        object.__delattr__(layer, "call")  # the class's own call again
    else:
        object.__setattr__(layer, "call", original)
    object.__delattr__(layer, _ANNOTATED)
    layer.supports_jit = call._nvtx_supports_jit
    return True


def _reset_traced_functions(model) -> None:
    """Functions traced before (un)annotation would not match it: Keras traces them anew."""
    for attr in ("train_function", "test_function", "predict_function"):
        if getattr(model, attr, None) is not None:
            try:
                setattr(model, attr, None)
            except AttributeError:
                pass


def annotate(
    model,
    *,
    filter: Callable | None = None,  # noqa: A002 - the documented keyword
    domain_name: str | None = DEFAULT_FORWARD_DOMAIN,
    grad_domain_name: str | None = DEFAULT_BACKWARD_DOMAIN,
    message: Callable | None = None,
    grad_message: Callable | None = None,
    include_model: bool = False,
    color=None,
    category=None,
):
    """Annotate every layer of ``model`` in place; returns ``model``.

    Each annotated layer's ``call`` opens a forward range named after the layer (in
    ``domain_name``) and its gradient a backward range (in ``grad_domain_name``), so one
    training step gives one forward and one backward range per layer, balanced also for
    the first layer. Nested models are layers too: their ranges enclose those of their
    own layers. Input layers and the package's own layers (``NVTXStart``, ``NVTXEnd``,
    ``NVTXRange`` and the layer it wraps) are skipped; a layer is annotated once even if
    ``annotate`` is called again: called again with other arguments, it keeps its first
    annotation and a ``UserWarning`` says so (:func:`unannotate` first to change it).

    Args:
      model: a built or unbuilt Keras model (functional, Sequential or subclassed) or layer.
      filter: ``layer -> bool``; only layers for which it is true are annotated.
      domain_name, grad_domain_name: NVTX domains of forward and backward ranges.
      message, grad_message: ``layer -> str`` naming the ranges (default: ``layer.name``).
      include_model: also put a range around ``model`` itself.
      color, category: NVTX attributes of the forward ranges.

    Annotated layers get ``supports_jit = False`` (XLA cannot compile the NVTX ops). Call
    ``annotate`` before ``compile``/``fit`` so that Keras does not pick XLA (on GPU) and
    so that the annotated calls are the ones traced into the train function.
    """
    if not (isinstance(model, keras.layers.Layer) or hasattr(model, "_flatten_layers")):  # (either Keras's)
        raise TypeError(
            f"annotate() takes a Keras model or layer of {keras.__name__.split('.')[0]} (the Keras tf.keras is), "
            f"got {type(model).__module__}.{type(model).__name__}; for a tf.Module or a function use "
            "nvtx_plugins_tf.ops.trace / ops.start and ops.end"
        )
    if filter is not None and not callable(filter):
        raise TypeError(f"filter must be a callable layer -> bool, got {type(filter).__name__}")
    _validation.domain(domain_name, "domain_name")
    _validation.domain(grad_domain_name, "grad_domain_name")
    _validation.color(color)
    _validation.category(category)
    layers = flatten_layers(model, include_self=include_model)
    # The package's own layers already are ranges: NVTXStart/NVTXEnd, NVTXRange and the
    # layer an NVTXRange wraps are left as they are.
    seen = set()
    for layer in layers:
        if isinstance(layer, (NVTXStart, NVTXEnd, NVTXRange)):
            seen.add(id(layer))
            if isinstance(layer, NVTXRange):
                seen.update(id(inner) for inner in flatten_layers(layer.layer, include_self=True))
    kept = []  # (layer name, its annotation, the one asked for) where they differ
    for layer in layers:
        if id(layer) in seen or _is_input_layer(layer):
            continue
        seen.add(id(layer))
        if filter is not None and not filter(layer):
            continue
        name = _validation.name(message(layer) if message else layer.name, "message")
        grad_name = _validation.message(grad_message(layer) if grad_message else name, "grad_message")
        asked = (name, domain_name, grad_name, grad_domain_name, color, category)
        current = getattr(layer, _ANNOTATED, None)
        if current is not None:
            if current != asked:
                kept.append((layer.name, current, asked))
            continue
        _wrap_call(layer, *asked)
    if kept:
        fields = ("message", "domain_name", "grad_message", "grad_domain_name", "color", "category")
        layer_name, current, asked = kept[0]
        changes = ", ".join(f"{f} {c!r} -> {a!r}" for f, c, a in zip(fields, current, asked) if c != a)
        warnings.warn(
            f"nvtx_plugins_tf: annotate(): {len(kept)} layer(s) already annotated with other arguments "
            f"keep their annotation (e.g. {layer_name!r}: {changes}); call "
            "nvtx_plugins_tf.keras.unannotate(model) first to annotate them anew",
            UserWarning,
            stacklevel=2,
        )
    _reset_traced_functions(model)
    return model


def unannotate(model, *, include_model: bool = True):
    """Remove what :func:`annotate` put on ``model``'s layers (nested models included); returns
    ``model``. Layers annotated otherwise (``NVTXRange``, ``NVTXStart``/``NVTXEnd``) are left
    as they are. Functions Keras traced with the ranges are traced anew on the next call.

    >>> from nvtx_plugins_tf.keras import annotate, unannotate, is_annotated, keras
    >>> model = annotate(keras.Sequential([keras.Input((4,)), keras.layers.Dense(2, name="d")]))
    >>> is_annotated(model.layers[0]), is_annotated(unannotate(model).layers[0])
    (True, False)
    """
    for layer in flatten_layers(model, include_self=include_model):
        _unwrap_call(layer)
    _reset_traced_functions(model)
    return model


def is_annotated(layer) -> bool:
    """True when :func:`annotate` wrapped ``layer.call``."""
    return getattr(layer, _ANNOTATED, None) is not None
