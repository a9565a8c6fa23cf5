"""The annotated model trains as the plain one does, bit for bit: helpers of
tests/test_same_program_matrix.py (issue 43, "the structural fix").

Each family builds a small model with ``build(keras, wrap)``, ``wrap(layer)`` returning what
to call in its place: the layer itself (plain, and ``annotate(model)`` afterwards), an
``NVTXRange`` around it, or explicit ``NVTXStart``/``NVTXEnd`` layers around its call. Plain
and annotated copies are built from the same seed and trained with ``fit`` on the same
batches (``STEPS`` steps, no shuffling); :func:`compare` names the first step and the first
tensor that differ (the loss, a weight after that step, a gradient, a prediction), or returns
None when everything is bit-identical. Used in-process (Keras 3) and by a subprocess with
``TF_USE_LEGACY_KERAS=1`` (tf_keras): run ``python same_program_matrix.py`` for one JSON line.
"""

from __future__ import annotations

import contextlib
import json
import sys

import numpy as np
import tensorflow as tf

STEPS = 20
BATCH = 4
SEED = 1234


# ------------------------------------------------------------------------------ styles
def _plain(layer):
    return layer


def _nvtx_range(layer):
    from nvtx_plugins_tf.keras import NVTXRange

    return NVTXRange(layer)


def _start_end(layer):
    """Explicit NVTXStart/NVTXEnd around the layer's call (functional and subclassed models)."""
    from nvtx_plugins_tf.keras.layers import NVTXEnd, NVTXStart

    start = NVTXStart(message=layer.name, domain_name="Forward")
    end = NVTXEnd(grad_domain_name="Backward")

    def call(*args, **kwargs):
        inputs = list(args) if len(args) > 1 else args[0]
        x, marker_id, domain_id = start(inputs)
        y = layer(*x, **kwargs) if len(args) > 1 else layer(x, **kwargs)
        return end([y, marker_id, domain_id])

    return call


#: style -> (wrap, annotate the whole model afterwards)
STYLES = {"annotate": (_plain, True), "nvtx_range": (_nvtx_range, False), "start_end": (_start_end, False)}


# ---------------------------------------------------------------------------- families
def _rng():
    return np.random.RandomState(0)


def _n():
    return BATCH * STEPS


def mlp_softmax(keras, wrap):
    """MLP, softmax head, sparse categorical crossentropy (README quick start 2's shape)."""
    L = keras.layers
    i = keras.Input((6,))
    x = wrap(L.Dense(16, activation="relu"))(i)
    out = wrap(L.Dense(4, activation="softmax"))(x)
    r = _rng()
    data = (r.rand(_n(), 6).astype("float32"), r.randint(0, 4, _n()))
    return keras.Model(i, out), dict(loss=keras.losses.SparseCategoricalCrossentropy()), data


def cnn_batchnorm_dropout(keras, wrap):
    """Conv2D, BatchNormalization, Dropout, softmax head."""
    L = keras.layers
    i = keras.Input((8, 8, 3))
    x = wrap(L.Conv2D(4, 3, activation="relu"))(i)
    x = wrap(L.BatchNormalization())(x)
    x = wrap(L.Dropout(0.25))(x)
    x = wrap(L.GlobalAveragePooling2D())(x)
    out = wrap(L.Dense(3, activation="softmax"))(x)
    r = _rng()
    data = (r.rand(_n(), 8, 8, 3).astype("float32"), r.randint(0, 3, _n()))
    return keras.Model(i, out), dict(loss="sparse_categorical_crossentropy"), data


def lstm(keras, wrap):
    L = keras.layers
    i = keras.Input((5, 3))
    x = wrap(L.LSTM(8))(i)
    out = wrap(L.Dense(1))(x)
    r = _rng()
    data = (r.rand(_n(), 5, 3).astype("float32"), r.rand(_n(), 1).astype("float32"))
    return keras.Model(i, out), dict(loss="mse"), data


