"""Messages a user meets (issue 12, item 6): what is wrong and the one command that fixes it."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


NO_COMPILER = "no C++ compiler: g++ was not found on PATH"


def _build_without_a_compiler(tmp_path, child_env, *args) -> subprocess.CompletedProcess:
    """Run the venv's Python (by its own path: a link to it elsewhere loses the venv) with
    ``args`` and a PATH holding no tools at all, so no g++ (the build looks it up on PATH)."""
    no_tools = tmp_path / "bin"
    no_tools.mkdir()
    return subprocess.run(
        [sys.executable, *args, "reader", "--out", str(tmp_path / "out")],
        env=child_env(PATH=str(no_tools)),
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_build_script_without_a_compiler_says_install_g_plus_plus(tmp_path, child_env):
    proc = _build_without_a_compiler(tmp_path, child_env, str(ROOT / "build_tools" / "build_native.py"))
    assert proc.returncode == 1
    assert NO_COMPILER in proc.stderr and "apt-get install g++" in proc.stderr, proc.stderr
    assert "Errno 2" not in proc.stderr and "Traceback" not in proc.stderr


def test_cli_build_without_a_compiler_says_it_once(tmp_path, child_env):
    proc = _build_without_a_compiler(tmp_path, child_env, "-m", "nvtx_plugins_tf", "build")
    assert proc.returncode == 1
    assert proc.stderr.startswith(f"nvtx-tf: error: build failed: {NO_COMPILER}"), proc.stderr
    assert proc.stderr.count(NO_COMPILER) == 1, proc.stderr  # printed twice before
    assert "then run: python -m nvtx_plugins_tf build" in proc.stderr and "Traceback" not in proc.stderr


def test_keras_3_tensor_in_a_tf_keras_layer_gets_a_hint(child_env):
    script = textwrap.dedent(
        """
        import tf_keras, keras
        import nvtx_plugins_tf as nvtx_tf
        try:
            nvtx_tf.keras.layers.NVTXStart(message="a")(keras.Input((4,)))
        except Exception as exc:
            print("ERROR", exc)
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", script],
        env=child_env(TF_USE_LEGACY_KERAS="1"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    # (issue 43 row 6: one line for either direction, naming the mix and the fix)
    assert "got a symbolic tensor of keras: the model mixes Keras 3" in proc.stdout, proc.stdout + proc.stderr
    assert "build it with one of them" in proc.stdout


def test_doctor_names_the_imported_copy_and_only_existing_paths(child_env):
    proc = subprocess.run(
        [sys.executable, "-m", "nvtx_plugins_tf", "doctor"],
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("nvtx_plugins_tf: ") and str(ROOT / "nvtx_plugins_tf") in lines[0]
    for line in lines:
        key, _, value = line.partition(": ")
        if key.endswith("library") and not value.startswith("not built"):
            assert os.path.isfile(value), line
