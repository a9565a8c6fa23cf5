"""NVTXStart / NVTXEnd: ranges per batch in fit/evaluate/predict, serialization, XLA opt-out."""

import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf

import nvtx_plugins_tf as nvtx_tf
from nvtx_plugins_tf.keras import NVTXRange, keras
from nvtx_plugins_tf.keras.layers import NVTXEnd, NVTXStart
from nvtx_plugins_tf.testing import capture

N, BATCH = 64, 16
STEPS = N // BATCH


def _data():
    rng = np.random.default_rng(0)
    return rng.normal(size=(N, 8)).astype("float32"), rng.integers(0, 2, size=(N, 1)).astype("float32")


def _functional():
    inputs = keras.Input((8,))
    x, marker_id, domain_id = NVTXStart(message="Dense 1", domain_name="Forward", trainable=True)(inputs)
    x = keras.layers.Dense(16, activation="relu")(x)
    x = NVTXEnd(grad_message="Dense 1 grad", grad_domain_name="Backward")([x, marker_id, domain_id])
    x, marker_id, domain_id = NVTXStart(message="Dense 2", domain_name="Forward")(x)
    x = keras.layers.Dense(1, activation="sigmoid")(x)
    x = NVTXEnd(grad_message="Dense 2 grad", grad_domain_name="Backward")([x, marker_id, domain_id])
    model = keras.Model(inputs, x)
    model.compile(optimizer="sgd", loss="binary_crossentropy")
    return model


class Subclassed(keras.Model):
    def __init__(self):
        super().__init__()
        self.start1 = NVTXStart(message="Dense 1", domain_name="Forward")
        self.dense1 = keras.layers.Dense(16, activation="relu")
        self.end1 = NVTXEnd(grad_message="Dense 1 grad", grad_domain_name="Backward")
        self.start2 = NVTXStart(message="Dense 2", domain_name="Forward")
        self.dense2 = keras.layers.Dense(1, activation="sigmoid")
        self.end2 = NVTXEnd(grad_message="Dense 2 grad", grad_domain_name="Backward")

    def call(self, inputs):
        x, m, d = self.start1(inputs)
        x = self.end1([self.dense1(x), m, d])
        x, m, d = self.start2(x)
        return self.end2([self.dense2(x), m, d])


def _check_train(rec, steps):
    for i in (1, 2):
        assert rec.count(message=f"Dense {i}", domain="Forward") == steps
        assert rec.count(message=f"Dense {i} grad", domain="Backward") == steps
    assert not rec.open_ranges


@pytest.mark.parametrize("run_eagerly", [False, True])
def test_functional_fit_evaluate_predict(run_eagerly):
    x, y = _data()
    model = _functional()
    model.compile(optimizer="sgd", loss="binary_crossentropy", run_eagerly=run_eagerly)
    with capture() as rec:
        model.fit(x, y, batch_size=BATCH, epochs=1, verbose=0)
    _check_train(rec, STEPS)
    with capture() as rec:
        model.evaluate(x, y, batch_size=BATCH, verbose=0)
        model.predict(x, batch_size=BATCH, verbose=0)
    assert rec.count(message="Dense 1", domain="Forward") == 2 * STEPS
    assert rec.count(message="Dense 1 grad") == 0
    assert not rec.open_ranges


def test_backward_range_follows_forward_range():
    x, y = _data()
    model = _functional()
    with capture() as rec:
        model.fit(x[:BATCH], y[:BATCH], batch_size=BATCH, epochs=1, verbose=0)
    (f1,) = rec.find(message="Dense 1", domain="Forward")
    (f2,) = rec.find(message="Dense 2", domain="Forward")
    (b1,) = rec.find(message="Dense 1 grad", domain="Backward")
    (b2,) = rec.find(message="Dense 2 grad", domain="Backward")
    assert f1.end_ns <= f2.start_ns
    assert f2.end_ns <= b2.start_ns <= b2.end_ns <= b1.start_ns


def test_subclassed_model():
    x, y = _data()
    model = Subclassed()
    model.compile(optimizer="sgd", loss="binary_crossentropy")
    with capture() as rec:
        model.fit(x, y, batch_size=BATCH, epochs=1, verbose=0)
    _check_train(rec, STEPS)


def test_gradient_tape_eager():
    x, y = _data()
    model = _functional()
    with capture() as rec:
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(model(x[:BATCH]) - y[:BATCH])
        grads = tape.gradient(loss, model.trainable_variables)
    assert all(g is not None for g in grads)
    _check_train(rec, 1)


def test_default_grad_names_are_forward_names():
    inputs = keras.Input((4,))
    x, m, d = NVTXStart(message="block", domain_name="Fwd")(inputs)
    x = NVTXEnd()([keras.layers.Dense(2)(x), m, d])
    model = keras.Model(inputs, x)
    model.compile(optimizer="sgd", loss="mse")
    with capture() as rec:
        model.fit(np.ones((8, 4), "float32"), np.ones((8, 2), "float32"), batch_size=8, verbose=0)
    assert rec.count(message="block", domain="Fwd") == 2  # forward + backward
    assert not rec.open_ranges


def test_default_domain():
    inputs = keras.Input((4,))
    x, m, d = NVTXStart(message="plain")(inputs)
    model = keras.Model(inputs, NVTXEnd()([x, m, d]))
    with capture() as rec:
        model.predict(np.ones((4, 4), "float32"), verbose=0)
    (r,) = rec.find(message="plain")
    assert not rec.open_ranges
    assert r.domain == ""  # NVTX's default domain