def gru_softmax(keras, wrap):
    L = keras.layers
    i = keras.Input((5, 3))
    x = wrap(L.GRU(8))(i)
    out = wrap(L.Dense(3, activation="softmax"))(x)
    r = _rng()
    data = (r.rand(_n(), 5, 3).astype("float32"), r.randint(0, 3, _n()))
    return keras.Model(i, out), dict(loss="sparse_categorical_crossentropy"), data


def bidirectional_masked(keras, wrap):
    """Embedding(mask_zero=True) into a bidirectional LSTM: the mask rides on the tensors."""
    L = keras.layers
    i = keras.Input((6,), dtype="int32")
    x = wrap(L.Embedding(20, 4, mask_zero=True))(i)
    x = wrap(L.Bidirectional(L.LSTM(4)))(x)
    out = wrap(L.Dense(1, activation="sigmoid"))(x)
    r = _rng()
    tokens = r.randint(1, 20, (_n(), 6))
    lengths = r.randint(1, 7, _n())
    tokens[np.arange(6)[None, :] >= lengths[:, None]] = 0
    data = (tokens.astype("int32"), r.randint(0, 2, (_n(), 1)).astype("float32"))
    return keras.Model(i, out), dict(loss="binary_crossentropy"), data


def transformer_block(keras, wrap):
    """MultiHeadAttention, residuals, LayerNormalization, feed-forward; logits head."""
    L = keras.layers
    i = keras.Input((5, 8))
    a = wrap(L.MultiHeadAttention(num_heads=2, key_dim=4))(i, i)
    h = wrap(L.LayerNormalization())(wrap(L.Add())([i, a]))
    f = wrap(L.Dense(8))(wrap(L.Dense(16, activation="relu"))(h))
    h = wrap(L.LayerNormalization())(wrap(L.Add())([h, f]))
    out = wrap(L.Dense(3))(wrap(L.GlobalAveragePooling1D())(h))
    r = _rng()
    data = (r.rand(_n(), 5, 8).astype("float32"), r.randint(0, 3, _n()))
    return keras.Model(i, out), dict(loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True)), data


def multi_io(keras, wrap):
    """Two inputs, two outputs (softmax classes, regression), per-output losses and loss_weights."""
    L = keras.layers
    a, b = keras.Input((6,)), keras.Input((4,))
    x = wrap(L.Concatenate())([wrap(L.Dense(8, activation="relu"))(a), wrap(L.Dense(8, activation="relu"))(b)])
    cls = wrap(L.Dense(3, activation="softmax"))(x)
    reg = wrap(L.Dense(1))(x)
    r = _rng()
    data = (
        (r.rand(_n(), 6).astype("float32"), r.rand(_n(), 4).astype("float32")),
        (r.randint(0, 3, _n()), r.rand(_n(), 1).astype("float32")),
    )
    compile_args = dict(
        loss=[keras.losses.SparseCategoricalCrossentropy(), keras.losses.MeanSquaredError()], loss_weights=[1.0, 0.5]
    )
    return keras.Model([a, b], [cls, reg]), compile_args, data


def _binary(keras, wrap, activation, from_logits):
    L = keras.layers
    i = keras.Input((6,))
    x = wrap(L.Dense(8, activation="relu"))(i)
    out = wrap(L.Dense(1, activation=activation))(x)
    r = _rng()
    data = (r.rand(_n(), 6).astype("float32") * 4, r.randint(0, 2, (_n(), 1)).astype("float32"))
    return keras.Model(i, out), dict(loss=keras.losses.BinaryCrossentropy(from_logits=from_logits)), data


def sigmoid_bce(keras, wrap):
    return _binary(keras, wrap, "sigmoid", False)


def logits_bce(keras, wrap):
    return _binary(keras, wrap, None, True)


def mse_regression(keras, wrap):
    L = keras.layers
    i = keras.Input((6,))
    out = wrap(L.Dense(2))(wrap(L.Dense(8, activation="tanh"))(i))
    r = _rng()
    data = (r.rand(_n(), 6).astype("float32"), r.rand(_n(), 2).astype("float32"))
    return keras.Model(i, out), dict(loss="mse"), data


