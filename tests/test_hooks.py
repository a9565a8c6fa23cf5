"""NVTXHook: one 'step {n}' range per session.run, an outer range over the session."""

import gc

import pytest
import tensorflow as tf
from nvtx._lib.lib import Domain, RegisteredString

import nvtx_plugins_tf as nvtx_tf
from nvtx_plugins_tf.hooks import NVTXHook
from nvtx_plugins_tf.testing import capture


def _graph():
    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [None, 4])
        w = tf.compat.v1.get_variable("w", [4, 1], initializer=tf.compat.v1.ones_initializer())
        h, ctx = nvtx_tf.ops.start(x, message="matmul", domain_name="Forward", grad_domain_name="Backward")
        h = nvtx_tf.ops.end(tf.matmul(h, w), ctx)
        loss = tf.reduce_mean(h)
        train_op = tf.compat.v1.train.GradientDescentOptimizer(0.1).minimize(loss)
    return graph, x, train_op


@pytest.mark.parametrize("skip", [0, 2])
def test_monitored_session_steps(skip):
    graph, x, train_op = _graph()
    hook = NVTXHook(skip_n_steps=skip, name="Session")
    feed = {x: [[1.0, 2.0, 3.0, 4.0]]}
    with capture() as rec:
        with graph.as_default():
            with tf.compat.v1.train.MonitoredSession(hooks=[hook]) as sess:
                for _ in range(5):
                    sess.run(train_op, feed_dict=feed)
    steps = [r for r in rec.ranges if r.message.startswith("step ")]
    assert sorted(r.payload for r in steps) == list(range(skip, 5))
    assert all(r.message == f"step {r.payload}" for r in steps)
    (session,) = rec.find(message="Session")
    assert all(session.start_ns <= r.start_ns <= r.end_ns <= session.end_ns for r in steps)
    # the graph's own ranges run inside the step ranges
    assert rec.count(message="matmul", domain="Forward") == 5
    assert rec.count(message="matmul", domain="Backward") == 5
    assert not rec.open_ranges


def test_estimator_reexport_and_no_name():
    from nvtx_plugins_tf.estimator import NVTXHook as Old

    assert Old is NVTXHook
    graph, x, train_op = _graph()
    with capture() as rec:
        with graph.as_default():
            with tf.compat.v1.train.MonitoredSession(hooks=[Old(domain_name="Hooks")]) as sess:
                sess.run(train_op, feed_dict={x: [[1.0] * 4]})
    assert [r.message for r in rec.find(domain="Hooks")] == ["step 0"]
    assert not rec.open_ranges
    with pytest.raises(ValueError):
        NVTXHook(skip_n_steps=-1)


def test_trace_decorator_in_compat_v1_graph():
    graph = tf.Graph()
    with graph.as_default():

        @nvtx_tf.ops.trace("scale", domain_name="Forward", grad_domain_name="Backward")
        def scale(v):
            return v * 2.0

        v = tf.compat.v1.get_variable("v", [2], initializer=tf.compat.v1.ones_initializer())
        loss = tf.reduce_sum(scale(tf.identity(v)))  # a tensor argument: threaded through the range
        grad = tf.gradients(loss, [v])[0]
        with tf.compat.v1.Session() as sess, capture() as rec:
            sess.run(tf.compat.v1.global_variables_initializer())
            hook = NVTXHook()
            hook.begin()
            hook.before_run(None)
            sess.run([loss, grad])
            hook.after_run(None, None)
    assert rec.count(message="scale", domain="Forward") == 1
    assert rec.count(message="scale", domain="Backward") == 1
    assert rec.count(message="step 0") == 1
    assert not rec.open_ranges


def _live_registered_strings() -> int:
    return sum(1 for o in gc.get_objects() if isinstance(o, RegisteredString))


@pytest.mark.parametrize("step_message", ["step {step}", "step"])
def test_step_names_hold_no_memory_per_step(step_message):
    """Issue 9 item 6: a per-step name was registered through nvtx's unbounded cache
    (Domain.get_registered_string): ~500 bytes per step forever (+97 MiB / 200,000 steps).
    The hook now holds at most its fixed names, whatever the number of steps."""
    steps = 3000
    hook = NVTXHook(domain_name="HookMemory", name="Session", step_message=step_message)
    nvtx_cache = Domain.get_registered_string.cache_info
    with capture() as rec:
        hook.begin()
        hook.after_create_session(None, None)
        gc.collect()
        cached, live = nvtx_cache().currsize, _live_registered_strings()
        for _ in range(steps):
            hook.before_run(None)
            hook.after_run(None, None)
        gc.collect()
        assert nvtx_cache().currsize == cached  # was + steps
        assert _live_registered_strings() - live <= 1  # was + steps (the fixed name, when first used)
        hook.end(None)
    ranges = rec.find(domain="HookMemory")
    steps_seen = [r for r in ranges if r.message != "Session"]
    assert sorted(r.payload for r in steps_seen) == list(range(steps))
    assert all(r.message == step_message.format(step=r.payload) for r in steps_seen)
    assert rec.count(message="Session", domain="HookMemory") == 1
    assert not rec.open_ranges
