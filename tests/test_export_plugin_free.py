"""Plugin-free artifacts from an annotated model (issue 37, row 4): what is exported inside
``nvtx_plugins_tf.ops.disabled()`` loads and runs in a process where nvtx_plugins_tf cannot
be imported (its ops never registered), and converts to TFLite without custom ops.

Without the block the same export holds NvtxStart and fails to load there ("Op type not
registered"): checked too, so that the plugin-free process really is one.
"""

import subprocess
import sys
import textwrap

import pytest

EXPORT = """
import numpy as np, tensorflow as tf
import nvtx_plugins_tf as nvtx_tf
from nvtx_plugins_tf.keras import keras, annotate
from nvtx_plugins_tf.keras.layers import NVTXStart, NVTXEnd
inp = keras.Input((8,))
x, marker_id, domain_id = NVTXStart(message="dense", domain_name="Forward")(inp)
x = keras.layers.Dense(4, activation="relu")(x)
x = NVTXEnd()([x, marker_id, domain_id])
m = annotate(keras.Model(inp, keras.layers.Dense(2)(x)))
x = np.ones((2, 8), "float32")
np.save("{d}/y.npy", m.predict(x, verbose=0))  # traced once with the ops
module = tf.Module()
module.w = tf.Variable(2.0)

@tf.function(input_signature=[tf.TensorSpec([None, 8])])
def scaled(x):
    with nvtx_tf.ops.range("scale"):
        y, ctx = nvtx_tf.ops.start(x * module.w, "scaled", domain_name="Forward")
        return nvtx_tf.ops.end(y, ctx)

m.export("{d}/with_ops", verbose=False)
with nvtx_tf.ops.disabled():
    m.export("{d}/exported", verbose=False)
    module.scaled = scaled
    tf.saved_model.save(module, "{d}/module")
    converter = tf.lite.TFLiteConverter.from_keras_model(m)
    open("{d}/m.tflite", "wb").write(converter.convert())
for folder in ("exported", "module"):
    assert b"NvtxStart" not in open(f"{d}/{{folder}}/saved_model.pb", "rb").read(), folder
assert b"NvtxStart" in open("{d}/with_ops/saved_model.pb", "rb").read()
print("EXPORTED")
"""

SERVE = """
import sys
sys.modules["nvtx_plugins_tf"] = None  # not installed here: importing it raises ImportError
import numpy as np, tensorflow as tf
from tensorflow.python.framework import op_def_registry
assert op_def_registry.get("NvtxStart") is None
x, y = np.ones((2, 8), "float32"), np.load("{d}/y.npy")
exported = tf.saved_model.load("{d}/exported")
served = exported.serve(tf.constant(x)).numpy()
assert np.allclose(served, y, atol=1e-6), (served, y)
module = tf.saved_model.load("{d}/module")
assert module.scaled(tf.constant(x)).numpy().tolist() == (2 * x).tolist()
interpreter = tf.lite.Interpreter(model_path="{d}/m.tflite")
interpreter.resize_tensor_input(interpreter.get_input_details()[0]["index"], [2, 8])
interpreter.allocate_tensors()
interpreter.set_tensor(interpreter.get_input_details()[0]["index"], x)
interpreter.invoke()
lite = interpreter.get_tensor(interpreter.get_output_details()[0]["index"])
assert np.allclose(lite, y, atol=1e-5), (lite, y)
try:
    tf.saved_model.load("{d}/with_ops")
except Exception as exc:
    assert "NvtxStart" in str(exc), exc
else:
    raise AssertionError("an export holding NvtxStart loaded without the plugin")
print("SERVED")
"""


def _run(code, env):
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True, text=True, timeout=300
    )


@pytest.mark.filterwarnings("ignore")
def test_disabled_export_loads_and_converts_without_the_plugin(tmp_path, child_env):
    env = child_env(None, TF_CPP_MIN_LOG_LEVEL="3")
    proc = _run(EXPORT.format(d=tmp_path), env)
    assert proc.returncode == 0 and "EXPORTED" in proc.stdout, proc.stderr[-3000:]
    env.pop("PYTHONPATH", None)
    proc = _run(SERVE.format(d=tmp_path), env)
    assert proc.returncode == 0 and "SERVED" in proc.stdout, proc.stderr[-3000:]
