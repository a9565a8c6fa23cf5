"""Any structure and any dtype passes through NvtxStart/NvtxEnd bit-identical."""

import numpy as np
import pytest
import tensorflow as tf

import nvtx_plugins_tf as nvtx_tf
from nvtx_plugins_tf.testing import capture

DTYPES = [
    tf.float16,
    tf.bfloat16,
    tf.float32,
    tf.float64,
    tf.complex64,
    tf.complex128,
    tf.int8,
    tf.int16,
    tf.int32,
    tf.int64,
    tf.uint8,
    tf.uint16,
    tf.uint32,
    tf.uint64,
    tf.bool,
]


def _value(dtype):
    rng = np.random.default_rng(0)
    if dtype == tf.bool:
        return tf.constant(rng.integers(0, 2, [3, 4]).astype(bool))
    if dtype.is_complex:
        return tf.complex(
            tf.constant(rng.normal(size=[3, 4]), dtype.real_dtype),
            tf.constant(rng.normal(size=[3, 4]), dtype.real_dtype),
        )
    if dtype.is_floating:
        return tf.cast(tf.constant(rng.normal(size=[3, 4]) * 1e3), dtype)
    info = np.iinfo(dtype.as_numpy_dtype)
    return tf.constant(rng.integers(info.min, info.max, [3, 4], dtype=dtype.as_numpy_dtype))


def _bits(t):
    return t.numpy().tobytes() if t.dtype != tf.string else t.numpy().tolist()


@pytest.mark.parametrize("mode", ["eager", "function"])
def test_every_dtype_bit_identical(mode):
    values = {d.name: _value(d) for d in DTYPES}
    values["string"] = tf.constant(["a", "", "\u00e9\u4e2d"])

    def run(v):
        y, ctx = nvtx_tf.ops.start(v, "dtypes")
        return nvtx_tf.ops.end(y, ctx)

    fn = tf.function(run) if mode == "function" else run
    with capture() as rec:
        out = fn(values)
    assert rec.count(message="dtypes") == 1
    assert set(out) == set(values)
    for key, value in values.items():
        assert out[key].dtype == value.dtype
        assert _bits(out[key]) == _bits(value), key


def test_resource_handle_passes_through():
    v = tf.Variable([1.0, 2.0])

    @tf.function
    def f():
        (h,), ctx = nvtx_tf.ops.start([v.handle], "resource")
        (h,) = nvtx_tf.ops.end([h], ctx)
        return tf.raw_ops.ReadVariableOp(resource=h, dtype=tf.float32)

    assert f().numpy().tolist() == [1.0, 2.0]


def test_sparse_ragged_nested_structures():
    sparse = tf.sparse.SparseTensor([[0, 1], [2, 3]], [1.5, -2.0], [3, 4])
    ragged = tf.ragged.constant([[1, 2], [], [3]])
    structure = {"a": [sparse, (ragged, tf.constant(7))], "b": {"c": tf.ones([2])}}

    @tf.function
    def f(s):
        y, ctx = nvtx_tf.ops.start(s, "nested")
        return nvtx_tf.ops.end(y, ctx)

    out = f(structure)
    tf.nest.assert_same_structure(out, structure, expand_composites=True)
    for got, want in zip(
        tf.nest.flatten(out, expand_composites=True), tf.nest.flatten(structure, expand_composites=True)
    ):
        assert _bits(got) == _bits(want)


def test_multiple_tensors_of_mixed_shapes():
    tensors = [tf.zeros([0]), tf.ones([2, 0, 3]), tf.constant(1), tf.fill([5], 2.5)]
    y, ctx = nvtx_tf.ops.start(tensors, "mixed")
    y = nvtx_tf.ops.end(y, ctx)
    assert [t.shape for t in y] == [t.shape for t in tensors]
    assert isinstance(y, list)
