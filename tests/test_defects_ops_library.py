"""Issue 9, items 17 and 19: loading the op library.

17: a truncated op library with a valid stamp must never reach dlopen (SIGBUS): the stamp
    records size and sha256; the loader refuses with one line, or rebuilds; the command
    in that line works when the package folder is read-only (it builds into the cache).
19: ``import tensorflow; import nvtx_plugins_tf`` (either order) registers the ops, so a
    SavedModel using them loads; with nothing built and NVTX_TF_NO_AUTO_BUILD=1 the import
    still succeeds and the loader's one line is shown.

Every scenario runs in a fresh interpreter (a crash shows as a negative return code) on a
copy of the package laid out like an installed wheel (``_build/`` holds the build script and
the sources), with its own ``XDG_CACHE_HOME``.
"""

import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import tensorflow as tf

import nvtx_plugins_tf
from nvtx_plugins_tf import recorder
from nvtx_plugins_tf.ops import _loader

ROOT = Path(__file__).resolve().parents[1]
LIB = "libnvtx_tf_ops.so"
STAMP = "libnvtx_tf_ops.json"

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def _good_library(tmp_path: Path) -> tuple[Path, dict]:
    """A verified copy of the op library this process loaded, and a valid stamp for it."""
    _loader.load()
    src = tmp_path / "good" / LIB
    src.parent.mkdir()
    shutil.copy2(_loader.library_path(), src)
    data = src.read_bytes()
    stamp = {**_loader.tensorflow_identity(), "size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    return src, stamp


def _install_copy(tmp_path: Path) -> tuple[Path, Path]:
    """A wheel-like copy of the package without the op library; returns (site, cache)."""
    site = tmp_path / "site"
    pkg = site / "nvtx_plugins_tf"
    shutil.copytree(
        ROOT / "nvtx_plugins_tf",
        pkg,
        ignore=shutil.ignore_patterns("__pycache__", "libnvtx_tf_ops.*", ".built", "*.tmp*", ".write_probe*"),
    )
    (pkg / "_build").mkdir()
    (pkg / "_build" / "__init__.py").write_text("")
    shutil.copy2(ROOT / "build_tools" / "build_native.py", pkg / "_build" / "build_native.py")
    (pkg / "_build" / "cc_ops").symlink_to(ROOT / "cc_ops")
    cache = tmp_path / "cache"
    cache.mkdir()
    return site, cache


def _place_truncated(tmp_path: Path, where: str, site: Path, cache: Path) -> Path:
    """Put the good library with its valid stamp at ``where``, then cut the library to 60 %."""
    good, stamp = _good_library(tmp_path)
    if where == "cache":
        folder = cache / "nvtx_plugins_tf" / f"tf-{stamp['tf_version']}-{stamp['abi']}"
    else:
        folder = site / "nvtx_plugins_tf" / "_native"
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy2(good, folder / LIB)
    (folder / STAMP).write_text(json.dumps(stamp))
    os.truncate(folder / LIB, stamp["size"] * 6 // 10)
    return folder / LIB


def _env(site: Path, cache: Path, **extra) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in (recorder.INJECTION_ENV, recorder.RECORD_DIR_ENV)}
    env.update(PYTHONPATH=str(site), XDG_CACHE_HOME=str(cache), TF_CPP_MIN_LOG_LEVEL="3")
    env.pop("NVTX_TF_NO_AUTO_BUILD", None)
    env.update(extra)
    return env


LOAD_SCRIPT = textwrap.dedent(
    """
    import sys
    import tensorflow as tf
    import nvtx_plugins_tf
    assert nvtx_plugins_tf.__file__.startswith(sys.argv[1]), nvtx_plugins_tf.__file__
    try:
        nvtx_plugins_tf.ops.load_library()
    except ImportError as e:
        print("ERR:" + str(e))
        sys.exit(3)
    y, ctx = nvtx_plugins_tf.ops.start(tf.ones([2]), "after load")
    nvtx_plugins_tf.ops.end(y, ctx)
    print("LOADED:" + str(nvtx_plugins_tf.ops.library_path()))
    """
)


def _run(argv, env, timeout=300):
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout, cwd="/")
    assert proc.returncode >= 0, (
        f"killed by {signal.Signals(-proc.returncode).name}\n{proc.stdout}{proc.stderr[-3000:]}"
    )
    return proc


