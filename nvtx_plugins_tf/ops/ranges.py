"""start / end / mark / range / trace: NVTX ranges that open and close when the graph runs.

The ops are identities on the tensors threaded through them; the range opens when
``NvtxStart`` executes and closes when ``NvtxEnd`` executes, in ``tf.function``, in
``compat.v1`` graphs and eagerly. Their gradients put backward ranges (``grad_message``
in ``grad_domain_name``) around the backward pass of the region (see gradients.py).
"""

from __future__ import annotations

import contextlib
import functools
from typing import Any, Callable, Iterator, TypeVar

import tensorflow as tf

from nvtx_plugins_tf.ops import _ends, _raw, _structure, _validation

F = TypeVar("F", bound=Callable[..., Any])


def enabled() -> bool:
    """False when ``NVTX_DISABLE`` is set (the ``nvtx`` package's switch) or inside
    :func:`disabled`: no ops are added.

    >>> import nvtx_plugins_tf as nvtx_tf
    >>> isinstance(nvtx_tf.ops.enabled(), bool)
    True
    """
    return _raw.annotations_enabled()


@contextlib.contextmanager
def disabled() -> Iterator[None]:
    """No NVTX op is built while the block runs, in any thread (as under ``NVTX_DISABLE=1``).

    The way to ship plugin-free artifacts from an annotated model: what is traced inside
    the block -- ``model.export()``, ``tf.saved_model.save``, a TFLite conversion -- holds no
    ``NvtxStart``/``NvtxEnd``, so it loads and runs where nvtx_plugins_tf is not installed,
    and converts without custom ops. A ``tf.function`` traced before the block keeps its
    ops: export a new trace (``model.export`` and the converters trace anew).

    >>> import tensorflow as tf, nvtx_plugins_tf as nvtx_tf
    >>> with nvtx_tf.ops.disabled():
    ...     graph = tf.function(lambda x: nvtx_tf.ops.end(*nvtx_tf.ops.start(x, "m"))).get_concrete_function(
    ...         tf.TensorSpec([2])).graph
    >>> [op.type for op in graph.get_operations() if op.type.startswith("Nvtx")]
    []
    """
    _raw.suspend(+1)
    try:
        yield
    finally:
        _raw.suspend(-1)


class NvtxContext:
    """What :func:`start` returns for :func:`end`: the range id tensor and its domain.

    Iterating gives ``(range_id, domain_name)`` as the old package's tuple did.
    A context is ended once; a disabled context (``enabled=False``) makes ``end`` a no-op.
    """

    __slots__ = ("range_id", "domain_name", "message", "grad_message", "grad_domain_name", "graph", "_ended")

    def __init__(self, range_id, domain_name: str, message: str, grad_message: str, grad_domain_name: str, graph):
        self.range_id = range_id
        self.domain_name = domain_name
        self.message = message
        self.grad_message = grad_message
        self.grad_domain_name = grad_domain_name
        self.graph = graph
        self._ended = False

    @property
    def enabled(self) -> bool:
        return self.range_id is not None

    def __iter__(self) -> Iterator:
        return iter((self.range_id, self.domain_name))

    def __repr__(self) -> str:
        state = "disabled" if not self.enabled else ("ended" if self._ended else "open")
        return f"NvtxContext(message={self.message!r}, domain_name={self.domain_name!r}, {state})"


def _disabled_context(message: str = "") -> NvtxContext:
    return NvtxContext(None, "", message, "", "", None)


