"""A start and its end pair without the range-id edge (cc_ops/tf_ops/range_pairing.h) where
that is sound, keep the edge elsewhere, and never end another execution's range.

Which end belongs to which execution is checked with sleeps: ``time.sleep`` sleeps at
least as long as asked, so a range whose payload says it holds a sleep of N ms must last
at least N ms; an end that took another execution's range id would cut it short.
"""

from __future__ import annotations

import threading
import time

import tensorflow as tf

import nvtx_plugins_tf as nvtx_tf
from nvtx_plugins_tf.testing import capture


def _nvtx_ops(graph, op_type):
    return [op for op in graph.get_operations() if op.type == op_type]


def _pair_token(op) -> str:
    return op.get_attr("pair").decode().split("@")[0]


def _sleep(x, seconds):
    """Sleeps ``seconds`` (a float32 tensor) when it runs; returns ``x``."""

    def body(v, s):
        time.sleep(float(s))
        return v

    return tf.ensure_shape(tf.numpy_function(body, [x, seconds], x.dtype, stateful=False), x.shape)


def _timed_range(x, before, inside, message):
    """Sleeps ``before``, then a range (payload: ``inside`` in ms) around a sleep of ``inside``."""
    x = _sleep(x, before)
    y, ctx = nvtx_tf.ops.start(x, message, "Pairing", payload=tf.cast(inside * 1000, tf.int64))
    return nvtx_tf.ops.end(_sleep(y, inside), ctx)


def _assert_each_range_holds_its_sleep(ranges, expected_count):
    assert len(ranges) == expected_count, ranges
    for r in ranges:
        assert r.end_ns is not None, f"{r} was never ended"
        assert r.end_ns - r.start_ns >= r.payload * 1_000_000, f"{r} ended before its own sleep of {r.payload} ms"


def test_function_pairs_without_the_edge():
    @tf.function
    def f(x):
        y, ctx = nvtx_tf.ops.start(x, "paired", "Pairing")
        return nvtx_tf.ops.end(y * 2.0, ctx)

    graph = f.get_concrete_function(tf.constant(1.0)).graph
    (start,) = _nvtx_ops(graph, "NvtxStart")
    (end,) = _nvtx_ops(graph, "NvtxEnd")
    assert end.get_attr("num_ids") == 0
    assert _pair_token(start) == _pair_token(end) != ""
    assert start.outputs[-1].consumers() == []  # the range id goes nowhere
    assert float(f(tf.constant(1.0))) == 2.0


def test_the_edge_stays_where_the_order_is_not_certain():
    @tf.function
    def unrelated(x):  # the end's input does not depend on the start: nothing orders them
        y, ctx = nvtx_tf.ops.start(x, "unrelated", "Pairing")
        return y, nvtx_tf.ops.end(tf.constant(0.0), ctx)

    @tf.function
    def block(x):  # ops.range passes no tensor through
        with nvtx_tf.ops.range("block", "Pairing"):
            return x + 1.0

    for fn in (unrelated, block):
        graph = fn.get_concrete_function(tf.constant(1.0)).graph
        (end,) = _nvtx_ops(graph, "NvtxEnd")
        assert end.get_attr("num_ids") == 1, fn
        assert end.get_attr("pair") == b""

    with tf.Graph().as_default():  # a compat.v1 graph: a session may run the end alone
        x = tf.compat.v1.placeholder(tf.float32, [])
        y, ctx = nvtx_tf.ops.start(x, "v1", "Pairing")
        nvtx_tf.ops.end(y * 2.0, ctx)
        (end,) = _nvtx_ops(tf.compat.v1.get_default_graph(), "NvtxEnd")
        assert end.get_attr("num_ids") == 1


def test_eager_ranges_keep_the_edge_and_close():
    with capture() as rec:
        y, ctx = nvtx_tf.ops.start(tf.constant(1.0), "eager", "Pairing")
        nvtx_tf.ops.end(y * 2.0, ctx)
    (r,) = rec.find(message="eager", domain="Pairing")
    assert r.end_ns is not None


