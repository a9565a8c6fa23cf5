"""A tiny Keras fit with NVTXCallback(profile_batches=...) for tests/test_capture_range.py:
2 epochs of 4 steps; argv[1] = "FIRST,LAST"."""

import sys

import numpy as np

from nvtx_plugins_tf.keras._compat import keras
from nvtx_plugins_tf.keras.callbacks import NVTXCallback

first, last = (int(v) for v in sys.argv[1].split(","))
model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
model.compile("sgd", "mse")
x, y = np.ones((32, 4), "float32"), np.ones((32, 2), "float32")
model.fit(x, y, batch_size=8, epochs=2, verbose=0, callbacks=[NVTXCallback(profile_batches=(first, last))])
