"""TensorFlow workload run once under the real nsys and once under our recorder.

* a tf.function training loop annotated with nvtx_plugins_tf.ops.start/end: forward
  ranges 'Dense k' (domain 'Forward', color, category, payload on the first) and their
  backward ranges (domain 'Gradient'), plus a mark;
* a tiny Keras model annotated with nvtx_plugins_tf.keras.annotate and fitted with
  NVTXCallback (its Train/epoch/batch ranges go through our libnvtx_host.so).

Kept short: STEPS steps of the loop, 1 epoch x 2 batches of fit.
"""

import numpy as np
import tensorflow as tf

import nvtx_plugins_tf as nvtx_tf
from nvtx_plugins_tf.keras import keras
from nvtx_plugins_tf.keras.callbacks import NVTXCallback

STEPS = 3
tf.config.threading.set_inter_op_parallelism_threads(1)
tf.config.threading.set_intra_op_parallelism_threads(1)


class MLP(tf.Module):
    def __init__(self):
        super().__init__()
        rng = np.random.default_rng(1)
        self.w = [tf.Variable(rng.normal(size=s).astype("float32")) for s in ([4, 8], [8, 8], [8, 1])]

    def __call__(self, x):
        for i, w in enumerate(self.w):
            extra = dict(color=0xFF00AA00, category=5, payload=7) if i == 0 else {}
            x, ctx = nvtx_tf.ops.start(x, f"Dense {i + 1}", "Forward", grad_domain_name="Gradient", **extra)
            x = tf.nn.relu(tf.matmul(x, w))
            x = nvtx_tf.ops.end(x, ctx)
        return x


def training_loop():
    model = MLP()
    opt = tf.keras.optimizers.SGD(0.01)
    x = tf.constant(np.ones([16, 4], "float32"))

    @tf.function
    def step(x):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(model(x))
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        return nvtx_tf.ops.mark("step done", loss, domain_name="Forward")

    for _ in range(STEPS):
        step(x)


def keras_fit():
    inputs = keras.Input((4,))
    h = keras.layers.Dense(8, activation="relu", name="hidden")(inputs)
    out = keras.layers.Dense(1, name="out")(h)
    model = nvtx_tf.keras.annotate(keras.Model(inputs, out))
    model.compile(optimizer=keras.optimizers.SGD(0.01), loss="mse")
    x = np.ones([32, 4], "float32")
    y = np.zeros([32, 1], "float32")
    model.fit(x, y, batch_size=16, epochs=1, verbose=0, callbacks=[NVTXCallback()])


if __name__ == "__main__":
    training_loop()
    keras_fit()
    print("tf_workload done")
