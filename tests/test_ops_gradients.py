"""Backward ranges: N steps give N forward and N backward ranges per region, all closed."""

import numpy as np
import tensorflow as tf

import nvtx_plugins_tf as nvtx_tf
from nvtx_plugins_tf.testing import capture

STEPS = 4


class MLP(tf.Module):
    """Three annotated Dense-like regions; the first takes only data (no trainable input)."""

    def __init__(self):
        super().__init__()
        rng = np.random.default_rng(1)
        self.w = [tf.Variable(rng.normal(size=s).astype("float32")) for s in ([4, 8], [8, 8], [8, 1])]

    def __call__(self, x):
        for i, w in enumerate(self.w):
            x, ctx = nvtx_tf.ops.start(x, f"Dense {i + 1}", "Forward", grad_domain_name="Gradient")
            x = tf.nn.relu(tf.matmul(x, w))
            x = nvtx_tf.ops.end(x, ctx)
        return x


def _check_counts(rec, steps):
    for i in range(1, 4):
        assert rec.count(message=f"Dense {i}", domain="Forward") == steps
        assert rec.count(message=f"Dense {i}", domain="Gradient") == steps, f"backward Dense {i}"
    assert not rec.open_ranges


def _backward_inside(rec):
    """Step k's backward range of a layer opens after its forward range closed, and the
    backward pass runs from the last layer to the first."""
    for i in range(1, 4):
        fwd = sorted(rec.find(message=f"Dense {i}", domain="Forward"), key=lambda r: r.start_ns)
        bwd = sorted(rec.find(message=f"Dense {i}", domain="Gradient"), key=lambda r: r.start_ns)
        for f, b in zip(fwd, bwd):
            assert f.end_ns <= b.start_ns
    first = sorted(rec.find(message="Dense 1", domain="Gradient"), key=lambda r: r.start_ns)
    last = sorted(rec.find(message="Dense 3", domain="Gradient"), key=lambda r: r.start_ns)
    for a, b in zip(last, first):
        assert a.start_ns <= b.start_ns


def test_gradient_tape_function_first_layer_balanced_without_trainable(functions_eagerly, capture_steps):
    model = MLP()
    n_vars = len(model.trainable_variables)
    opt = tf.keras.optimizers.SGD(0.01)
    x = tf.constant(np.ones([16, 4], "float32"))

    @tf.function
    def step(x):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(model(x))
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    rec = capture_steps(step, x, steps=STEPS)
    _check_counts(rec, STEPS)
    _backward_inside(rec)
    assert len(model.trainable_variables) == n_vars


def test_gradient_tape_eager_balanced():
    model = MLP()
    x = tf.constant(np.ones([2, 4], "float32"))
    with capture() as rec:
        for _ in range(STEPS):
            with tf.GradientTape() as tape:
                loss = tf.reduce_sum(model(x))
            tape.gradient(loss, model.trainable_variables)
    _check_counts(rec, STEPS)
    _backward_inside(rec)


def test_compat_v1_minimize_first_layer_balanced():
    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [None, 4])
        h = x
        for i, shape in enumerate(([4, 8], [8, 8], [8, 1])):
            w = tf.compat.v1.get_variable(f"w{i}", shape)
            h, ctx = nvtx_tf.ops.start(h, f"Dense {i + 1}", "Forward", grad_domain_name="Gradient")
            h = nvtx_tf.ops.end(tf.nn.relu(tf.matmul(h, w)), ctx)
        loss = tf.reduce_mean(h)
        n_vars = len(tf.compat.v1.trainable_variables())
        train = tf.compat.v1.train.GradientDescentOptimizer(0.1).minimize(loss)
        assert len(tf.compat.v1.trainable_variables()) == n_vars == 3
        with tf.compat.v1.Session(graph=graph) as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            with capture() as rec:
                for _ in range(STEPS):
                    sess.run(train, {x: np.ones([8, 4], "float32")})
    _check_counts(rec, STEPS)


def test_trainable_true_still_accepted():
    x, ctx = nvtx_tf.ops.start(tf.ones([1]), "old", trainable=True)
    assert nvtx_tf.ops.end(x, ctx).numpy().tolist() == [1.0]


