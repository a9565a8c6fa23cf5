"""A region inside a loop body closes every backward range it opens (tf.map_fn, tf.while_loop,
tf.scan, under a tf.GradientTape in a tf.function), also where its input gradient is never
needed.

With only the weights trainable (the loop's input a constant, or not watched), TensorFlow
builds the gradient of the region's NvtxEnd in the loop's gradient body but never the gradient
of its NvtxStart (the input gradient is not between the loop variables it differentiates and
the body's outputs). The backward range opened there stayed open: one per loop iteration (5
per call on the 5-row input below), because the tape closer looked only at the graph the outer
tape.gradient call builds, not at the loop's gradient body. The same held in the backward
graph of a nested tf.function (a region over a tensor made inside it) and for a region inside a
Keras RNN cell over the cell's input (4 per fit step on a 4-step sequence). Gradients are
compared bit for bit with the same program without the ops, and the ops TensorFlow executes
(tests/same_program.py) with the plain program's.
"""

from __future__ import annotations

import keras
import numpy as np
import pytest
import same_program as sp
import tensorflow as tf
from test_rnn_training import _matmuls, _work

import nvtx_plugins_tf as nvtx_tf
from nvtx_plugins_tf.testing import capture

RNG = np.random.default_rng(37)
ROWS = 5
X = RNG.normal(size=(ROWS, 4)).astype("float32")
W = RNG.normal(size=(4, 3)).astype("float32")
V = RNG.normal(size=(3, 3)).astype("float32")


def _dense(row, w, annotated: bool, how: str):
    """tanh(row @ w), inside an annotated region in the style ``how``."""
    if not annotated:
        return tf.tanh(tf.matmul(row[None, :], w))[0]
    if how == "start/end":
        row, ctx = nvtx_tf.ops.start(row, "r", "Forward", grad_domain_name="Backward")
        return nvtx_tf.ops.end(tf.tanh(tf.matmul(row[None, :], w))[0], ctx)
    if how == "trace":
        traced = nvtx_tf.ops.trace("r", domain_name="Forward", grad_domain_name="Backward")(
            lambda r: tf.tanh(tf.matmul(r[None, :], w))[0]
        )
        return traced(row)
    raise AssertionError(how)


def map_fn(x, w, v, annotated, how):
    return tf.map_fn(lambda row: _dense(row, w, annotated, how), x)


def while_loop(x, w, v, annotated, how):
    acc = tf.TensorArray(tf.float32, size=ROWS)

    def body(i, acc):
        return i + 1, acc.write(i, _dense(x[i], w, annotated, how))

    _, acc = tf.while_loop(lambda i, _: i < ROWS, body, (tf.constant(0), acc))
    return acc.stack()


def scan(x, w, v, annotated, how):
    """An RNN-like loop: a state carried from row to row (the state's gradient is needed, the
    rows' is not)."""

    def step(state, row):
        h = _dense(row, w, annotated, how)
        return tf.tanh(h + tf.linalg.matvec(v, state, transpose_a=True))

    return tf.scan(step, x, initializer=tf.zeros([3]))


LOOPS = {"tf.map_fn": map_fn, "tf.while_loop": while_loop, "tf.scan": scan}


def _program(loop, annotated: bool, how: str, watch_input: bool):
    w, v = tf.Variable(W), tf.Variable(V)
    x_var = tf.Variable(X)

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            x = tf.identity(x_var) if watch_input else tf.constant(X)
            if watch_input:
                tape.watch(x)
            y = loop(x, w, v, annotated, how)
            loss = tf.reduce_sum(y * y)
        sources = [w, v] + ([x] if watch_input else [])
        return [g if g is not None else tf.zeros([0]) for g in tape.gradient(loss, sources)]

    return step


def _run(loop, annotated: bool, how: str, watch_input: bool):
    step = _program(loop, annotated, how, watch_input)
    step()  # traced (and run once) outside the capture
    with capture() as rec:
        result = step()
    return [np.asarray(t) for t in result], rec


def _check(loop, how, watch_input):
    plain, _ = _run(loop, False, how, watch_input)
    annotated, rec = _run(loop, True, how, watch_input)
    assert len(plain) == len(annotated)
    for a, b in zip(plain, annotated):
        assert np.array_equal(a, b, equal_nan=True), "gradients differ from the unannotated program's"
    assert not rec.open_ranges, [(r.domain, r.message) for r in rec.open_ranges]
    assert rec.count(message="r", domain="Forward") == ROWS
    return rec


@pytest.mark.parametrize("how", ["start/end", "trace"])
@pytest.mark.parametrize("name", sorted(LOOPS))
def test_loop_region_without_input_gradient_closes_its_backward_ranges(name, how):
    rec = _check(LOOPS[name], how, watch_input=False)
    # Either each iteration's backward range opened and closed, or none was opened.
    assert rec.count(message="r", domain="Backward") in (0, ROWS)


