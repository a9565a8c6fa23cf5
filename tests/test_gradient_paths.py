"""Every gradient path TensorFlow offers closes every backward range it opens, and the
gradients stay bit-identical to the unannotated model's (issue 20.7,
../shared/repros/tf_repro_tf.py: tape.jacobian left 6 backward ranges open, tf.gradients
inside a tf.function the first layer's).

The model: an MLP of three annotated regions (nvtx_tf.ops.start/end, backward ranges in
domain "Gradient"); the first takes only data, so no gradient leaves it (the case the tape
closer exists for). The same weights without the ops are the reference.
"""

from __future__ import annotations

import logging
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf

import nvtx_plugins_tf as nvtx_tf
from nvtx_plugins_tf.testing import capture

RNG = np.random.default_rng(7)
WEIGHTS = [RNG.normal(size=s).astype("float32") for s in ([4, 6], [6, 5], [5, 3])]
X = tf.constant(RNG.normal(size=(3, 4)).astype("float32"))


class MLP(tf.Module):
    def __init__(self, annotated: bool):
        super().__init__()
        self.annotated = annotated
        self.w = [tf.Variable(w) for w in WEIGHTS]
        self.x = tf.Variable(X.numpy())  # an input to differentiate with respect to

    def __call__(self, x):
        for i, w in enumerate(self.w):
            if self.annotated:
                x, ctx = nvtx_tf.ops.start(x, f"Dense {i + 1}", "Forward", grad_domain_name="Gradient")
            x = tf.tanh(tf.matmul(x, w))
            if self.annotated:
                x = nvtx_tf.ops.end(x, ctx)
        return x


def tape_gradient(m):
    with tf.GradientTape() as tape:
        y = tf.reduce_sum(m(X))
    return tape.gradient(y, m.w)


def persistent_tape(m):
    with tf.GradientTape(persistent=True) as tape:
        y = m(X)
        loss = tf.reduce_sum(y * y)
    first = tape.gradient(loss, m.w)
    second = tape.gradient(y, m.w[1:])
    del tape
    return first + second


def jacobian(m):
    with tf.GradientTape() as tape:
        y = m(X)
    return tape.jacobian(y, m.w[0])


def jacobian_no_pfor(m):
    with tf.GradientTape(persistent=True) as tape:
        y = m(X)
    return tape.jacobian(y, m.w[2], experimental_use_pfor=False)


def batch_jacobian(m):
    with tf.GradientTape() as tape:
        y = m(m.x)
    return tape.batch_jacobian(y, m.x)


def nested_tapes(m):  # a gradient of a gradient
    with tf.GradientTape() as outer:
        with tf.GradientTape() as inner:
            y = tf.reduce_sum(m(X))
        g = inner.gradient(y, m.w[2])
        z = tf.reduce_sum(g * g)
    return outer.gradient(z, m.w[1:])


def forward_accumulator(m):
    tangents = [tf.ones_like(w) for w in m.w]
    with tf.autodiff.ForwardAccumulator(m.w, tangents) as acc:
        y = m(X)
    return acc.jvp(y)


def recompute_grad(m):
    block = tf.recompute_grad(lambda x: m(x))
    with tf.GradientTape() as tape:
        y = tf.reduce_sum(block(X))
    return tape.gradient(y, m.w)


def custom_gradient(m):
    @tf.custom_gradient
    def scaled(x):
        def grad(upstream):
            return upstream * 2.0

        return tf.identity(x), grad

    with tf.GradientTape() as tape:
        y = tf.reduce_sum(scaled(m(X)))
    return tape.gradient(y, m.w)


def vectorized_map(m):  # per-example gradients: the forward pass runs under pfor too
    def one(x):
        with tf.GradientTape() as tape:
            y = tf.reduce_sum(m(x[None]))
        return tape.gradient(y, m.w)

    return tf.vectorized_map(one, X)


def recompute_grad_jacobian(m):  # the forward rerun of recompute_grad happens inside pfor
    block = tf.recompute_grad(lambda x: m(x))
    with tf.GradientTape() as tape:
        y = block(X)
    return tape.jacobian(y, m.w[2])


def hessian(m):  # a jacobian of a gradient: the outer tape records the inner backward pass
    with tf.GradientTape() as outer:
        with tf.GradientTape() as inner:
            y = tf.reduce_sum(m(X))
        g = inner.gradient(y, m.w[2])
    return outer.jacobian(g, m.w[2])


def forward_over_backward(m):  # a Hessian-vector product
    with tf.autodiff.ForwardAccumulator(m.w[1], tf.ones_like(m.w[1])) as acc:
        with tf.GradientTape() as tape:
            y = tf.reduce_sum(m(X))
        g = tape.gradient(y, m.w[1])
    return [g, acc.jvp(g)]


def tape_over_function(m):  # the backward pass is the function's own backward function
    f = tf.function(lambda x: m(x))
    with tf.GradientTape() as tape:
        y = tf.reduce_sum(f(X))
    return tape.gradient(y, m.w)


