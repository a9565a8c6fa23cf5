"""``python -m nvtx_plugins_tf doctor`` and ``... build``: what is installed, and rebuilding.

doctor prints the TensorFlow version, the op library's path and build stamp, the NVTX
header version, whether an NVTX tool is attached (NVTX_INJECTION64_PATH) and whether
``nsys`` is on PATH. build compiles the native libraries against the running TensorFlow.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys

from nvtx_plugins_tf import _native_libs


def doctor_lines() -> list[str]:
    """The doctor report, one ``key: value`` per line (imports TensorFlow)."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    lines = []
    try:
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
        lines.append(f"op library built for: TensorFlow {stamp.get('tf_version')} (abi {stamp.get('abi')}), {stamp.get('compiler')}")
    except ImportError as exc:
        lines.append(f"op library: NOT LOADED: {exc}")
    try:
        build = _native_libs.build_module()
        lines.append(f"nvtx headers: {build.nvtx_header_version()} ({build.nvtx_include_dir()})")
    except Exception as exc:  # noqa: BLE001
        lines.append(f"nvtx headers: not found ({exc})")
    tool = os.environ.get("NVTX_INJECTION64_PATH")
    lines.append(f"nvtx tool attached: {'yes: ' + tool if tool else 'no (NVTX_INJECTION64_PATH unset)'}")
    lines.append(f"recorder library: {_native_libs.NATIVE_DIR / 'libnvtx_recorder.so'}")
    nsys = shutil.which("nsys")
    lines.append(f"nsys: {nsys or 'not on PATH (use python -m nvtx_plugins_tf record)'}")
    return lines


def _doctor(args: argparse.Namespace) -> int:
    print("\n".join(doctor_lines()))
    return 0


def _build(args: argparse.Namespace) -> int:
    build = _native_libs.build_module()
    try:
        for path in build.build(_native_libs.NATIVE_DIR if args.out is None else args.out, tuple(args.targets or build.TARGETS)):
            print(f"built {path}")
    except build.BuildError as exc:
        print(f"nvtx-tf: error: build failed: {str(exc).splitlines()[0]}", file=sys.stderr)
        print(str(exc), file=sys.stderr)
        return 1
    return 0


def register(subparsers) -> None:
    """Add the ``doctor`` and ``build`` subcommands to the CLI's subparsers."""
    doctor = subparsers.add_parser("doctor", help="show TensorFlow, op library, NVTX and tool status")
    doctor.set_defaults(func=_doctor)
    build = subparsers.add_parser("build", help="(re)build the native libraries for the installed TensorFlow")
    build.add_argument("targets", nargs="*", choices=["recorder", "reader", "tf_ops"], help="default: all")
    build.add_argument("--out", default=None, help="output folder (default: the package's _native folder)")
    build.set_defaults(func=_build)
