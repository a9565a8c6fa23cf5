"""Our ranges in TensorFlow's own profiler (issue 13, item 2): while tf.profiler traces,
the .xplane.pb it writes holds each NVTX range and mark of the ops, once per execution,
on the thread that ran them, with domain and payload as metadata."""

import glob
import os
from pathlib import Path

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
            # (a line's name is its thread's, not unique: two Python threads are both 'python')
            events.append((meta.name, f"{line.name}#{line.id}", event.duration_ps, stats))
    return events


def _caller_line(events, caller):
    """The line (thread) of the Python thread that ran inside ``Trace(caller)``."""
    (line,) = {line for name, line, *_ in events if name == caller}
    return line


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


def test_ranges_ended_on_another_thread_are_all_in_the_trace(tmp_path):
    """A range whose end runs on another thread than its start is in the trace once, with
    its full duration. (TensorFlow's own split TraceMe activities lose some of these when
    it merges the two halves at profiler stop: 1 range in ~16 runs of the tf_profiler
    example, always one that changed threads; the ops record one complete event instead.)
    Eager ops run on the calling thread, so each range here starts on one Python thread
    and ends on the next; several sessions, several threads with events in each."""
    import threading

    threads, sessions = 6, 4
    x = tf.ones([2])
    for session in range(sessions):
        logdir = tmp_path / str(session)
        tf.profiler.experimental.start(str(logdir))
        started = [nvtx_tf.ops.start(x, f"handed {i}", "Forward") for i in range(threads)]
        barrier = threading.Barrier(threads)

        def end_the_next(i, started, barrier):
            barrier.wait()
            _, ctx = started[(i + 1) % threads]
            nvtx_tf.ops.end(x, ctx)

        runners = [threading.Thread(target=end_the_next, args=(i, started, barrier)) for i in range(threads)]
        for runner in runners:
            runner.start()
        for runner in runners:
            runner.join()
        tf.profiler.experimental.stop()
        names = sorted(name for name, _, duration, _ in _host_events(logdir) if name.startswith("handed") and duration)
        assert names == sorted(f"handed {i}" for i in range(threads)), (session, names)


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


def _fit_with_callback_profiled(logdir):
    from nvtx_plugins_tf.keras import keras
    from nvtx_plugins_tf.keras.callbacks import NVTXCallback

    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    x, y = tf.ones([8, 4]), tf.ones([8, 1])
    model.fit(x, y, batch_size=4, epochs=1, verbose=0)  # traced before the profiler starts
    tf.profiler.experimental.start(str(logdir))
    with tf.profiler.experimental.Trace("fit caller"):  # marks the line of this thread
        model.fit(x, y, batch_size=4, epochs=2, verbose=0, callbacks=[NVTXCallback()])
    tf.profiler.experimental.stop()


def _assert_callback_ranges(events):
    # The callback runs on the Python thread that called fit: all its ranges on that line.
    keras_lines = {line for _, line, _, stats in events if stats.get("domain") == "Keras"}
    assert keras_lines == {_caller_line(events, "fit caller")}, keras_lines
    by_name = {}
    for name, _line, duration, stats in events:
        by_name.setdefault(name, []).append((duration, stats))
    assert len(by_name.get("Train", [])) == 1, sorted(by_name)
    assert sorted(stats.get("payload") for _, stats in by_name["epoch 0"] + by_name["epoch 1"]) == [0, 1]
    batches = by_name["batch 0"] + by_name["batch 1"]
    assert len(batches) == 4  # 2 epochs x 2 batches
    assert all(stats.get("domain") == "Keras" and duration > 0 for duration, stats in batches)


def test_callback_ranges_appear_in_tf_profiler_trace(tmp_path):
    """NVTXCallback's host ranges, with the recorder attached: TensorFlow's trace has them
    (domain and payload as metadata) and the recorder still gets every one."""
    with capture() as rec:
        _fit_with_callback_profiled(tmp_path)
    _assert_callback_ranges(_host_events(tmp_path))
    assert rec.count(message="batch 0", domain="Keras") == 2 and rec.count(message="Train") == 1


def test_callback_and_hook_ranges_in_tf_profiler_trace_without_nvtx_tool(tmp_path, child_env):
    """No NVTX tool at all: TensorFlow's profiler alone still gets the callback's and the
    hook's ranges, and the ranges of paired ops (whose start, with no tool and the
    profiler off, hands nothing to its end)."""
    import subprocess
    import sys
    import textwrap

    code = textwrap.dedent(
        f"""
        import sys
        import tensorflow as tf
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        from test_tf_profiler import _fit_with_callback_profiled
        from nvtx_plugins_tf import _host_ranges
        from nvtx_plugins_tf.hooks import NVTXHook
        import nvtx_plugins_tf as nvtx_tf
        _fit_with_callback_profiled({str(tmp_path / "fit")!r})
        assert not _host_ranges.tool_attached()

        @tf.function
        def paired(x):
            x, ctx = nvtx_tf.ops.start(x, "paired", "Forward")
            return nvtx_tf.ops.end(x * 2.0, ctx)

        graph = paired.get_concrete_function(tf.TensorSpec([2])).graph
        assert all(op.get_attr("pair") for op in graph.get_operations() if op.type.startswith("Nvtx"))
        for _ in range(3):
            paired(tf.ones([2]))  # profiler off: nothing put
        tf.profiler.experimental.start({str(tmp_path / "ops")!r})
        for _ in range(3):
            paired(tf.ones([2]))
        tf.profiler.experimental.stop()
        for _ in range(3):
            paired(tf.ones([2]))
        with tf.Graph().as_default():
            step = tf.compat.v1.train.get_or_create_global_step()
            train = tf.compat.v1.assign_add(step, 1)
            tf.profiler.experimental.start({str(tmp_path / "hook")!r})
            hook = NVTXHook(skip_n_steps=0, name="Session", step_message="step {{step}}")
            with tf.profiler.experimental.Trace("hook caller"):
                with tf.compat.v1.train.MonitoredSession(hooks=[hook]) as session:
                    for _ in range(3):
                        session.run(train)
            tf.profiler.experimental.stop()
        print("DONE")
        """
    )
    proc = subprocess.run([sys.executable, "-c", code], env=child_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and "DONE" in proc.stdout, proc.stdout + proc.stderr
    _assert_callback_ranges(_host_events(tmp_path / "fit"))
    ops_events = _host_events(tmp_path / "ops")  # (TensorFlow names its own call event "paired" too)
    paired = [duration for name, _, duration, stats in ops_events if name == "paired" and stats.get("domain")]
    assert len(paired) == 3 and all(paired), paired
    hook_events = _host_events(tmp_path / "hook")
    steps = sorted(stats.get("payload") for name, _, _, stats in hook_events if name.startswith("step "))
    assert steps == [0, 1, 2]
    assert [name for name, *_ in hook_events].count("Session") == 1
    # The hook runs on the Python thread that ran the session: all its ranges on that line.
    hook_lines = {line for name, line, *_ in hook_events if name == "Session" or name.startswith("step ")}
    assert hook_lines == {_caller_line(hook_events, "hook caller")}, hook_lines