@pytest.mark.parametrize("name", sorted(LOOPS))
def test_loop_region_with_input_gradient_keeps_its_backward_ranges(name):
    rec = _check(LOOPS[name], "start/end", watch_input=True)
    assert rec.count(message="r", domain="Backward") == ROWS


@pytest.mark.parametrize("how", ["start/end", "trace"])
@pytest.mark.parametrize("name", sorted(LOOPS))
def test_loop_region_computes_the_plain_ops(name, how):
    plain = sp.executed_ops(_program(LOOPS[name], False, how, watch_input=False))
    annotated = sp.executed_ops(_program(LOOPS[name], True, how, watch_input=False))
    assert _matmuls(annotated) == _matmuls(plain), sp.diff(plain, annotated)
    assert sp.diff(_work(plain), _work(annotated)) == {}, "op types that differ (plain, annotated)"


@pytest.mark.parametrize("name", sorted(LOOPS))
def test_eager_loop_region_closes_its_backward_ranges(name):
    w, v = tf.Variable(W), tf.Variable(V)
    with capture() as rec:
        with tf.GradientTape() as tape:
            y = LOOPS[name](tf.constant(X), w, v, True, "start/end")
            loss = tf.reduce_sum(y * y)
        tape.gradient(loss, [w, v])
    assert not rec.open_ranges, [(r.domain, r.message) for r in rec.open_ranges]
    assert rec.count(message="r", domain="Backward") in (0, ROWS)


def _nested(annotated: bool):
    w = tf.Variable(W)

    @tf.function
    def inner(w):
        x = tf.constant(X)  # made inside: no gradient leaves the region
        if not annotated:
            return tf.matmul(x, w)
        x, ctx = nvtx_tf.ops.start(x, "n", "Forward", grad_domain_name="Backward")
        return nvtx_tf.ops.end(tf.matmul(x, w), ctx)

    def step():
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(tf.tanh(inner(w)))
        return tape.gradient(loss, w)

    return step


@pytest.mark.parametrize("outer", ["tf.function", "eager"])
def test_region_in_nested_function_closes_its_backward_range(outer):
    plain, annotated = _nested(False), _nested(True)
    if outer == "tf.function":
        plain, annotated = tf.function(plain), tf.function(annotated)
    annotated()
    with capture() as rec:
        grad = annotated()
    assert np.array_equal(np.asarray(grad), np.asarray(plain()))
    assert not rec.open_ranges, [(r.domain, r.message) for r in rec.open_ranges]
    assert rec.count(message="n", domain="Forward") == 1


class _Cell(keras.layers.Layer):
    """An RNN cell whose input transform is a region: its input gradient is not needed."""

    def __init__(self, units: int, annotated: bool):
        super().__init__()
        self.units, self.state_size, self.annotated = units, units, annotated

    def build(self, shape):
        init = keras.initializers.GlorotUniform(seed=3)
        self.k = self.add_weight(shape=(shape[-1], self.units), initializer=init)
        self.r = self.add_weight(shape=(self.units, self.units), initializer=init)

    def call(self, x, states):
        if self.annotated:
            x, ctx = nvtx_tf.ops.start(x, "cell input", "Forward", grad_domain_name="Backward")
        h = tf.matmul(x, self.k)
        if self.annotated:
            h = nvtx_tf.ops.end(h, ctx)
        out = tf.tanh(h + tf.matmul(states[0], self.r))
        return out, [out]


def _rnn_gradients(annotated: bool):
    """Gradients of a Keras RNN over the cell above, under a tape in a tf.function (a Keras
    training step's shape; fit itself is not bit-reproducible even without the ops)."""
    rnn = keras.layers.RNN(_Cell(8, annotated))
    x = tf.constant(np.random.default_rng(5).normal(size=(8, 4, 6)).astype("float32"))
    rnn(x)

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(tf.square(rnn(x, training=True)))
        return tape.gradient(loss, rnn.trainable_variables)

    step()  # traced outside the capture
    with capture() as rec:
        grads = step()
    return [np.asarray(g) for g in grads], rec


def test_keras_rnn_cell_region_closes_its_backward_ranges():
    plain, _ = _rnn_gradients(False)
    annotated, rec = _rnn_gradients(True)
    assert len(plain) == len(annotated) == 2
    for a, b in zip(plain, annotated):
        assert np.array_equal(a, b), "gradients differ from the unannotated model's"
    assert not rec.open_ranges, [(r.domain, r.message) for r in rec.open_ranges]
    assert rec.count(message="cell input", domain="Forward") == 4
