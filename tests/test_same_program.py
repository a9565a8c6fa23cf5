"""The annotated program is the same program: every way of annotating leaves the ops that
TensorFlow executes in a training step unchanged (NVTX ops aside), on models where
TensorFlow skips gradient work: frozen layers, stop_gradient, integer inputs.

The judge is TensorFlow's own runtime (run metadata: the partition graphs it executes
after pruning and Grappler), not our recorder. Before the backward ops were made
stateless, the annotated frozen base ran every Conv2DBackpropInput and ReluGrad of the
base; see gradients.py.
"""

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import keras
import numpy as np
import pytest
import same_program as sp
import tensorflow as tf
from conftest import _child_env

import nvtx_plugins_tf as nvtx_tf
from nvtx_plugins_tf.keras.layers import NVTXEnd, NVTXStart
from nvtx_plugins_tf.testing import capture

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


def _plain(layer):
    return layer


def _nvtx_range(layer):
    return nvtx_tf.keras.NVTXRange(layer)


def _start_end_layers(layer):
    """NVTXStart/NVTXEnd around ``layer`` (functional models only)."""

    def call(x):
        x, marker_id, domain_id = NVTXStart(message=layer.name, domain_name="Forward")(x)
        return NVTXEnd(grad_domain_name="Backward")([layer(x), marker_id, domain_id])

    call.trainable = layer.trainable
    return call


def _assert_same(name, plain, annotated):
    assert sp.diff(plain, annotated) == {}, f"{name}: op types that differ (plain, annotated)"


@pytest.mark.filterwarnings("ignore:Gradients do not exist")
@pytest.mark.parametrize("model_name", sorted(sp.MODELS))
def test_annotate_fit_runs_the_same_ops(model_name):
    build = sp.MODELS[model_name]
    plain = sp.fit_ops(*build(keras, _plain))
    model, kind = build(keras, _plain)
    annotated = sp.fit_ops(nvtx_tf.keras.annotate(model), kind)
    _assert_same(model_name, plain, annotated)


@pytest.mark.filterwarnings("ignore:Gradients do not exist")
@pytest.mark.parametrize("model_name", ["frozen_base", "embedding", "stop_gradient", "batchnorm_inference"])
def test_nvtx_range_fit_runs_the_same_ops(model_name):
    build = sp.MODELS[model_name]
    _assert_same(model_name, sp.fit_ops(*build(keras, _plain)), sp.fit_ops(*build(keras, _nvtx_range)))


@pytest.mark.parametrize("model_name", ["partially_frozen", "frozen_branch"])
def test_start_end_layers_fit_runs_the_same_ops(model_name):
    build = sp.MODELS[model_name]
    _assert_same(model_name, sp.fit_ops(*build(keras, _plain)), sp.fit_ops(*build(keras, _start_end_layers)))


@pytest.mark.parametrize("model_name", ["frozen_base", "partially_frozen", "embedding"])
def test_annotate_gradient_tape_runs_the_same_ops(model_name):
    build = sp.MODELS[model_name]
    plain = sp.tape_ops(*build(keras, _plain))
    model, kind = build(keras, _plain)
    _assert_same(model_name, plain, sp.tape_ops(nvtx_tf.keras.annotate(model), kind))


class _Tower(tf.Module):
    """A frozen embedding table and a frozen layer under trainable ones, with stop_gradient,
    annotated (or not) with ops.start/end, @ops.trace and ops.range."""

    def __init__(self, annotate):
        super().__init__()
        rng = np.random.default_rng(3)
        self.table = tf.Variable(rng.normal(size=(20, 4)).astype("float32"), trainable=False)
        self.frozen = tf.Variable(rng.normal(size=(4, 8)).astype("float32"), trainable=False)
        self.w1 = tf.Variable(rng.normal(size=(8, 8)).astype("float32"))
        self.w2 = tf.Variable(rng.normal(size=(8, 1)).astype("float32"))
        self.annotate = annotate

    def _region(self, message, fn, x):
        if not self.annotate:
            return fn(x)
        x, ctx = nvtx_tf.ops.start(x, message, "Forward", grad_domain_name="Backward")
        return nvtx_tf.ops.end(fn(x), ctx)

    def __call__(self, tokens):
        x = self._region("embed", lambda t: tf.reduce_mean(tf.gather(self.table, t), axis=1), tokens)
        x = self._region("frozen", lambda h: tf.nn.relu(h @ self.frozen), x)
        traced = nvtx_tf.ops.trace("w1", "Forward", grad_domain_name="Backward") if self.annotate else (lambda f: f)
        x = traced(lambda h: tf.nn.relu(h @ self.w1))(x)
        x = tf.stop_gradient(x) + x  # half of the gradient is stopped
        if self.annotate:
            with nvtx_tf.ops.range("head", "Forward"):
                return x @ self.w2
        return x @ self.w2


def test_ops_start_end_trace_range_tape_runs_the_same_ops():
    tokens = tf.constant(np.random.default_rng(0).integers(0, 20, size=(8, 5)).astype("int32"))

    def ops_of(annotate):
        tower = _Tower(annotate)
        optimizer = tf.keras.optimizers.SGD(0.01)

        @tf.function
        def step(t):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(tower(t)))
            grads = tape.gradient(loss, tower.trainable_variables)
            optimizer.apply_gradients(zip(grads, tower.trainable_variables))
            return loss

        return sp.executed_ops(lambda: step(tokens))

    _assert_same("tower", ops_of(False), ops_of(True))


