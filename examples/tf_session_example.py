"""compat.v1 graph + MonitoredSession + NVTXHook, with @trace and start/end in the graph.

    python -m nvtx_plugins_tf record -o out/session -- python examples/tf_session_example.py

Ranges: 'Session' > 'step n' (default domain, from NVTXHook), 'hidden' and 'output' in
'Forward' and their backward ranges in 'Backward' (from the graph ops).
"""

import argparse

import numpy as np
import tensorflow as tf

import nvtx_plugins_tf as nvtx_tf
from nvtx_plugins_tf.hooks import NVTXHook


@nvtx_tf.ops.trace("output", domain_name="Forward", grad_domain_name="Backward")
def output_layer(h, w):
    return tf.matmul(h, w)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--skip", type=int, default=1, help="first steps without a step range")
    args = parser.parse_args(argv)
    rng = np.random.default_rng(0)
    data = rng.normal(size=(32, 16)).astype("float32")
    labels = (data.sum(axis=1, keepdims=True) > 0).astype("float32")
    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [None, 16])
        y = tf.compat.v1.placeholder(tf.float32, [None, 1])
        w1 = tf.compat.v1.get_variable("w1", [16, 32])
        w2 = tf.compat.v1.get_variable("w2", [32, 1])
        h, ctx = nvtx_tf.ops.start(x, message="hidden", domain_name="Forward", grad_domain_name="Backward")
        h = nvtx_tf.ops.end(tf.nn.relu(tf.matmul(h, w1)), ctx)
        logits = output_layer(h, w2)
        loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=y, logits=logits))
        global_step = tf.compat.v1.train.get_or_create_global_step()
        train_op = tf.compat.v1.train.GradientDescentOptimizer(0.1).minimize(loss, global_step=global_step)
        hooks = [
            NVTXHook(skip_n_steps=args.skip, name="Session"),
            tf.compat.v1.train.StopAtStepHook(last_step=args.steps),
        ]
        with tf.compat.v1.train.MonitoredSession(hooks=hooks) as sess:
            while not sess.should_stop():
                _, value = sess.run([train_op, loss], feed_dict={x: data, y: labels})
    print(f"tf_session_example: loss {value:.4f} after {args.steps} steps")


if __name__ == "__main__":
    main()
