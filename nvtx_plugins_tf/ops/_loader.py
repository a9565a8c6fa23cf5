"""Load the TensorFlow op library built for the TensorFlow that is running.

The library is looked for in the package (``nvtx_plugins_tf/_native``) and in the
per-user cache (``~/.cache/nvtx_plugins_tf/tf-<version>-<abi>/``); it is used only when
its stamp (``libnvtx_tf_ops.json``) names this TensorFlow's version and ABI *and* the
file still has the size and sha256 the stamp recorded at build time (a truncated or
damaged library is never handed to ``dlopen``: that would crash the process with
SIGBUS). Otherwise it is rebuilt once into the cache (a C++ compile against TensorFlow's
headers, which the import waits for; ``NVTX_TF_NO_AUTO_BUILD=1`` turns that off) and,
when that fails, loading raises one ImportError line with the exact command to run (which
builds into the cache when the package folder is read-only). A build that failed is
remembered there for that TensorFlow and those sources: later loads, in this process or
another, say so with the log's path instead of compiling again. Never a bare "undefined
symbol", "cannot open shared object file" or a crash.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
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


FAILED_NAME = "build-failed.json"  # in the cache folder: an automatic build that failed, and where its log is


class AutomaticBuildFailed(RuntimeError):
    """The automatic build of the op library failed, now or before (then it is not tried
    again for the same sources and TensorFlow); the message names the log."""


def failed_build(out_dir: Path, identity: dict) -> dict | None:
    """The record of a failed build in ``out_dir`` (a TensorFlow version and ABI's cache
    folder) of the same sources, or None: ``{"sources", "error", "log"}``."""
    try:
        record = json.loads((out_dir / FAILED_NAME).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or record.get("sources") != identity.get("sources"):
        return None  # other sources (the package was updated): worth another try
    return record


def _remember_failure(out_dir: Path, identity: dict, exc: BaseException) -> dict:
    """Keep the failed build's whole message in its log (unless the compiler's output is
    there already) and write the record that spares the next processes the same build."""
    log = out_dir / f"{LIBRARY_NAME}.build.log"
    text = str(exc).strip() or repr(exc)
    with contextlib.suppress(OSError):
        if not log.is_file() or log.stat().st_size == 0:
            log.write_text(text + "\n")
    record = {"sources": identity.get("sources"), "error": text.splitlines()[0], "log": str(log)}
    with contextlib.suppress(OSError):
        partial = out_dir / f"{FAILED_NAME}.tmp{os.getpid()}"
        partial.write_text(json.dumps(record, indent=1))
        os.replace(partial, out_dir / FAILED_NAME)
    return record


def _failure_text(record: dict, before: bool) -> str:
    error, log = str(record.get("error")), str(record.get("log"))
    where = "" if log in error else f"; log: {log}"
    if before:
        return f"automatic build failed before for these sources and this TensorFlow, not tried again: {error}{where}"
    return f"automatic build failed: {error}{where}"


def build_into_cache(identity: dict | None = None, *, force: bool = False) -> Path:
    """Build the op library into the per-user cache (unless a good one is there, or ``force``).

    Used by the loader and by ``python -m nvtx_plugins_tf build`` when the package folder
    is read-only. Builds of the same TensorFlow are serialized by a lock file. A failed
    build (not a missing compiler: that is found at once) is remembered in the cache folder
    (per TensorFlow version and ABI, and source digest): without ``force`` the next callers
    get :class:`AutomaticBuildFailed` naming the log instead of compiling again (minutes of
    g++ per process on a loaded machine); ``force`` (the build command) tries again and
    raises the build's own error.
    """
    identity = identity or tensorflow_identity()
    out_dir = cached_library_dir(identity)
    out_dir.mkdir(parents=True, exist_ok=True)
    with open(out_dir / ".lock", "w") as lock_file:
        fcntl.flock(lock_file, fcntl.LOCK_EX)  # another process may be building it
        library = out_dir / LIBRARY_NAME
        if force or not _matches(library, identity):
            failed = None if force else failed_build(out_dir, identity)
            if failed is not None:
                raise AutomaticBuildFailed(_failure_text(failed, before=True))
            # no compiler: its one line (how to install one), found by a look-up on PATH, never
            # remembered (installing it is all it takes) and never announced as a build
            build_module().require_compiler()
            print(
                f"nvtx_plugins_tf: building the op library for TensorFlow {identity['tf_version']} into {out_dir}",
                file=sys.stderr,
            )
            for stale in (out_dir / FAILED_NAME, out_dir / f"{LIBRARY_NAME}.build.log"):
                with contextlib.suppress(OSError):
                    stale.unlink()
            try:
                build_module().build_tf_ops(out_dir)
            except Exception as exc:
                if compiler_missing(exc):  # found at once, and its message is the way out
                    raise
                record = _remember_failure(out_dir, identity, exc)
                if force:
                    raise
                raise AutomaticBuildFailed(_failure_text(record, before=False)) from exc
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
        from nvtx_plugins_tf import _tensorflow

        tf = _tensorflow.require()  # installed, and not older than the oldest supported
        identity = tensorflow_identity()
        library = next((c for c in candidates(identity) if _matches(c, identity)), None)
        if library is None:
            if os.environ.get("NVTX_TF_NO_AUTO_BUILD") == "1":
                raise ImportError(_refusal_message(identity))
            refusal = _refusal_message(identity)
            try:
                library = build_into_cache(identity)
            except AutomaticBuildFailed as exc:  # remembered: the next load here and elsewhere says it again
                raise ImportError(f"{refusal} ({exc})") from None
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
