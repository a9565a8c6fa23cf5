"""The old nvtx-plugins Keras example: a 5-Dense binary classifier with NVTXStart/NVTXEnd.

    python -m nvtx_plugins_tf record -o out/keras -- python examples/keras_example.py

Forward ranges 'Dense 1'..'Dense 5' (domain 'Forward'), backward ranges 'Dense k grad'
(domain 'Gradient'), and NVTXCallback's 'Train' / 'epoch n' / 'batch n' (domain 'Keras').
The data is generated: points inside a sphere (label 1) or outside (label 0).
"""

import argparse

import numpy as np
import tensorflow as tf

import nvtx_plugins_tf as nvtx_tf
from nvtx_plugins_tf.keras import keras
from nvtx_plugins_tf.keras.callbacks import NVTXCallback
from nvtx_plugins_tf.keras.layers import NVTXEnd, NVTXStart


def build_model(features: int, units=(1024, 1024, 512, 512)) -> keras.Model:
    inputs = keras.Input((features,))
    x = inputs
    sizes = list(units) + [1]
    for i, size in enumerate(sizes, start=1):
        x, marker_id, domain_id = NVTXStart(message=f"Dense {i}", domain_name="Forward", trainable=(i == 1))(x)
        activation = "sigmoid" if i == len(sizes) else "relu"
        x = keras.layers.Dense(size, activation=activation, name=f"dense_{i}")(x)
        x = NVTXEnd(grad_message=f"Dense {i} grad", grad_domain_name="Gradient")([x, marker_id, domain_id])
    return keras.Model(inputs, x)


def make_data(samples: int, features: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(samples, features)).astype("float32")
    y = (np.linalg.norm(x, axis=1, keepdims=True) < np.sqrt(features)).astype("float32")
    return x, y


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--steps", type=int, default=5, help="batches per epoch")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--features", type=int, default=32)
    parser.add_argument("--small", action="store_true", help="narrow layers (for quick runs)")
    args = parser.parse_args(argv)
    x, y = make_data(args.steps * args.batch_size, args.features)
    model = build_model(args.features, units=(64, 64, 32, 32) if args.small else (1024, 1024, 512, 512))
    model.compile(optimizer=keras.optimizers.SGD(0.01), loss="binary_crossentropy", metrics=["accuracy"])
    history = model.fit(x, y, batch_size=args.batch_size, epochs=args.epochs, verbose=0, callbacks=[NVTXCallback()])
    print(
        f"keras_example: loss {history.history['loss'][-1]:.4f} after {args.epochs} epoch(s) of {args.steps} steps "
        f"(Keras {nvtx_tf.keras.KERAS3 and '3' or '2'}, TF {tf.__version__})"
    )


if __name__ == "__main__":
    main()
