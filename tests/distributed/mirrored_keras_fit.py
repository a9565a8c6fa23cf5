"""Keras 3 ``model.fit`` under MirroredStrategy over 2 logical CPU devices: a functional
model with NVTXStart/NVTXEnd around a Dense layer and NVTXCallback; run by
tests/test_distributed.py under the recorder. Usage: mirrored_keras_fit.py EPOCHS STEPS."""

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf  # noqa: E402

# Two logical CPU devices, configured before TensorFlow initializes its devices.
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)

import keras  # noqa: E402
import numpy as np  # noqa: E402

import nvtx_plugins_tf as nvtx_tf  # noqa: E402
from nvtx_plugins_tf.keras.layers import NVTXEnd, NVTXStart  # noqa: E402

EPOCHS = int(sys.argv[1]) if len(sys.argv) > 1 else 2
STEPS = int(sys.argv[2]) if len(sys.argv) > 2 else 3
GLOBAL_BATCH = 8

assert nvtx_tf.keras.KERAS3 and not nvtx_tf.keras.LEGACY, keras.__version__
strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
assert strategy.num_replicas_in_sync == 2

with strategy.scope():
    inputs = keras.Input((4,))
    x, marker_id, domain_id = NVTXStart(message="dense", domain_name="Forward")(inputs)
    x = keras.layers.Dense(4, activation="relu")(x)
    x = NVTXEnd(grad_message="dense grad", grad_domain_name="Backward")([x, marker_id, domain_id])
    outputs = keras.layers.Dense(1)(x)
    model = keras.Model(inputs, outputs)
    model.compile(optimizer="sgd", loss="mse", jit_compile=False)

rng = np.random.default_rng(0)
X = rng.normal(size=(GLOBAL_BATCH * STEPS, 4)).astype("float32")
Y = rng.normal(size=(GLOBAL_BATCH * STEPS, 1)).astype("float32")
history = model.fit(
    X,
    Y,
    batch_size=GLOBAL_BATCH,
    epochs=EPOCHS,
    shuffle=False,
    verbose=0,
    callbacks=[nvtx_tf.keras.callbacks.NVTXCallback()],
)
assert len(history.history["loss"]) == EPOCHS
print("done", strategy.num_replicas_in_sync, history.history["loss"])
