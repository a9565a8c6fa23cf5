"""The annotated program must be the same program: helpers of tests/test_same_program.py.

``executed_ops(run)`` asks TensorFlow itself which ops it executes: run metadata holds the
partition graphs of every function instantiated while ``run`` ran, after pruning and
Grappler, i.e. what the executor runs. The training step is the largest of them. Models
and the ways to annotate them are built here so that the plain and the annotated program
differ only by the annotation. Used in-process and by subprocess scripts (tf_keras,
``record --keras-layers``).
"""

from __future__ import annotations

import collections
import json

import numpy as np
import tensorflow as tf
from tensorflow.python.eager import context

BATCH = 8
STEPS = 2


def executed_ops(run) -> collections.Counter:
    """Op types of the largest function TensorFlow instantiated and ran during ``run()``
    (partition graphs: after pruning and Grappler), NVTX ops left out: ours, the empty
    tensors a silenced range takes (ops/_dead_ranges.py), and NoOp (a control anchor, no
    work: a loop body's count differs when the body holds a stateful op)."""
    context.enable_run_metadata()
    try:
        context.export_run_metadata()  # drop what an earlier run left
        run()
        metadata = context.export_run_metadata()
    finally:
        context.disable_run_metadata()
    if not metadata.function_graphs:
        raise AssertionError("no function was instantiated: was the step traced before?")
    step = max(metadata.function_graphs, key=lambda fg: sum(len(g.node) for g in fg.partition_graphs))
    return collections.Counter(
        n.op
        for g in step.partition_graphs
        for n in g.node
        if not (n.op.startswith("Nvtx") or n.op == "NoOp" or "nvtx_silenced/" in n.name)
    )


def diff(plain: collections.Counter, annotated: collections.Counter) -> dict:
    """{op type: (plain count, annotated count)} where they differ."""
    return {k: (plain[k], annotated[k]) for k in sorted(set(plain) | set(annotated)) if plain[k] != annotated[k]}


# ---- Keras models: build(keras, wrap) with wrap(layer) -> layer (Sequential-friendly) ----


class _StopGradient:
    """A layer applying tf.stop_gradient, for either Keras."""

    @staticmethod
    def make(keras):
        class StopGradient(keras.layers.Layer):
            def call(self, x):
                return tf.stop_gradient(x)

        return StopGradient()


def _frozen(layer):
    layer.trainable = False
    return layer


def frozen_base(keras, wrap):
    """A fully frozen convolutional base (with BatchNormalization) in a Sequential."""
    base = keras.Sequential(
        [
            keras.Input((12, 12, 3)),
            wrap(keras.layers.Conv2D(4, 3, activation="relu")),
            wrap(keras.layers.BatchNormalization()),
            wrap(keras.layers.Conv2D(4, 3)),
            wrap(keras.layers.GlobalAveragePooling2D()),
        ]
    )
    base.trainable = False
    model = keras.Sequential([keras.Input((12, 12, 3)), base, wrap(keras.layers.Dense(3))])
    return model, ("image", 3)


def partially_frozen(keras, wrap):
    """A functional model whose first two layers are frozen."""
    inputs = keras.Input((6,))
    x = wrap(_frozen(keras.layers.Dense(8, activation="relu")))(inputs)
    x = wrap(_frozen(keras.layers.Dense(8, activation="relu")))(x)
    x = wrap(keras.layers.Dense(8, activation="relu"))(x)
    return keras.Model(inputs, wrap(keras.layers.Dense(1))(x)), ("vector", 1)


def frozen_branch(keras, wrap):
    """Two branches; one of them is not trainable."""
    inputs = keras.Input((6,))
    a = wrap(_frozen(keras.layers.Dense(8, activation="relu")))(inputs)
    b = wrap(keras.layers.Dense(8, activation="relu"))(inputs)
    x = wrap(keras.layers.Concatenate())([a, b])
    return keras.Model(inputs, wrap(keras.layers.Dense(1))(x)), ("vector", 1)


def stop_gradient(keras, wrap):
    """tf.stop_gradient between two trainable layers."""
    return (
        keras.Sequential(
            [
                keras.Input((6,)),
                wrap(keras.layers.Dense(8, activation="relu")),
                wrap(_StopGradient.make(keras)),
                wrap(keras.layers.Dense(1)),
            ]
        ),
        ("vector", 1),
    )