def _tagged(proc, tag: str) -> str:
    lines = [line[len(tag) :] for line in proc.stdout.splitlines() if line.startswith(tag)]
    assert len(lines) == 1, proc.stdout + proc.stderr[-3000:]
    return lines[0]


# ------------------------------------------------------------------------------ item 17
@pytest.mark.parametrize("where", ["cache", "package"])
def test_truncated_library_with_valid_stamp_is_refused_with_one_line(tmp_path, where):
    site, cache = _install_copy(tmp_path)
    truncated = _place_truncated(tmp_path, where, site, cache)
    proc = _run([sys.executable, "-c", LOAD_SCRIPT, str(site)], _env(site, cache, NVTX_TF_NO_AUTO_BUILD="1"))
    assert proc.returncode == 3, proc.stdout + proc.stderr[-3000:]
    message = _tagged(proc, "ERR:")
    assert str(truncated) in message and "truncated" in message, message
    assert message.endswith("; run: python -m nvtx_plugins_tf build tf_ops"), message
    assert "\n" not in message


def test_truncated_cached_library_is_rebuilt_automatically(tmp_path):
    site, cache = _install_copy(tmp_path)
    truncated = _place_truncated(tmp_path, "cache", site, cache)
    proc = _run([sys.executable, "-c", LOAD_SCRIPT, str(site)], _env(site, cache))
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    assert _tagged(proc, "LOADED:") == str(truncated)
    assert "building the op library" in proc.stderr
    assert _loader.problem(truncated, _loader.tensorflow_identity()) is None  # size and sha256 match now


def _read_only(folder: Path, argv: list[str]) -> list[str]:
    """``argv`` run with ``folder`` read-only: a read-only bind mount in a private mount
    namespace (root ignores file modes), so nothing outside the command sees it."""
    script = 'mount --bind "$0" "$0" && mount -o remount,bind,ro "$0" && exec "$@"'
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, str(folder), *argv]


@pytest.fixture
def read_only(tmp_path):
    """Runs a command with a folder read-only; skips where that cannot be arranged."""
    if os.geteuid() != 0:
        made = []

        def run(folder, argv):
            for path in [folder, *folder.rglob("*")]:
                if path.is_dir() and not path.is_symlink():
                    path.chmod(0o555)
                    made.append(path)
            return argv

        yield run
        for path in made:
            path.chmod(0o755)
        return
    probe = tmp_path / "probe"
    probe.mkdir()
    proc = subprocess.run(_read_only(probe, ["touch", str(probe / "x")]), capture_output=True, text=True)
    if shutil.which("unshare") is None or "Read-only file system" not in proc.stderr:
        pytest.skip(f"cannot make a read-only folder here: {proc.stderr.strip()[:200]}")
    yield _read_only


def test_suggested_build_command_works_with_read_only_package(tmp_path, read_only):
    site, cache = _install_copy(tmp_path)
    _place_truncated(tmp_path, "package", site, cache)
    pkg = site / "nvtx_plugins_tf"
    before = sorted(p.name for p in (pkg / "_native").iterdir())
    env = _env(site, cache, NVTX_TF_NO_AUTO_BUILD="1")
    refused = _run(read_only(pkg, [sys.executable, "-c", LOAD_SCRIPT, str(site)]), env)
    assert refused.returncode == 3, refused.stdout + refused.stderr[-3000:]
    command = re.search(r"; run: (python -m nvtx_plugins_tf .*)$", _tagged(refused, "ERR:")).group(1)
    argv = [sys.executable, *command.split()[1:]]
    built = _run(read_only(pkg, argv), env)
    assert built.returncode == 0, built.stdout + built.stderr[-3000:]
    identity = _loader.tensorflow_identity()
    expected = cache / "nvtx_plugins_tf" / f"tf-{identity['tf_version']}-{identity['abi']}" / LIB
    assert "is read-only; building into" in built.stderr
    assert built.stdout.strip().splitlines()[-1] == f"built {expected}"
    assert sorted(p.name for p in (pkg / "_native").iterdir()) == before  # nothing written there
    loaded = _run(read_only(pkg, [sys.executable, "-c", LOAD_SCRIPT, str(site)]), env)
    assert loaded.returncode == 0, loaded.stdout + loaded.stderr[-3000:]
    assert _tagged(loaded, "LOADED:") == str(expected)


