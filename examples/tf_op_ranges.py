"""TensorFlow's own per-op NVTX ranges, inside your ranges.

    python -m nvtx_plugins_tf record -o out/ops -- python examples/tf_op_ranges.py

Per step: 'train_step' (domain 'Loop') around one NVTX range per op TensorFlow executes
(domain 'TSL', named 'node_name:op_type': the MatMul, its gradient, the variable update...).
The same switch works under Nsight Systems (`nsys profile -t nvtx ...`).
"""

import argparse

import tensorflow as tf

import nvtx_plugins_tf as nvtx_tf


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=5)
    args = parser.parse_args()

    w = tf.Variable(tf.random.stateless_normal([64, 64], seed=[0, 1]))
    optimizer = tf.keras.optimizers.SGD(0.01)

    @tf.function
    def train_step(x):
        with nvtx_tf.ops.range("train_step", domain_name="Loop"):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(tf.matmul(x, w)))
            optimizer.apply_gradients(zip(tape.gradient(loss, [w]), [w]))
        return loss

    x = tf.random.stateless_normal([32, 64], seed=[2, 3])
    train_step(x)  # trace outside the op ranges
    with nvtx_tf.tf_op_ranges():
        for _ in range(args.steps):
            loss = train_step(x)
    print(f"tf_op_ranges: loss {float(loss):.4f}")


if __name__ == "__main__":
    main()
