"""Ranges around several tensors at once: a two-input, two-output Keras model.

    python -m nvtx_plugins_tf record -o out/multi -- python examples/multi_inputs_outputs.py

NVTXStart/NVTXEnd take any nested structure: 'Merge' covers both inputs, 'Heads' both
outputs (domain 'Forward'; backward ranges 'Merge grad' / 'Heads grad' in 'Backward').
"""

import argparse

import numpy as np

from nvtx_plugins_tf.keras import keras
from nvtx_plugins_tf.keras.callbacks import NVTXCallback
from nvtx_plugins_tf.keras.layers import NVTXEnd, NVTXStart


def build_model():
    a = keras.Input((8,), name="a")
    b = keras.Input((4,), name="b")
    (a2, b2), marker_id, domain_id = NVTXStart(message="Merge", domain_name="Forward")([a, b])
    merged = keras.layers.Concatenate()(
        [keras.layers.Dense(16, activation="relu")(a2), keras.layers.Dense(16, activation="relu")(b2)]
    )
    merged = NVTXEnd(grad_message="Merge grad", grad_domain_name="Backward")([merged, marker_id, domain_id])
    merged, marker_id, domain_id = NVTXStart(message="Heads", domain_name="Forward")(merged)
    regression = keras.layers.Dense(1, name="regression")(merged)
    classification = keras.layers.Dense(3, activation="softmax", name="classification")(merged)
    regression, classification = NVTXEnd(grad_message="Heads grad", grad_domain_name="Backward")(
        [[regression, classification], marker_id, domain_id]
    )
    return keras.Model({"a": a, "b": b}, {"regression": regression, "classification": classification})


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--steps", type=int, default=4)
    args = parser.parse_args(argv)
    n = 16 * args.steps
    rng = np.random.default_rng(0)
    inputs = {"a": rng.normal(size=(n, 8)).astype("float32"), "b": rng.normal(size=(n, 4)).astype("float32")}
    targets = {"regression": rng.normal(size=(n, 1)).astype("float32"), "classification": rng.integers(0, 3, size=(n,))}
    model = build_model()
    model.compile(optimizer="adam", loss={"regression": "mse", "classification": "sparse_categorical_crossentropy"})
    history = model.fit(inputs, targets, batch_size=16, epochs=args.epochs, verbose=0, callbacks=[NVTXCallback()])
    print(f"multi_inputs_outputs: loss {history.history['loss'][-1]:.4f}")


if __name__ == "__main__":
    main()
