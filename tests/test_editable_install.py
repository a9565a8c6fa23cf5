"""``pip install -e .`` leaves each native library with its build stamp (issue 34).

setuptools copies an editable install's libraries from its build folder back into the source
tree, but not the stamps beside them (``libX.json``), and the loaders refuse a library without
one: ``doctor`` said "refused: no build stamp" and every library was built again into the
per-user cache. ``make`` hid it by running the build script after pip. Here pip alone, on an
unbuilt copy of the checkout, the way a user installs it.
"""

from __future__ import annotations

import os
import subprocess
import sys

from test_install import copy_checkout

from nvtx_plugins_tf import _native_libs

BUILT_BY_PIP = ("recorder", "reader", "host")  # pip's isolated build has no TensorFlow


def test_editable_install_leaves_verified_libraries_with_their_stamps(tmp_path):
    # (--ignore-installed: else pip uninstalls this venv's own install of the package first,
    # whatever --prefix says, and every later test's subprocess loses nvtx_plugins_tf)
    source = copy_checkout(tmp_path / "src")
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--ignore-installed",
            "--prefix",
            tmp_path / "prefix",
            "-e",
            ".",
        ],
        cwd=source,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    native = source / "nvtx_plugins_tf" / "_native"
    for target in BUILT_BY_PIP:
        library = native / _native_libs.LIBRARY_NAMES[target]
        identity = {"target": target, **_native_libs.source_identity(target)}  # the copy's sources are ours
        assert library.with_suffix(".json").is_file(), sorted(p.name for p in native.iterdir())
        assert _native_libs.library_problem(library, identity) is None
