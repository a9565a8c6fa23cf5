"""One worker of a 2-worker MultiWorkerMirroredStrategy job (TF_CONFIG set by
mwms_launcher.py; tf_keras) whose worker 1 is slow in its input pipeline: every element it
reads sleeps 40 ms inside an NVTX range "read" (domain "Data"), worker 0's 2 ms. tf_keras fit
with NVTXCallback ("batch N" ranges, domain Keras). Under the all-reduce both workers' steps
last as long as the slower one's: `nvtx-tf analyze` must name worker 1 and its Data:read range
(tests/test_analyze.py). Usage: mwms_straggler.py EPOCHS STEPS."""

import json
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
if os.environ.get("TF_USE_LEGACY_KERAS") != "1":
    sys.exit("mwms_straggler.py needs TF_USE_LEGACY_KERAS=1")

import numpy as np  # noqa: E402
import nvtx  # noqa: E402
import tensorflow as tf  # noqa: E402

tf.config.threading.set_inter_op_parallelism_threads(2)
tf.config.threading.set_intra_op_parallelism_threads(1)

import tf_keras  # noqa: E402

import nvtx_plugins_tf as nvtx_tf  # noqa: E402

EPOCHS = int(sys.argv[1]) if len(sys.argv) > 1 else 1
STEPS = int(sys.argv[2]) if len(sys.argv) > 2 else 8
GLOBAL_BATCH = 8
index = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
DELAY = 0.04 if index == 1 else 0.002

strategy = tf.distribute.MultiWorkerMirroredStrategy(
    communication_options=tf.distribute.experimental.CommunicationOptions(
        implementation=tf.distribute.experimental.CommunicationImplementation.RING, timeout_seconds=120.0
    )
)


def read(x):
    with nvtx.annotate("read", domain="Data"):
        time.sleep(DELAY)
    return x


rng = np.random.default_rng(0)
X = rng.normal(size=(GLOBAL_BATCH * STEPS * EPOCHS, 4)).astype("float32")
Y = rng.normal(size=(GLOBAL_BATCH * STEPS * EPOCHS, 1)).astype("float32")
options = tf.data.Options()
options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
data = (
    tf.data.Dataset.from_tensor_slices((X, Y))
    .batch(GLOBAL_BATCH // 2)
    .map(lambda x, y: (tf.py_function(read, [x], tf.float32), y))
    .map(lambda x, y: (tf.ensure_shape(x, [GLOBAL_BATCH // 2, 4]), y))
    .repeat()
    .with_options(options)
)
with strategy.scope():
    model = tf_keras.Sequential(
        [tf_keras.Input((4,)), tf_keras.layers.Dense(4, activation="relu"), tf_keras.layers.Dense(1)]
    )
    model.compile(optimizer="sgd", loss="mse")
model.fit(data, epochs=EPOCHS, steps_per_epoch=STEPS, verbose=0, callbacks=[nvtx_tf.keras.callbacks.NVTXCallback()])
print(f"[worker {index}] fit done", flush=True)
