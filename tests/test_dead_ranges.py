"""Annotation never keeps alive work TensorFlow prunes (issue 37, row 1).

Keras 3's RNN calls its cell once more, before its loop, only to learn the output shapes;
TensorFlow prunes that call, but the stateful NVTX ops around an annotated cell made it run
(an annotated LSTM at 1.9x the plain one's inference time). Judged by TensorFlow's own
runtime (the ops it executes, tests/same_program.py) and by the ranges recorded.
"""

import keras
import pytest
import same_program as sp
import tensorflow as tf

import nvtx_plugins_tf as nvtx_tf
from nvtx_plugins_tf.testing import capture


@pytest.mark.parametrize("model_name", ["lstm", "gru", "attention"])
def test_annotated_inference_runs_the_same_ops(model_name):
    build = sp.INFERENCE_MODELS[model_name]
    plain = sp.inference_ops(*build(keras, lambda layer: layer))
    model, kind = build(keras, lambda layer: layer)
    annotated = sp.inference_ops(nvtx_tf.keras.annotate(model), kind)
    assert sp.diff(plain, annotated) == {}, f"{model_name}: op types that differ (plain, annotated)"


def test_no_range_for_the_shape_probe_call():
    """One cell range per timestep: none for the cell call whose result nothing uses."""
    model = nvtx_tf.keras.annotate(keras.Sequential([keras.Input((5, 6)), keras.layers.LSTM(8, name="lstm")]))
    call = tf.function(model.__call__)
    x = tf.ones([2, 5, 6])
    with capture() as rec:
        call(x)
        call(x)
    assert rec.count(message="lstm", domain="Forward") == 2
    assert rec.count(message="lstm_cell", domain="Forward") == 10
    assert not rec.open_ranges


def _assert_ranges_and_matmuls(step, ranges: dict, matmuls: int) -> None:
    """One call of ``step``: the count of each range of domain D, and the MatMuls TensorFlow ran."""
    with capture() as rec:
        executed = sp.executed_ops(lambda: step(tf.ones([4, 4])))
    assert {message: rec.count(message=message, domain="D") for message in ranges} == ranges
    assert not rec.open_ranges
    assert sum(n for op, n in executed.items() if op.endswith("MatMul")) == matmuls, executed  # (_MklMatMul)


def test_dead_branch_is_pruned_live_uses_keep_their_range():
    """A range whose region nothing uses is silenced; one whose region is used elsewhere, or
    whose start's outputs feed a stateful op, keeps its range."""
    w = tf.Variable(tf.ones([4, 4]))
    sink = tf.Variable(tf.zeros([4, 4]))

    @tf.function
    def step(x):
        d, ctx = nvtx_tf.ops.start(x, "dead", domain_name="D")
        nvtx_tf.ops.end(tf.matmul(tf.matmul(d, w), w), ctx)  # nothing uses it
        u, ctx = nvtx_tf.ops.start(x, "used elsewhere", domain_name="D")
        y = tf.matmul(u, w)
        nvtx_tf.ops.end(y, ctx)  # the end's result is dropped, but y is returned
        s, ctx = nvtx_tf.ops.start(x, "side effect", domain_name="D")
        sink.assign(s)
        nvtx_tf.ops.end(tf.matmul(s, w), ctx)
        return y

    # y, and the side-effect region's MatMul: not the dead region's two
    _assert_ranges_and_matmuls(step, {"dead": 0, "used elsewhere": 1, "side effect": 1}, 2)


def test_dead_block_of_a_range_without_tensors_is_pruned_an_empty_block_keeps_its_range():
    w = tf.Variable(tf.ones([4, 4]))

    @tf.function
    def step(x):
        with nvtx_tf.ops.range("dead block", domain_name="D"):
            tf.matmul(tf.matmul(x, w), w)  # nothing uses it
        with nvtx_tf.ops.range("empty", domain_name="D"):
            pass
        with nvtx_tf.ops.range("live block", domain_name="D"):
            y = tf.matmul(x, w)
        return y

    _assert_ranges_and_matmuls(step, {"dead block": 0, "empty": 1, "live block": 1}, 1)
