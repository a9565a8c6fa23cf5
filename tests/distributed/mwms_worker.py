"""One worker of a 2-worker MultiWorkerMirroredStrategy cluster on 127.0.0.1 (TF_CONFIG
set by mwms_launcher.py), on tf_keras (TF_USE_LEGACY_KERAS=1): (a) tf_keras ``fit`` of a
functional model with NVTXStart/NVTXEnd and NVTXCallback, (b) a custom loop with
``strategy.run`` annotated with nvtx_tf.ops.start/end.
Usage: mwms_worker.py EPOCHS STEPS (the same on every worker)."""

import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
if os.environ.get("TF_USE_LEGACY_KERAS") != "1":
    sys.exit("mwms_worker.py needs TF_USE_LEGACY_KERAS=1 (Keras 3 fit fails under MultiWorkerMirroredStrategy)")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

# Small thread pools: two workers (plus the test) share a 2-core machine.
tf.config.threading.set_inter_op_parallelism_threads(2)
tf.config.threading.set_intra_op_parallelism_threads(1)

import tf_keras  # noqa: E402

import nvtx_plugins_tf as nvtx_tf  # noqa: E402
from nvtx_plugins_tf.keras.layers import NVTXEnd, NVTXStart  # noqa: E402

EPOCHS = int(sys.argv[1]) if len(sys.argv) > 1 else 2
STEPS = int(sys.argv[2]) if len(sys.argv) > 2 else 3
GLOBAL_BATCH = 8

task = json.loads(os.environ["TF_CONFIG"])["task"]
tag = f"[worker {task['index']} pid {os.getpid()}]"

# tf.keras is tf_keras and our Keras layers/callbacks are built on it.
assert tf.keras.__name__.startswith("tf_keras"), tf.keras.__name__
assert nvtx_tf.keras.LEGACY and nvtx_tf.keras.keras is tf_keras
assert issubclass(NVTXStart, tf_keras.layers.Layer)
assert issubclass(nvtx_tf.keras.callbacks.NVTXCallback, tf_keras.callbacks.Callback)

strategy = tf.distribute.MultiWorkerMirroredStrategy(
    communication_options=tf.distribute.experimental.CommunicationOptions(
        implementation=tf.distribute.experimental.CommunicationImplementation.RING,
        timeout_seconds=120.0,
    )
)
assert strategy.num_replicas_in_sync == 2, strategy.num_replicas_in_sync
print(tag, "cluster up", flush=True)

rng = np.random.default_rng(0)  # same data on every worker
X = rng.normal(size=(GLOBAL_BATCH * STEPS, 4)).astype("float32")
Y = rng.normal(size=(GLOBAL_BATCH * STEPS, 1)).astype("float32")
options = tf.data.Options()
options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA

# (a) tf_keras fit: NVTXStart/NVTXEnd around a Dense layer, NVTXCallback.
with strategy.scope():
    inputs = tf_keras.Input((4,))
    x, marker_id, domain_id = NVTXStart(message="dense", domain_name="Forward")(inputs)
    x = tf_keras.layers.Dense(4, activation="relu")(x)
    x = NVTXEnd(grad_message="dense grad", grad_domain_name="Backward")([x, marker_id, domain_id])
    outputs = tf_keras.layers.Dense(1)(x)
    model = tf_keras.Model(inputs, outputs)
    model.compile(optimizer="sgd", loss="mse")

fit_data = tf.data.Dataset.from_tensor_slices((X, Y)).batch(GLOBAL_BATCH).repeat().with_options(options)
history = model.fit(
    fit_data,
    epochs=EPOCHS,
    steps_per_epoch=STEPS,
    verbose=0,
    callbacks=[nvtx_tf.keras.callbacks.NVTXCallback()],
)
assert len(history.history["loss"]) == EPOCHS
print(tag, "fit done", history.history["loss"], flush=True)

# (b) custom loop: strategy.run with nvtx_tf.ops.start/end in the replica function.
with strategy.scope():
    w = tf.Variable(tf.ones([4, 1]))
    opt = tf_keras.optimizers.SGD(0.01)


@tf.function
def step(x):
    def replica_fn(x):
        with tf.GradientTape() as tape:
            h, ctx = nvtx_tf.ops.start(x, "worker step", "Forward", grad_domain_name="Gradient")
            h = nvtx_tf.ops.end(tf.matmul(h, w), ctx)
            loss = tf.reduce_mean(h)
        grads = tape.gradient(loss, [w])
        opt.apply_gradients(zip(grads, [w]))
        return loss

    losses = strategy.run(replica_fn, args=(x,))
    return strategy.reduce(tf.distribute.ReduceOp.MEAN, losses, axis=None)


loop_data = tf.data.Dataset.from_tensor_slices(X).batch(GLOBAL_BATCH).with_options(options)
n = 0
for batch in strategy.experimental_distribute_dataset(loop_data):
    step(batch)
    n += 1
assert n == STEPS, n
print(tag, "custom loop done", n, flush=True)
