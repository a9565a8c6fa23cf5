"""Messages a user meets (issue 12, item 6): what is wrong and the one command that fixes it."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_build_without_a_compiler_says_install_g_plus_plus(tmp_path, child_env):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python").symlink_to(sys.executable)  # a PATH with Python and no g++
    env = child_env(PATH=str(bin_dir))
    proc = subprocess.run(
        [
            str(bin_dir / "python"),
            str(ROOT / "build_tools" / "build_native.py"),
            "reader",
            "--out",
            str(tmp_path / "out"),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1
    assert "no C++ compiler: g++ was not found" in proc.stderr and "apt-get install g++" in proc.stderr, proc.stderr
    assert "Errno 2" not in proc.stderr and "Traceback" not in proc.stderr


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
    assert "got KerasTensor -- a symbolic tensor of the other Keras" in proc.stdout, proc.stdout + proc.stderr


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
