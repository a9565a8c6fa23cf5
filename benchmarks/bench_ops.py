"""Per-op cost of NvtxStart/NvtxEnd against the stateful-identity floor, and the step
overhead of annotating every layer of the old package's example MLP.

Measured side by side in one run; per-op costs are slopes (time of a chain of 550
pairs minus a chain of 50, divided by the op count), so the function-call overhead
cancels; medians of interleaved rounds. No NVTX tool attached (the production case).

    python benchmarks/bench_ops.py
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.pop("NVTX_INJECTION64_PATH", None)

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _floor import build_floor, call_time, slope_ns  # noqa: E402

import nvtx_plugins_tf as nvtx_tf  # noqa: E402


def chain(pair, n):
    @tf.function
    def f(x):
        for _ in range(n):
            x = pair(x)
        return x

    return f


def per_op_ns(pairs: dict, rounds: int = 31, reps: int = 80) -> dict:
    """Per round, the slope (chain of 550 pairs minus 50) per op; rounds interleaved."""
    x = tf.constant(1.0)
    fns = {name: (chain(pair, 50), chain(pair, 550)) for name, pair in pairs.items()}
    for short, long_ in fns.values():
        short(x), long_(x), short(x), long_(x)
    samples = {name: [] for name in pairs}
    for i in range(rounds + 1):  # the order flips every round; the first round is dropped
        for name in list(fns) if i % 2 == 0 else list(reversed(fns)):
            short, long_ = fns[name]
            slope = slope_ns(short, long_, x, reps, ops=2 * 500)  # 550 pairs minus 50
            if i > 0:
                samples[name].append(slope)
    return samples


def mlp(annotate: bool):
    layers = [tf.keras.layers.Dense(n, activation="relu") for n in (1024, 1024, 512, 512)]
    layers.append(tf.keras.layers.Dense(1))
    opt = tf.keras.optimizers.SGD(0.001)

    def forward(x):
        for i, layer in enumerate(layers):
            if annotate:
                x, ctx = nvtx_tf.ops.start(x, f"Dense {i + 1}", "Forward", grad_domain_name="Gradient")
            x = layer(x)
            if annotate:
                x = nvtx_tf.ops.end(x, ctx)
        return x

    @tf.function
    def step(batch):
        x, y = batch
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(forward(x) - y))
        variables = [v for layer in layers for v in layer.trainable_variables]
        opt.apply_gradients(zip(tape.gradient(loss, variables), variables))
        return loss

    return step


def step_times(steps: int = 150) -> dict:
    """Median step time of a plain MLP, a second plain MLP (the noise) and an annotated one,
    interleaved step by step (order flipped every step) so that they share the machine's noise."""
    rng = np.random.default_rng(0)
    batch = (
        tf.constant(rng.normal(size=[128, 1024]).astype("float32")),
        tf.constant(rng.normal(size=[128, 1]).astype("float32")),
    )
    models = {"plain": mlp(False), "plain again": mlp(False), "annotated": mlp(True)}
    for step in models.values():
        step(batch), step(batch)
    times = {name: [] for name in models}
    for i in range(steps + 1):  # the order flips every step; the first step is dropped
        for name in list(models) if i % 2 == 0 else list(reversed(models)):
            t = call_time(models[name], batch, 1)
            if i > 0:
                times[name].append(t)
    return {name: float(np.median(t)) for name, t in times.items()}


def main() -> int:
    floor_lib = tf.load_op_library(str(build_floor()))
    ops = nvtx_tf.ops.load_library()

    def floor_pair(x):
        (y,) = floor_lib.floor_identity([x])
        (y,) = floor_lib.floor_identity([y])
        return y

    def nvtx_pair(x):  # the public API: the start and end pair without the range-id edge
        y, ctx = nvtx_tf.ops.start(x, "bench")
        return nvtx_tf.ops.end(y, ctx)

    def nvtx_edge_pair(x):  # the previous design: the range id passed from start to end
        (y,), _, rid = ops.nvtx_start([x], [], [], [], message="bench")
        (y,), _ = ops.nvtx_end([y], [], [rid], [])
        return y

    def id_edge_pair(x):
        (y,), rid = floor_lib.floor_start([x])
        (y,) = floor_lib.floor_end([y], rid)
        return y

    samples = per_op_ns(
        {"floor": floor_pair, "nvtx": nvtx_pair, "nvtx with edge": nvtx_edge_pair, "id edge": id_edge_pair}
    )
    floor_ns, nvtx_ns = float(np.median(samples["floor"])), float(np.median(samples["nvtx"]))
    ratios = sorted(n / f for n, f in zip(samples["nvtx"], samples["floor"]))
    nvtx_edge_ratios = sorted(n / f for n, f in zip(samples["nvtx with edge"], samples["floor"]))
    edge_ratios = sorted(n / f for n, f in zip(samples["id edge"], samples["floor"]))
    steps = step_times()
    base = steps["plain"]
    print("## TensorFlow ops (no NVTX tool attached); medians of interleaved rounds")
    print(f"{'metric':<55}{'value':>12}{'target':>12}")
    print(f"{'stateful identity floor, ns/op':<55}{floor_ns:>12.0f}{'':>12}")
    print(f"{'NvtxStart/NvtxEnd, ns/op':<55}{nvtx_ns:>12.0f}{'':>12}")
    print(f"{'ratio to floor (median of rounds)':<55}{float(np.median(ratios)):>12.2f}{'<= 1.10':>12}")
    print(
        f"{'  ratio, quartiles of rounds':<55}"
        f"{f'{ratios[len(ratios) // 4]:.2f}-{ratios[3 * len(ratios) // 4]:.2f}':>12}{'':>12}"
    )
    print(
        f"{'  previous design (range-id edge start -> end): ratio':<55}"
        f"{float(np.median(nvtx_edge_ratios)):>12.2f}{'':>12}"
    )
    print(
        f"{'  the floor with a range-id edge, no NVTX call: ratio':<55}{float(np.median(edge_ratios)):>12.2f}{'':>12}"
    )
    print(f"{'MLP step, plain (ms)':<55}{base * 1e3:>12.2f}{'':>12}")
    print(f"{'MLP step, every layer annotated fwd+bwd (ms)':<55}{steps['annotated'] * 1e3:>12.2f}{'':>12}")
    print(f"{'MLP step overhead (%)':<55}{(steps['annotated'] / base - 1) * 100:>12.2f}{'<= 1.00':>12}")
    print(
        f"{'  noise: a second plain MLP vs the first (%)':<55}{(steps['plain again'] / base - 1) * 100:>12.2f}{'':>12}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
