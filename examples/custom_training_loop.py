"""A custom training loop: tf.function + GradientTape, ranges from start/end and @trace.

    python -m nvtx_plugins_tf record -o out/loop -- python examples/custom_training_loop.py

Per step: 'train_step' (domain 'Loop', payload = step), 'layer 1'/'layer 2' forward in
'Forward' and backward in 'Backward', and 'loss' (traced function).
"""

import argparse

import numpy as np
import tensorflow as tf

import nvtx_plugins_tf as nvtx_tf


class MLP(tf.Module):
    def __init__(self, features, hidden):
        super().__init__()
        init = tf.keras.initializers.GlorotUniform(seed=0)
        self.w1 = tf.Variable(init([features, hidden]))
        self.w2 = tf.Variable(init([hidden, 1]))

    def __call__(self, x):
        x, ctx = nvtx_tf.ops.start(x, "layer 1", "Forward", grad_domain_name="Backward")
        x = nvtx_tf.ops.end(tf.nn.relu(x @ self.w1), ctx)
        x, ctx = nvtx_tf.ops.start(x, "layer 2", "Forward", grad_domain_name="Backward")
        return nvtx_tf.ops.end(x @ self.w2, ctx)


@nvtx_tf.ops.trace("loss", domain_name="Forward", grad_domain_name="Backward")
def loss_fn(logits, labels):
    return tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=labels, logits=logits))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args(argv)
    rng = np.random.default_rng(0)
    model = MLP(16, 64)
    optimizer = tf.keras.optimizers.SGD(0.1)

    @tf.function
    def train_step(step, x, y):
        with nvtx_tf.ops.range("train_step", domain_name="Loop", payload=step):
            with tf.GradientTape() as tape:
                loss = loss_fn(model(x), y)
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    for step in range(args.steps):
        x = rng.normal(size=(args.batch_size, 16)).astype("float32")
        y = (x.sum(axis=1, keepdims=True) > 0).astype("float32")
        loss = train_step(tf.constant(step, tf.int64), x, y)
    print(f"custom_training_loop: loss {float(loss):.4f} after {args.steps} steps")


if __name__ == "__main__":
    main()