def embedding(keras, wrap):
    """Integer inputs into an Embedding."""
    return (
        keras.Sequential(
            [
                keras.Input((5,), dtype="int32"),
                wrap(keras.layers.Embedding(20, 4)),
                wrap(keras.layers.GlobalAveragePooling1D()),
                wrap(keras.layers.Dense(1)),
            ]
        ),
        ("tokens", 1),
    )


def batchnorm_inference(keras, wrap):
    """A frozen BatchNormalization (inference mode) between trainable layers."""
    return (
        keras.Sequential(
            [
                keras.Input((6,)),
                wrap(keras.layers.Dense(8)),
                wrap(_frozen(keras.layers.BatchNormalization())),
                wrap(keras.layers.Dense(1)),
            ]
        ),
        ("vector", 1),
    )


def trainable(keras, wrap):
    """Every layer trainable."""
    return (
        keras.Sequential(
            [
                keras.Input((6,)),
                wrap(keras.layers.Dense(8, activation="relu")),
                wrap(keras.layers.Dense(8, activation="relu")),
                wrap(keras.layers.Dense(1)),
            ]
        ),
        ("vector", 1),
    )


def lstm(keras, wrap):
    """Keras 3's RNN calls its cell once more only to learn the output shapes (work
    TensorFlow prunes; annotation must not keep it alive)."""
    return keras.Sequential([keras.Input((4, 6)), wrap(keras.layers.LSTM(8)), wrap(keras.layers.Dense(1))]), (
        "sequence",
        1,
    )


def gru(keras, wrap):
    return keras.Sequential([keras.Input((4, 6)), wrap(keras.layers.GRU(8)), wrap(keras.layers.Dense(1))]), (
        "sequence",
        1,
    )


def attention(keras, wrap):
    """A small self-attention block (functional)."""
    inputs = keras.Input((4, 6))
    x = wrap(keras.layers.MultiHeadAttention(num_heads=2, key_dim=4))(inputs, inputs)
    x = wrap(keras.layers.LayerNormalization())(x)
    x = wrap(keras.layers.GlobalAveragePooling1D())(x)
    return keras.Model(inputs, wrap(keras.layers.Dense(1))(x)), ("sequence", 1)


MODELS = {
    f.__name__: f
    for f in (
        frozen_base,
        partially_frozen,
        frozen_branch,
        stop_gradient,
        embedding,
        batchnorm_inference,
        trainable,
        attention,
    )
}

#: Models judged on inference in a tf.function (tests/test_dead_ranges.py). The RNNs'
#: training step computes the plain ops but differs in loop bookkeeping (the loops carry the
#: forward range ids, the backward ranges' payload): tests/test_rnn_training.py judges it.
INFERENCE_MODELS = {f.__name__: f for f in (lstm, gru, attention)}


def data(kind, outputs: int):
    rng = np.random.default_rng(0)
    n = BATCH * STEPS
    if kind == "image":
        x = rng.normal(size=(n, 12, 12, 3)).astype("float32")
    elif kind == "tokens":
        x = rng.integers(0, 20, size=(n, 5)).astype("int32")
    elif kind == "sequence":
        x = rng.normal(size=(n, 4, 6)).astype("float32")
    else:
        x = rng.normal(size=(n, 6)).astype("float32")
    return x, rng.normal(size=(n, outputs)).astype("float32")


def fit_ops(model, kind_outputs) -> collections.Counter:
    """Executed ops of ``model``'s Keras training step (the first ``fit`` traces it)."""
    x, y = data(*kind_outputs)
    model.compile(optimizer="sgd", loss="mse")
    return executed_ops(lambda: model.fit(x, y, batch_size=BATCH, epochs=1, verbose=0))


def inference_ops(model, kind_outputs) -> collections.Counter:
    """Executed ops of ``model`` called in a ``tf.function`` (its first call traces it)."""
    x, _ = data(*kind_outputs)
    call = tf.function(model.__call__)
    return executed_ops(lambda: call(tf.constant(x[:BATCH])))


def tape_ops(model, kind_outputs) -> collections.Counter:
    """Executed ops of a custom ``tf.GradientTape`` step over ``model``."""
    x, y = data(*kind_outputs)
    optimizer = tf.keras.optimizers.SGD(0.01)

    @tf.function
    def step(x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(x, training=True) - y))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    return executed_ops(lambda: step(tf.constant(x[:BATCH]), tf.constant(y[:BATCH])))


def report(results: dict) -> str:
    """One JSON line for subprocess scripts: {name: diff}."""
    return json.dumps({name: {k: list(v) for k, v in d.items()} for name, d in results.items()})
