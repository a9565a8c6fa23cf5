"""Regression tests of issue 9's ops/API defects: 18 (trace on exceptions), 20 (handle
data through the ops), 22 (annotate() skips the package's own layers)."""

import warnings

import keras
import numpy as np
import pytest
import tensorflow as tf

import nvtx_plugins_tf as nvtx_tf
from nvtx_plugins_tf.keras.layers import NVTXEnd, NVTXStart
from nvtx_plugins_tf.testing import capture


class Boom(RuntimeError):
    pass


def test_trace_closes_its_range_when_the_function_raises_eagerly():
    @nvtx_tf.ops.trace("raises", domain_name="Forward")
    def f(x):
        raise Boom("inside the range")

    with capture() as rec:
        with pytest.raises(Boom):
            f(tf.ones([2]))
    assert rec.count(message="raises", domain="Forward") == 1
    assert not rec.open_ranges


def test_trace_closes_its_range_when_an_exception_is_caught_while_tracing():
    @nvtx_tf.ops.trace("maybe", domain_name="Forward")
    def g(x):
        raise Boom("at trace time")

    @tf.function
    def step(x):
        try:
            g(x)
        except Boom:
            pass
        return x + 1

    with capture() as rec:
        step(tf.ones([2]))
        step(tf.ones([2]))
    assert rec.count(message="maybe", domain="Forward") == 2
    assert not rec.open_ranges


def test_resource_handle_keeps_its_shape_and_dtype_through_start_end():
    v = tf.Variable(tf.zeros([3, 4]))

    @tf.function
    def read():
        (handle,), ctx = nvtx_tf.ops.start([v.handle], "read")
        handle = nvtx_tf.ops.end(handle, ctx)
        value = tf.raw_ops.ReadVariableOp(resource=handle, dtype=tf.float32)
        assert value.shape.as_list() == [3, 4], value.shape  # from the handle data
        return value

    assert read().shape == (3, 4)


def test_tensor_list_keeps_its_element_shape_through_start_end():
    @tf.function
    def stack():
        handle = tf.raw_ops.TensorListReserve(element_shape=[2], num_elements=3, element_dtype=tf.float32)
        handle, ctx = nvtx_tf.ops.start(handle, "list")
        handle = nvtx_tf.ops.end(handle, ctx)
        stacked = tf.raw_ops.TensorListStack(input_handle=handle, element_shape=-1, element_dtype=tf.float32)
        assert stacked.shape.as_list()[1:] == [2], stacked.shape  # element shape from the handle data
        return stacked

    assert stack().shape == (3, 2)


def test_annotate_skips_the_package_own_layers(capture_steps):
    inputs = keras.Input((4,))
    x, marker_id, domain_id = NVTXStart(message="Dense 1", domain_name="Forward")(inputs)
    x = keras.layers.Dense(4, activation="relu", name="dense_1")(x)
    x = NVTXEnd(grad_message="Dense 1 grad", grad_domain_name="Gradient")([x, marker_id, domain_id])
    x = nvtx_tf.keras.NVTXRange(keras.layers.Dense(1, name="head"))(x)
    model = keras.Model(inputs, x)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no 'domain_id' warning from a wrapped NVTXEnd
        nvtx_tf.keras.annotate(model)
    annotated = {layer.name for layer in model._flatten_layers(include_self=False) if nvtx_tf.keras.is_annotated(layer)}
    assert annotated == {"dense_1"}
    model.compile(optimizer="sgd", loss="mse")
    data = np.ones((8, 4), "float32"), np.ones((8, 1), "float32")
    rec = capture_steps(model.fit, *data, batch_size=4, verbose=0)
    assert rec.count(message="Dense 1", domain="Forward") == 2
    assert rec.count(message="dense_1", domain="Forward") == 2
    assert rec.count(message="head", domain="Forward") == 2  # once: from NVTXRange only
    assert rec.count(message="Dense 1 grad", domain="Gradient") == 2
    assert not rec.open_ranges
