"""annotate() called again with other arguments, unannotate(), and the arguments at their
edges (issue 37, rows 8 and 9)."""

import warnings

import numpy as np
import pytest
import tensorflow as tf

import nvtx_plugins_tf as nvtx_tf
from nvtx_plugins_tf.keras import annotate, is_annotated, keras, unannotate
from nvtx_plugins_tf.keras.layers import NVTXStart
from nvtx_plugins_tf.ops._validation import MAX_TEXT_BYTES
from nvtx_plugins_tf.testing import capture


def _model():
    return keras.Sequential([keras.Input((4,)), keras.layers.Dense(2, name="a"), keras.layers.Dense(1, name="b")])


def test_annotate_again_with_other_arguments_warns_and_keeps_the_first():
    model = annotate(_model())
    with pytest.warns(UserWarning, match=r"2 layer\(s\) already annotated.*domain_name 'Forward' -> 'Other'"):
        annotate(model, domain_name="Other")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        annotate(model)  # the same arguments: nothing to say
    with capture() as rec:
        model.predict(np.ones((2, 4)), verbose=0)
    assert rec.count(message="a", domain="Forward") == 1
    assert rec.count(message="a", domain="Other") == 0


def test_unannotate_removes_the_ranges_and_allows_annotating_anew():
    model = annotate(_model())
    x = np.ones((2, 4), "float32")
    before = model.predict(x, verbose=0)
    assert unannotate(model) is model
    assert not any(is_annotated(layer) for layer in model.layers)
    assert all("call" not in vars(layer) for layer in model.layers)
    with capture() as rec:
        after = model.predict(x, verbose=0)
    assert np.array_equal(before, after)
    assert rec.count(domain="Forward") == 0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        annotate(model, domain_name="Other")
    with capture() as rec:
        model.predict(x, verbose=0)
    assert rec.count(message="b", domain="Other") == 1


@pytest.mark.parametrize(
    "call, error, match",
    [
        (lambda: nvtx_tf.ops.start(tf.ones([2]), "x" * (MAX_TEXT_BYTES + 1)), ValueError, "message is 65537 bytes"),
        (lambda: nvtx_tf.ops.start(tf.ones([2]), "bad \ud800"), ValueError, "message must be encodable as UTF-8"),
        (lambda: nvtx_tf.ops.start(tf.ones([2]), "m", domain_name="\udfff"), ValueError, "domain_name must be"),
        (lambda: nvtx_tf.ops.start(tf.ones([2]), ""), ValueError, "message must not be empty"),
        (lambda: nvtx_tf.ops.mark(""), ValueError, "message must not be empty"),
        (lambda: NVTXStart(message=""), ValueError, "message must not be empty"),
        (lambda: nvtx_tf.keras.NVTXRange(keras.layers.Dense(1), message="\ud800"), ValueError, "message must be"),
        (
            lambda: nvtx_tf.ops.start(tf.ones([2]), "m", payload=tf.constant(2**63 + 5, tf.uint64)),
            TypeError,
            "payload: a uint64 tensor",
        ),
        (lambda: nvtx_tf.ops.start(tf.ones([2]), "m", payload=2**63 + 5), ValueError, "payload must fit in int64"),
    ],
    ids=[
        "1MiB",
        "surrogate",
        "domain-surrogate",
        "empty",
        "empty-mark",
        "empty-layer",
        "range-surrogate",
        "u64",
        "int",
    ],
)
def test_arguments_at_the_edges_are_refused_naming_the_argument(call, error, match):
    with pytest.raises(error, match=match):
        call()


def test_longest_accepted_message_is_recorded_whole():
    text = "é" * (MAX_TEXT_BYTES // 2)  # 2 bytes each: exactly the limit
    with capture() as rec:
        nvtx_tf.ops.end(*nvtx_tf.ops.start(tf.ones([2]), text))
    assert [len(r.message) for r in rec.ranges] == [len(text)]


def test_annotate_something_that_is_not_a_keras_layer_raises():
    """Issue 43 row 6: annotate(tf.Module()) returned having added nothing."""
    with pytest.raises(TypeError, match=r"annotate\(\) takes a Keras model or layer .*ops\.trace"):
        annotate(tf.Module())