def start(
    inputs: Any,
    message: str,
    domain_name: str | None = None,
    grad_message: str | None = None,
    grad_domain_name: str | None = None,
    trainable: bool = False,
    enabled: bool = True,
    name: str | None = None,
    *,
    color: int | str | None = None,
    category: int | None = None,
    payload: int | tf.Tensor | None = None,
) -> tuple[Any, NvtxContext]:
    """Open an NVTX range when ``inputs`` flow through this point of the graph.

    Args:
      inputs: a tensor, a nested structure (list/tuple/dict) of tensors of any dtypes,
        a ``tf.SparseTensor``/``tf.RaggedTensor``, or ``None`` for a range with no tensor
        to thread through (order it with control dependencies, or use :func:`range`).
      message: the range's name.
      domain_name: NVTX domain; ``None`` for the default domain.
      grad_message: name of the backward range (default: ``message``).
      grad_domain_name: its domain (default: ``domain_name``).
      trainable: accepted for old code; not needed: backward ranges are balanced
        without a dummy variable, also for a model's first layer (see gradients.py).
      enabled: ``False`` (or ``NVTX_DISABLE=1``) adds no op and returns ``inputs``.
      name: name scope of the op.
      color: ARGB int or a color name (``"red"``, ``"blue"``, ... as in ``nvtx``).
      category: NVTX category id. Default: inside a replica of a multi-replica
        ``tf.distribute`` strategy, the replica's ``replica_id_in_sync_group + 1``.
      payload: an int or an integer scalar tensor (a step number, say) attached to
        the range, evaluated when the range opens.

    Returns:
      ``(outputs, nvtx_context)``: ``outputs`` has the structure of ``inputs`` with the
      same values; pass ``nvtx_context`` to :func:`end`.

    Example:
      >>> import tensorflow as tf, nvtx_plugins_tf as nvtx_tf
      >>> x, ctx = nvtx_tf.ops.start(tf.ones([2]), message="Dense 1", domain_name="Forward")
      >>> x = nvtx_tf.ops.end(x * 2.0, ctx)
      >>> x.numpy().tolist()
      [2.0, 2.0]
    """
    message = _validation.name(message, "message")
    domain_name = _validation.domain(domain_name, "domain_name")
    grad_message = _validation.optional_message(grad_message, "grad_message", message)
    grad_domain_name = (
        _validation.domain(grad_domain_name, "grad_domain_name") if grad_domain_name is not None else domain_name
    )
    _validation.boolean(trainable, "trainable")
    color = _validation.color(color)
    category = _validation.category(category)
    if name is not None and not isinstance(name, str):
        raise TypeError(f"name must be a str, got {type(name).__name__}")
    if not (_validation.boolean(enabled, "enabled") and _raw.annotations_enabled()):
        return inputs, _disabled_context(message)
    flat = _structure.flatten(inputs)
    payload_list = _validation.payload(payload)
    if _raw.skip_for_xla(message):
        return inputs, _disabled_context(message)
    category = category or _raw.replica_category()
    out, range_id = _raw.start_op(flat, message, domain_name, color, category, payload_list, name)
    return _structure.pack(inputs, out), NvtxContext(
        range_id, domain_name, message, grad_message, grad_domain_name, _raw.current_graph()
    )


def end(inputs: Any, nvtx_context: NvtxContext, name: str | None = None) -> Any:
    """Close the range of ``nvtx_context`` when ``inputs`` flow through this point.

    Args:
      inputs: as for :func:`start` (any structure, or ``None``).
      nvtx_context: what :func:`start` returned; each context is ended exactly once.
      name: name scope of the op.

    Returns:
      ``inputs`` with the same structure and values.

    Raises:
      TypeError: ``nvtx_context`` is not an :class:`NvtxContext`.
      ValueError: it was already ended, or belongs to another graph.
    """
    if not isinstance(nvtx_context, NvtxContext):
        raise TypeError(f"nvtx_context must be the NvtxContext returned by start(), got {type(nvtx_context).__name__}")
    if name is not None and not isinstance(name, str):
        raise TypeError(f"name must be a str, got {type(name).__name__}")
    if not nvtx_context.enabled:
        return inputs
    if nvtx_context._ended:
        raise ValueError(f"nvtx_context of range {nvtx_context.message!r} was already ended")
    if nvtx_context.graph is not _raw.current_graph():
        raise ValueError(
            f"nvtx_context of range {nvtx_context.message!r} comes from another graph or function; "
            "start and end a range in the same one"
        )
    flat = _structure.flatten(inputs)
    out = _ends.end_op(
        flat,
        nvtx_context.range_id,
        nvtx_context.domain_name,
        nvtx_context.grad_message,
        nvtx_context.grad_domain_name,
        name,
    )
    nvtx_context._ended = True
    return _structure.pack(inputs, out)


def mark(
    message: str,
    inputs: Any = None,
    domain_name: str | None = None,
    *,
    color: int | str | None = None,
    category: int | None = None,
    payload: int | tf.Tensor | None = None,
    name: str | None = None,
) -> Any:
    """Emit an NVTX mark (an instant) when ``inputs`` flow through; returns ``inputs``.

    >>> import tensorflow as tf, nvtx_plugins_tf as nvtx_tf
    >>> int(nvtx_tf.ops.mark("checkpoint", tf.constant(3)))
    3
    """
    message = _validation.name(message, "message")
    domain_name = _validation.domain(domain_name, "domain_name")
    color = _validation.color(color)
    category = _validation.category(category)
    if not enabled():
        return inputs
    flat = _structure.flatten(inputs)
    payload_list = _validation.payload(payload)
    if _raw.skip_for_xla(message):
        return inputs
    return _structure.pack(inputs, _raw.mark_op(flat, message, domain_name, color, category, payload_list, name))


def _sink_ops(ops: list[tf.Operation]) -> list[tf.Operation]:
    """Ops of ``ops`` whose outputs no other op of ``ops`` consumes."""
    members = set(ops)
    sinks = []
    for op in ops:
        consumed = any(consumer in members for out in op.outputs for consumer in out.consumers())
        if not consumed:
            sinks.append(op)
    return sinks