def test_build_command_accepts_no_target():
    """`python -m nvtx_plugins_tf build` with no target (docs/install.md gives it) parses."""
    from nvtx_plugins_tf.cli import build_parser

    assert build_parser().parse_args(["build"]).targets == []


# ------------------------------------------------------------------------------ item 19
class _Module(tf.Module):
    @tf.function(input_signature=[tf.TensorSpec([2], tf.float32)])
    def f(self, x):
        y, ctx = nvtx_plugins_tf.ops.start(x, "saved range", domain_name="Saved")
        return nvtx_plugins_tf.ops.end(y * 2.0, ctx)


@pytest.mark.parametrize(
    "imports", ["import tensorflow as tf; import nvtx_plugins_tf", "import nvtx_plugins_tf; import tensorflow as tf"]
)
def test_savedmodel_loads_after_importing_tensorflow_and_the_package(tmp_path, imports):
    saved = tmp_path / "saved"
    tf.saved_model.save(_Module(), str(saved))
    record_dir = tmp_path / "rec"
    record_dir.mkdir()
    script = f"{imports}\nm = tf.saved_model.load({str(saved)!r})\nprint(m.f(tf.ones([2])).numpy().tolist())\n"
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", **recorder.environment(record_dir))
    proc = _run([sys.executable, "-c", script], env, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip() == "[2.0, 2.0]"
    rec = recorder.load(record_dir)
    assert rec.count(message="saved range", domain="Saved") == 1
    assert not rec.open_ranges


def test_import_alone_does_not_import_tensorflow():
    script = "import sys, nvtx_plugins_tf; print('tensorflow' in sys.modules)"
    proc = _run([sys.executable, "-c", script], dict(os.environ), timeout=60)
    assert proc.stdout.strip() == "False", proc.stderr[-2000:]


def test_nothing_built_and_no_auto_build_import_succeeds_and_says_why(tmp_path):
    site, cache = _install_copy(tmp_path)
    saved = tmp_path / "saved"
    tf.saved_model.save(_Module(), str(saved))
    script = textwrap.dedent(
        f"""
        import tensorflow as tf
        import nvtx_plugins_tf
        print("IMPORTED")
        try:
            tf.saved_model.load({str(saved)!r})
        except Exception as e:
            print("SAVEDMODEL:" + type(e).__name__ + ": " + str(e).splitlines()[0])
        try:
            nvtx_plugins_tf.ops.start(tf.ones([1]), "x")
        except ImportError as e:
            print("OPS:" + str(e))
        """
    )
    proc = _run([sys.executable, "-c", script], _env(site, cache, NVTX_TF_NO_AUTO_BUILD="1"), timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    assert "IMPORTED" in proc.stdout
    identity = _loader.tensorflow_identity()
    line = (
        f"nvtx_plugins_tf: the op library is not built for TensorFlow {identity['tf_version']}; "
        "run: python -m nvtx_plugins_tf build tf_ops"
    )
    assert _tagged(proc, "OPS:") == line
    assert f"OpLibraryWarning: {line}" in proc.stderr  # shown once, at import
    assert "'NvtxStart'" in _tagged(proc, "SAVEDMODEL:")
    assert not (cache / "nvtx_plugins_tf").exists()  # nothing was built
