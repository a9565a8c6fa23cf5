"""Where the package's native libraries are, and how to (re)build them.

Four libraries live in ``nvtx_plugins_tf/_native`` after ``pip install``:
``libnvtx_recorder.so`` (the NVTX injection tool), ``libnvtx_reader.so`` (the recording
decoder), ``libnvtx_host.so`` (host-side NVTX ranges for the Keras callback and the
session hook, see :mod:`nvtx_plugins_tf._host_ranges`) and ``libnvtx_tf_ops.so`` (the
TensorFlow ops; it may instead live in the per-user cache, see
:mod:`nvtx_plugins_tf.ops._loader`).

:data:`LIBRARY_NAMES` is the one place their file names are written: the build script
(``build_tools/build_native.py``, also shipped as ``nvtx_plugins_tf/_build``) reads it from
this file. Keep this module free of imports beyond the standard library for that reason.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import tempfile
from pathlib import Path
from types import ModuleType

PACKAGE_DIR = Path(__file__).resolve().parent
NATIVE_DIR = PACKAGE_DIR / "_native"
BUILD_COMMAND = "python -m nvtx_plugins_tf build"
#: Rebuilds only the op library: into ``NATIVE_DIR``, or into the per-user cache the
#: loader also searches when the package folder is read-only.
OPS_BUILD_COMMAND = f"{BUILD_COMMAND} tf_ops"

#: The environment variable NVTX v3 reads to load a tool (our recorder), and the one our
#: recorder reads for its recording folder.
INJECTION_ENV = "NVTX_INJECTION64_PATH"
RECORD_DIR_ENV = "NVTX_TF_RECORD_DIR"
#: What the recorder writes (cc_ops/recorder/gate.h): a capture range ``NAME[@DOMAIN]``
#: (``record --capture-range``), its end mode ``stop|none|repeat[:N]``, and the domain
#: filter (nsys's comma list syntax; one of the two).
CAPTURE_RANGE_ENV = "NVTX_TF_CAPTURE_RANGE"
CAPTURE_RANGE_END_ENV = "NVTX_TF_CAPTURE_RANGE_END"
DOMAIN_INCLUDE_ENV = "NVTX_TF_DOMAIN_INCLUDE"
DOMAIN_EXCLUDE_ENV = "NVTX_TF_DOMAIN_EXCLUDE"
#: The recorder's clock (cc_ops/recorder/clock.h): ``auto`` (default: the TSC, converted to
#: CLOCK_MONOTONIC nanoseconds, when it is invariant and the kernel's clocksource is
#: ``tsc``; else clock_gettime), ``tsc`` (the TSC whenever it is invariant) or ``monotonic``
#: (always clock_gettime). Timestamps are CLOCK_MONOTONIC nanoseconds either way.
RECORDER_CLOCK_ENV = "NVTX_TF_RECORDER_CLOCK"
#: NVTX's variable for a 32-bit tool (unused by us; the nsys oracle's runs drop it with
#: ours), and the recorder's chunk size in bytes (tests use small chunks to reach chunk
#: boundaries).
INJECTION32_ENV = "NVTX_INJECTION32_PATH"
CHUNK_SIZE_ENV = "NVTX_TF_CHUNK_SIZE"
#: The start-up switches ``record --keras-layers`` and ``record --tf-ops`` set for the child
#: (read by ``_site/sitecustomize.py``, which writes the names itself: it runs before the
#: package can be imported).
KERAS_LAYERS_ENV = "NVTX_TF_KERAS_LAYERS"
TF_OP_RANGES_ENV = "NVTX_TF_OP_RANGES"

#: Build target (``cc_ops/<target>``) -> file name of its library.
LIBRARY_NAMES = {
    "recorder": "libnvtx_recorder.so",
    "reader": "libnvtx_reader.so",
    "host": "libnvtx_host.so",
    "tf_ops": "libnvtx_tf_ops.so",
}


class NativeLibraryMissing(ImportError):
    """A native library is not built; the message gives the command that builds it."""


def cache_dir() -> Path:
    """Per-user folder for libraries rebuilt against another TensorFlow."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "nvtx_plugins_tf"


def is_writable(folder: Path) -> bool:
    """True when a file can be created in ``folder`` (tried, not guessed: root ignores modes
    but not a read-only mount)."""
    try:
        fd, probe = tempfile.mkstemp(prefix=".write_probe", dir=folder)
    except OSError:
        return False
    os.close(fd)
    os.unlink(probe)
    return True


@functools.lru_cache(maxsize=1)
def build_module() -> ModuleType:
    """The build script (loaded once): shipped as ``nvtx_plugins_tf._build`` or in the source tree."""
    shipped = PACKAGE_DIR / "_build" / "build_native.py"
    script = shipped if shipped.is_file() else PACKAGE_DIR.parent / "build_tools" / "build_native.py"
    if not script.is_file():
        raise NativeLibraryMissing(
            "nvtx_plugins_tf: build script not found; reinstall with pip install nvtx_plugins_tf"
        )
    spec = importlib.util.spec_from_file_location("nvtx_plugins_tf_build_native", script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def compiler_missing(exc: BaseException) -> bool:
    """Whether a build failed for want of a C++ compiler (``build_native.CompilerMissing``):
    its message says how to install one and what to run next, and is passed on whole."""
    try:
        return isinstance(exc, build_module().CompilerMissing)
    except NativeLibraryMissing:  # no build script, so no build ran
        return False


def native_library(target: str) -> Path:
    """Path of the built ``recorder``, ``reader`` or ``host`` library, building it once if
    missing (into the per-user cache). The TensorFlow op library has its own loader."""
    if target not in LIBRARY_NAMES or target == "tf_ops":
        raise ValueError(f"native_library: unknown target {target!r}")
    names = LIBRARY_NAMES
    path = NATIVE_DIR / names[target]
    if path.is_file():
        return path
    cached = cache_dir() / "native" / names[target]
    if cached.is_file():
        return cached
    try:
        build = build_module()
        return build.BUILDERS[target](cached.parent)
    except Exception as exc:  # noqa: BLE001 - turned into one clear line
        if compiler_missing(exc):  # its own way out, not a second command
            raise NativeLibraryMissing(f"nvtx_plugins_tf: {names[target]} is not built: {exc}") from None
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise NativeLibraryMissing(
            f"nvtx_plugins_tf: {names[target]} is not built and building it failed ({first}); run: {BUILD_COMMAND}"
        ) from exc