def label_smoothing(keras, wrap):
    L = keras.layers
    i = keras.Input((6,))
    out = wrap(L.Dense(3, activation="softmax"))(wrap(L.Dense(8, activation="relu"))(i))
    r = _rng()
    y = np.eye(3, dtype="float32")[r.randint(0, 3, _n())]
    data = (r.rand(_n(), 6).astype("float32"), y)
    return keras.Model(i, out), dict(loss=keras.losses.CategoricalCrossentropy(label_smoothing=0.1)), data


def softmax_layer(keras, wrap):
    """A Softmax layer as the head (tf_keras's sets no _keras_logits: the loss reads the op)."""
    L = keras.layers
    i = keras.Input((6,))
    x = wrap(L.Dense(3))(wrap(L.Dense(8, activation="relu"))(i))
    out = wrap(L.Softmax())(x)
    r = _rng()
    data = (r.rand(_n(), 6).astype("float32") * 8, r.randint(0, 3, _n()))
    return keras.Model(i, out), dict(loss="sparse_categorical_crossentropy"), data


def tf_sigmoid_lambda(keras, wrap):
    """tf.nn.sigmoid in a Lambda layer: binary crossentropy takes the logits from the Sigmoid op."""
    L = keras.layers
    i = keras.Input((6,))
    x = wrap(L.Dense(1))(wrap(L.Dense(8, activation="relu"))(i))
    out = wrap(L.Lambda(tf.nn.sigmoid, output_shape=(1,)))(x)
    r = _rng()
    data = (r.rand(_n(), 6).astype("float32") * 8, r.randint(0, 2, (_n(), 1)).astype("float32"))
    return keras.Model(i, out), dict(loss="binary_crossentropy"), data


def subclassed_train_step(keras, wrap):
    """A subclassed model with its own train_step (GradientTape, apply_gradients)."""
    L = keras.layers

    class Classifier(keras.Model):
        def __init__(self):
            super().__init__()
            self.hidden = L.Dense(8, activation="relu")
            self.head = L.Dense(3, activation="softmax")
            self.wrapped = [wrap(self.hidden), wrap(self.head)]
            self.crossentropy = keras.losses.SparseCategoricalCrossentropy()

        def call(self, x, training=None):
            return self.wrapped[1](self.wrapped[0](x))

        def train_step(self, data):
            x, y = data
            with tf.GradientTape() as tape:
                loss = self.crossentropy(y, self(x, training=True))
            grads = tape.gradient(loss, self.trainable_variables)
            self.optimizer.apply_gradients(zip(grads, self.trainable_variables))
            return {"loss": loss}

    r = _rng()
    data = (r.rand(_n(), 6).astype("float32"), r.randint(0, 3, _n()))
    model = Classifier()
    model.build((None, 6))
    return model, dict(loss=None), data


def mixed_bfloat16(keras, wrap):
    """The MLP under the ``mixed_bfloat16`` policy (bfloat16 compute, float32 weights)."""
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    try:
        L = keras.layers
        i = keras.Input((6,))
        x = wrap(L.Dense(16, activation="relu"))(i)
        out = wrap(L.Dense(4, activation="softmax", dtype="float32"))(x)
        model = keras.Model(i, out)
    finally:
        keras.mixed_precision.set_global_policy("float32")
    r = _rng()
    data = (r.rand(_n(), 6).astype("float32"), r.randint(0, 4, _n()))
    return model, dict(loss="sparse_categorical_crossentropy"), data


