"""NvtxStart/NvtxEnd in tf.function, compat.v1 Session and eager, checked through the recorder."""

import nvtx
import pytest
import tensorflow as tf

import nvtx_plugins_tf as nvtx_tf
from nvtx_plugins_tf.testing import capture


def _inner_marker(x):
    """An op whose execution the recorder sees: a Python NVTX range inside tf.py_function."""

    def body(v):
        with nvtx.annotate("inner", domain="probe"):
            return v + 1.0

    return tf.py_function(body, [x], tf.float32)


def _only(rec, message, domain=None):
    found = rec.find(message=message, domain=domain)
    assert len(found) == 1, f"expected one {message!r} range, got {found}"
    return found[0]


def _assert_encloses(outer, inner):
    assert outer.start_ns <= inner.start_ns <= inner.end_ns <= outer.end_ns


def test_function_range_attributes_and_enclosure():
    @tf.function
    def f(x, step):
        y, ctx = nvtx_tf.ops.start(x, "Dense 1", "Forward", color=0xFF00FF00, category=7, payload=step)
        y = _inner_marker(y)
        return nvtx_tf.ops.end(y, ctx)

    # Traced outside the capture with another payload than the captured call's (not
    # capture_steps): a payload fixed at trace time would show as 3.
    f(tf.constant(1.0), tf.constant(3, tf.int64))
    with capture() as rec:
        out = f(tf.constant(1.0), tf.constant(42, tf.int64))
    assert out.numpy() == 2.0
    outer = _only(rec, "Dense 1", "Forward")
    assert outer.kind == "start-end"
    assert outer.color == 0xFF00FF00
    assert outer.category == 7
    assert outer.payload == 42
    _assert_encloses(outer, _only(rec, "inner", "probe"))
    assert not rec.open_ranges


def test_eager_range_and_named_color():
    with capture() as rec:
        y, ctx = nvtx_tf.ops.start(tf.constant(1.0), "eager range", color="red")
        y = _inner_marker(y)
        y = nvtx_tf.ops.end(y, ctx)
    outer = _only(rec, "eager range")
    assert outer.domain in (None, "")
    assert outer.color == 0xFF0000
    _assert_encloses(outer, _only(rec, "inner", "probe"))


def test_session_graph_range():
    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [])
        y, ctx = nvtx_tf.ops.start(x, "session range", "Graph", payload=5)
        y = nvtx_tf.ops.end(_inner_marker(y), ctx)
        with tf.compat.v1.Session(graph=graph) as sess:
            sess.run(y, {x: 1.0})
            with capture() as rec:
                for _ in range(3):
                    assert sess.run(y, {x: 1.0}) == 2.0
    ranges = rec.find(message="session range", domain="Graph")
    inners = rec.find(message="inner", domain="probe")
    assert len(ranges) == 3 and len(inners) == 3
    for outer, inner in zip(sorted(ranges, key=lambda r: r.start_ns), sorted(inners, key=lambda r: r.start_ns)):
        _assert_encloses(outer, inner)
        assert outer.payload == 5


def test_range_context_manager_orders_block_ops(capture_steps):
    @tf.function
    def f(x):
        with nvtx_tf.ops.range("block", domain_name="Forward"):
            y = _inner_marker(x)
        return y

    rec = capture_steps(f, tf.constant(0.0))
    _assert_encloses(_only(rec, "block", "Forward"), _only(rec, "inner", "probe"))


def test_none_inputs_range_with_control_dependencies(capture_steps):
    @tf.function
    def f(x):
        _, ctx = nvtx_tf.ops.start(None, "no tensors")
        with tf.control_dependencies([ctx.range_id]):
            y = _inner_marker(x)
        with tf.control_dependencies([y]):
            assert nvtx_tf.ops.end(None, ctx) is None
        return y

    rec = capture_steps(f, tf.constant(0.0))
    _assert_encloses(_only(rec, "no tensors"), _only(rec, "inner", "probe"))


def test_nested_ranges_and_trace_decorator():
    @nvtx_tf.ops.trace("traced", domain_name="Forward")
    def block(x, scale=2.0, *, extra):
        return {"y": x * scale, "extra": extra}

    @tf.function
    def f(x):
        x, outer = nvtx_tf.ops.start(x, "outer")
        out = block(x, extra=tf.constant([1, 2]))
        return nvtx_tf.ops.end(out, outer)

    f(tf.constant(1.0))
    with capture() as rec:
        out = f(tf.constant(1.0))
    assert out["y"].numpy() == 2.0
    assert out["extra"].numpy().tolist() == [1, 2]
    _assert_encloses(_only(rec, "outer"), _only(rec, "traced", "Forward"))


def test_constant_inputs_emit_every_step_under_default_grappler(capture_steps):
    @tf.function
    def f():
        x, ctx = nvtx_tf.ops.start(tf.constant([1.0, 2.0]), "const")
        return nvtx_tf.ops.end(x * 2.0, ctx)

    rec = capture_steps(f, steps=5)
    assert rec.count(message="const") == 5
    assert not rec.open_ranges


def test_mark_op():
    @tf.function
    def f(x):
        return nvtx_tf.ops.mark("checkpoint", x, domain_name="Marks", payload=9, color="blue")

    f(tf.constant(1))
    with capture() as rec:
        assert f(tf.constant(1)).numpy() == 1
    marks = [m for m in rec.marks if m.message == "checkpoint"]
    assert len(marks) == 1 and marks[0].domain == "Marks" and marks[0].payload == 9


def test_ranges_end_on_other_threads_are_paired(capture_steps):
    """Kernels run on TensorFlow's pool: start/end ranges may end on another thread."""

    @tf.function
    def f(x):
        outs = []
        for i in range(8):
            y, ctx = nvtx_tf.ops.start(x, f"branch {i}")
            y = tf.py_function(lambda v: v * 2.0, [y], tf.float32)
            outs.append(nvtx_tf.ops.end(y, ctx))
        return tf.add_n(outs)

    rec = capture_steps(f, tf.constant(1.0), steps=3)
    for i in range(8):
        assert rec.count(message=f"branch {i}") == 3
    assert not rec.open_ranges


def test_disabled_adds_no_ops(monkeypatch):
    def build(**kwargs):
        @tf.function
        def f(x):
            y, ctx = nvtx_tf.ops.start(x, "off", **kwargs)
            return nvtx_tf.ops.end(y, ctx)

        return [op.type for op in f.get_concrete_function(tf.constant(1.0)).graph.get_operations()]

    assert "NvtxStart" in build()
    assert not any(t.startswith("Nvtx") for t in build(enabled=False))
    monkeypatch.setenv("NVTX_DISABLE", "1")
    assert not any(t.startswith("Nvtx") for t in build())


def test_xla_drops_ranges_with_one_warning():
    @tf.function(jit_compile=True)
    def f(x):
        y, ctx = nvtx_tf.ops.start(x, "xla region")
        return nvtx_tf.ops.end(y * 3.0, ctx)

    import nvtx_plugins_tf.ops.ranges as ranges

    ranges._xla_warned = False
    with pytest.warns(RuntimeWarning, match="XLA"):
        with capture() as rec:
            assert f(tf.constant(2.0)).numpy() == 6.0
    assert rec.count(message="xla region") == 0
