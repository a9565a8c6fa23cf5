"""Models using the package's Keras layers, saved in every Keras format and loaded in a
fresh process after ``import tensorflow; import nvtx_plugins_tf`` only (issue 37, rows 3, 7).

One process saves each Keras's formats (Keras 3: ``.keras``; tf_keras: ``.keras``, ``.h5`` and
SavedModel, ``save_format="tf"``, which must warn about nothing);
each format then loads in a process of its own, which never imports ``nvtx_plugins_tf.keras``
itself (the package's import does, once TensorFlow and Keras are both there), and must give
the saved model's outputs and its ranges.
"""

import subprocess
import sys
import textwrap

import pytest

SAVE = """
import numpy as np, tensorflow as tf
from nvtx_plugins_tf.keras import keras, NVTXRange
from nvtx_plugins_tf.keras.layers import NVTXStart, NVTXEnd
inp = keras.Input((8,))
x, marker_id, domain_id = NVTXStart(message="dense", domain_name="Forward")(inp)
x = keras.layers.Dense(4)(x)
x = NVTXEnd(grad_message="dense grad", grad_domain_name="Gradient")([x, marker_id, domain_id])
out = NVTXRange(keras.layers.Dense(2, name="head"))(x)
m = keras.Model(inp, out)
x = np.ones((2, 8), "float32")
np.save("{d}/x.npy", x); np.save("{d}/y.npy", m(x).numpy())
import warnings
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    for suffix in {formats!r}:
        if suffix == "_tf":  # tf_keras SavedModel
            m.save("{d}/m" + suffix, save_format="tf")
        else:
            m.save("{d}/m" + suffix)
ours = [str(w.message) for w in caught if "nvtx_plugins_tf" in str(w.message)]
assert not ours, ours  # a normal save warns about nothing
print("SAVED")
"""

LOAD = """
import numpy as np, tensorflow as tf
{first}
import nvtx_plugins_tf
from nvtx_plugins_tf.testing import capture
{keras_import}
with capture() as rec:
    m = load_model("{d}/m{suffix}")
    y = m(np.load("{d}/x.npy")).numpy()
assert np.array_equal(y, np.load("{d}/y.npy")), (y, np.load("{d}/y.npy"))
assert rec.count(message="dense", domain="Forward") >= 1, rec.ranges
assert rec.count(message="head", domain="Forward") >= 1, rec.ranges
assert not rec.open_ranges, rec.open_ranges
print("LOADED")
"""

KERAS3_FORMATS = (".keras",)
TF_KERAS_FORMATS = (".keras", ".h5", "_tf")


def _run(code: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True, text=True, timeout=240
    )


def _saved(tmp_path_factory, child_env, legacy: bool) -> tuple:
    folder = tmp_path_factory.mktemp("legacy" if legacy else "keras3")
    env = child_env(None, TF_CPP_MIN_LOG_LEVEL="3", **({"TF_USE_LEGACY_KERAS": "1"} if legacy else {}))
    formats = TF_KERAS_FORMATS if legacy else KERAS3_FORMATS
    proc = _run(SAVE.format(d=folder, formats=formats), env)
    assert proc.returncode == 0 and "SAVED" in proc.stdout, proc.stderr[-3000:]
    (folder / "rec").mkdir()
    return folder, child_env(
        folder / "rec", TF_CPP_MIN_LOG_LEVEL="3", **({"TF_USE_LEGACY_KERAS": "1"} if legacy else {})
    )


@pytest.fixture(scope="module")
def keras3_saved(tmp_path_factory, child_env):
    return _saved(tmp_path_factory, child_env, legacy=False)


@pytest.fixture(scope="module")
def tf_keras_saved(tmp_path_factory, child_env):
    pytest.importorskip("tf_keras")
    return _saved(tmp_path_factory, child_env, legacy=True)


def _load(folder, env, suffix, keras_import, keras_first=False):
    # keras_first: Keras imported before the package (its import then registers at once)
    first = keras_import if keras_first else ""
    code = LOAD.format(
        d=folder, suffix=suffix, first=first, keras_first=keras_first, keras_import="" if keras_first else keras_import
    )
    proc = _run(code, env)
    assert proc.returncode == 0 and "LOADED" in proc.stdout, proc.stderr[-3000:]


@pytest.mark.parametrize("keras_first", [False, True], ids=["package-then-keras", "keras-then-package"])
def test_keras3_dot_keras_loads_after_import_nvtx_plugins_tf(keras3_saved, keras_first):
    folder, env = keras3_saved
    _load(folder, env, ".keras", "from keras.models import load_model", keras_first)


def test_keras3_load_through_tf_keras_attribute(keras3_saved):
    """``tf.keras.models.load_model``: Keras imported through TensorFlow's lazy attribute."""
    folder, env = keras3_saved
    _load(folder, env, ".keras", "load_model = tf.keras.models.load_model")


@pytest.mark.parametrize("suffix", TF_KERAS_FORMATS)
def test_tf_keras_formats_load_after_import_nvtx_plugins_tf(tf_keras_saved, suffix):
    folder, env = tf_keras_saved
    _load(folder, env, suffix, "from tf_keras.models import load_model")


def test_import_without_tensorflow_imports_no_keras(child_env, tmp_path):
    """The package's import never imports Keras (nor TensorFlow) itself: the registration
    waits for both to be imported by the program."""
    code = (
        "import sys, nvtx_plugins_tf; "
        "print(sorted(m for m in ('tensorflow', 'keras', 'tf_keras', 'nvtx_plugins_tf.keras') if m in sys.modules))"
    )
    proc = _run(code, child_env(None, TF_CPP_MIN_LOG_LEVEL="3"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines()[-1] == "[]"


@pytest.mark.parametrize("legacy", [False, True], ids=["keras3", "tf_keras"])
def test_dot_keras_loads_when_the_package_is_imported_before_tensorflow(keras3_saved, tf_keras_saved, legacy):
    """``import nvtx_plugins_tf`` first, then ``tensorflow`` (issue 43, row 2): TensorFlow 2.16+
    imports Keras 3 inside its own ``__init__``, so the hook at the end of Keras's import found
    TensorFlow still initializing and nothing registered the layers: "Could not locate class
    'NVTXStart'"."""
    folder, env = tf_keras_saved if legacy else keras3_saved
    keras_import = "from tf_keras.models import load_model" if legacy else "from keras.models import load_model"
    code = "import nvtx_plugins_tf\n" + textwrap.dedent(LOAD).format(
        d=folder, suffix=".keras", first="", keras_first=False, keras_import=keras_import
    )
    proc = _run(code, env)
    assert proc.returncode == 0 and "LOADED" in proc.stdout, proc.stderr[-3000:]