def dataset_steps_per_execution(keras, wrap):
    """A tf.data pipeline into fit with ``steps_per_execution=4`` (4 steps a call)."""
    L = keras.layers
    i = keras.Input((6,))
    out = wrap(L.Dense(3, activation="softmax"))(wrap(L.Dense(8, activation="relu"))(i))
    r = _rng()
    x, y = r.rand(_n(), 6).astype("float32"), r.randint(0, 3, _n())
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).map(lambda a, b: (a * 2.0, b)).batch(BATCH)
    return keras.Model(i, out), dict(loss="sparse_categorical_crossentropy", steps_per_execution=4), (dataset, x)


FAMILIES = {
    f.__name__: f
    for f in (
        mlp_softmax,
        cnn_batchnorm_dropout,
        lstm,
        gru_softmax,
        bidirectional_masked,
        transformer_block,
        multi_io,
        sigmoid_bce,
        logits_bce,
        mse_regression,
        label_smoothing,
        softmax_layer,
        tf_sigmoid_lambda,
        subclassed_train_step,
        mixed_bfloat16,
        dataset_steps_per_execution,
    )
}


def mobilenet_v2(keras, wrap):
    """A Keras Applications model without weights at a small input (annotate() style only: its
    layers are built by Keras, there is no place for ``wrap``)."""
    model = keras.applications.MobileNetV2(input_shape=(32, 32, 3), alpha=0.35, weights=None, classes=4)
    r = _rng()
    data = (r.rand(_n(), 32, 32, 3).astype("float32"), r.randint(0, 4, _n()))
    return model, dict(loss="sparse_categorical_crossentropy"), data


#: Families that can only be annotated with annotate(model).
ANNOTATE_ONLY = {"mobilenet_v2": mobilenet_v2}


# --------------------------------------------------------------------------- training
def _keras():
    from nvtx_plugins_tf.keras import keras

    return keras


def _flat(value):
    return [np.asarray(v) for v in tf.nest.flatten(value)]


