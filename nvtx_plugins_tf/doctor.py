"""``python -m nvtx_plugins_tf doctor`` and ``... build``: what is installed, and rebuilding.

doctor prints the TensorFlow version, the op library's path and build stamp, the NVTX
header version, whether an NVTX tool is attached (NVTX_INJECTION64_PATH: checked, see
:func:`tool_verdict`), the native library each loader would take (its stamp, size and
sha256 checked, as the loaders check them) and every copy refused, with why, and whether
``nsys`` is on PATH. build compiles the native libraries against the running TensorFlow:
into the package's ``_native`` folder, or, when that folder is read-only (a system or
shared site-packages), into the per-user cache the loaders search too
(``~/.cache/nvtx_plugins_tf/tf-<version>-<abi>/`` for the op library,
``~/.cache/nvtx_plugins_tf/native/`` for the recorder and the reader).
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings
from pathlib import Path

import nvtx_plugins_tf
from nvtx_plugins_tf import _native_libs


def doctor_lines() -> list[str]:
    """The doctor report, one ``key: value`` per line (imports TensorFlow)."""
    from nvtx_plugins_tf._quiet import quiet_tensorflow_startup

    lines = [f"nvtx_plugins_tf: {nvtx_plugins_tf.__version__} imported from {Path(nvtx_plugins_tf.__file__).parent}"]
    try:
        # (the op library's state is reported below; TensorFlow's start-up lines are not ours)
        with warnings.catch_warnings(), quiet_tensorflow_startup():
            warnings.simplefilter("ignore", nvtx_plugins_tf.OpLibraryWarning)
            import tensorflow as tf

            gpus = tf.config.list_physical_devices("GPU")
        lines.append(f"tensorflow: {tf.__version__} ({tf.sysconfig.get_lib()})")
        lines.append(f"gpus: {len(gpus)}")
    except Exception as exc:  # noqa: BLE001 - doctor reports, never raises
        lines.append(f"tensorflow: not importable ({exc})")
    try:
        from nvtx_plugins_tf.ops import _loader

        _loader.load()
        stamp = _native_libs.read_stamp(_loader.library_path()) or {}
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
    lines.append(f"nvtx tool attached: {tool_verdict(tool) if tool else f'no ({_native_libs.INJECTION_ENV} unset)'}")
    for target in ("recorder", "reader", "host"):  # verified as the loaders do; nothing is built here
        name = _native_libs.LIBRARY_NAMES[target]
        usable, refused = [], []
        for path in (_native_libs.NATIVE_DIR / name, _native_libs.cache_dir() / "native" / name):
            why = _native_libs.library_problem(path, {"target": target, **_native_libs.source_identity(target)})
            if why is None:
                usable.append(path)
            elif why != "not built":
                refused.append(f"{target} library refused: {path} ({why}; run: {_native_libs.BUILD_COMMAND})")
        if usable:  # the one the loader takes; its stamp, size and sha256 were checked
            lines.append(f"{target} library: {usable[0]}")
        else:
            lines.append(f"{target} library: not built (run: {_native_libs.BUILD_COMMAND})")
        lines.extend(refused)
    import shutil

    nsys = shutil.which("nsys")
    lines.append(f"nsys: {nsys or 'not on PATH (use python -m nvtx_plugins_tf record)'}")
    return lines


_PROBE = """
import ctypes, sys
try:
    lib = ctypes.CDLL(sys.argv[1])
except OSError as exc:
    print("not loadable:", str(exc).splitlines()[0]); sys.exit(3)
sys.exit(0 if hasattr(lib, "InitializeInjectionNvtx2") else 4)
"""


def tool_verdict(path: str) -> str:
    """What doctor can say of the NVTX tool named by NVTX_INJECTION64_PATH, having checked it:
    our recorder (stamp and sha256), or a library that loads and exports
    InitializeInjectionNvtx2 (loaded in a child process: a damaged file can kill the process
    that maps it). What the tool then records is not checked."""
    tool = Path(path)
    if not tool.is_file():
        return f"NO: {_native_libs.INJECTION_ENV}={path} names no file"
    if tool.name == _native_libs.LIBRARY_NAMES["recorder"]:
        why = _native_libs.library_problem(tool, {"target": "recorder", **_native_libs.source_identity("recorder")})
        if why is None:
            return f"yes: {path} (our recorder: stamp, size and sha256 verified)"
        return f"NO: {path} cannot be used ({why}); run: {_native_libs.BUILD_COMMAND}"
    import subprocess  # (here: the command line imports this module for its flags)

    try:
        proc = subprocess.run(
            [sys.executable, "-c", _PROBE, str(tool)], capture_output=True, text=True, timeout=60, env=_probe_env()
        )
    except subprocess.TimeoutExpired:
        return f"NO: {path} did not load within 60 s (in a child process)"
    if proc.returncode == 0:
        return f"yes: {path} (loads and exports InitializeInjectionNvtx2, checked in a child process; not our recorder)"
    if proc.returncode == 4:
        return f"NO: {path} loads but does not export InitializeInjectionNvtx2: not an NVTX tool"
    if proc.returncode < 0:
        return f"NO: {path} killed the child process that loaded it (signal {-proc.returncode}): damaged?"
    return f"NO: {path} is {proc.stdout.strip() or f'not loadable (exit {proc.returncode})'}"


def _probe_env() -> dict:
    """The probe's environment: no NVTX tool of its own (the probe makes no NVTX call anyway)."""
    return {k: v for k, v in os.environ.items() if not k.startswith("NVTX_INJECTION")}


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
    from nvtx_plugins_tf._quiet import quiet_tensorflow_startup

    build = _native_libs.build_module()
    unknown = sorted(set(args.targets) - set(build.TARGETS))
    if unknown:
        print(
            f"nvtx-tf: error: unknown build target(s) {', '.join(unknown)}; choose from {', '.join(build.TARGETS)}",
            file=sys.stderr,
        )
        return 2
    if "tf_ops" in (args.targets or build.TARGETS):
        with quiet_tensorflow_startup():  # built against it; its start-up lines are not ours
            import tensorflow  # noqa: F401
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
    build.add_argument("targets", nargs="*", metavar="TARGET", help="recorder, reader, host, tf_ops (default: all)")
    build.add_argument(
        "--out",
        default=None,
        help="output folder (default: the package's _native folder, or the per-user cache "
        "~/.cache/nvtx_plugins_tf when that folder is read-only)",
    )
    build.set_defaults(func=_build)