def tf_gradients(m):  # only inside a tf.function (graph)
    return tf.gradients(tf.reduce_sum(m(X)), m.w)


PATHS = {
    "tape.gradient": tape_gradient,
    "persistent tape": persistent_tape,
    "tape.jacobian": jacobian,
    "tape.jacobian without pfor": jacobian_no_pfor,
    "tape.batch_jacobian": batch_jacobian,
    "nested tapes": nested_tapes,
    "ForwardAccumulator": forward_accumulator,
    "tf.recompute_grad": recompute_grad,
    "tf.custom_gradient": custom_gradient,
    "tf.vectorized_map": vectorized_map,
    "tf.recompute_grad in a jacobian": recompute_grad_jacobian,
    "Hessian": hessian,
    "forward over backward": forward_over_backward,
    "tape over a tf.function": tape_over_function,
}


def _run(path, annotated: bool, in_function: bool):
    m = MLP(annotated)
    call = tf.autograph.experimental.do_not_convert(lambda: path(m))
    fn = tf.function(call) if in_function else call
    if in_function:
        fn()  # traced outside the capture
    with capture() as rec:
        result = fn()
    return [np.asarray(t) for t in tf.nest.flatten(result)], rec


def _check(path, in_function):
    plain, _ = _run(path, False, in_function)
    annotated, rec = _run(path, True, in_function)
    assert len(plain) == len(annotated)
    for a, b in zip(plain, annotated):
        assert np.array_equal(a, b, equal_nan=True), "gradients differ from the unannotated model's"
    assert not rec.open_ranges, [(r.domain, r.message) for r in rec.open_ranges]
    assert rec.count(domain="Forward") >= 3
    return rec


@pytest.mark.parametrize("name", sorted(PATHS))
@pytest.mark.parametrize("in_function", [False, True], ids=["eager", "tf.function"])
def test_gradient_path_closes_every_backward_range(name, in_function):
    rec = _check(PATHS[name], in_function)
    if name != "ForwardAccumulator":  # forward mode: no backward pass is run
        assert rec.count(domain="Gradient") >= 1


def test_tf_gradients_in_a_function():
    rec = _check(tf_gradients, True)
    for i in (1, 2, 3):
        assert rec.count(message=f"Dense {i}", domain="Gradient") == 1


class _TensorFlowWarnings(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.lines = []

    def emit(self, record):
        self.lines.append(record.getMessage())


@pytest.mark.parametrize("name", ["tape.jacobian", "tape.batch_jacobian", "tf.vectorized_map"])
def test_pfor_runs_one_range_per_region(name):
    """pfor (jacobians, vectorized_map) computes all the rows at once, and so do the NVTX ops
    (_pfor.py): one forward and one backward range per region, not one per row in a while
    loop plus one more run of the loop body (before: 3 rows and the extra run gave 10 backward
    ranges of a jacobian; vectorized_map left its 9 forward ranges per row open), and no
    "Using a while_loop for converting NvtxStart" warning."""
    warnings = _TensorFlowWarnings()
    tf.get_logger().addHandler(warnings)
    try:
        rec = _check(PATHS[name], False)
    finally:
        tf.get_logger().removeHandler(warnings)
    for i in (1, 2, 3):
        assert rec.count(message=f"Dense {i}", domain="Gradient") == 1, rec.count(message=f"Dense {i}")
    if name == "tf.vectorized_map":
        # The forward pass runs inside pfor: its vectorized ranges only. The loop body as first
        # traced (before pfor converts it) is dead code: TensorFlow prunes it, its ranges with
        # it (ops/_dead_ranges.py; before, the stateful NVTX ops ran it once more: 6 ranges).
        assert rec.count(domain="Forward") == 3
    assert not [line for line in warnings.lines if "nvtx" in line.lower()], warnings.lines


def test_jacobian_of_an_annotated_keras_model_and_tf_gradients_in_a_function():
    """The issue's reproduction (../shared/repros/tf_repro_tf.py) with annotate() on Keras:
    a jacobian and tf.gradients in a tf.function leave no backward range open."""
    from nvtx_plugins_tf.keras import annotate, keras

    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(2, name="d")])
    plain = keras.models.clone_model(model)
    plain.set_weights(model.get_weights())
    annotate(model)
    x = tf.random.normal((3, 8))

    def jacobian_of(m):
        with tf.GradientTape() as tape:
            y = m(x)
        return tape.jacobian(y, m.trainable_variables[0])

    def gradients_of(m):
        return tf.function(lambda: tf.gradients(tf.reduce_sum(m(x)), m.trainable_variables))

    with capture() as rec:
        jac = jacobian_of(model)
    assert rec.count(message="d", domain="Backward") == 1 and not rec.open_ranges, rec.open_ranges
    assert np.array_equal(jac, jacobian_of(plain))
    step = gradients_of(model)
    step()
    with capture() as rec:
        grads = step()
    assert rec.count(message="d", domain="Backward") == 1 and not rec.open_ranges, rec.open_ranges
    assert all(np.array_equal(a, b) for a, b in zip(grads, gradients_of(plain)()))


