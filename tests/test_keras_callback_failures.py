"""NVTXCallback when fit() fails mid-epoch (issue 37, row 5): every range it opened is closed
where the exception leaves fit(), not at a later fit or at exit."""

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
