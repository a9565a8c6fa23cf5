"""TensorFlow's own per-op NVTX ranges on demand (issue 13, item 1)."""

import subprocess
import sys

import pytest
import tensorflow as tf

import nvtx_plugins_tf as nvtx_tf
from nvtx_plugins_tf.testing import capture

STEPS = 3
#: TensorFlow's own NVTX calls are compiled into its CUDA builds only (not tensorflow-cpu's)
needs_cuda_build = pytest.mark.skipif(
    not tf.test.is_built_with_cuda(), reason="TensorFlow built without CUDA makes no NVTX ranges of its own"
)


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


@needs_cuda_build
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
    # The user's range of a step encloses the op ranges of that step (the forward, the
    # gradient and the update). Not necessarily on its thread: the step range is a start/end
    # range opened by one of TensorFlow's executor threads, which hands the step's other ops
    # to its pool threads as they become ready.
    steps = rec.find(message="step", domain="Steps")
    assert len(steps) == STEPS
    enclosing_steps = set()
    for op_range in matmuls + grads + updates:
        enclosing = [s for s in steps if s.start_ns <= op_range.start_ns and op_range.end_ns <= s.end_ns]
        assert len(enclosing) == 1, op_range
        enclosing_steps.add(enclosing[0].range_id)
    assert enclosing_steps == {s.range_id for s in steps}  # every step, not one step many times


def test_no_op_ranges_when_off(capture_steps):
    rec = capture_steps(_training_step(), tf.ones([2, 4]))
    assert rec.count(domain="TSL") == 0


def test_bad_argument_names_it():
    with pytest.raises(TypeError, match="enabled"):
        nvtx_tf.tf_op_ranges("yes")


# A symbol this TensorFlow does not export, in place of AnnotationStack::Enable.
MISSING = "_ZN3tsl8profiler15AnnotationStack13NoSuchFeatureEb"


@needs_cuda_build
def test_missing_symbol_is_one_clear_line(monkeypatch):
    from nvtx_plugins_tf import tf_ops_annotation

    monkeypatch.setattr(tf_ops_annotation, "_ENABLE", MISSING)
    monkeypatch.setattr(tf_ops_annotation, "_ENABLED_FLAG", MISSING)  # TensorFlow 2.16/2.17's way
    for switch in (nvtx_tf.tf_op_ranges, nvtx_tf.tf_op_ranges_enabled):
        with pytest.raises(nvtx_tf.TFOpRangesUnavailable) as info:
            switch()
        message = str(info.value)
        assert "\n" not in message, message
        assert tf.__version__ in message and "AnnotationStack::Enable" in message, message


def _record_tf_ops(script, prefix, env):
    command = [sys.executable, "-m", "nvtx_plugins_tf", "record", "--tf-ops", "-o", str(prefix), "--"]
    return subprocess.run([*command, sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=300)


# The child looks for the missing symbol, as on a TensorFlow without it, before importing
# TensorFlow (importing the package does not): record's start-up switch then runs into it.
LACKING = f"""
import nvtx_plugins_tf.tf_ops_annotation as annotation
annotation._ENABLE = annotation._ENABLED_FLAG = {MISSING!r}
import tensorflow as tf
import nvtx_plugins_tf as nvtx_tf
with nvtx_tf.ops.range("after", domain_name="Script"):
    total = tf.reduce_sum(tf.matmul(tf.ones([2, 4]), tf.ones([4, 4])))
print("LACKING ran", float(total))
"""


def test_record_tf_ops_on_a_tensorflow_lacking_the_symbol_warns_and_runs(tmp_path, child_env):
    from nvtx_plugins_tf.recorder.recording.reader import load

    script = tmp_path / "lacking.py"
    script.write_text(LACKING)
    proc = _record_tf_ops(script, tmp_path / "run", child_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "LACKING ran 32.0" in proc.stdout, proc.stdout
    warnings = [line for line in proc.stderr.splitlines() if "warning:" in line]
    assert len(warnings) == 1 and "--tf-ops" in warnings[0], proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    recording = load(str(tmp_path / "run") + ".nvtxrec")
    assert [r.message for r in recording.ranges if r.domain == "Script"] == ["after"]
    assert not [r for r in recording.events if r.domain == "TSL"]  # the op ranges stayed off


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


@needs_cuda_build
def test_record_tf_ops_on_an_unmodified_script(tmp_path, child_env):
    from nvtx_plugins_tf.recorder.recording.reader import load

    script = tmp_path / "train.py"
    script.write_text(UNMODIFIED)
    prefix = tmp_path / "run"
    proc = _record_tf_ops(script, prefix, child_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    recording = load(str(prefix) + ".nvtxrec")
    # the gradient's MatMul, once per step (the forward one is pruned: only the gradient is returned)
    grads = [r for r in recording.events if r.domain == "TSL" and r.message.startswith("gradient_tape/MatMul/MatMul:")]
    assert len(grads) == 3, sorted({r.message for r in recording.events})


@pytest.mark.skipif(tf.test.is_built_with_cuda(), reason="a CUDA build has the ranges (tests above)")
def test_tensorflow_without_cuda_says_it_has_no_ranges():
    """tensorflow-cpu: the switch exists but TensorFlow makes no NVTX call (issue 34: 0 ranges, no word)."""
    for switch in (nvtx_tf.tf_op_ranges, nvtx_tf.tf_op_ranges_enabled):
        with pytest.raises(nvtx_tf.TFOpRangesUnavailable, match="built without CUDA") as info:
            switch()
        assert "\n" not in str(info.value) and tf.__version__ in str(info.value)
