"""Scale: parallel branches from several Python threads, and a million ranges in one process."""

import resource
import threading

import tensorflow as tf

import nvtx_plugins_tf as nvtx_tf
from nvtx_plugins_tf.testing import capture

BRANCHES = 16
THREADS = 4
STEPS_PER_THREAD = 2_500  # 4 threads x 2,500 calls = 10,000 steps


def test_parallel_branches_from_python_threads_balanced():
    @tf.function
    def step(x):
        outs = []
        for b in range(BRANCHES):
            y, ctx = nvtx_tf.ops.start(x, f"branch {b}", "Scale")
            outs.append(nvtx_tf.ops.end(y * float(b), ctx))
        return tf.add_n(outs)

    x = tf.constant(1.0)
    step(x)
    errors = []

    def worker():
        try:
            for _ in range(STEPS_PER_THREAD):
                step(x)
        except Exception as exc:  # noqa: BLE001 - surfaced below
            errors.append(exc)

    with capture() as rec:
        threads = [threading.Thread(target=worker) for _ in range(THREADS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert not errors
    total = THREADS * STEPS_PER_THREAD
    counts = {}
    for r in rec.ranges:
        counts[r.message] = counts.get(r.message, 0) + 1
    for b in range(BRANCHES):
        assert counts.get(f"branch {b}") == total, (b, counts.get(f"branch {b}"))
    assert not rec.open_ranges
    assert rec.damaged_chunks == 0


def test_million_ranges_one_process_memory_bounded():
    n = 1_000_000

    @tf.function
    def run():
        def body(i):
            i2, ctx = nvtx_tf.ops.start(i, "tick", "Long", payload=i)
            return (nvtx_tf.ops.end(i2, ctx) + 1,)

        return tf.while_loop(lambda i: i < n, body, (tf.constant(0, tf.int64),))

    run.get_concrete_function()
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with capture() as rec:
        run()
        recording_growth_mib = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before) / 1024
    assert rec.count(message="tick", domain="Long") == n
    assert not rec.open_ranges
    payloads = sorted(r.payload for r in rec.find(message="tick"))
    assert payloads[0] == 0 and payloads[-1] == n - 1
    # 2M events (~48 MB on disk) while recording: the recorder maps one chunk per thread.
    assert recording_growth_mib < 32, recording_growth_mib
