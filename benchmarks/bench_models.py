"""Step-time overhead of annotate() on stock Keras models, plain and annotated in one process.

For each model two identical copies are built in one process, one passed through
``nvtx_plugins_tf.keras.annotate()``. Each round calls ``fit()`` (a few steps) on both,
the order flipped every round; the first round is dropped (tracing); the table shows the
median of the per-round ratios annotated / plain with its quartiles. Machine load that
drifts over time hits both copies alike, which best-of timings on a shared machine do not.

Models: the old example MLP (Dense 1024-1024-512-512-1, batch 128), a transfer-learning
set-up (MobileNetV2 alpha 0.35 base, frozen, in a Sequential with a pooling and a Dense
head), EfficientNetB0 and ResNet50 (64x64 inputs, ``weights=None``), batch 32. Each
without an NVTX tool and under our recorder (a second process with the recorder attached).
Targets: median <= 1.01 without a tool, <= 1.02 under the recorder.

Sequence models (issue 37): ``lstm`` and ``gru`` (a layer of 256 units over 8 timesteps of
64 features, batch 64) and ``attention`` (a 4-head self-attention block over 16 tokens of 64,
layer norm, pooling, Dense); ``--legacy`` runs them (and the others) on tf_keras
(``TF_USE_LEGACY_KERAS=1``) instead of Keras 3. ``--inference`` times a ``tf.function`` call
of each model on one batch instead of ``fit()`` (Keras 3's RNN probe call, pruned or not,
shows there). ``--cpu-time`` times by the worker process's CPU time (all its threads) instead
of the wall clock: on a machine other jobs share, waiting for a core no longer counts.

    python benchmarks/bench_models.py [--rounds 15] [--models mlp,frozen_mobilenet,...]
    python benchmarks/bench_models.py --models lstm,gru,attention [--legacy] [--inference] [--cpu-time]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

from _table import print_table

TARGETS = {"no tool": 1.01, "recorder": 1.02}
MODELS = ("mlp", "frozen_mobilenet", "efficientnet", "resnet50")
SEQUENCE_MODELS = ("lstm", "gru", "attention")


def _keras():
    """The Keras tf.keras is (Keras 3, or tf_keras under TF_USE_LEGACY_KERAS=1)."""
    from nvtx_plugins_tf.keras import keras

    return keras


def build(name: str):
    keras = _keras()

    if name in ("lstm", "gru"):
        rnn = keras.layers.LSTM if name == "lstm" else keras.layers.GRU
        model = keras.Sequential([keras.Input((8, 64)), rnn(256), keras.layers.Dense(1)])
        return model, "mse", 64, 8
    if name == "attention":
        inputs = keras.Input((16, 64))
        x = keras.layers.MultiHeadAttention(num_heads=4, key_dim=16)(inputs, inputs)
        x = keras.layers.LayerNormalization()(keras.layers.Add()([inputs, x]))
        x = keras.layers.GlobalAveragePooling1D()(x)
        return keras.Model(inputs, keras.layers.Dense(1)(x)), "mse", 64, 8
    if name == "mlp":
        layers = [keras.Input((32,))] + [keras.layers.Dense(u, activation="relu") for u in (1024, 1024, 512, 512)]
        model = keras.Sequential(layers + [keras.layers.Dense(1, activation="sigmoid")])
        return model, "binary_crossentropy", 128, 20
    shape = (64, 64, 3)
    if name == "frozen_mobilenet":
        base = keras.applications.MobileNetV2(weights=None, alpha=0.35, input_shape=shape, include_top=False)
        base.trainable = False
        model = keras.Sequential(
            [keras.Input(shape), base, keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(10)]
        )
    elif name == "efficientnet":
        model = keras.applications.EfficientNetB0(weights=None, input_shape=shape, classes=10)
    elif name == "resnet50":
        model = keras.applications.ResNet50(weights=None, input_shape=shape, classes=10)
    else:
        raise ValueError(f"unknown model {name!r}; choose from {', '.join(MODELS + SEQUENCE_MODELS)}")
    return model, keras.losses.SparseCategoricalCrossentropy(from_logits=name == "frozen_mobilenet"), 32, 3


def measure(name: str, rounds: int, inference: bool = False, cpu_time: bool = False) -> list[float]:
    """Per-round ratios annotated / plain (first round dropped)."""
    import numpy as np
    import tensorflow as tf

    import nvtx_plugins_tf as nvtx_tf

    plain, loss, batch, steps = build(name)
    annotated, _, _, _ = build(name)
    nvtx_tf.keras.annotate(annotated)
    rng = np.random.default_rng(0)
    shape = plain.input_shape[1:]
    x = rng.normal(size=(batch * steps, *shape)).astype("float32")
    if name == "mlp":
        y = (rng.random((batch * steps, 1)) > 0.5).astype("float32")
    elif name in SEQUENCE_MODELS:
        y = rng.normal(size=(batch * steps, 1)).astype("float32")
    else:
        y = rng.integers(0, 10, batch * steps)
    for model in (plain, annotated):
        model.compile(optimizer="sgd", loss=loss)
    calls = {id(m): tf.function(m.__call__) for m in (plain, annotated)}
    one_batch = tf.constant(x[:batch])

    clock = time.process_time if cpu_time else time.perf_counter

    def timed(model) -> float:
        t0 = clock()
        if inference:
            for _ in range(steps):
                calls[id(model)](one_batch).numpy()
        else:
            model.fit(x, y, batch_size=batch, epochs=1, verbose=0, shuffle=False)
        return clock() - t0

    ratios = []
    for r in range(rounds + 1):
        if r % 2 == 0:
            t_plain, t_annotated = timed(plain), timed(annotated)
        else:
            t_annotated, t_plain = timed(annotated), timed(plain)
        if r:
            ratios.append(t_annotated / t_plain)
    return ratios


def quartiles(values: list[float]) -> tuple[float, float, float]:
    import numpy as np

    q1, q2, q3 = np.percentile(values, [25, 50, 75])
    return float(q1), float(q2), float(q3)


def worker(models: list[str], rounds: int, inference: bool, cpu_time: bool = False) -> None:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    for name in models:
        print("RESULT", json.dumps({"model": name, "ratios": measure(name, rounds, inference, cpu_time)}), flush=True)


def run_mode(
    mode: str, models: list[str], rounds: int, legacy: bool = False, inference: bool = False, cpu_time: bool = False
) -> dict[str, list[float]]:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    if legacy:
        env["TF_USE_LEGACY_KERAS"] = "1"
    with tempfile.TemporaryDirectory() as tmp:
        if mode == "recorder":
            from nvtx_plugins_tf import recorder

            env.update(recorder.environment(os.path.join(tmp, "bench.nvtxrec")))
        cmd = [sys.executable, __file__, "--worker", "--rounds", str(rounds), "--models", ",".join(models)]
        cmd += ["--inference"] if inference else []
        cmd += ["--cpu-time"] if cpu_time else []
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"bench_models worker ({mode}) failed:\n{proc.stderr[-3000:]}")
    results = {}
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            item = json.loads(line[len("RESULT ") :])
            results[item["model"]] = item["ratios"]
    return results


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15, help="measured rounds per model (one more is dropped)")
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--legacy", action="store_true", help="tf_keras (TF_USE_LEGACY_KERAS=1) instead of Keras 3")
    parser.add_argument("--inference", action="store_true", help="time tf.function calls instead of fit()")
    parser.add_argument("--cpu-time", action="store_true", help="the worker's CPU time instead of the wall clock")
    parser.add_argument("--modes", default="no tool,recorder", help="no tool, recorder or both")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    models = [m for m in args.models.split(",") if m]
    if args.worker:
        worker(models, args.rounds, args.inference, args.cpu_time)
        return 0
    header = ("model", "tool", "median annotated/plain", "quartiles", "target", "")
    rows = []
    for mode in [m.strip() for m in args.modes.split(",") if m.strip()]:
        for name, ratios in run_mode(mode, models, args.rounds, args.legacy, args.inference, args.cpu_time).items():
            q1, med, q3 = quartiles(ratios)
            rows.append(
                (
                    name,
                    mode,
                    f"{med:.3f}",
                    f"{q1:.3f}-{q3:.3f}",
                    f"<= {TARGETS[mode]}",
                    "ok" if med <= TARGETS[mode] else "OVER",
                )
            )
    what = "tf.function call" if args.inference else "fit()"
    keras_name = "tf_keras" if args.legacy else "Keras 3"
    print(
        f"{args.rounds} interleaved {what} rounds per model on {keras_name} (order flipped each round, "
        f"first dropped), {'CPU time' if args.cpu_time else 'wall clock'}, {os.cpu_count()} CPUs"
    )
    print_table(header, rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
