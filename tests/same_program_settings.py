"""The settings cells of the same-program matrix (issue 43): helpers of
tests/test_same_program_matrix.py, beside the families of same_program_matrix.py.

* ``compile(jit_compile=True)``, the documented behaviour (docs/keras.md): Keras 3 reads the
  annotated layers' ``supports_jit = False`` (XLA cannot compile the NVTX ops) and trains the
  annotated model without XLA, with its warning: bit for bit as the plain model compiled with
  ``jit_compile=False``. tf_keras reads no ``supports_jit``: it compiles the step with XLA and
  the ranges are dropped (one warning): bit for bit as the plain model with
  ``jit_compile=True``. (No Dropout there: XLA seeds a stateful random op anew at each
  compilation, so two plain copies under XLA differ already.)
* ``MirroredStrategy`` on two logical CPUs (2 replicas, the batch split between them): plain
  and annotated built and compiled in the strategy's scope. The logical devices must be
  made before TensorFlow's runtime starts: a fresh process (``python same_program_settings.py
  --mirrored``).
* A custom training loop with ``nvtx_plugins_tf.ops.start``/``end`` (a ``tf.function`` step
  with a ``GradientTape``: a range around the forward pass and the loss, one around the
  optimizer's update) against the same loop without them.
* ``record --keras-layers`` on an unmodified script: ``python same_program_settings.py
  --unmodified OUT`` trains families with ``tf.keras`` and imports nothing of the package
  itself; run plainly and under ``nvtx-tf record --keras-layers`` (which annotates every
  model of the process), the two pickles it writes are compared.
* ``--no-arithmetic``: the Transformer block with Grappler's arithmetic optimizer off, the
  control of the documented exception (the plain graph's residual sums reassociated by
  ``AddOpsRewrite`` across the attention's edge, docs/keras.md).
* ``--application``: a Keras Applications model (MobileNetV2, annotate() only): the whole
  comparison; on tf_keras also the training alone (losses, weights after every step,
  gradients) and the whole comparison again with Grappler's remapper off (docs/keras.md).
"""

from __future__ import annotations

import json
import pickle
import sys

import numpy as np
import same_program_matrix as spm
import tensorflow as tf

JIT_FAMILIES = {"keras": ("mlp_softmax", "cnn_batchnorm_dropout"), "tf_keras": ("mlp_softmax", "multi_io")}
MIRRORED_FAMILIES = ("mlp_softmax", "cnn_batchnorm_dropout")
UNMODIFIED_FAMILIES = ("mlp_softmax", "cnn_batchnorm_dropout")
LOOP_STEPS = 20


def jit_compile(styles=tuple(spm.STYLES)) -> dict:
    """{"family/style/jit_compile": None or the first difference}: annotated with
    ``jit_compile=True`` against plain with ``jit_compile=False`` (Keras 3) or ``True``
    (tf_keras)."""
    kind = spm._keras().__name__.split(".")[0]
    results = {}
    for family in JIT_FAMILIES[kind]:
        plain = spm.train(family, None, jit_compile=kind == "tf_keras")
        for style in styles:
            results[f"{family}/{style}/jit_compile"] = _cell(family, plain, style, jit_compile=True)
    return results


def two_logical_cpus() -> None:
    """Split the CPU into two logical devices (before anything starts TensorFlow's runtime)."""
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)


def mirrored(families=MIRRORED_FAMILIES, styles=tuple(spm.STYLES)) -> dict:
    """{"family/style/mirrored": ...}: plain and annotated, each under a MirroredStrategy
    over the two logical CPUs."""
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    assert strategy.num_replicas_in_sync == 2
    results = {}
    for family in families:
        plain = spm.train(family, None, strategy=strategy)
        for style in styles:
            results[f"{family}/{style}/mirrored"] = _cell(family, plain, style, strategy=strategy)
    return results


def no_arithmetic(family="transformer_block", styles=tuple(spm.STYLES)) -> dict:
    """{"family/style/no_arithmetic": ...} with Grappler's arithmetic optimizer off."""
    tf.config.optimizer.set_experimental_options({"arithmetic_optimization": False})
    try:
        plain = spm.train(family, None)
        return {f"{family}/{style}/no_arithmetic": _cell(family, plain, style) for style in styles}
    finally:
        tf.config.optimizer.set_experimental_options({"arithmetic_optimization": True})


