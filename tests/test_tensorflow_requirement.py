"""Which TensorFlow the package takes, and what its metadata asks pip for (issue 34).

A requirement on the name ``tensorflow`` made pip install stable TensorFlow beside
tensorflow-cpu, tf-nightly or a source build; pyarrow >= 26 (refusing numpy 1.x at import) was
allowed beside TensorFlow 2.16/2.17 (numpy < 2). The whole install of each is checked by
``make compat`` (build_tools/compat.py) in fresh virtualenvs; here what one process can check.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from conftest import _child_env
from packaging.requirements import Requirement
from packaging.version import Version

from nvtx_plugins_tf import _tensorflow

tomllib = pytest.importorskip("tomllib")  # Python 3.11+

ROOT = Path(__file__).resolve().parents[1]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
#: The first pyarrow that refuses numpy 1.x at import ("pyarrow requires NumPy 2.0 or newer").
PYARROW_WITHOUT_NUMPY_1 = Version("26.0.0")
#: The newest TensorFlow that pins numpy < 2.
NEWEST_WITH_NUMPY_1 = (2, 17)


def _requirements(names: list[str]) -> dict[str, Requirement]:
    found = [Requirement(r) for r in names]
    return {r.name.lower().replace("_", "-"): r for r in found}


def test_no_requirement_names_a_tensorflow_distribution():
    base = _requirements(PROJECT["dependencies"])
    assert not {"tensorflow", "tensorflow-cpu", "tf-nightly", "tf-keras"} & set(base), sorted(base)
    assert str(_requirements(PROJECT["optional-dependencies"]["tf"])["tensorflow"].specifier) == ">=2.16"
    for extra, names in PROJECT["optional-dependencies"].items():  # tf_keras requires the name tensorflow
        if extra not in ("tf", "tf-keras"):
            assert not {"tensorflow", "tf-keras"} & set(_requirements(names)), extra


def test_pyarrow_bound_admits_no_pyarrow_that_refuses_the_numpy_of_a_supported_tensorflow():
    assert _tensorflow.MINIMUM <= NEWEST_WITH_NUMPY_1  # still supported: the bound must stay
    pyarrow = _requirements(PROJECT["dependencies"])["pyarrow"]
    assert PYARROW_WITHOUT_NUMPY_1 not in pyarrow.specifier, pyarrow
    assert Version("25.0.1") in pyarrow.specifier, pyarrow  # works with numpy 1.26 (make compat, TF 2.16)


@pytest.mark.parametrize("module", ["nvtx_plugins_tf.ops", "nvtx_plugins_tf.keras", "nvtx_plugins_tf.hooks"])
def test_without_tensorflow_the_tensorflow_parts_say_what_to_install(module):
    """An interpreter that has no TensorFlow on its path (-S: no site-packages): one line."""
    proc = subprocess.run(
        [sys.executable, "-S", "-c", f"import nvtx_plugins_tf, {module}"],
        cwd=ROOT,
        env=_child_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1, proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    expected = f"TensorFlow is not installed; {_tensorflow.INSTALL_HINT}"
    assert last == f"nvtx_plugins_tf._tensorflow.TensorFlowMissing: nvtx_plugins_tf: {expected}", last


@pytest.mark.parametrize(
    "version, ok",
    [("2.15.1", False), ("1.15.5", False), ("2.16.2", True), ("2.23.0-dev20261026", True), ("2.17.0+nv24.08", True)],
)
def test_oldest_supported_tensorflow(version, ok):
    why = _tensorflow.problem(version)
    assert (why is None) == ok, why
    if not ok:
        assert why.startswith(f"TensorFlow {version} is older than 2.16"), why
