"""Load the TensorFlow op library built for the TensorFlow that is running.

The library is looked for in the package (``nvtx_plugins_tf/_native``) and in the
per-user cache; it is used only when its stamp (``libnvtx_tf_ops.json``) names this
TensorFlow's version and ABI. Otherwise it is rebuilt once into the cache (about 15 s;
``NVTX_TF_NO_AUTO_BUILD=1`` turns that off) and, when that fails, importing the ops
raises one ImportError line with the exact command to run. Never a bare
"undefined symbol" or "cannot open shared object file".
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import sys
import threading
from pathlib import Path
from types import ModuleType

from nvtx_plugins_tf._native_libs import BUILD_COMMAND, NATIVE_DIR, build_module, cache_dir

LIBRARY_NAME = "libnvtx_tf_ops.so"
_lock = threading.Lock()
_module: ModuleType | None = None
_path: Path | None = None


def tensorflow_identity() -> dict:
    """This process's TensorFlow version and the ABI hash the build script computes."""
    import tensorflow as tf

    abi = hashlib.sha256(
        json.dumps([tf.__version__, list(tf.sysconfig.get_compile_flags()), tf.sysconfig.CXX11_ABI_FLAG]).encode()
    ).hexdigest()[:16]
    return {"tf_version": tf.__version__, "abi": abi}


def read_stamp(library: Path) -> dict | None:
    """The build stamp next to ``library``, or None when missing or unreadable."""
    try:
        return json.loads(library.with_suffix(".json").read_text())
    except (OSError, ValueError):
        return None


def _matches(library: Path, identity: dict) -> bool:
    stamp = read_stamp(library)
    return library.is_file() and stamp is not None and all(stamp.get(k) == v for k, v in identity.items())


def cached_library_dir(identity: dict) -> Path:
    return cache_dir() / f"tf-{identity['tf_version']}-{identity['abi']}"


def candidates(identity: dict) -> list[Path]:
    return [NATIVE_DIR / LIBRARY_NAME, cached_library_dir(identity) / LIBRARY_NAME]


def _build_into_cache(identity: dict) -> Path:
    out_dir = cached_library_dir(identity)
    out_dir.mkdir(parents=True, exist_ok=True)
    with open(out_dir / ".lock", "w") as lock_file:
        fcntl.flock(lock_file, fcntl.LOCK_EX)  # another process may be building it
        library = out_dir / LIBRARY_NAME
        if not _matches(library, identity):
            print(
                f"nvtx_plugins_tf: building the op library for TensorFlow {identity['tf_version']} into {out_dir} (once)",
                file=sys.stderr,
            )
            build_module().build_tf_ops(out_dir)
        return library


def _mismatch_message(identity: dict) -> str:
    stamp = read_stamp(NATIVE_DIR / LIBRARY_NAME)
    built_for = f"TensorFlow {stamp['tf_version']}" if stamp else "no TensorFlow (not built)"
    return (
        f"nvtx_plugins_tf: the op library was built for {built_for}, "
        f"but TensorFlow {identity['tf_version']} is running; run: {BUILD_COMMAND}"
    )


def library_path() -> Path | None:
    """Path of the loaded op library (None before the first load)."""
    return _path


def load() -> ModuleType:
    """The op module (``nvtx_start``, ``nvtx_end``, ``nvtx_mark``), loading it once."""
    global _module, _path
    if _module is not None:
        return _module
    with _lock:
        if _module is not None:
            return _module
        import tensorflow as tf

        identity = tensorflow_identity()
        library = next((c for c in candidates(identity) if _matches(c, identity)), None)
        if library is None:
            if os.environ.get("NVTX_TF_NO_AUTO_BUILD") == "1":
                raise ImportError(_mismatch_message(identity))
            try:
                library = _build_into_cache(identity)
            except Exception as exc:  # noqa: BLE001 - one line with the way out
                raise ImportError(f"{_mismatch_message(identity)} (automatic rebuild failed: "
                                  f"{str(exc).strip().splitlines()[0] if str(exc).strip() else exc!r})") from exc
        try:
            _module = tf.load_op_library(str(library))
        except Exception as exc:  # noqa: BLE001 - e.g. NotFoundError: undefined symbol
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else repr(exc)
            raise ImportError(f"nvtx_plugins_tf: cannot load {library} ({first}); run: {BUILD_COMMAND}") from exc
        _path = library
        return _module
