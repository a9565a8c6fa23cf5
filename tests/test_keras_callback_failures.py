"""NVTXCallback when fit() fails mid-epoch (issue 37, row 5): every range it opened is closed
where the exception leaves fit(), not at a later fit or at exit."""

import subprocess
import sys
import time

import numpy as np
import pytest

from nvtx_plugins_tf.keras import keras
from nvtx_plugins_tf.keras.callbacks import NVTXCallback
from nvtx_plugins_tf.testing import capture


def _model():
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    return model


class _Boom(keras.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
        if batch == 2:
            raise RuntimeError("boom")


def _generator():
    for i in range(6):
        if i == 3:
            raise ValueError("bad record")
        yield np.ones((4, 4), "float32"), np.ones((4, 1), "float32")


@pytest.mark.parametrize("failure", ["callback", "generator"])
def test_ranges_close_where_fit_raises(failure):
    model = _model()
    callback = NVTXCallback()
    x, y = np.ones((32, 4), "float32"), np.ones((32, 1), "float32")
    with capture() as rec:
        with pytest.raises(Exception, match="boom|bad record"):
            if failure == "callback":
                model.fit(x, y, batch_size=4, epochs=2, verbose=0, callbacks=[callback, _Boom()])
            else:
                model.fit(_generator(), epochs=2, verbose=0, callbacks=[callback])
        assert callback.open_ranges == []
        time.sleep(0.3)  # a later fit with the same callback must not be what closes them
        model.fit(x, y, batch_size=4, epochs=1, verbose=0, callbacks=[callback])
    assert not rec.open_ranges, rec.open_ranges
    first_train, second_train = sorted(rec.find(message="Train", domain="Keras"), key=lambda r: r.start_ns)
    first_epoch = min(rec.find(message="epoch 0", domain="Keras"), key=lambda r: r.start_ns)
    # closed when fit raised, before the pause; not by the second fit
    assert second_train.start_ns - first_train.end_ns >= 250_000_000, second_train.start_ns - first_train.end_ns
    assert first_epoch.end_ns <= first_train.end_ns


_INLINE = """
import numpy as np
from nvtx_plugins_tf.keras import keras
from nvtx_plugins_tf.keras.callbacks import NVTXCallback
from nvtx_plugins_tf.testing import capture

def data():
    for i in range(10):
        if i == 3:
            raise RuntimeError("bad batch")
        yield np.ones((8, 4), "float32"), np.ones((8, 1), "float32")

m = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
m.compile(optimizer="sgd", loss="mse")
with capture() as rec:
    try:
        m.fit(data(), epochs=1, steps_per_epoch=10, verbose=0, callbacks=[NVTXCallback()])
    except Exception:  # the generator's error, as tf.data raises it
        pass
    else:
        raise SystemExit("fit did not raise")
print("RESULT", sorted(r.message for r in rec.open_ranges), rec.count(message="Train", domain="Keras"))
"""


@pytest.mark.parametrize("legacy", [False, True], ids=["keras3", "tf_keras"])
def test_inline_callback_first_fit_is_guarded(child_env, tmp_path, legacy):
    """``fit(..., callbacks=[NVTXCallback()])`` in a fresh process (issue 43, row 4): Python
    looks ``m.fit`` up before it makes the callback, so the guard must be there already."""
    env = child_env(tmp_path, TF_CPP_MIN_LOG_LEVEL="3", **({"TF_USE_LEGACY_KERAS": "1"} if legacy else {}))
    proc = subprocess.run([sys.executable, "-c", _INLINE], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    assert line == ["RESULT [] 1"], proc.stdout[-2000:] + proc.stderr[-2000:]