def test_gradient_values_unchanged():
    v = tf.Variable([[2.0], [3.0]])
    x = tf.constant([[1.0, 4.0]])

    def loss_fn(annotate):
        with tf.GradientTape() as tape:
            h = x
            if annotate:
                h, ctx = nvtx_tf.ops.start(h, "g")
            h = tf.matmul(h, v)
            if annotate:
                h = nvtx_tf.ops.end(h, ctx)
            loss = tf.reduce_sum(h * h)
        return tape.gradient(loss, v).numpy()

    np.testing.assert_array_equal(loss_fn(True), loss_fn(False))


def test_each_backward_range_links_to_exactly_one_forward_range_of_its_step():
    """A backward range's payload is the NVTX range id of the forward range it mirrors."""
    model = MLP()
    opt = tf.keras.optimizers.SGD(0.01)
    x = tf.constant(np.ones([16, 4], "float32"))

    @tf.function
    def step(x):
        with nvtx_tf.ops.range("step", domain_name="Steps"):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(model(x)))
            grads = tape.gradient(loss, model.trainable_variables)
            opt.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    step(x)
    with capture() as rec:
        for _ in range(STEPS):
            step(x)
    forward = {r.range_id: r for r in rec.find(domain="Forward")}
    steps = rec.find(message="step", domain="Steps")
    backward = rec.find(domain="Gradient")
    assert len(backward) == 3 * STEPS
    for b in backward:
        f = forward[b.payload]  # exactly one: range ids are unique
        assert f.message == b.message and f.end_ns <= b.start_ns
        (s,) = [s for s in steps if s.start_ns <= b.start_ns and b.end_ns <= s.end_ns]
        assert s.start_ns <= f.start_ns  # the forward range of the same step


def _nested_function_step(w1, w2):
    @tf.function
    def inner(x):
        x, ctx = nvtx_tf.ops.start(x, "inner", "Forward", grad_domain_name="Gradient")
        return nvtx_tf.ops.end(tf.matmul(x, w1), ctx)

    @tf.function
    def step(x):
        with tf.GradientTape() as tape:
            h, ctx = nvtx_tf.ops.start(inner(x), "outer", "Forward", grad_domain_name="Gradient")
            loss = tf.reduce_sum(tf.square(nvtx_tf.ops.end(tf.matmul(h, w2), ctx)))
        return tape.gradient(loss, [w1, w2])

    return step


def test_backward_ranges_of_a_nested_function_are_balanced(capture_steps):
    """The backward pass of a nested tf.function is a function of its own, pruned later:
    its backward ranges still end."""
    step = _nested_function_step(tf.Variable(tf.ones([4, 4])), tf.Variable(tf.ones([4, 1])))
    rec = capture_steps(step, tf.ones([2, 4]), steps=STEPS)
    for name in ("inner", "outer"):
        assert rec.count(message=name, domain="Forward") == STEPS
        assert rec.count(message=name, domain="Gradient") == STEPS
    assert not rec.open_ranges


def test_backward_ranges_under_recompute_grad_are_balanced(capture_steps):
    """tf.recompute_grad runs a tape.gradient inside the outer one: what it returns for
    the data input is unused, and its backward range still ends."""
    w = tf.Variable(tf.ones([4, 4]))

    @tf.recompute_grad
    def block(h):
        h, ctx = nvtx_tf.ops.start(h, "block", "Forward", grad_domain_name="Gradient")
        return nvtx_tf.ops.end(tf.nn.relu(tf.matmul(h, w)), ctx)

    @tf.function
    def step(x):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(block(x))
        return tape.gradient(loss, [w])

    rec = capture_steps(step, tf.ones([2, 4]), steps=STEPS)
    # Only the recomputation: the first forward, whose result step() never uses, is pruned as
    # in the unannotated program (ops/_dead_ranges.py; it ran, and had a range, before).
    assert rec.count(message="block", domain="Forward") == STEPS
    assert rec.count(message="block", domain="Gradient") == STEPS
    assert not rec.open_ranges

    @tf.function
    def step_and_loss(x):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(block(x))
        return loss, tape.gradient(loss, [w])

    rec = capture_steps(step_and_loss, tf.ones([2, 4]), steps=STEPS)
    assert rec.count(message="block", domain="Forward") == 2 * STEPS  # forward, and its recomputation
    assert rec.count(message="block", domain="Gradient") == STEPS
    assert not rec.open_ranges