def _record_annotated_fit(model, kind):
    """annotate(model), fit once (tracing), record a second fit; (recording, steps)."""
    nvtx_tf.keras.annotate(model)
    x, y = sp.data(*kind)
    model.compile(optimizer="sgd", loss="mse")
    model.fit(x, y, batch_size=sp.BATCH, verbose=0)
    with capture() as rec:
        model.fit(x, y, batch_size=sp.BATCH, verbose=0)
    return rec, len(x) // sp.BATCH


def test_frozen_layers_get_a_forward_range_and_no_backward_range():
    model, kind = sp.frozen_base(keras, _plain)
    base = model.layers[0]
    rec, steps = _record_annotated_fit(model, kind)
    for layer in base.layers:
        assert rec.count(message=layer.name, domain="Forward") == steps, layer.name
        assert rec.count(message=layer.name, domain="Backward") == 0, layer.name
    head = model.layers[-1].name
    assert rec.count(message=head, domain="Forward") == steps
    assert rec.count(message=head, domain="Backward") == steps
    assert not rec.open_ranges


def test_lowest_trainable_layer_backward_range_closes_after_its_gradients():
    """The input gradient of the lowest trainable layer is pruned (frozen layers below):
    its backward range still ends, after the gradients of its own weights."""
    model, kind = sp.partially_frozen(keras, _plain)
    rec, steps = _record_annotated_fit(model, kind)
    names = [layer.name for layer in model.layers[1:]]
    assert [rec.count(message=n, domain="Backward") for n in names] == [0, 0, steps, steps]
    assert not rec.open_ranges
    for f, b in zip(rec.find(message=names[2], domain="Forward"), rec.find(message=names[2], domain="Backward")):
        assert f.end_ns <= b.start_ns < b.end_ns


_SUBPROCESS = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, {here!r})
    import tensorflow as tf
    import same_program as sp
    {keras_import}
    import nvtx_plugins_tf as nvtx_tf
    results = {{}}
    for name in {models!r}:
        build = sp.MODELS[name]
        plain = sp.fit_ops(*build(keras, lambda layer: layer))
        model, kind = build(keras, lambda layer: layer)
        {annotate}
        results[name] = sp.diff(plain, sp.fit_ops(model, kind))
    print("RESULT", sp.report(results))
    """
)


def _run(script, env_extra, prefix=()):
    env = _child_env(**env_extra)
    proc = subprocess.run(
        [*prefix, sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=600, cwd=ROOT
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    assert line, proc.stdout[-2000:] + proc.stderr[-2000:]
    return json.loads(line[-1][len("RESULT ") :])


def test_tf_keras_annotate_fit_runs_the_same_ops():
    script = _SUBPROCESS.format(
        here=str(HERE),
        keras_import="import tf_keras as keras; assert tf.keras.__name__.startswith('tf_keras')",
        models=["frozen_base", "partially_frozen", "embedding", "batchnorm_inference"],
        annotate="nvtx_tf.keras.annotate(model)",
    )
    results = _run(script, {"TF_USE_LEGACY_KERAS": "1"})
    assert results == {name: {} for name in results} and len(results) == 4


_OPS_SCRIPT = textwrap.dedent(
    """
    import json, sys
    sys.path.insert(0, {here!r})
    import keras
    import same_program as sp
    ops = {{}}
    for name in {models!r}:
        ops[name] = sp.fit_ops(*sp.MODELS[name](keras, lambda layer: layer))
    print("RESULT", json.dumps(ops, sort_keys=True))
    """
)


def test_record_keras_layers_runs_the_same_ops(tmp_path):
    """``record --keras-layers`` annotates every model of an unmodified script; the script
    executes the same ops with and without it."""
    script = _OPS_SCRIPT.format(here=str(HERE), models=["frozen_base", "partially_frozen"])
    plain = _run(script, {})
    prefix = (sys.executable, "-m", "nvtx_plugins_tf", "record", "--keras-layers", "-o", str(tmp_path / "run"), "--")
    annotated = _run(script, {}, prefix)
    assert annotated == plain
    from nvtx_plugins_tf.recorder.recording.reader import load

    recording = load(tmp_path / "run.nvtxrec")
    assert any(r.domain == "Backward" for r in recording.events), "the models were not annotated"


def test_recompute_grad_runs_the_same_ops():
    """Gradient checkpointing: the tape inside the custom gradient returns a gradient for
    the data input that the outer step does not use; annotation keeps it unused."""

    def ops_of(annotate):
        w = tf.Variable(tf.ones([8, 8]))
        v = tf.Variable(tf.ones([8, 1]))

        @tf.recompute_grad
        def block(h):
            if annotate:
                h, ctx = nvtx_tf.ops.start(h, "block", "Forward", grad_domain_name="Backward")
            h = tf.nn.relu(tf.matmul(h, w))
            return nvtx_tf.ops.end(h, ctx) if annotate else h

        @tf.function
        def step(x):
            with tf.GradientTape() as tape:
                loss = tf.reduce_sum(tf.matmul(block(x), v))
            return tape.gradient(loss, [w, v])

        return sp.executed_ops(lambda: step(tf.ones([4, 8])))

    _assert_same("recompute_grad", ops_of(False), ops_of(True))
