"""Our ranges in TensorFlow's profiler (TensorBoard's Profile tab) as well as in NVTX.

    python examples/tf_profiler.py --logdir out/tb
    tensorboard --logdir out/tb          # Profile tab, trace viewer: 'Dense 1', 'Dense 2', ...

While `tf.profiler.experimental` traces, every NVTX range and mark of the ops is also a
TraceMe activity in the host plane of its .xplane.pb, with the domain and the payload as
metadata. The script reads the trace back and prints what it holds.
"""

import argparse
import glob
import os
import tempfile
from collections import Counter

import tensorflow as tf
from tensorflow.tsl.profiler.protobuf import xplane_pb2

import nvtx_plugins_tf as nvtx_tf


def host_event_names(logdir: str) -> Counter:
    """Event names of the host plane of the newest .xplane.pb under ``logdir``."""
    path = sorted(glob.glob(os.path.join(logdir, "plugins", "profile", "*", "*.xplane.pb")))[-1]
    space = xplane_pb2.XSpace()
    with open(path, "rb") as f:
        space.ParseFromString(f.read())
    names = Counter()
    for plane in space.planes:
        if plane.name == "/host:CPU":
            for line in plane.lines:
                names.update(plane.event_metadata[e.metadata_id].name for e in line.events)
    return names


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--logdir", default=None, help="TensorBoard log folder (default: a temporary one)")
    args = parser.parse_args()
    logdir = args.logdir or tempfile.mkdtemp(prefix="nvtx_tf_profile_")

    layers = [tf.keras.layers.Dense(32, activation="relu"), tf.keras.layers.Dense(1)]

    @tf.function
    def forward(x, step):
        for i, layer in enumerate(layers):
            x, ctx = nvtx_tf.ops.start(x, f"Dense {i + 1}", "Forward", payload=step)
            x = nvtx_tf.ops.end(layer(x), ctx)
        return x

    x = tf.ones([8, 16])
    forward(x, tf.constant(0, tf.int64))
    tf.profiler.experimental.start(logdir)
    for step in range(args.steps):
        forward(x, tf.constant(step, tf.int64))
    tf.profiler.experimental.stop()
    names = host_event_names(logdir)
    for name in ("Dense 1", "Dense 2"):
        print(f"tf_profiler: {name!r} x{names[name]} in {logdir}")


if __name__ == "__main__":
    main()