@contextlib.contextmanager
def range(  # noqa: A001 - mirrors nvtx.annotate's vocabulary; exported as ops.range
    message: str,
    domain_name: str | None = None,
    *,
    color: int | str | None = None,
    category: int | None = None,
    payload: int | tf.Tensor | None = None,
) -> Iterator[NvtxContext]:
    """A range around the ops created in the ``with`` block, no tensor threading needed.

    In a graph or ``tf.function``, every op created inside the block runs after the range
    opens (control dependencies on NvtxStart) and the range closes after the block's
    last ops ran (NvtxEnd depends on them). Eagerly, the block's ops run in between.
    The backward pass of the block is not annotated: use :func:`start`/:func:`end` or
    :func:`trace` for backward ranges.

    >>> import tensorflow as tf, nvtx_plugins_tf as nvtx_tf
    >>> @tf.function
    ... def step(x):
    ...     with nvtx_tf.ops.range("matmul", domain_name="Forward"):
    ...         y = tf.matmul(x, x)
    ...     return y
    >>> step(tf.eye(2)).numpy().tolist()
    [[1.0, 0.0], [0.0, 1.0]]
    """
    message = _validation.name(message, "message")
    domain_name = _validation.domain(domain_name, "domain_name")
    color = _validation.color(color)
    category = _validation.category(category)
    if not enabled() or _raw.skip_for_xla(message):
        yield _disabled_context(message)
        return
    payload_list = _validation.payload(payload)
    _, range_id = _raw.start_op([], message, domain_name, color, category, payload_list, None)
    context = NvtxContext(range_id, domain_name, message, "", "", _raw.current_graph())
    if tf.executing_eagerly():
        try:
            yield context
        finally:
            _raw.end_op([], range_id, domain_name, "", "", None)
        return
    graph = tf.compat.v1.get_default_graph()
    first = len(graph.get_operations())
    try:
        with tf.control_dependencies([range_id.op]):
            yield context
    finally:
        inside = [op for op in graph.get_operations()[first:] if op is not range_id.op]
        with tf.control_dependencies(_sink_ops(inside) or [range_id.op]):
            _raw.end_op([], range_id, domain_name, "", "", None)


def _is_tensor_leaf(value: Any) -> bool:
    """What trace() threads through its range (variables are passed untouched, and so are
    boolean tensors, which the ops do not take: a Keras layer's ``mask`` argument)."""
    return isinstance(value, (tf.Tensor, tf.SparseTensor, tf.RaggedTensor)) and value.dtype != tf.bool


def trace(
    message: str,
    domain_name: str | None = None,
    grad_message: str | None = None,
    grad_domain_name: str | None = None,
    trainable: bool = False,
    enabled: bool = True,
    name: str | None = None,
    *,
    color: int | str | None = None,
    category: int | None = None,
) -> Callable[[F], F]:
    """Decorator: a range (and a backward range) around every call of the function.

    Every tensor among the arguments (positional, keyword, nested) enters the range
    through NvtxStart and every tensor in the result leaves it through NvtxEnd; other
    arguments are passed untouched. With no tensor argument or result, the range
    covers the ops the function creates (as :func:`range` does).

    >>> import tensorflow as tf, nvtx_plugins_tf as nvtx_tf
    >>> @nvtx_tf.ops.trace("scale", domain_name="Forward")
    ... def scale(x, factor=2.0):
    ...     return x * factor
    >>> scale(tf.ones([2])).numpy().tolist()
    [2.0, 2.0]
    """
    options = dict(
        message=_validation.name(message, "message"),
        domain_name=domain_name,
        grad_message=grad_message,
        grad_domain_name=grad_domain_name,
        trainable=trainable,
        enabled=enabled,
        name=name,
        color=color,
        category=category,
    )
    _validation.domain(domain_name, "domain_name")
    _validation.color(color)
    _validation.category(category)

    def decorator(func: F) -> F:
        if not callable(func):
            raise TypeError(f"trace decorates a callable, got {type(func).__name__}")

        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            if not (options["enabled"] and _raw.annotations_enabled()):
                return func(*args, **kwargs)
            if not any(_is_tensor_leaf(leaf) for leaf in tf.nest.flatten((args, kwargs))):
                with range(message, domain_name, color=color, category=category):
                    return func(*args, **kwargs)
            contexts = []

            def open_range(flat):
                out, context = start(flat, **options)
                contexts.append(context)
                return out

            args2, kwargs2 = _structure.through_tensors((args, kwargs), open_range, _is_tensor_leaf)
            context = contexts[0]
            try:
                result = func(*args2, **kwargs2)
            except BaseException:
                if context.enabled and not context._ended:
                    end(None, context)  # the range closes on every exit path
                raise
            if not context.enabled:
                return result
            if not any(_is_tensor_leaf(leaf) for leaf in tf.nest.flatten(result)):
                end(None, context)
                return result
            return _structure.through_tensors(result, lambda flat: end(flat, context), _is_tensor_leaf)

        return wrapper  # type: ignore[return-value]

    return decorator
