"""annotate() on a stock keras.applications model: a range per layer, forward and backward.

    python -m nvtx_plugins_tf record -o out/annotate -- python examples/auto_annotate.py

MobileNetV2 (alpha 0.35, 32x32 inputs, weights=None): every layer gets a range named
after it in 'Forward' and its backward range in 'Backward'; nested under NVTXCallback's
'batch n' ranges (domain 'Keras').
"""

import argparse

import numpy as np

from nvtx_plugins_tf.keras import NVTXCallback, annotate, is_annotated, keras


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--model", choices=["mobilenetv2", "resnet50"], default="mobilenetv2")
    args = parser.parse_args(argv)
    if args.model == "mobilenetv2":
        model = keras.applications.MobileNetV2(input_shape=(32, 32, 3), alpha=0.35, weights=None, classes=10)
    else:
        model = keras.applications.ResNet50(input_shape=(32, 32, 3), weights=None, classes=10)
    annotate(model)  # before compile/fit
    model.compile(optimizer="sgd", loss="sparse_categorical_crossentropy")
    n = args.steps * args.batch_size
    rng = np.random.default_rng(0)
    x = rng.normal(size=(n, 32, 32, 3)).astype("float32")
    y = rng.integers(0, 10, size=(n,))
    model.fit(x, y, batch_size=args.batch_size, epochs=1, verbose=0, callbacks=[NVTXCallback()])
    annotated = sum(is_annotated(layer) for layer in model.layers)
    print(f"auto_annotate: {model.name}, {annotated} annotated layers, {args.steps} steps")


if __name__ == "__main__":
    main()