def application(family="mobilenet_v2", controls=True) -> dict:
    """{"family/annotate": ...}; with ``controls`` (tf_keras's) also "family/annotate/training"
    (the same without predict) and "family/annotate/no_remapping" (the whole comparison with
    Grappler's remapper off)."""
    plain, annotated = spm.train(family, None), spm.train(family, "annotate")
    results = {f"{family}/annotate": spm.compare(family, plain, annotated)}
    if not controls:
        return results
    results[f"{family}/annotate/training"] = spm.compare(family, plain, {**annotated, "predict": plain["predict"]})
    tf.config.optimizer.set_experimental_options({"remapping": False})
    try:
        results[f"{family}/annotate/no_remapping"] = _cell(family, spm.train(family, None), "annotate")
    finally:
        tf.config.optimizer.set_experimental_options({"remapping": True})
    return results


def _cell(family, plain, style, **train_args):
    try:
        return spm.compare(family, plain, spm.train(family, style, **train_args))
    except Exception as exc:  # noqa: BLE001 - a cell that cannot even run is a failing cell
        return f"{family}: {type(exc).__name__}: {str(exc)[:300]}"


# ------------------------------------------------------------------ custom training loop
def custom_loop(annotated: bool, family: str = "transformer_block") -> dict:
    """``family`` trained LOOP_STEPS steps by a ``tf.function`` step of its own: the losses,
    the weights after each step. Annotated: ``ops.start``/``end`` around the forward pass
    and loss (backward range "Step grad") and around the optimizer's update."""
    keras = spm._keras()
    keras.utils.set_random_seed(spm.SEED)
    model, compile_args, (x, y) = spm.FAMILIES[family](keras, spm._plain)
    loss_fn = compile_args["loss"]
    optimizer = keras.optimizers.Adam(1e-2)
    variables = model.trainable_variables

    @tf.function
    def step(x, y):
        import nvtx_plugins_tf as nvtx_tf

        with tf.GradientTape() as tape:
            if annotated:
                x, forward = nvtx_tf.ops.start(x, message="Step", domain_name="Loop", grad_message="Step grad")
            loss = loss_fn(y, model(x, training=True))
            if annotated:
                loss = nvtx_tf.ops.end(loss, forward)
        grads = tape.gradient(loss, variables)
        if annotated:
            grads, update = nvtx_tf.ops.start(grads, message="Update", domain_name="Loop")
        optimizer.apply_gradients(zip(grads, variables))
        if annotated:
            nvtx_tf.ops.end(None, update)
        return loss

    steps = []
    for i in range(LOOP_STEPS):
        batch = slice(i * spm.BATCH, (i + 1) * spm.BATCH)
        loss = step(tf.constant(x[batch]), tf.constant(y[batch]))
        steps.append(({"loss": float(loss)}, [np.array(w) for w in model.get_weights()]))
    names = [getattr(w, "path", None) or w.name for w in model.weights]
    return {"names": names, "steps": steps, "grads": [], "predict": spm._flat(model(x[: spm.BATCH]))}


def custom_loops(families=("transformer_block", "mlp_softmax")) -> dict:
    cells = {}
    for family in families:
        plain, annotated = custom_loop(False, family), custom_loop(True, family)
        cells[f"{family}/ops_start_end/custom_loop"] = spm.compare(family, plain, annotated)
    return cells


# ------------------------------------------------------------------ an unmodified script
def unmodified(path: str) -> None:
    """Train UNMODIFIED_FAMILIES plainly with ``tf.keras`` (nothing of nvtx_plugins_tf is
    imported here: under ``record --keras-layers`` the recorder annotates the models) and
    pickle the results to ``path``."""
    results = {family: spm.train(family, None, keras=tf.keras) for family in UNMODIFIED_FAMILIES}
    results["imported nvtx_plugins_tf.keras"] = "nvtx_plugins_tf.keras" in sys.modules
    with open(path, "wb") as out:
        pickle.dump(results, out)


if __name__ == "__main__":
    # python same_program_settings.py --unmodified OUT
    #   | [--matrix] [--saturated] [--mirrored] [--jit] [--loop] [--no-arithmetic] [--application]: one JSON line
    args = sys.argv[1:]
    if args[:1] == ["--unmodified"]:
        unmodified(args[1])
        sys.exit(0)
    if "--mirrored" in args:
        two_logical_cpus()
    results = spm.run_matrix(list(spm.FAMILIES), list(spm.STYLES)) if "--matrix" in args else {}
    if "--saturated" in args:
        results["saturated"] = spm.saturated()
    for flag, run in (("--mirrored", mirrored), ("--jit", jit_compile), ("--loop", custom_loops)):
        if flag in args:
            results.update(run())
    if "--no-arithmetic" in args:
        results.update(no_arithmetic())
    if "--application" in args:
        results.update(application(controls=spm._keras().__name__.startswith("tf_keras")))
    print("RESULT " + json.dumps(results))