def test_concurrent_calls_of_one_function_keep_their_own_ranges():
    @tf.function
    def step(x, before, inside):
        return _timed_range(x, before, inside, "call")

    one = tf.constant(1.0)
    step(one, tf.constant(0.0), tf.constant(0.0))  # traced outside the capture
    with capture() as rec:
        # The first call opens its range first and closes it last; the second opens later
        # and closes first: an end taking the other call's id would cut the first short.
        threads = [
            threading.Thread(target=step, args=(one, tf.constant(0.0), tf.constant(0.6))),
            threading.Thread(target=step, args=(one, tf.constant(0.2), tf.constant(0.1))),
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    _assert_each_range_holds_its_sleep(rec.find(message="call", domain="Pairing"), 2)
    assert sorted(r.payload for r in rec.find(message="call")) == [100, 600]


def test_inlined_copies_of_a_function_keep_their_own_ranges():
    @tf.function
    def inner(x, before, inside):
        return _timed_range(x, before, inside, "inlined")

    @tf.function
    def outer(x):  # two copies of inner, inlined into outer, run side by side
        return inner(x, tf.constant(0.0), tf.constant(0.6)) + inner(x + 1.0, tf.constant(0.2), tf.constant(0.1))

    one = tf.constant(1.0)
    outer(one)
    with capture() as rec:
        outer(one)
    _assert_each_range_holds_its_sleep(rec.find(message="inlined", domain="Pairing"), 2)


def test_parallel_loop_iterations_keep_their_own_ranges():
    @tf.function
    def loop(x):
        def body(i, acc):
            inside = tf.cast(3 - i, tf.float32) * 0.1  # 300, 200, 100 ms: the first ends last
            return i + 1, acc + _timed_range(acc, tf.constant(0.0), inside, "iteration") * 0.0

        return tf.while_loop(lambda i, _: i < 3, body, [tf.constant(0), x], parallel_iterations=3)

    one = tf.constant(1.0)
    loop(one)
    with capture() as rec:
        loop(one)
    _assert_each_range_holds_its_sleep(rec.find(message="iteration", domain="Pairing"), 3)


def test_backward_range_links_to_a_paired_forward_range():
    dense = tf.keras.layers.Dense(2)

    @tf.function
    def step(x):
        with tf.GradientTape() as tape:
            y, ctx = nvtx_tf.ops.start(x, "layer", "Forward", grad_domain_name="Backward")
            loss = tf.reduce_sum(nvtx_tf.ops.end(dense(y), ctx))
        return tape.gradient(loss, dense.trainable_variables)

    x = tf.ones([1, 3])
    graph = step.get_concrete_function(x).graph
    forward_ends = [op for op in _nvtx_ops(graph, "NvtxEnd") if op.get_attr("domain_name") == b"Forward"]
    assert [op.get_attr("num_ids") for op in forward_ends] == [0]
    with capture() as rec:
        step(x)
    (forward,) = rec.find(message="layer", domain="Forward")
    (backward,) = rec.find(message="layer", domain="Backward")
    assert backward.payload == forward.range_id
    assert forward.end_ns <= backward.start_ns


def test_executions_that_fail_inside_a_range_do_not_disturb_later_ones():
    @tf.function
    def f(x, fail):
        y, ctx = nvtx_tf.ops.start(x, "maybe", "Pairing")
        y = tf.debugging.check_numerics(y / (1.0 - fail), "stop here")  # fails for fail = 1
        return nvtx_tf.ops.end(y * 2.0, ctx)

    one = tf.constant(1.0)
    f(one, tf.constant(0.0))
    with capture() as rec:
        for _ in range(40):  # more failed executions (each leaves its id behind) than a slot holds
            try:
                f(one, tf.constant(1.0))
            except tf.errors.InvalidArgumentError:
                pass
        f(one, tf.constant(0.0))
    ranges = rec.find(message="maybe", domain="Pairing")
    assert len(ranges) == 41
    assert [r.end_ns is not None for r in ranges].count(True) == 1  # the failed ones stay open, as with the edge
    assert ranges[-1].end_ns is not None


def test_many_threads_calling_one_function_end_every_range_once():
    """Eight threads, twenty calls each, with sleeps of different lengths inside the range:
    executions overlap in every order, through the slot's first entry and its ring."""

    @tf.function
    def step(x, inside):
        return _timed_range(x, tf.constant(0.0), inside, "busy")

    one = tf.constant(1.0)
    step(one, tf.constant(0.0))

    def worker(k):
        for i in range(20):
            step(one, tf.constant(((k * 7 + i * 3) % 5) * 0.002))

    with capture() as rec:
        threads = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    _assert_each_range_holds_its_sleep(rec.find(message="busy", domain="Pairing"), 160)
    assert len({r.range_id for r in rec.find(message="busy")}) == 160
