"""NVTXHook: one 'step {n}' range per session.run, an outer range over the session."""

import pytest
import tensorflow as tf

import nvtx_plugins_tf as nvtx_tf
from nvtx_plugins_tf import _host_ranges
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


@pytest.mark.parametrize("step_message", ["step {step}", "step"])
def test_step_names_hold_no_memory_per_step(step_message):
    """Issue 9 item 6: a per-step name was registered through nvtx's unbounded cache
    (Domain.get_registered_string): ~500 bytes per step forever (+97 MiB / 200,000 steps).
    Now the names go through the adapter's bounded cache: more steps than the bound leave
    the cache at the bound; a constant name holds one entry (plus the session's).

    The bound is lowered for the test: registering MAX_CACHED_STRINGS names would also
    fill the recorder's own registry (8192 strings remembered per process, re-emitted into
    each new capture), after which strings cached by later tests could not be resolved in
    a later capture."""
    name = "HookMemory" + step_message
    domain = _host_ranges.domain(name)
    assert domain.active and domain.max_strings == _host_ranges.MAX_CACHED_STRINGS
    bound, steps = 50, 400
    hook = NVTXHook(domain_name=name, name="Session", step_message=step_message)
    assert hook._domain is domain
    saved, domain.max_strings = domain.max_strings, bound
    try:
        with capture() as rec:
            hook.begin()
            hook.after_create_session(None, None)
            cached = domain.cached_strings
            assert cached == 1  # "Session"
            for _ in range(steps):
                hook.before_run(None)
                hook.after_run(None, None)
            if "{step}" in step_message:
                assert domain.cached_strings == bound  # was + steps, forever
            else:
                assert domain.cached_strings == cached + 1
            hook.end(None)
    finally:
        domain.max_strings = saved
    ranges = rec.find(domain=name)
    steps_seen = [r for r in ranges if r.message != "Session"]
    assert sorted(r.payload for r in steps_seen) == list(range(steps))
    assert all(r.message == step_message.format(step=r.payload) for r in steps_seen)
    assert rec.count(message="Session", domain=name) == 1
    assert not rec.open_ranges


def test_hook_domain_is_shared_and_old_names_come_back_after_eviction():
    """Two hooks of one domain share one cache; a name dropped from it is registered again
    and still recorded under its text."""
    a, b = NVTXHook(domain_name="HookShared"), NVTXHook(domain_name="HookShared")
    assert a._domain is b._domain
    domain = a._domain
    saved, domain.max_strings = domain.max_strings, 4
    try:
        with capture() as rec:
            for hook in (a, b):  # b's steps 0..9 repeat a's names after they were evicted
                hook.begin()
                for _ in range(10):
                    hook.before_run(None)
                    hook.after_run(None, None)
                assert domain.cached_strings == 4
    finally:
        domain.max_strings = saved
    messages = sorted(r.message for r in rec.find(domain="HookShared"))
    assert messages == sorted([f"step {i}" for i in range(10)] * 2)
    assert all(r.payload == int(r.message.split()[1]) for r in rec.find(domain="HookShared"))
