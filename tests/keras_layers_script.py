"""An unmodified Keras script (no nvtx import) for `record --keras-layers` (test_cli_keras_layers.py)."""

import numpy as np
import tensorflow as tf

model = tf.keras.Sequential(
    [
        tf.keras.Input((8,)),
        tf.keras.layers.Dense(4, activation="relu", name="hidden"),
        tf.keras.layers.Dense(1, name="out"),
    ]
)
model.compile(optimizer="sgd", loss="mse")
x = np.ones((12, 8), "float32")
model.fit(x, np.ones((12, 1), "float32"), batch_size=4, epochs=1, verbose=0)