def test_supports_jit_false_and_jit_compile_true_falls_back():
    x, y = _data()
    model = _functional()
    assert NVTXStart(message="a").supports_jit is False
    assert NVTXEnd().supports_jit is False
    assert all(not layer.supports_jit for layer in model.layers if isinstance(layer, (NVTXStart, NVTXEnd)))
    with pytest.warns(UserWarning, match="jit_compile"):
        model.compile(optimizer="sgd", loss="binary_crossentropy", jit_compile=True)
    assert model.jit_compile is False
    with capture() as rec:
        history = model.fit(x, y, batch_size=BATCH, epochs=1, verbose=0)
    assert np.isfinite(history.history["loss"][0])
    _check_train(rec, STEPS)


def test_config_round_trip():
    start = NVTXStart(message="m", domain_name="D", color="red", category=3, name="s")
    end = NVTXEnd(grad_message="g", grad_domain_name="G", name="e")
    start2 = NVTXStart.from_config(start.get_config())
    end2 = NVTXEnd.from_config(end.get_config())
    assert (start2.message, start2.domain_name, start2.color, start2.category) == ("m", "D", "red", 3)
    assert (end2.grad_message, end2.grad_domain_name) == ("g", "G")
    assert keras.layers.deserialize(keras.layers.serialize(start)).message == "m"


def test_keras_file_round_trip(tmp_path):
    x, y = _data()
    model = _functional()
    model.fit(x, y, batch_size=BATCH, epochs=1, verbose=0)
    path = tmp_path / "model.keras"
    model.save(path)
    loaded = keras.models.load_model(path)
    assert any(isinstance(layer, NVTXStart) for layer in loaded.layers)
    np.testing.assert_allclose(loaded.predict(x, verbose=0), model.predict(x, verbose=0), rtol=1e-5)
    with capture() as rec:
        loaded.fit(x, y, batch_size=BATCH, epochs=1, verbose=0)
    _check_train(rec, STEPS)


def test_nvtx_range_in_sequential():
    x, y = _data()
    model = keras.Sequential([keras.Input((8,)), NVTXRange(keras.layers.Dense(4), message="d1"), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    with capture() as rec:
        model.fit(x, y, batch_size=BATCH, epochs=1, verbose=0)
    assert rec.count(message="d1", domain="Forward") == STEPS
    assert rec.count(message="d1", domain="Backward") == STEPS
    assert not rec.open_ranges


def test_end_requires_three_inputs():
    with pytest.raises(ValueError, match="marker_id"):
        NVTXEnd()(tf.ones([2, 2]))


def test_savedmodel_reloaded_in_fresh_process(tmp_path, recorder_env):
    """model.export() and tf.saved_model.save: a fresh process that only imports tensorflow and
    nvtx_plugins_tf loads the SavedModel and its NVTX ops still emit their ranges."""
    from nvtx_plugins_tf import recorder

    model = _functional()
    model.predict(_data()[0][:2], verbose=0)
    exported = tmp_path / "exported"
    saved = tmp_path / "saved"
    model.export(str(exported), verbose=False)
    tf.saved_model.save(model, str(saved))
    record_dir = tmp_path / "rec"
    record_dir.mkdir()
    script = textwrap.dedent(
        f"""
        import numpy as np
        import tensorflow as tf
        import nvtx_plugins_tf  # registers NvtxStart/NvtxEnd: nothing else is needed
        x = np.ones((2, 8), "float32")
        exported = tf.saved_model.load({str(exported)!r})
        exported.serve(x)
        m = tf.saved_model.load({str(saved)!r})
        m.signatures["serving_default"](tf.constant(x))
        """
    )
    env = recorder_env(record_dir)
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rec = recorder.load(record_dir)
    assert rec.count(message="Dense 1", domain="Forward") == 2
    assert rec.count(message="Dense 2", domain="Forward") == 2
    assert not rec.open_ranges


def test_nvtx_start_in_a_sequential_says_to_use_nvtx_range():
    """Issue 43 row 6: Keras said "expects 1 input(s), but it received 3" (of the next layer)."""
    with pytest.raises(TypeError, match=r"cannot be a layer of a Sequential; wrap the layer instead.*NVTXRange"):
        keras.Sequential([keras.Input((4,)), NVTXStart(message="a"), keras.layers.Dense(2)])


def test_nvtx_start_called_by_a_model_inside_a_sequential_is_fine():
    class Block(keras.Model):
        def __init__(self):
            super().__init__()
            self.dense, self.start, self.end = keras.layers.Dense(2), NVTXStart(message="block"), NVTXEnd()

        def call(self, x):
            x, marker_id, domain_id = self.start(x)
            return self.end([self.dense(x), marker_id, domain_id])

    model = keras.Sequential([keras.Input((4,)), Block(), keras.layers.Dense(1)])
    assert model.predict(np.ones((2, 4), "float32"), verbose=0).shape == (2, 1)


def test_a_symbolic_tensor_of_the_other_keras_gives_one_line():
    """Issue 43 row 6: a tf_keras tensor into Keras 3's NVTXStart (or the other way round)."""
    other = pytest.importorskip("keras" if nvtx_tf.keras.LEGACY else "tf_keras")
    with pytest.raises(TypeError, match=r"^nvtx_plugins_tf: NVTXStart .* mixes Keras 3 .* and tf_keras .*[^\n]$"):
        NVTXStart(message="a")(other.Input((4,)))