def train(family: str, style: str | None, *, keras=None, strategy=None, **compile_extra) -> dict:
    """Build ``family`` (plain when ``style`` is None) from SEED and fit it STEPS steps;
    ``keras`` (default: the package's), in ``strategy``'s scope, ``compile_extra`` (e.g.
    ``jit_compile``) to ``compile``. A plain run imports nothing of nvtx_plugins_tf.

    Returns per step the logs' values and the weights after it, the gradients of the
    trained model's outputs (eagerly, training=False) and its predictions."""
    keras = keras or _keras()
    wrap, annotate_after = STYLES[style] if style is not None else (_plain, False)
    keras.utils.set_random_seed(SEED)
    with strategy.scope() if strategy is not None else contextlib.nullcontext():
        model, compile_args, (x, y) = {**FAMILIES, **ANNOTATE_ONLY}[family](keras, wrap)
        if annotate_after:
            import nvtx_plugins_tf as nvtx_tf

            nvtx_tf.keras.annotate(model)
        loss = compile_args.pop("loss")
        model.compile(optimizer=keras.optimizers.Adam(1e-2), loss=loss, **compile_args, **compile_extra)
    names = [getattr(w, "path", None) or w.name for w in model.weights]
    steps = []

    class Record(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            logs = {k: float(np.asarray(v)) for k, v in (logs or {}).items()}
            steps.append((logs, [np.array(w) for w in model.get_weights()]))

    if isinstance(x, tf.data.Dataset):  # (dataset, the inputs it is made of: for the gradients and predict)
        dataset, x = x, y * 2.0
        model.fit(dataset, epochs=1, verbose=0, callbacks=[Record()])
    else:
        model.fit(x, y, batch_size=BATCH, epochs=1, shuffle=False, verbose=0, callbacks=[Record()])
    first = tf.nest.map_structure(lambda a: tf.constant(a[:BATCH]), x)
    with tf.GradientTape() as tape:
        outputs = model(first, training=False)
        total = tf.add_n([tf.reduce_sum(tf.square(tf.cast(o, tf.float32))) for o in tf.nest.flatten(outputs)])
    grads = tape.gradient(total, model.trainable_weights)
    grad_names = [getattr(w, "path", None) or w.name for w in model.trainable_weights]
    return {
        "names": names,
        "steps": steps,
        "grads": [(n, None if g is None else np.asarray(tf.convert_to_tensor(g))) for n, g in zip(grad_names, grads)],
        "predict": _flat(model.predict(x[:8] if not isinstance(x, tuple) else tuple(a[:8] for a in x), verbose=0)),
    }


def compare(family: str, plain: dict, annotated: dict) -> str | None:
    """None when bit-identical, else one line naming the family, step and tensor."""
    if len(plain["steps"]) != len(annotated["steps"]):
        return f"{family}: {len(plain['steps'])} steps plain, {len(annotated['steps'])} annotated"
    for step, ((logs_p, w_p), (logs_a, w_a)) in enumerate(zip(plain["steps"], annotated["steps"]), start=1):
        # (as values: per-output keys carry layer names, which differ between the copies)
        if sorted(logs_p.values()) != sorted(logs_a.values()):
            return f"{family}: step {step}: losses {logs_p} plain, {logs_a} annotated"
        if len(w_p) != len(w_a):
            return f"{family}: step {step}: {len(w_p)} weights plain, {len(w_a)} annotated"
        for name, a, b in zip(plain["names"], w_p, w_a):
            if not np.array_equal(a, b):
                return f"{family}: step {step}: weight {name} differs (max |diff| {np.max(np.abs(a - b)):.3g})"
    for (name, a), (_, b) in zip(plain["grads"], annotated["grads"]):
        if (a is None) != (b is None) or (a is not None and not np.array_equal(a, b)):
            return f"{family}: after step {len(plain['steps'])}: gradient of {name} differs"
    for i, (a, b) in enumerate(zip(plain["predict"], annotated["predict"])):
        if not np.array_equal(a, b):
            return f"{family}: after step {len(plain['steps'])}: predict output {i} differs"
    return None


def run_matrix(families, styles) -> dict:
    """{"family/style": None or the first difference}."""
    results = {}
    for family in families:
        plain = train(family, None)
        for style in styles:
            try:
                results[f"{family}/{style}"] = compare(family, plain, train(family, style))
            except Exception as exc:  # noqa: BLE001 - a cell that cannot even run is a failing cell
                results[f"{family}/{style}"] = f"{family}: {type(exc).__name__}: {str(exc)[:300]}"
    return results


def saturated() -> list:
    """Issue 43 row 1: ``[has _keras_logits, loss, |gradient|]`` of a softmax classifier on a
    saturated example (the logits 30, -30, 0; the true class 2), plain and annotated."""
    import nvtx_plugins_tf as nvtx_tf

    keras = _keras()
    x, y = tf.constant([[30.0, -30.0, 0.0, 1.0]]), tf.constant([2])
    rows = []
    for annotated in (False, True):
        keras.utils.set_random_seed(1)
        i = keras.Input((4,))
        model = keras.Model(i, keras.layers.Dense(3, activation="softmax")(i))
        if annotated:
            nvtx_tf.keras.annotate(model)
        model.set_weights([np.eye(4, 3, dtype="float32"), np.zeros(3, "float32")])

        has, loss, grad = _saturated_step(keras, model, x, y)
        rows.append([bool(has), float(loss), float(tf.norm(grad))])
    return rows


def _saturated_step(keras, model, x, y):
    @tf.function
    def step():
        with tf.GradientTape() as tape:
            out = model(x, training=True)
            loss = keras.losses.SparseCategoricalCrossentropy()(y, out)
        return hasattr(out, "_keras_logits"), loss, tape.gradient(loss, model.trainable_variables)[0]

    return step()


if __name__ == "__main__":  # python same_program_matrix.py [--saturated] [family ...]: one JSON line
    args = sys.argv[1:]
    extra = {}
    if "--saturated" in args:
        args.remove("--saturated")
        extra["saturated"] = saturated()
    print("RESULT " + json.dumps({**run_matrix(args or list(FAMILIES), list(STYLES)), **extra}))
