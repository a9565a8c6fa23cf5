"""Fuzzed input into the Python API and the raw ops: a clear error or a correct result."""

import numpy as np
import tensorflow as tf
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import nvtx_plugins_tf as nvtx_tf
from nvtx_plugins_tf.ops import _loader
from nvtx_plugins_tf.testing import capture

DTYPES = [tf.float16, tf.bfloat16, tf.float32, tf.float64, tf.int8, tf.int32, tf.int64, tf.uint8, tf.bool, tf.complex64]
SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def tensors(draw):
    dtype = draw(st.sampled_from(DTYPES))
    shape = draw(st.lists(st.integers(0, 3), max_size=3))
    data = draw(st.binary(min_size=int(np.prod(shape)) * 8, max_size=int(np.prod(shape)) * 8))
    raw = np.frombuffer(data, np.uint8)[: int(np.prod(shape))].reshape(shape)
    return tf.cast(tf.constant(raw), dtype)


structures = st.recursive(
    tensors(),
    lambda children: st.one_of(
        st.lists(children, max_size=3),
        st.tuples(children, children),
        st.dictionaries(st.text("abc", min_size=1, max_size=3), children, max_size=3),
    ),
    max_leaves=6,
)


def _same(a, b):
    fa, fb = tf.nest.flatten(a), tf.nest.flatten(b)
    assert len(fa) == len(fb)
    for x, y in zip(fa, fb):
        assert x.dtype == y.dtype and x.shape == y.shape
        assert x.numpy().tobytes() == y.numpy().tobytes()


@SETTINGS
@given(structures, st.text(max_size=40))
def test_random_structures_and_unicode_messages(structure, message):
    message = message.replace("\0", "") or "m"  # an empty message is refused (test_keras_annotate_arguments)
    with capture() as rec:
        out, ctx = nvtx_tf.ops.start(structure, message, domain_name="fuzz \u00e9")
        out = nvtx_tf.ops.end(out, ctx)
    tf.nest.assert_same_structure(out, structure)
    _same(out, structure)
    found = rec.find(message=message, domain="fuzz \u00e9")
    assert len(found) == 1


def test_64_kib_message():
    message = "\u4e2d" * (64 * 1024 // 3)
    with capture() as rec:
        x, ctx = nvtx_tf.ops.start(tf.ones([1]), message)
        nvtx_tf.ops.end(x, ctx)
    assert rec.count(message=message) == 1


@SETTINGS
@given(st.integers(-(2**63), 2**63 - 1), st.text(max_size=8).filter(lambda s: "\0" not in s))
def test_forged_ids_into_raw_end(range_id, domain):
    ops = _loader.load()
    out, _ = ops.nvtx_end([tf.constant([1.0])], [], [tf.constant(range_id, tf.int64)], [], domain_name=domain)
    assert out[0].numpy().tolist() == [1.0]


@SETTINGS
@given(st.one_of(st.integers(), st.floats(), st.text(), st.none(), st.binary(), st.lists(st.integers(), max_size=2)))
def test_arbitrary_argument_values_raise_clear_errors(value):
    for argument in ("message", "color", "category", "payload", "domain_name"):
        kwargs = {"message": "m", argument: value}
        try:
            x, ctx = nvtx_tf.ops.start(tf.ones([1]), **kwargs)
            nvtx_tf.ops.end(x, ctx)
        except (TypeError, ValueError) as exc:
            assert argument in str(exc), (argument, value, str(exc))  # the error names the argument
