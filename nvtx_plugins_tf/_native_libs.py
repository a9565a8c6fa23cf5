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
import hashlib
import importlib.util
import json
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
    try:  # (unnamed where the filesystem can, O_TMPFILE: a signal meanwhile leaves no file behind)
        with tempfile.TemporaryFile(prefix=".write_probe", dir=folder):
            pass
    except OSError:
        return False
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


def read_stamp(library: Path) -> dict | None:
    """The build stamp next to ``library`` (``libX.json``), or None when missing or unreadable."""
    try:
        stamp = json.loads(library.with_suffix(".json").read_text())
    except (OSError, ValueError):
        return None
    return stamp if isinstance(stamp, dict) else None


_verified: dict[tuple, str | None] = {}  # (path, size, mtime_ns, identity) -> library_problem


def library_problem(library: Path, identity: dict) -> str | None:
    """Why ``library`` must not be loaded (or handed to a program as its NVTX tool), or None
    when it may: it exists, its stamp names ``identity`` (``{"target": ...}``, or the
    TensorFlow version and ABI of the op library), and the file has the size and sha256
    the stamp recorded when it was built. A truncated file would crash the process that
    maps it (SIGBUS); a foreign one (another library under this name) would not be ours.
    Hashing a library takes about a millisecond; the verdict is kept per file version."""
    try:
        st = library.stat()
    except OSError:
        return "not built"
    key = (str(library), st.st_size, st.st_mtime_ns, tuple(sorted(identity.items())))
    if key not in _verified:
        _verified[key] = _check(library, st.st_size, identity)
    return _verified[key]


def _check(library: Path, size: int, identity: dict) -> str | None:
    stamp = read_stamp(library)
    if stamp is None:
        return "no build stamp"
    if any(stamp.get(k) != v for k, v in identity.items()):
        if "tf_version" in identity and (stamp.get("tf_version"), stamp.get("abi")) != (
            identity["tf_version"],
            identity["abi"],
        ):
            return f"built for TensorFlow {stamp.get('tf_version')}"
        if "target" in identity and stamp.get("target") != identity["target"]:
            return f"its stamp names {stamp.get('target')!r}, not {identity['target']!r}"
        return "built from other sources than this package's (an older version?)"
    if not isinstance(stamp.get("size"), int) or not isinstance(stamp.get("sha256"), str):
        return "its stamp has no size/sha256: built by an older nvtx_plugins_tf"
    if size != stamp["size"]:
        return f"truncated or damaged: {size} bytes, {stamp['size']} when built"
    try:
        sha = hashlib.sha256()
        with open(library, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                sha.update(block)
    except OSError as exc:
        return f"unreadable ({exc.strerror or exc})"
    if sha.hexdigest() != stamp["sha256"]:
        return "damaged: its sha256 differs from the one recorded when built"
    return None


_source_identities: dict[str, dict] = {}


def source_identity(target: str) -> dict:
    """``{"sources": digest}`` of the package's own sources of ``target`` (the build script's
    :func:`sources_digest`), part of the identity a library's stamp must name: a copy built
    from other sources (the per-user cache's, left by an older version) is rebuilt, not
    loaded. Empty when the package ships no sources to compare with."""
    if target not in _source_identities:
        try:
            _source_identities[target] = {"sources": build_module().sources_digest(target)}
        except (NativeLibraryMissing, OSError, AttributeError, Exception):  # noqa: BLE001 - no sources: no check
            _source_identities[target] = {}
    return _source_identities[target]


def native_library(target: str) -> Path:
    """Path of the ``recorder``, ``reader`` or ``host`` library, verified (:func:`library_problem`)
    before anyone maps it: the package's copy, else the per-user cache's, else built once
    into the cache. A damaged copy is passed over (and rebuilt); when nothing usable can
    be had, NativeLibraryMissing says why in one line with the command that fixes it. The
    TensorFlow op library has its own loader (ops/_loader.py), with the same check."""
    if target not in LIBRARY_NAMES or target == "tf_ops":
        raise ValueError(f"native_library: unknown target {target!r}")
    name = LIBRARY_NAMES[target]
    identity = {"target": target, **source_identity(target)}
    refused = []
    for candidate in (NATIVE_DIR / name, cache_dir() / "native" / name):
        why = library_problem(candidate, identity)
        if why is None:
            return candidate
        if why != "not built":
            refused.append(f"{candidate} cannot be used ({why})")
    cached = cache_dir() / "native" / name
    what = refused[0] if refused else f"{name} is not built"
    try:
        built = build_module().BUILDERS[target](cached.parent)
    except Exception as exc:  # noqa: BLE001 - turned into one clear line
        if compiler_missing(exc):  # its own way out, not a second command
            raise NativeLibraryMissing(f"nvtx_plugins_tf: {what}: {exc}") from None
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise NativeLibraryMissing(
            f"nvtx_plugins_tf: {what} and building it failed ({first}); run: {BUILD_COMMAND}"
        ) from exc
    why = library_problem(built, identity)
    if why is not None:
        raise NativeLibraryMissing(f"nvtx_plugins_tf: the {name} just built in {built.parent} does not verify: {why}")
    return built