SUBPROCESS = textwrap.dedent(
    """
    import numpy as np, tensorflow as tf
    tf.config.set_logical_device_configuration(
        tf.config.list_physical_devices("CPU")[0], [tf.config.LogicalDeviceConfiguration()] * 2)
    import nvtx_plugins_tf as nvtx_tf
    from nvtx_plugins_tf.testing import capture
    import sys
    sys.path.insert(0, {tests!r})
    from test_gradient_paths import MLP, X

    def v1_graph(annotated):
        g = tf.Graph()
        with g.as_default():
            m = MLP(annotated)
            grads = tf.gradients(tf.reduce_sum(m(tf.constant(X.numpy()))), m.w)
            with tf.compat.v1.Session(graph=g) as s:
                s.run(tf.compat.v1.global_variables_initializer())
                with capture() as rec:
                    out = s.run(grads)
        return out, rec

    def mirrored(annotated, devices=("/cpu:0", "/cpu:1")):
        strategy = tf.distribute.MirroredStrategy(list(devices))
        with strategy.scope():
            m = MLP(annotated)

        @tf.function
        def step():
            def replica():
                with tf.GradientTape() as tape:
                    y = tf.reduce_sum(m(X))
                return tape.gradient(y, m.w)
            per_replica = strategy.run(replica)
            return [strategy.reduce("SUM", g, axis=None) for g in per_replica]

        step()
        with capture() as rec:
            out = step()
        return [np.asarray(t) for t in out], rec

    mirrored_1 = lambda annotated: mirrored(annotated, ["/cpu:0"])
    for name, fn in (("v1 graph", v1_graph), ("mirrored", mirrored), ("mirrored on 1 device", mirrored_1)):
        plain, _ = fn(False)
        annotated, rec = fn(True)
        assert all(np.array_equal(a, b) for a, b in zip(plain, annotated)), name
        assert not rec.open_ranges, (name, [(r.domain, r.message) for r in rec.open_ranges])
        assert rec.count(domain="Gradient") >= 3, (name, rec.count(domain="Gradient"))
        print(name, "OK", rec.count(domain="Gradient"))
    """
)


def test_compat_v1_graph_and_mirrored_replicas(child_env, tmp_path):
    """tf.gradients in a compat.v1 graph run by a Session, and a GradientTape in each replica of
    a MirroredStrategy over two logical CPUs and over one (in a process of their own: the logical devices
    must be set before TensorFlow starts)."""
    from pathlib import Path

    tests = str(Path(__file__).resolve().parent)
    proc = subprocess.run(
        [sys.executable, "-c", SUBPROCESS.format(tests=tests)],
        env=child_env(tmp_path / "rec", TF_CPP_MIN_LOG_LEVEL="3"),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    for name in ("v1 graph", "mirrored", "mirrored on 1 device"):
        assert f"{name} OK" in proc.stdout, proc.stdout


def _range_without_tensors(x):
    with nvtx_tf.ops.range("region", "Forward"):
        y = x * 3.0
    return y


def _end_never_used(x):
    y, ctx = nvtx_tf.ops.start(x, "region", "Forward")
    nvtx_tf.ops.end(y * 2.0, ctx)  # its output unused: only its start's data reach the result
    return y + 1.0


def _payload_per_row(x):
    y, ctx = nvtx_tf.ops.start(x, "region", "Forward", payload=tf.cast(x[0] > 0, tf.int64))
    return nvtx_tf.ops.end(y * 2.0, ctx)


def _cond_inside(x):
    y, ctx = nvtx_tf.ops.start(x, "region", "Forward")
    y = tf.cond(tf.reduce_sum(y) > 0, lambda: y * 2.0, lambda: y - 1.0)
    return nvtx_tf.ops.end(y, ctx)


@pytest.mark.parametrize("body", [_range_without_tensors, _end_never_used, _payload_per_row, _cond_inside])
@pytest.mark.parametrize("in_function", [False, True], ids=["eager", "tf.function"])
def test_every_range_inside_vectorized_map_ends(body, in_function):
    """pfor copies only what the loop's outputs need; the end of a range with no tensor, or
    whose tensors nobody uses, is copied with its start (before: the copied range, or one
    per row, never ended); a payload that differs per row is the rows' smallest."""
    call = tf.autograph.experimental.do_not_convert(lambda: tf.vectorized_map(body, X))
    fn = tf.function(call) if in_function else call
    if in_function:
        fn()
    with capture() as rec:
        out = fn()
    assert np.array_equal(out, tf.stack([body(x) for x in X]))
    assert not rec.open_ranges, [(r.domain, r.message) for r in rec.open_ranges]
    # The vectorized one only: the loop body as first traced is dead code, pruned with its range
    # (ops/_dead_ranges.py; before, the stateful NVTX ops ran it once more: 2 ranges).
    assert rec.count(message="region", domain="Forward") == 1
