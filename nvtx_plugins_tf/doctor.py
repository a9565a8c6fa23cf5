"""``python -m nvtx_plugins_tf doctor`` and ``... build``: what is installed, and rebuilding.

doctor prints the TensorFlow version, the op library's path and build stamp, the NVTX
header version, whether an NVTX tool is attached (NVTX_INJECTION64_PATH) and whether
``nsys`` is on PATH. build compiles the native libraries against the running TensorFlow:
into the package's ``_native`` folder, or, when that folder is read-only (a system or
shared site-packages), into the per-user cache the loaders search too
(``~/.cache/nvtx_plugins_tf/tf-<version>-<abi>/`` for the op library,
``~/.cache/nvtx_plugins_tf/native/`` for the recorder and the reader).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import warnings
from pathlib import Path

import nvtx_plugins_tf
from nvtx_plugins_tf import _native_libs


def doctor_lines() -> list[str]:
    """The doctor report, one ``key: value`` per line (imports TensorFlow)."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    lines = [f"nvtx_plugins_tf: {nvtx_plugins_tf.__version__} imported from {Path(nvtx_plugins_tf.__file__).parent}"]
    try:
        with warnings.catch_warnings():  # the op library's state is reported below
            warnings.simplefilter("ignore", nvtx_plugins_tf.OpLibraryWarning)
            import tensorflow as tf

        lines.append(f"tensorflow: {tf.__version__} ({tf.sysconfig.get_lib()})")
        gpus = tf.config.list_physical_devices("GPU")
        lines.append(f"gpus: {len(gpus)}")
    except Exception as exc:  # noqa: BLE001 - doctor reports, never raises
        lines.append(f"tensorflow: not importable ({exc})")
    try:
        from nvtx_plugins_tf.ops import _loader

        _loader.load()
        stamp = _loader.read_stamp(_loader.library_path()) or {}
        lines.append(f"op library: {_loader.library_path()}")
        lines.append(
            f"op library built for: TensorFlow {stamp.get('tf_version')} (abi {stamp.get('abi')}), "
            f"{stamp.get('compiler')}"
        )
        lines.append(
            f"op library file: {stamp.get('size')} bytes, sha256 {str(stamp.get('sha256'))[:16]}... (matches its stamp)"
        )
    except ImportError as exc:
        lines.append(f"op library: NOT LOADED: {exc}")
    try:
        build = _native_libs.build_module()
        lines.append(f"nvtx headers: {build.nvtx_header_version()} ({build.nvtx_include_dir()})")
    except Exception as exc:  # noqa: BLE001
        lines.append(f"nvtx headers: not found ({exc})")
    tool = os.environ.get(_native_libs.INJECTION_ENV)
    lines.append(f"nvtx tool attached: {'yes: ' + tool if tool else f'no ({_native_libs.INJECTION_ENV} unset)'}")
    for target in ("recorder", "reader", "host"):  # only paths that exist; nothing is built here
        name = _native_libs.LIBRARY_NAMES[target]
        found = [p for p in (_native_libs.NATIVE_DIR / name, _native_libs.cache_dir() / "native" / name) if p.is_file()]
        lines.append(f"{target} library: {found[0] if found else f'not built (run: {_native_libs.BUILD_COMMAND})'}")
    nsys = shutil.which("nsys")
    lines.append(f"nsys: {nsys or 'not on PATH (use python -m nvtx_plugins_tf record)'}")
    return lines


def _doctor(args: argparse.Namespace) -> int:
    print("\n".join(doctor_lines()))
    return 0


def _build_one(build, target: str, out) -> Path:
    """Build ``target`` into ``out``; by default the package folder, else the user cache."""
    if out is not None:
        return build.BUILDERS[target](Path(out))
    if _native_libs.is_writable(_native_libs.NATIVE_DIR):
        return build.BUILDERS[target](_native_libs.NATIVE_DIR)
    if target == "tf_ops":
        from nvtx_plugins_tf.ops import _loader

        where = _loader.cached_library_dir(_loader.tensorflow_identity())
        print(f"nvtx-tf: {_native_libs.NATIVE_DIR} is read-only; building into {where}", file=sys.stderr)
        return _loader.build_into_cache(force=True)
    where = _native_libs.cache_dir() / "native"
    print(f"nvtx-tf: {_native_libs.NATIVE_DIR} is read-only; building into {where}", file=sys.stderr)
    return build.BUILDERS[target](where)


def _build(args: argparse.Namespace) -> int:
    nvtx_plugins_tf._disable_autoload()  # importing TensorFlow must not load (or auto-build) it now
    build = _native_libs.build_module()
    unknown = sorted(set(args.targets) - set(build.TARGETS))
    if unknown:
        print(
            f"nvtx-tf: error: unknown build target(s) {', '.join(unknown)}; choose from {', '.join(build.TARGETS)}",
            file=sys.stderr,
        )
        return 2
    try:
        for target in args.targets or build.TARGETS:
            print(f"built {_build_one(build, target, args.out)}")
    except (build.BuildError, OSError) as exc:  # once: a compiler's command and output follow on their lines
        print(f"nvtx-tf: error: build failed: {exc}", file=sys.stderr)
        return 1
    return 0


def register(subparsers) -> None:
    """Add the ``doctor`` and ``build`` subcommands to the CLI's subparsers."""
    doctor = subparsers.add_parser("doctor", help="show TensorFlow, op library, NVTX and tool status")
    doctor.set_defaults(func=_doctor)
    build = subparsers.add_parser("build", help="(re)build the native libraries for the installed TensorFlow")
    # no argparse `choices` here: with nargs="*" it rejects the empty default (Python < 3.12)
    build.add_argument("targets", nargs="*", metavar="TARGET", help="recorder, reader, tf_ops (default: all)")
    build.add_argument(
        "--out",
        default=None,
        help="output folder (default: the package's _native folder, or the per-user cache "
        "~/.cache/nvtx_plugins_tf when that folder is read-only)",
    )
    build.set_defaults(func=_build)
