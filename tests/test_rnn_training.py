"""An annotated RNN trains with the plain model's work (issue 37, row 1, training).

The backward range of an annotated Keras 3 RNN cell was ended by one op over the gradients
of the cell's input and of its states. The state gradients are needed, so the input's (one
MatMul per timestep), which TensorFlow prunes in the plain loop when nothing asks for the
sequence's gradient, was computed as well. Judged by TensorFlow's own runtime (the ops it
executes, tests/same_program.py); the loops' bookkeeping is left out of the comparison (the
forward range id each timestep hands to its backward range, the payload that links them, is
carried through the loops).
"""

import collections

import keras
import numpy as np
import pytest
import same_program as sp
from test_same_program import _run

import nvtx_plugins_tf as nvtx_tf
from nvtx_plugins_tf.testing import capture

#: Loop bookkeeping: control flow, the TensorLists that carry values between the forward
#: and the backward loop, constants and identities. Everything else is work.
BOOKKEEPING = frozenset(
    {
        "Enter",
        "Exit",
        "Merge",
        "Switch",
        "NextIteration",
        "LoopCond",
        "EmptyTensorList",
        "TensorListPushBack",
        "TensorListPopBack",
        "Const",
        "Identity",
    }
)


def _work(ops: collections.Counter) -> collections.Counter:
    return collections.Counter({op: n for op, n in ops.items() if op not in BOOKKEEPING})


def _matmuls(ops: collections.Counter) -> int:
    return sum(n for op, n in ops.items() if op.endswith("MatMul"))  # (_MklMatMul)


def _embedded(rnn):
    """A Dense below the RNN: the sequence's gradient is needed, the input gradient stays."""

    def build(keras, wrap):
        layers = [keras.Input((4, 6)), wrap(keras.layers.Dense(6)), wrap(rnn(keras)(8)), wrap(keras.layers.Dense(1))]
        return keras.Sequential(layers), ("sequence", 1)

    return build


MODELS = {
    "lstm": sp.lstm,
    "gru": sp.gru,
    "dense_lstm": _embedded(lambda k: k.layers.LSTM),
    "dense_gru": _embedded(lambda k: k.layers.GRU),
}


@pytest.mark.parametrize("model_name", sorted(MODELS))
def test_annotated_rnn_fit_computes_the_plain_ops(model_name):
    build = MODELS[model_name]
    plain = sp.fit_ops(*build(keras, lambda layer: layer))
    model, kind = build(keras, lambda layer: layer)
    annotated = sp.fit_ops(nvtx_tf.keras.annotate(model), kind)
    assert _matmuls(annotated) == _matmuls(plain), sp.diff(plain, annotated)
    assert sp.diff(_work(plain), _work(annotated)) == {}, f"{model_name}: op types that differ (plain, annotated)"


@pytest.mark.parametrize("model_name", ["lstm", "gru"])
def test_annotated_rnn_gradient_tape_computes_the_plain_ops(model_name):
    build = MODELS[model_name]
    plain = sp.tape_ops(*build(keras, lambda layer: layer))
    model, kind = build(keras, lambda layer: layer)
    annotated = sp.tape_ops(nvtx_tf.keras.annotate(model), kind)
    assert sp.diff(_work(plain), _work(annotated)) == {}


@pytest.mark.parametrize("model_name", ["lstm", "dense_lstm"])
def test_annotated_rnn_training_is_bit_identical_with_a_backward_range_per_timestep(model_name):
    build = MODELS[model_name]
    plain, kind = build(keras, lambda layer: layer)
    annotated, _ = build(keras, lambda layer: layer)
    annotated.set_weights(plain.get_weights())
    nvtx_tf.keras.annotate(annotated)
    x, y = sp.data(*kind)
    for model in (plain, annotated):
        model.compile(optimizer="sgd", loss="mse")
        model.fit(x, y, batch_size=sp.BATCH, epochs=1, verbose=0, shuffle=False)  # traces
    plain.fit(x, y, batch_size=sp.BATCH, epochs=1, verbose=0, shuffle=False)
    with capture() as rec:
        annotated.fit(x, y, batch_size=sp.BATCH, epochs=1, verbose=0, shuffle=False)
    for a, b in zip(plain.get_weights(), annotated.get_weights()):
        np.testing.assert_array_equal(a, b)
    steps, timesteps = len(x) // sp.BATCH, x.shape[1]
    cell = next(layer for layer in annotated.layers if isinstance(layer, keras.layers.RNN)).cell.name
    assert rec.count(message=cell, domain="Forward") == steps * timesteps
    assert rec.count(message=cell, domain="Backward") == steps * timesteps
    assert not rec.open_ranges
    # each backward range links to its forward range (payload) and ends after it started
    forward_ids = {r.range_id for r in rec.find(message=cell, domain="Forward")}
    backward = rec.find(message=cell, domain="Backward")
    assert {r.payload for r in backward} == forward_ids
    assert all(r.start_ns <= r.end_ns for r in backward)


def test_tf_keras_annotated_rnn_fit_computes_the_plain_ops():
    """tf_keras runs its cells without their own ranges (the RNN layer keeps its range)."""
    script = (
        "import sys; sys.path.insert(0, {here!r})\n"
        "import tensorflow as tf, tf_keras as keras, same_program as sp\n"
        "import nvtx_plugins_tf as nvtx_tf\n"
        "results = {{}}\n"
        "for name in ('lstm', 'gru'):\n"
        "    build = getattr(sp, name)\n"
        "    plain = sp.fit_ops(*build(keras, lambda layer: layer))\n"
        "    model, kind = build(keras, lambda layer: layer)\n"
        "    results[name] = sp.diff(plain, sp.fit_ops(nvtx_tf.keras.annotate(model), kind))\n"
        "print('RESULT', sp.report(results))\n"
    ).format(here=str(sp.__file__).rsplit("/", 1)[0])
    assert _run(script, {"TF_USE_LEGACY_KERAS": "1"}) == {"lstm": {}, "gru": {}}
