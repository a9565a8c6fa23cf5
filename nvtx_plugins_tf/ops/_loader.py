"""Load the TensorFlow op library built for the TensorFlow that is running.

The library is looked for in the package (``nvtx_plugins_tf/_native``) and in the
per-user cache (``~/.cache/nvtx_plugins_tf/tf-<version>-<abi>/``); it is used only when
its stamp (``libnvtx_tf_ops.json``) names this TensorFlow's version and ABI *and* the
file still has the size and sha256 the stamp recorded at build time (a truncated or
damaged library is never handed to ``dlopen``: that would crash the process with
SIGBUS). Otherwise it is rebuilt once into the cache (a C++ compile against TensorFlow's
headers, which the import waits for; ``NVTX_TF_NO_AUTO_BUILD=1`` turns that off) and,
when that fails, loading raises one ImportError line with the exact command to run (which
builds into the cache when the package folder is read-only). Never a bare "undefined
symbol", "cannot open shared object file" or a crash.
"""

from __future__ import annotations

import fcntl
import os
import sys
import threading
from pathlib import Path
from types import ModuleType

from nvtx_plugins_tf._native_libs import (
    LIBRARY_NAMES,
    NATIVE_DIR,
    OPS_BUILD_COMMAND,
    build_module,
    cache_dir,
    compiler_missing,
    library_problem,
    source_identity,
)

LIBRARY_NAME = LIBRARY_NAMES["tf_ops"]
_lock = threading.Lock()
_module: ModuleType | None = None
_path: Path | None = None
_state = threading.local()  # .loading: this thread is inside load() (its TensorFlow import included)


def loading() -> bool:
    """True while this thread runs :func:`load` (the package's import hook then stays out)."""
    return getattr(_state, "loading", False)


def tensorflow_identity() -> dict:
    """This process's TensorFlow version and ABI hash, as the build script computes them, and
    the package's op sources (a library built from others is not loaded: _native_libs)."""
    info = build_module().tf_build_info()
    return {"tf_version": info["tf_version"], "abi": info["abi"], **source_identity("tf_ops")}


def problem(library: Path, identity: dict) -> str | None:
    """Why ``library`` must not be loaded into this TensorFlow, or None when it may
    (``_native_libs.library_problem``: its stamp names this TensorFlow's version and ABI,
    and the file has the size and sha256 the stamp recorded when it was built)."""
    return library_problem(library, identity)


def _matches(library: Path, identity: dict) -> bool:
    return problem(library, identity) is None


def cached_library_dir(identity: dict) -> Path:
    return cache_dir() / f"tf-{identity['tf_version']}-{identity['abi']}"


def candidates(identity: dict) -> list[Path]:
    return [NATIVE_DIR / LIBRARY_NAME, cached_library_dir(identity) / LIBRARY_NAME]


def build_into_cache(identity: dict | None = None, *, force: bool = False) -> Path:
    """Build the op library into the per-user cache (unless a good one is there, or ``force``).

    Used by the loader and by ``python -m nvtx_plugins_tf build`` when the package folder
    is read-only. Builds of the same TensorFlow are serialized by a lock file.
    """
    identity = identity or tensorflow_identity()
    out_dir = cached_library_dir(identity)
    out_dir.mkdir(parents=True, exist_ok=True)
    with open(out_dir / ".lock", "w") as lock_file:
        fcntl.flock(lock_file, fcntl.LOCK_EX)  # another process may be building it
        library = out_dir / LIBRARY_NAME
        if force or not _matches(library, identity):
            print(
                f"nvtx_plugins_tf: building the op library for TensorFlow {identity['tf_version']} into {out_dir}",
                file=sys.stderr,
            )
            build_module().build_tf_ops(out_dir)
        why = problem(library, identity)
        if why is not None:
            raise RuntimeError(f"the library just built in {out_dir} does not verify: {why}")
        return library


def _refusal_message(identity: dict) -> str:
    """One line: why no candidate can be loaded, and the command that fixes it."""
    found = [(c, problem(c, identity)) for c in candidates(identity)]
    found = [(c, why) for c, why in found if why != "not built"]
    if not found:
        what = f"the op library is not built for TensorFlow {identity['tf_version']}"
    else:
        library, why = found[0]
        if why.startswith("built for TensorFlow"):
            what = f"the op library was {why}, but TensorFlow {identity['tf_version']} is running"
        else:
            what = f"the op library {library} cannot be used ({why})"
    return f"nvtx_plugins_tf: {what}; run: {OPS_BUILD_COMMAND}"


def library_path() -> Path | None:
    """Path of the loaded op library (None before the first load)."""
    return _path


def load() -> ModuleType:
    """The op module (``nvtx_start``, ``nvtx_end``, ``nvtx_mark``), loading it once."""
    if _module is not None:
        return _module
    _state.loading = True
    try:
        return _load()
    finally:
        _state.loading = False


def _load() -> ModuleType:
    global _module, _path
    with _lock:
        if _module is not None:
            return _module
        import tensorflow as tf

        identity = tensorflow_identity()
        library = next((c for c in candidates(identity) if _matches(c, identity)), None)
        if library is None:
            if os.environ.get("NVTX_TF_NO_AUTO_BUILD") == "1":
                raise ImportError(_refusal_message(identity))
            refusal = _refusal_message(identity)
            try:
                library = build_into_cache(identity)
            except Exception as exc:  # noqa: BLE001 - one line with the way out
                if compiler_missing(exc):  # its own way out, not a second command
                    raise ImportError(f"nvtx_plugins_tf: the op library is not built: {exc}") from None
                raise ImportError(
                    f"{refusal} (automatic rebuild failed: "
                    f"{str(exc).strip().splitlines()[0] if str(exc).strip() else exc!r})"
                ) from exc
        try:
            _module = tf.load_op_library(str(library))
        except Exception as exc:  # noqa: BLE001 - e.g. NotFoundError: undefined symbol
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else repr(exc)
            raise ImportError(f"nvtx_plugins_tf: cannot load {library} ({first}); run: {OPS_BUILD_COMMAND}") from exc
        _path = library
        return _module
