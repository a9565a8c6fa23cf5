"""Each backward range linked to the forward range it mirrors.

    python -m nvtx_plugins_tf record -o out/pairs -- python examples/backward_pairs.py
    python -m nvtx_plugins_tf report out/pairs --pairs

A small training loop (tf.GradientTape): per step, 'train_step' (domain 'Loop', payload the
step) around a forward range per layer (domain 'Forward') and, when the gradients run, a
backward range per layer (domain 'Backward', same names). Each backward range's payload is
the NVTX range id of its forward range, so the pairs are known also when steps overlap;
`report --pairs` counts them per name, with average times and their ratio:

    Pairs  Forward avg (ns)  Backward avg (ns)  Backward/forward  Forward          Backward
    -----  ----------------  -----------------  ----------------  ---------------  ----------------
        5         146,484.4           19,752.4              0.13  Forward:Dense 1  Backward:Dense 1
        5          28,307.0           23,226.0              0.82  Forward:Dense 2  Backward:Dense 2
        5          10,094.4           12,539.4              1.24  Forward:loss     Backward:loss

(times of one run on a CPU; the first step's forward ranges also hold one-time work.)
"""

import argparse

import tensorflow as tf

import nvtx_plugins_tf as nvtx_tf


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=5)
    args = parser.parse_args()

    layers = [tf.keras.layers.Dense(32, activation="relu"), tf.keras.layers.Dense(1)]
    optimizer = tf.keras.optimizers.SGD(0.01)

    @tf.function
    def train_step(x, y, step):
        with nvtx_tf.ops.range("train_step", domain_name="Loop", payload=step):
            with tf.GradientTape() as tape:
                h = x
                for i, layer in enumerate(layers):
                    h, ctx = nvtx_tf.ops.start(h, f"Dense {i + 1}", "Forward", grad_domain_name="Backward")
                    h = nvtx_tf.ops.end(layer(h), ctx)
                h, ctx = nvtx_tf.ops.start(h, "loss", "Forward", grad_domain_name="Backward")
                loss = nvtx_tf.ops.end(tf.reduce_mean(tf.square(h - y)), ctx)
            variables = [v for layer in layers for v in layer.trainable_variables]
            optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables))
        return loss

    x = tf.random.stateless_normal([64, 16], seed=[0, 1])
    y = tf.reduce_sum(x, axis=1, keepdims=True)
    h = x
    for layer in layers:  # variables created and initialized before the first step
        h = layer(h)
    for step in range(args.steps):
        loss = train_step(x, y, tf.constant(step, tf.int64))
    print(f"backward_pairs: loss {float(loss):.4f}")


if __name__ == "__main__":
    main()
