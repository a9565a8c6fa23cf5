"""An XLA-compiled train step between our ranges, with TensorFlow's XLA ranges.

    python -m nvtx_plugins_tf record -o out/xla -- python examples/xla.py
    python -m nvtx_plugins_tf report out/xla

Our ops cannot be compiled by XLA, so the ranges go around the `jit_compile=True` function,
not inside it: 'step N' (domain 'Loop', payload N) per call, 'compile' around the first
call. With TensorFlow's own ranges switched on (`nvtx_tf.tf_op_ranges()` here; `record
--tf-ops` does it for an unmodified script), the first call shows what XLA does to compile
the step, in domain 'TSL': one 'XlaCompile' range and one 'XlaPass' range per compiler pass,
named 'XlaPass:#name=...,module=...#' (up to ~200 characters). `report` groups them by what
precedes the metadata, one row each (the full names are in `report --format csv`):

    Instances  ...  Style     Range
            1  ...  StartEnd  Loop:compile
           13  ...  PushPop   TSL:__inference_train_step_92:__inference_train_step_92
            1  ...  PushPop   TSL:XlaCompile
           12  ...  StartEnd  Loop:step *
           12  ...  PushPop   TSL:XlaPassPipeline
          148  ...  PushPop   TSL:XlaPass
            1  ...  PushPop   TSL:XlaMemoryScheduler
            1  ...  PushPop   TSL:gradient_tape/Tile:Tile
          ...

(a CPU run, rows by total time). The '__inference_train_step' row is the compiled step
running, once per call. The few op ranges after it are the ops TensorFlow runs once while
compiling (constant folding); in the steps themselves no op range is left but the compiled
step's, since XLA fused them all.
On a GPU, XLA's runtime also annotates each executed module and kernel (see docs/ops.md).
"""

import argparse

import tensorflow as tf

import nvtx_plugins_tf as nvtx_tf


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=12)
    args = parser.parse_args()

    w1 = tf.Variable(tf.random.stateless_normal([16, 32], seed=[0, 1]))
    w2 = tf.Variable(tf.random.stateless_normal([32, 1], seed=[0, 2]))
    optimizer = tf.keras.optimizers.SGD(0.01)

    @tf.function(jit_compile=True)
    def train_step(x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(tf.nn.relu(x @ w1) @ w2 - y))
        optimizer.apply_gradients(zip(tape.gradient(loss, [w1, w2]), [w1, w2]))
        return loss

    x = tf.random.stateless_normal([64, 16], seed=[1, 0])
    y = tf.reduce_sum(x, axis=1, keepdims=True)
    with nvtx_tf.tf_op_ranges():
        with nvtx_tf.ops.range("compile", domain_name="Loop"):
            loss = train_step(x, y)  # traced and compiled by XLA
        for step in range(args.steps):
            with nvtx_tf.ops.range(f"step {step}", domain_name="Loop", payload=step):
                loss = train_step(x, y)
    print(f"xla: loss {float(loss):.4f}")


if __name__ == "__main__":
    main()
