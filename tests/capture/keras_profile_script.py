"""A tiny Keras fit with NVTXCallback(profile_batches=...), for tests/test_capture_range.py
and benchmarks/bench_capture_range.py: ``FIRST,LAST [EPOCHS [STEPS_PER_EPOCH]]`` (default 2
epochs of 4 steps)."""

import sys

import numpy as np

from nvtx_plugins_tf.keras._compat import keras
from nvtx_plugins_tf.keras.callbacks import NVTXCallback

first, last = (int(v) for v in sys.argv[1].split(","))
epochs = int(sys.argv[2]) if len(sys.argv) > 2 else 2
steps = int(sys.argv[3]) if len(sys.argv) > 3 else 4
model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
model.compile("sgd", "mse")
x, y = np.ones((8 * steps, 4), "float32"), np.ones((8 * steps, 2), "float32")
model.fit(x, y, batch_size=8, epochs=epochs, verbose=0, callbacks=[NVTXCallback(profile_batches=(first, last))])
