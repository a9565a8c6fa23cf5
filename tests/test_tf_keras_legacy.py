"""The Keras pieces on tf_keras (Keras 2): TF_USE_LEGACY_KERAS=1, in its own process."""

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

SCRIPT = textwrap.dedent(
    """
    import numpy as np
    import tensorflow as tf
    import tf_keras
    import nvtx_plugins_tf as nvtx_tf
    from nvtx_plugins_tf.testing import capture

    assert tf.keras.__name__.startswith("tf_keras"), tf.keras.__name__
    K = nvtx_tf.keras
    assert K.LEGACY and K.keras is tf_keras
    from nvtx_plugins_tf.keras.layers import NVTXStart, NVTXEnd
    assert issubclass(NVTXStart, tf_keras.layers.Layer)

    inputs = tf.keras.Input((8,))
    x, marker_id, domain_id = NVTXStart(message="Dense 1", domain_name="Forward", trainable=True)(inputs)
    x = tf.keras.layers.Dense(8, activation="relu")(x)
    x = NVTXEnd(grad_message="Dense 1 grad", grad_domain_name="Backward")([x, marker_id, domain_id])
    x = K.NVTXRange(tf.keras.layers.Dense(1), message="head")(x)
    model = tf.keras.Model(inputs, x)
    model.compile(optimizer="sgd", loss="mse")
    assert NVTXStart(message="a").supports_jit is False
    rng = np.random.default_rng(0)
    X = rng.normal(size=(32, 8)).astype("float32"); Y = rng.normal(size=(32, 1)).astype("float32")
    with capture() as rec:
        model.fit(X, Y, batch_size=8, epochs=2, verbose=0, callbacks=[K.callbacks.NVTXCallback()])
        model.predict(X, batch_size=8, verbose=0)
    assert rec.count(message="Dense 1", domain="Forward") == 12, rec.count(message="Dense 1")
    assert rec.count(message="Dense 1 grad", domain="Backward") == 8
    assert rec.count(message="head", domain="Forward") == 12
    assert rec.count(message="head", domain="Backward") == 8
    assert rec.count(message="Train", domain="Keras") == 1
    assert rec.count(message="epoch 1", domain="Keras") == 1
    assert len(rec.find(domain="Keras", category="phase: Train")) == 8
    assert not rec.open_ranges, rec.open_ranges

    # config / h5-free SavedModel-free round trip through the Keras 2 serializer
    clone = tf.keras.models.model_from_json(model.to_json())
    assert any(isinstance(l, NVTXStart) for l in clone.layers)

    m2 = K.annotate(tf.keras.Sequential([tf.keras.Input((8,)), tf.keras.layers.Dense(4, name="a"),
                                         tf.keras.layers.Dense(1, name="b")]))
    m2.compile(optimizer="sgd", loss="mse")
    with capture() as rec:
        m2.fit(X, Y, batch_size=8, verbose=0)
    for name in ("a", "b"):
        assert rec.count(message=name, domain="Forward") == 4
        assert rec.count(message=name, domain="Backward") == 4
    assert not rec.open_ranges

    model.compile(optimizer="sgd", loss="mse", run_eagerly=True)
    with capture() as rec:
        model.fit(X, Y, batch_size=8, epochs=1, verbose=0)
    assert rec.count(message="Dense 1 grad", domain="Backward") == 4
    assert not rec.open_ranges
    print("LEGACY OK")
    """
)


def test_tf_keras_layers_callback_annotate(tmp_path, child_env):
    pytest.importorskip("tf_keras")
    env = child_env(tmp_path, TF_USE_LEGACY_KERAS="1")
    proc = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "LEGACY OK" in proc.stdout
