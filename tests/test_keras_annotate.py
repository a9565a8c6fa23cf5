"""annotate(): one forward and one backward range per layer per step, nested models nest."""

import numpy as np
import pytest

from nvtx_plugins_tf.keras import annotate, is_annotated, keras
from nvtx_plugins_tf.testing import capture

N, BATCH = 32, 8
STEPS = N // BATCH


def _mlp(name="mlp"):
    return keras.Sequential(
        [keras.Input((8,))]
        + [keras.layers.Dense(8, activation="relu", name=f"{name}_d{i}") for i in range(4)]
        + [keras.layers.Dense(1, name=f"{name}_out")],
        name=name,
    )


def _data(shape=(8,), outputs=1):
    rng = np.random.default_rng(0)
    return rng.normal(size=(N, *shape)).astype("float32"), rng.normal(size=(N, outputs)).astype("float32")


@pytest.mark.parametrize("run_eagerly", [False, True])
def test_forward_and_backward_range_per_layer_per_step(run_eagerly):
    model = annotate(_mlp())
    model.compile(optimizer="sgd", loss="mse", run_eagerly=run_eagerly)
    x, y = _data()
    with capture() as rec:
        model.fit(x, y, batch_size=BATCH, epochs=1, verbose=0)
    for layer in model.layers:
        assert rec.count(message=layer.name, domain="Forward") == STEPS, layer.name
        assert rec.count(message=layer.name, domain="Backward") == STEPS, layer.name
    assert not rec.open_ranges
    with capture() as rec:
        model.evaluate(x, y, batch_size=BATCH, verbose=0)
        model.predict(x, batch_size=BATCH, verbose=0)
    assert rec.count(message="mlp_d0", domain="Forward") == 2 * STEPS
    assert rec.count(domain="Backward") == 0
    assert not rec.open_ranges


def test_first_layer_backward_range_is_balanced():
    model = annotate(_mlp())
    model.compile(optimizer="sgd", loss="mse")
    x, y = _data()
    with capture() as rec:
        model.fit(x[:BATCH], y[:BATCH], batch_size=BATCH, verbose=0)
    (fwd,) = rec.find(message="mlp_d0", domain="Forward")
    (bwd,) = rec.find(message="mlp_d0", domain="Backward")
    (last_bwd,) = rec.find(message="mlp_out", domain="Backward")
    assert fwd.end_ns <= last_bwd.start_ns <= last_bwd.end_ns <= bwd.start_ns
    assert not rec.open_ranges


def test_nested_model_ranges_nest_and_domains_are_configurable():
    inner = _mlp("inner")
    inputs = keras.Input((8,))
    x = keras.layers.Dense(8, name="pre")(inputs)
    outputs = inner(x)
    model = keras.Model(inputs, outputs, name="outer")
    annotate(model, domain_name="F", grad_domain_name="B")
    model.compile(optimizer="sgd", loss="mse")
    x, y = _data()
    with capture() as rec:
        model.fit(x[:BATCH], y[:BATCH], batch_size=BATCH, verbose=0)
    (outer,) = rec.find(message="inner", domain="F")
    for name in ("inner_d0", "inner_out"):
        (r,) = rec.find(message=name, domain="F")
        assert outer.start_ns <= r.start_ns <= r.end_ns <= outer.end_ns
        assert rec.count(message=name, domain="B") == 1
    assert rec.count(message="pre", domain="B") == 1
    assert rec.count(message="inner", domain="B") == 1
    assert not rec.open_ranges


def test_filter_and_idempotence():
    model = _mlp()
    annotate(model, filter=lambda layer: layer.name.endswith(("d0", "out")))
    annotate(model)  # annotates the rest, never twice
    assert all(is_annotated(layer) for layer in model.layers)
    model.compile(optimizer="sgd", loss="mse")
    x, y = _data()
    with capture() as rec:
        model.predict(x[:BATCH], batch_size=BATCH, verbose=0)
    for layer in model.layers:
        assert rec.count(message=layer.name, domain="Forward") == 1
    with pytest.raises(TypeError):
        annotate(model, filter="Dense")


def test_keras_applications_model():
    model = keras.applications.MobileNetV2(input_shape=(32, 32, 3), alpha=0.35, weights=None, classes=4)
    annotate(model)
    model.compile(optimizer="sgd", loss="sparse_categorical_crossentropy")
    rng = np.random.default_rng(0)
    x = rng.normal(size=(4, 32, 32, 3)).astype("float32")
    y = rng.integers(0, 4, size=(4,))
    with capture() as rec:
        model.fit(x, y, batch_size=4, epochs=1, verbose=0)
    layers = [layer for layer in model.layers if is_annotated(layer)]
    assert len(layers) > 100
    missing_fwd = [layer.name for layer in layers if rec.count(message=layer.name, domain="Forward") != 1]
    missing_bwd = [layer.name for layer in layers if rec.count(message=layer.name, domain="Backward") != 1]
    assert not missing_fwd
    assert not missing_bwd
    assert not rec.open_ranges
    # annotated model still saves and loads
    assert model.get_config()["name"] == model.name
