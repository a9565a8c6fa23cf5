"""TensorFlow's own per-op NVTX ranges on demand (issue 13, item 1)."""

import pytest
import tensorflow as tf

import nvtx_plugins_tf as nvtx_tf
from nvtx_plugins_tf.testing import capture

STEPS = 3


def _training_step():
    w = tf.Variable(tf.ones([4, 4]), name="w")
    optimizer = tf.keras.optimizers.SGD(0.1)

    @tf.function
    def step(x):
        with nvtx_tf.ops.range("step", domain_name="Steps"):
            with tf.GradientTape() as tape:
                loss = tf.reduce_sum(tf.matmul(x, w))
            grads = tape.gradient(loss, [w])
            optimizer.apply_gradients(zip(grads, [w]))
        return loss

    return step


def test_one_range_per_executed_op_per_step_nested_in_the_user_range():
    step = _training_step()
    x = tf.ones([2, 4])
    step(x)
    with capture() as rec, nvtx_tf.tf_op_ranges():
        for _ in range(STEPS):
            step(x)
    assert not nvtx_tf.tf_op_ranges_enabled()  # restored on exit
    tsl = rec.find(domain="TSL")
    by_op = {}
    for r in tsl:
        by_op.setdefault(r.message.rsplit(":", 1)[-1], []).append(r)
    # the forward MatMul, its gradient and the variable update, once per step each
    matmuls = [r for r in tsl if r.message.startswith("MatMul:")]
    grads = [r for r in tsl if r.message.startswith("gradient_tape/") and "MatMul" in r.message]
    updates = [
        r
        for r in tsl
        if r.message.endswith(":AssignSubVariableOp")
        or r.message.endswith(":ResourceApplyGradientDescent")
        or r.message.endswith(":AssignVariableOp")
    ]
    assert len(matmuls) == STEPS and len(grads) == STEPS and len(updates) >= STEPS, sorted(by_op)
    # The user's range of a step encloses the op ranges of that step on its thread.
    steps = rec.find(message="step", domain="Steps")
    assert len(steps) == STEPS
    for op_range in matmuls + grads:
        enclosing = [s for s in steps if s.start_ns <= op_range.start_ns and op_range.end_ns <= s.end_ns]
        assert len(enclosing) == 1, op_range


def test_no_op_ranges_when_off():
    step = _training_step()
    x = tf.ones([2, 4])
    step(x)
    with capture() as rec:
        step(x)
    assert rec.count(domain="TSL") == 0


def test_bad_argument_names_it():
    with pytest.raises(TypeError, match="enabled"):
        nvtx_tf.tf_op_ranges("yes")


UNMODIFIED = """
import tensorflow as tf
w = tf.Variable(tf.ones([4, 4]))

@tf.function
def step(x):
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(tf.matmul(x, w))
    return tape.gradient(loss, [w])

for _ in range(3):
    step(tf.ones([2, 4]))
"""


def test_record_tf_ops_on_an_unmodified_script(tmp_path, child_env):
    import subprocess
    import sys

    from nvtx_plugins_tf.recorder.reader import load

    script = tmp_path / "train.py"
    script.write_text(UNMODIFIED)
    prefix = tmp_path / "run"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "nvtx_plugins_tf",
            "record",
            "--tf-ops",
            "-o",
            str(prefix),
            "--",
            sys.executable,
            str(script),
        ],
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    recording = load(str(prefix) + ".nvtxrec")
    # the gradient's MatMul, once per step (the forward one is pruned: only the gradient is returned)
    grads = [r for r in recording.events if r.domain == "TSL" and r.message.startswith("gradient_tape/MatMul/MatMul:")]
    assert len(grads) == 3, sorted({r.message for r in recording.events})
