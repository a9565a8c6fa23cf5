"""Bad input: clear TypeError/ValueError at graph build; forged ids never crash."""

import subprocess
import sys
import textwrap

import pytest
import tensorflow as tf

import nvtx_plugins_tf as nvtx_tf
from nvtx_plugins_tf.ops import _loader


@pytest.mark.parametrize(
    "kwargs, error, argument",
    [
        (dict(message=3), TypeError, "message"),
        (dict(message=b"bytes"), TypeError, "message"),
        (dict(message="m", domain_name=5), TypeError, "domain_name"),
        (dict(message="m", grad_message=1.5), TypeError, "grad_message"),
        (dict(message="m", color="no-such-color-xyz"), ValueError, "color"),
        (dict(message="m", color=-1), ValueError, "color"),
        (dict(message="m", color=2**40), ValueError, "color"),
        (dict(message="m", category="x"), TypeError, "category"),
        (dict(message="m", category=-2), ValueError, "category"),
        (dict(message="m", payload=1.5), TypeError, "payload"),
        (dict(message="m", payload=tf.constant([1, 2])), ValueError, "payload"),
        (dict(message="m", payload=tf.constant(1.0)), TypeError, "payload"),
        (dict(message="m\0x"), ValueError, "message"),
    ],
)
def test_start_argument_errors_name_the_argument(kwargs, error, argument):
    with pytest.raises(error, match=argument):
        nvtx_tf.ops.start(tf.ones([1]), **kwargs)


def test_end_context_errors():
    x, ctx = nvtx_tf.ops.start(tf.ones([1]), "once")
    nvtx_tf.ops.end(x, ctx)
    with pytest.raises(ValueError, match="already ended"):
        nvtx_tf.ops.end(x, ctx)
    with pytest.raises(TypeError, match="nvtx_context"):
        nvtx_tf.ops.end(x, (1, 2))
    with pytest.raises(TypeError, match="nvtx_context"):
        nvtx_tf.ops.end(x, None)


def test_end_with_context_from_another_graph():
    _, ctx = nvtx_tf.ops.start(tf.ones([1]), "eager one")

    @tf.function
    def f(x):
        return nvtx_tf.ops.end(x, ctx)

    with pytest.raises(ValueError, match="another graph"):
        f(tf.ones([1]))
    nvtx_tf.ops.end(tf.ones([1]), ctx)


def test_forged_range_ids_do_not_crash():
    ops = _loader.load()
    for forged in [0, 1, -1, 2**62, 123456789, -(2**63)]:
        out, host = ops.nvtx_end([tf.ones([2])], [], [tf.constant(forged, tf.int64)], [], domain_name="forged")
        assert out[0].numpy().tolist() == [1.0, 1.0]
    with pytest.raises(tf.errors.InvalidArgumentError, match="range_id"):
        ops.nvtx_end([], [], [tf.constant([1, 2], tf.int64)], [])


def test_raw_op_bad_attributes_are_invalid_argument():
    ops = _loader.load()
    with pytest.raises(tf.errors.InvalidArgumentError, match="color"):
        ops.nvtx_start([], [], [], [], message="m", color=-5)


def test_mismatched_library_gives_one_line_with_command(tmp_path):
    """A library stamped for another TensorFlow is rebuilt, or refused with the command."""
    script = textwrap.dedent(
        f"""
        import json, os, shutil, sys
        from pathlib import Path
        os.environ["NVTX_TF_NO_AUTO_BUILD"] = "1"
        os.environ["XDG_CACHE_HOME"] = {str(tmp_path / "cache")!r}
        import nvtx_plugins_tf
        nvtx_plugins_tf._disable_autoload()  # the test loads a library of its own below
        import nvtx_plugins_tf._native_libs as libs
        import nvtx_plugins_tf.ops._loader as loader
        fake = Path({str(tmp_path / "native")!r}); fake.mkdir()
        shutil.copy(libs.NATIVE_DIR / "libnvtx_tf_ops.so", fake / "libnvtx_tf_ops.so")
        (fake / "libnvtx_tf_ops.json").write_text(json.dumps({{"tf_version": "2.0.0", "abi": "x"}}))
        loader.NATIVE_DIR = fake
        try:
            loader.load()
        except ImportError as e:
            print("ERR:" + str(e))
        """
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    line = [ln for ln in out.stdout.splitlines() if ln.startswith("ERR:")]
    assert line, out.stdout + out.stderr
    assert "TensorFlow 2.0.0" in line[0] and "python -m nvtx_plugins_tf build" in line[0]
    assert "undefined symbol" not in line[0]
