"""A failed automatic build of the op library is tried once, not by every process (issue 34).

Before, every ``python`` that imported TensorFlow and the package compiled the op library
again when it could not be built, twice (at import and at the first op): minutes of g++ per
start on a loaded machine. Now the failure is remembered in the per-user cache folder of that
TensorFlow, for those sources: said once per process with the log's path, not retried until the
sources change or ``python -m nvtx_plugins_tf build`` is run.

Here the failure is real: a copy of the checkout whose op sources do not compile, loaded with an
empty ``XDG_CACHE_HOME``.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from conftest import _child_env
from test_install import copy_checkout

BUILDING = "nvtx_plugins_tf: building the op library"
#: import, then an op: before, each of the two built (and failed) again
SCRIPT = """
import warnings
import tensorflow as tf
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import nvtx_plugins_tf as nvtx_tf
for w in caught:
    print("WARNING", w.message)
try:
    nvtx_tf.ops.start(tf.ones([2]), message="x")
except ImportError as exc:
    print("OPS", exc)
"""


@pytest.fixture(scope="module")
def broken(tmp_path_factory) -> Path:
    """A checkout copy whose first op source stops the compiler at once."""
    copy = copy_checkout(tmp_path_factory.mktemp("broken") / "src")
    first = sorted((copy / "cc_ops" / "tf_ops").glob("*.cc"))[0]
    first.write_text("#error this op source is broken on purpose (tests/test_failed_build.py)\n" + first.read_text())
    return copy


def _load(source: Path, cache: Path) -> subprocess.CompletedProcess:
    env = _child_env(XDG_CACHE_HOME=cache, TF_CPP_MIN_LOG_LEVEL=3)
    env.pop("NVTX_TF_NO_AUTO_BUILD", None)
    return subprocess.run(
        [sys.executable, "-c", SCRIPT], cwd=source, env=env, capture_output=True, text=True, timeout=900
    )


def test_a_failed_build_is_tried_once_and_said_with_its_log(broken, tmp_path):
    cache = tmp_path / "cache"
    first = _load(broken, cache)
    assert first.returncode == 0, first.stderr[-3000:]
    assert first.stderr.count(BUILDING) == 1, first.stderr[-3000:]  # not again at the first op
    (warning,) = [line for line in first.stdout.splitlines() if line.startswith("WARNING")]
    assert "automatic build failed" in warning and "run: python -m nvtx_plugins_tf build tf_ops" in warning, warning
    (log,) = cache.glob("nvtx_plugins_tf/tf-*/libnvtx_tf_ops.so.build.log")
    assert str(log) in warning, warning
    assert "broken on purpose" in log.read_text()  # the compiler's own output
    assert "OPS" in first.stdout and str(log) in first.stdout, first.stdout

    second = _load(broken, cache)  # another process: told, not built again
    assert second.returncode == 0, second.stderr[-3000:]
    assert BUILDING not in second.stderr, second.stderr[-3000:]
    (warning,) = [line for line in second.stdout.splitlines() if line.startswith("WARNING")]
    assert "failed before for these sources and this TensorFlow, not tried again" in warning, warning
    assert str(log) in warning and log.is_file(), warning


def test_changed_sources_are_built_again(broken, tmp_path):
    cache = tmp_path / "cache"
    assert _load(broken, cache).stderr.count(BUILDING) == 1
    first = sorted((broken / "cc_ops" / "tf_ops").glob("*.cc"))[0]
    first.write_text(first.read_text() + "\n// changed\n")  # still broken, but other sources
    again = _load(broken, cache)
    assert again.stderr.count(BUILDING) == 1, again.stderr[-3000:]


def test_no_compiler_is_one_line_per_moment_and_not_remembered(broken, tmp_path):
    """No g++ on PATH (issue 43 row 6): no "building the op library" line (nothing is built),
    the import's warning and the first op's ImportError are each the one line naming the fix,
    and nothing is remembered: each process looks again (a look-up on PATH), so installing
    the compiler is all it takes."""
    cache = tmp_path / "cache"
    for _ in range(2):
        env = _child_env(XDG_CACHE_HOME=cache, TF_CPP_MIN_LOG_LEVEL=3, PATH=str(Path(sys.executable).parent))
        env.pop("NVTX_TF_NO_AUTO_BUILD", None)
        proc = subprocess.run(
            [sys.executable, "-c", SCRIPT], cwd=broken, env=env, capture_output=True, text=True, timeout=900
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert BUILDING not in proc.stderr, proc.stderr[-3000:]
        said = [line for line in proc.stdout.splitlines() if line.startswith(("WARNING", "OPS"))]
        assert len(said) == 2, proc.stdout
        for line in said:
            assert line.endswith(
                "the op library is not built: no C++ compiler: g++ was not found on PATH. Install it "
                "(Debian/Ubuntu: apt-get install g++; Fedora: dnf install gcc-c++), then run: "
                "python -m nvtx_plugins_tf build"
            ), line
        assert not list(cache.glob("nvtx_plugins_tf/*/build-failed.json"))
