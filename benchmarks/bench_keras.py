"""Cost of the Keras pieces, side by side in one run, printed as a table.

1. NVTXCallback per batch: on_train_batch_begin + on_train_batch_end called in a loop,
   against an empty keras.callbacks.Callback (target: <= 2 us extra per batch with no
   NVTX tool attached; also shown with the tool attached when run under the recorder).
   Batch numbers restart every 1000 batches, as over the epochs of ``fit``: each name is
   registered once (nvtx_plugins_tf/_host_ranges.py) and the loop measures the steady
   state, one start and one end through libnvtx_host.so per batch.
2. annotate() per training step on the example MLP (Dense 1024-1024-512-512-1, batch
   128): the same model trained with and without annotation, steps interleaved with
   those of a second plain model, whose difference shows the noise floor
   (target: <= 1 % extra).

    python benchmarks/bench_keras.py [--steps 30] [--repeats 5]
    python -m nvtx_plugins_tf record -o /tmp/b -- python benchmarks/bench_keras.py  # tool attached
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np
import tensorflow as tf
from _table import print_table

from nvtx_plugins_tf.keras import NVTXCallback, annotate, keras

STEPS_PER_EPOCH = 1000


def per_batch_cost(callback, n: int, steps_per_epoch: int = STEPS_PER_EPOCH) -> float:
    begin, end = callback.on_train_batch_begin, callback.on_train_batch_end
    batches = [i % steps_per_epoch for i in range(n)]
    t0 = time.perf_counter_ns()
    for batch in batches:
        begin(batch)
        end(batch)
    return (time.perf_counter_ns() - t0) / n


def callback_bench(n: int, repeats: int) -> tuple[float, float]:
    empty, nvtx_cb = keras.callbacks.Callback(), NVTXCallback()
    nvtx_cb.on_train_begin()
    nvtx_cb.on_epoch_begin(0)
    per_batch_cost(nvtx_cb, STEPS_PER_EPOCH)  # first epoch: registers the batch names
    base, ours = [], []
    for _ in range(repeats):
        base.append(per_batch_cost(empty, n))
        ours.append(per_batch_cost(nvtx_cb, n))
    nvtx_cb.on_epoch_end(0)
    nvtx_cb.on_train_end()
    return min(base), min(ours)


def mlp(features: int) -> keras.Model:
    layers = [keras.Input((features,))]
    layers += [keras.layers.Dense(u, activation="relu") for u in (1024, 1024, 512, 512)]
    layers += [keras.layers.Dense(1, activation="sigmoid")]
    model = keras.Sequential(layers)
    model.compile(optimizer=keras.optimizers.SGD(0.01), loss="binary_crossentropy")
    return model


def _step(model, x, y) -> float:
    t0 = time.perf_counter()
    model.train_on_batch(x, y)
    return time.perf_counter() - t0


def annotate_bench(steps: int, repeats: int, batch: int = 128, features: int = 32) -> tuple[float, float, float]:
    """Median seconds per train step: plain MLP, annotated MLP, and a second plain MLP
    (the A/A noise floor). Steps of the three models alternate, so machine load that
    varies over time hits all of them alike."""
    rng = np.random.default_rng(0)
    x = tf.constant(rng.normal(size=(batch, features)).astype("float32"))
    y = tf.constant((rng.random((batch, 1)) > 0.5).astype("float32"))
    plain, annotated, plain2 = mlp(features), annotate(mlp(features)), mlp(features)
    models = (plain, annotated, plain2)
    for model in models:  # trace + warm up
        for _ in range(3):
            model.train_on_batch(x, y)
    times = ([], [], [])
    for i in range(steps * repeats):
        order = range(3) if i % 2 == 0 else range(2, -1, -1)
        for k in order:
            times[k].append(_step(models[k], x, y))
    return tuple(statistics.median(t) for t in times)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200_000, help="callback loop length")
    parser.add_argument("--steps", type=int, default=30, help="train steps per repeat")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    attached = bool(os.environ.get("NVTX_INJECTION64_PATH"))

    base_cb, ours_cb = callback_bench(args.calls, args.repeats)
    base_step, ours_step, base2_step = annotate_bench(args.steps, args.repeats)
    noise = abs(base2_step - base_step) / base_step * 100
    cb_extra_us = (ours_cb - base_cb) / 1000
    step_extra = (ours_step - base_step) / base_step * 100

    rows = [
        (
            "NVTXCallback per batch",
            f"{base_cb / 1000:.3f} us",
            f"{ours_cb / 1000:.3f} us",
            f"{cb_extra_us:+.3f} us",
            "<= 2 us",
            "ok" if cb_extra_us <= 2 else "OVER",
        ),
        (
            "annotate() MLP train step",
            f"{base_step * 1e3:.2f} ms",
            f"{ours_step * 1e3:.2f} ms",
            f"{step_extra:+.2f} %",
            "<= 1 %",
            "ok" if step_extra <= 1 else ("OVER" if step_extra > noise else "noise"),
        ),
        (
            "  same, plain vs plain (noise)",
            f"{base_step * 1e3:.2f} ms",
            f"{base2_step * 1e3:.2f} ms",
            f"{noise:.2f} %",
            "",
            "",
        ),
    ]
    header = ("measurement", "baseline", "with nvtx_plugins_tf", "overhead", "target", "")
    print(
        f"NVTX tool attached: {'yes' if attached else 'no'}; TF {tf.__version__}, "
        f"{os.cpu_count()} CPUs; callback: min over {args.repeats} repeats, "
        f"steps: median of {args.steps * args.repeats} interleaved steps"
    )
    print_table(header, rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
