"""Our ranges in TensorFlow's own profiler (issue 13, item 2): while tf.profiler traces,
the .xplane.pb it writes holds each NVTX range and mark of the ops, once per execution,
on the thread that ran them, with domain and payload as metadata."""

import glob
import os

import tensorflow as tf
from tensorflow.tsl.profiler.protobuf import xplane_pb2

import nvtx_plugins_tf as nvtx_tf
from nvtx_plugins_tf.testing import capture

STEPS = 3


def _value(plane, stat):
    kind = stat.WhichOneof("value")
    if kind == "ref_value":  # strings are interned as stat metadata
        return plane.stat_metadata[stat.ref_value].name
    return getattr(stat, kind)


def _host_events(logdir):
    (path,) = glob.glob(os.path.join(logdir, "plugins", "profile", "*", "*.xplane.pb"))
    space = xplane_pb2.XSpace()
    space.ParseFromString(open(path, "rb").read())
    (host,) = [p for p in space.planes if p.name == "/host:CPU"]
    stat_names = {k: m.name for k, m in host.stat_metadata.items()}
    events = []
    for line in host.lines:
        for event in line.events:
            meta = host.event_metadata[event.metadata_id]
            stats = {stat_names[s.metadata_id]: _value(host, s) for s in event.stats}
            events.append((meta.name, line.name, event.duration_ps, stats))
    return events


def test_ranges_and_marks_appear_in_tf_profiler_trace(tmp_path):
    @tf.function
    def step(x, i):
        x, ctx = nvtx_tf.ops.start(x, "Dense 1", "Forward", payload=i)
        x = nvtx_tf.ops.end(x * 2.0, ctx)
        return nvtx_tf.ops.mark("done", x, domain_name="Forward")

    step(tf.ones([2]), tf.constant(0, tf.int64))
    with capture() as rec:
        tf.profiler.experimental.start(str(tmp_path))
        for i in range(STEPS):
            step(tf.ones([2]), tf.constant(i, tf.int64))
        tf.profiler.experimental.stop()
    events = _host_events(tmp_path)
    ranges = [e for e in events if e[0] == "Dense 1"]
    marks = [e for e in events if e[0] == "done"]
    assert len(ranges) == STEPS and len(marks) == STEPS
    assert all(duration > 0 for _, _, duration, _ in ranges)
    assert sorted(stats.get("payload") for *_, stats in ranges) == list(range(STEPS))
    assert all(stats.get("domain") == "Forward" for *_, stats in ranges + marks)
    # On the threads that ran them: TensorFlow's compute threads (its own thread ids), as
    # many as our recorder saw (OS thread ids) for the same ranges.
    lines = {line for _, line, _, _ in ranges}
    assert all(line.startswith("tf_Compute") for line in lines), lines
    assert len(lines) == len({r.tid for r in rec.find(message="Dense 1")})


def test_no_trace_me_state_left_when_profiler_is_off():
    """With TensorFlow's profiler off the ops behave as before (the recorder sees the
    ranges, nothing is kept for TraceMe)."""

    @tf.function
    def step(x):
        x, ctx = nvtx_tf.ops.start(x, "plain")
        return nvtx_tf.ops.end(x + 1.0, ctx)

    with capture() as rec:
        for _ in range(STEPS):
            step(tf.ones([2]))
    assert rec.count(message="plain") == STEPS
    assert not rec.open_ranges
