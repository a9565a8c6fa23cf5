"""A user's training script, as the guide's `record` examples run it: a small Keras model
trained with NVTXCallback (Train, epoch and batch ranges in domain Keras), nothing else
annotated. By default one epoch of 8 batches (32 samples, batch size 4): enough steps that a
timeline's default window (steps 1 on, without the first where TensorFlow traces) shows seven.

    python -m nvtx_plugins_tf record -o out/run -- python examples/train.py --epochs 1
    python -m nvtx_plugins_tf record -o out/window --capture-range profile@Keras -- \\
        python examples/train.py --batch-size 4 --profile-batches 2 3

``--read-ms MS``: each batch is read by a Python generator that takes MS milliseconds inside an
NVTX range "read" (domain Data, the ``nvtx`` package): a slow input pipeline, for ``make
demo-ranks`` (8 ranks, one slow: ``nvtx-tf analyze`` names it).
"""

import argparse
import time

import numpy as np

from nvtx_plugins_tf.keras import NVTXCallback, keras


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument(
        "--profile-batches",
        type=int,
        nargs=2,
        metavar=("FIRST", "LAST"),
        help="the callback's `profile` range around these steps (for --capture-range profile@Keras)",
    )
    parser.add_argument("--read-ms", type=float, help="read each batch through a generator taking MS ms")
    args = parser.parse_args()
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    callback = NVTXCallback(profile_batches=tuple(args.profile_batches)) if args.profile_batches else NVTXCallback()
    x, y = np.ones((32, 8), "float32"), np.ones((32, 1), "float32")
    if args.read_ms is None:
        model.fit(x, y, epochs=args.epochs, batch_size=args.batch_size, verbose=0, callbacks=[callback])
    else:
        import nvtx

        def batches():
            while True:
                with nvtx.annotate("read", domain="Data"):
                    time.sleep(args.read_ms / 1000)
                yield x[: args.batch_size], y[: args.batch_size]

        steps = len(x) // args.batch_size
        model.fit(batches(), epochs=args.epochs, steps_per_epoch=steps, verbose=0, callbacks=[callback])
    print(f"train: {args.epochs} epoch(s) done")


if __name__ == "__main__":
    main()
