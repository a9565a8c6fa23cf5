"""MirroredStrategy over 2 logical CPU devices: a custom loop with strategy.run whose
regions are annotated with nvtx_tf.ops; run by tests/test_distributed.py under the recorder."""

import sys

import tensorflow as tf

cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)

import nvtx_plugins_tf as nvtx_tf  # noqa: E402

STEPS = int(sys.argv[1]) if len(sys.argv) > 1 else 3
strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
with strategy.scope():
    w = tf.Variable(tf.ones([4, 1]))
    opt = tf.keras.optimizers.SGD(0.01)


@tf.function
def step(x):
    def replica_fn(x):
        with tf.GradientTape() as tape:
            h, ctx = nvtx_tf.ops.start(x, "replica step", "Forward", grad_domain_name="Gradient")
            h = nvtx_tf.ops.end(tf.matmul(h, w), ctx)
            loss = tf.reduce_mean(h)
        grads = tape.gradient(loss, [w])
        opt.apply_gradients(zip(grads, [w]))
        return loss

    return strategy.run(replica_fn, args=(x,))


dataset = tf.data.Dataset.from_tensors(tf.ones([8, 4])).repeat(STEPS)
for batch in strategy.experimental_distribute_dataset(dataset):
    step(batch)
print("done", strategy.num_replicas_in_sync)
