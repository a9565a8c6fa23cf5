"""Build the native libraries of nvtx_plugins_tf.

Four shared libraries, each from one folder of ``cc_ops/`` (their file names are in
``nvtx_plugins_tf/_native_libs.py``, ``LIBRARY_NAMES``, read from there):

* ``libnvtx_recorder.so`` (``cc_ops/recorder``): the NVTX injection tool. Needs only the
  NVTX v3 headers (from the ``nvidia-nvtx`` wheel) and a C++17 compiler.
* ``libnvtx_reader.so`` (``cc_ops/reader``): decodes recordings, and writes the SQLite
  export's events (libsqlite3 loaded at run time with dlopen: no sqlite3.h needed).
* ``libnvtx_host.so`` (``cc_ops/host``): host-side NVTX ranges for the Keras callback and
  the session hook, called through ctypes. Needs only the NVTX v3 headers.
* ``libnvtx_tf_ops.so`` (``cc_ops/tf_ops``): the TensorFlow ops, compiled with the
  installed TensorFlow's ``tf.sysconfig`` flags. Next to it ``libnvtx_tf_ops.json``
  records the TensorFlow version and ABI it was built for, and the library's size and
  sha256 (the other three have such a stamp too, naming their target): the loaders check
  them before ``dlopen`` (a truncated library would crash the
  process with SIGBUS instead of failing).

Used by ``setup.py``, by ``python -m nvtx_plugins_tf build`` and by the op loader when
the installed TensorFlow differs from the one the library was built for. Run directly:

    python build_tools/build_native.py [--out DIR] [recorder] [reader] [host] [tf_ops]
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import importlib.util
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

_HERE = Path(__file__).resolve().parent
# (subprocess, shlex and concurrent.futures are imported by the functions that build: the
# package's loaders load this script to verify a library, ``nvtx-tf analyze`` among them)


def _native_libs():
    """``nvtx_plugins_tf/_native_libs.py``, loaded by path (this script runs before the
    package is installed): beside this file once shipped as ``nvtx_plugins_tf/_build``, else
    in the repository."""
    for candidate in (_HERE.parent / "_native_libs.py", _HERE.parent / "nvtx_plugins_tf" / "_native_libs.py"):
        if candidate.is_file():
            spec = importlib.util.spec_from_file_location("nvtx_plugins_tf_native_libs_names", candidate)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            return module
    raise RuntimeError(f"cannot find nvtx_plugins_tf/_native_libs.py near {_HERE}")


_NATIVE_LIBS = _native_libs()
LIBRARY_NAMES = dict(_NATIVE_LIBS.LIBRARY_NAMES)
TARGETS = tuple(LIBRARY_NAMES)  # recorder, reader, host, tf_ops
_COMMON_FLAGS = ["-std=c++17", "-O2", "-fPIC", "-pthread", "-Wall", "-Wno-sign-compare"]


class BuildError(RuntimeError):
    """A native build failed; the message holds the compiler's command and output."""


class CompilerMissing(BuildError):
    """No C++ compiler: the message says how to install one and what to run then, whole."""


def sources_root() -> Path:
    """The ``cc_ops`` folder: beside this file once installed, else in the repository."""
    for candidate in (_HERE / "cc_ops", _HERE.parent / "cc_ops"):
        if candidate.is_dir():
            return candidate
    raise BuildError(f"cannot find the cc_ops sources near {_HERE}")


def nvtx_include_dir() -> Path:
    """The folder holding ``nvtx3/nvToolsExt.h`` from the ``nvidia-nvtx`` wheel."""
    try:
        import nvidia  # namespace package installed by nvidia-nvtx
    except ImportError:  # "No module named 'nvidia'" says no more than this message
        raise BuildError("NVTX headers not found: pip install nvidia-nvtx") from None
    found = []
    for base in list(getattr(nvidia, "__path__", [])):
        for header in sorted(Path(base).glob("*/include/nvtx3/nvToolsExt.h")):
            found.append(header.parent.parent)
        header = Path(base) / "nvtx" / "include" / "nvtx3" / "nvToolsExt.h"
        if header.is_file():
            found.append(header.parent.parent)
    if not found:
        raise BuildError("NVTX headers not found in the nvidia-nvtx wheel: pip install nvidia-nvtx")
    return found[-1]


def nvtx_header_version(include_dir: Path | None = None) -> str:
    """The NVTX API version the headers declare, e.g. ``"3"`` plus the wheel version."""
    include_dir = include_dir or nvtx_include_dir()
    text = (include_dir / "nvtx3" / "nvToolsExt.h").read_text(errors="replace")
    version = "?"
    for line in text.splitlines():
        if line.startswith("#define NVTX_VERSION "):
            version = line.split()[-1]
            break
    try:
        from importlib.metadata import version as dist_version

        return f"NVTX v{version} (nvidia-nvtx {dist_version('nvidia-nvtx')})"
    except Exception:  # noqa: BLE001 - metadata is informative only
        return f"NVTX v{version}"


def tf_build_info() -> dict:
    """Compile/link flags and the identity of the installed TensorFlow."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import tensorflow as tf

    compile_flags = list(tf.sysconfig.get_compile_flags())
    link_flags = list(tf.sysconfig.get_link_flags())
    framework = Path(tf.sysconfig.get_lib())
    abi = hashlib.sha256(json.dumps([tf.__version__, compile_flags, tf.sysconfig.CXX11_ABI_FLAG]).encode()).hexdigest()[
        :16
    ]
    return {
        "tf_version": tf.__version__,
        "tf_lib": str(framework),
        "abi": abi,
        "compile_flags": compile_flags,
        "link_flags": link_flags,
    }


#: The compiler every target is built with (looked up on PATH; CXX is not read).
COMPILER = "g++"
#: The command that builds the libraries again once the compiler is installed.
REBUILD_COMMAND = _NATIVE_LIBS.BUILD_COMMAND


def no_compiler_message(then: str = REBUILD_COMMAND) -> str:
    """What a user without :data:`COMPILER` reads: what is missing, how to install it, and
    ``then``, the command to run again afterwards (``pip install .`` from setup.py)."""
    return (
        f"no C++ compiler: {COMPILER} was not found on PATH. Install it (Debian/Ubuntu: apt-get install g++; "
        f"Fedora: dnf install gcc-c++), then run: {then}"
    )


def require_compiler() -> None:
    """Raise :class:`CompilerMissing` (its one line says how to install one) when
    :data:`COMPILER` is not on PATH: a look-up, before anything says a build starts."""
    if shutil.which(COMPILER) is None:
        raise CompilerMissing(no_compiler_message())


def _compiler_version() -> str:
    import subprocess

    try:
        return subprocess.run([COMPILER, "--version"], capture_output=True, text=True).stdout.splitlines()[0]
    except (FileNotFoundError, IndexError):
        raise CompilerMissing(no_compiler_message()) from None  # the chained error only repeats it


def _build_log(output: Path) -> Path:
    """Where a failed build of ``output`` leaves the compiler's output: beside it, or in the
    temporary folder when that is read-only."""
    for folder in (output.parent, Path(tempfile.gettempdir())):
        log = folder / f"{output.name}.build.log"
        try:
            log.touch()
            return log
        except OSError:
            continue
    return Path(os.devnull)


def _run(cmd: list[str], log: Path | None = None) -> None:
    import shlex
    import subprocess

    try:
        proc = subprocess.run(cmd, capture_output=True, text=True)
    except FileNotFoundError:  # the compiler itself is missing; the chained error only repeats it
        raise CompilerMissing(no_compiler_message()) from None
    if proc.returncode != 0:
        where = ""
        if log is not None:
            with contextlib.suppress(OSError):
                log.write_text(f"$ {shlex.join(cmd)}\n{proc.stdout}{proc.stderr}")
                where = f" (the compiler's output: {log})"
        raise BuildError(f"{COMPILER} failed{where}\n{shlex.join(cmd)}\n{proc.stdout}{proc.stderr}")


def _say(text: str) -> None:
    """A progress line on stderr (a build takes up to a minute: never silent that long)."""
    print(f"nvtx_plugins_tf: {text}", file=sys.stderr, flush=True)


def _compile_and_link(sources: list[Path], output: Path, cflags: list[str], ldflags: list[str]) -> None:
    """Compile each source to an object in parallel (2 jobs), then link atomically; say what is
    built and how long it takes on stderr (every 10 s while it lasts)."""
    import concurrent.futures

    require_compiler()  # said once, before anything else
    output.parent.mkdir(parents=True, exist_ok=True)
    log = _build_log(output)
    started = time.monotonic()
    _say(f"building {output.name} from {len(sources)} source(s) into {output.parent}")
    with tempfile.TemporaryDirectory(prefix="nvtx_tf_build_") as tmp:
        objects = [Path(tmp) / (src.stem + ".o") for src in sources]
        jobs = max(1, min(len(sources), os.cpu_count() or 1))
        with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
            futures = [
                pool.submit(_run, [COMPILER, *cflags, "-c", str(src), "-o", str(obj)], log)
                for src, obj in zip(sources, objects)
            ]
            while True:
                done, pending = concurrent.futures.wait(futures, timeout=10)
                for future in done:
                    if future.exception() is not None:  # the first failure ends the build: the sources
                        for other in futures:  # not started yet are not compiled
                            other.cancel()
                        future.result()
                if not pending:
                    break
                _say(f"building {output.name}: {len(done)}/{len(futures)} compiled, {time.monotonic() - started:.0f} s")
        partial = output.with_name(output.name + f".tmp{os.getpid()}")
        _run([COMPILER, "-shared", *map(str, objects), "-o", str(partial), *ldflags], log)
        os.replace(partial, output)
    with contextlib.suppress(OSError):
        if log.name.endswith(".build.log") and log.stat().st_size == 0:
            log.unlink()
    _say(f"built {output.name} in {time.monotonic() - started:.1f} s")


def _sources(folder: str) -> list[Path]:
    sources = sorted((sources_root() / folder).glob("*.cc"))
    if not sources:
        raise BuildError(f"no sources in cc_ops/{folder}")
    return sources


def build_recorder(out_dir: Path) -> Path:
    out = out_dir / LIBRARY_NAMES["recorder"]
    cflags = [*_COMMON_FLAGS, "-Werror", "-fvisibility=hidden", f"-I{nvtx_include_dir()}", f"-I{sources_root()}"]
    _compile_and_link(_sources("recorder"), out, cflags, ["-pthread", "-ldl"])
    return _stamp(out, "recorder")


def build_reader(out_dir: Path) -> Path:
    out = out_dir / LIBRARY_NAMES["reader"]
    cflags = [*_COMMON_FLAGS, "-Werror", "-fvisibility=hidden", f"-I{sources_root()}"]
    # -ldl: libsqlite3 is opened at run time (cc_ops/reader/sqlite_insert.h), never linked.
    _compile_and_link(_sources("reader"), out, cflags, ["-pthread", "-ldl"])
    return _stamp(out, "reader")


def build_host(out_dir: Path) -> Path:
    out = out_dir / LIBRARY_NAMES["host"]
    cflags = [*_COMMON_FLAGS, "-Werror", "-fvisibility=hidden", f"-I{nvtx_include_dir()}"]
    _compile_and_link(_sources("host"), out, cflags, ["-ldl"])
    return _stamp(out, "host")


def stamp_path(library: Path) -> Path:
    return library.with_suffix(".json")


def file_digest(path: Path) -> dict:
    """``{"size": bytes, "sha256": hex}`` of ``path``, as recorded in the stamp."""
    sha = hashlib.sha256()
    size = 0
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            sha.update(block)
            size += len(block)
    return {"size": size, "sha256": sha.hexdigest()}


def _write_atomically(path: Path, text: str) -> None:
    partial = path.with_name(path.name + f".tmp{os.getpid()}")
    partial.write_text(text)
    os.replace(partial, path)


_SOURCE_FOLDERS = {"recorder": ("recorder", "format"), "reader": ("reader", "format"), "host": ("host",)}
_SOURCE_FOLDERS["tf_ops"] = ("tf_ops", "format")


def sources_digest(target: str) -> str:
    """sha256 over the names and bytes of the sources a target is built from (its cc_ops
    folder and the shared format header): the stamp records it, and a library built from other
    sources (an older cache copy) is not loaded in place of this package's."""
    sha = hashlib.sha256()
    root = sources_root()
    for folder in _SOURCE_FOLDERS[target]:
        for path in sorted((root / folder).iterdir()):
            if path.suffix in (".cc", ".h"):
                sha.update(f"{folder}/{path.name}\0".encode())
                sha.update(path.read_bytes())
    return sha.hexdigest()


def _stamp(library: Path, target: str) -> Path:
    """Writes the stamp of the recorder, reader or host library: which target it is, the
    sources it was built from, its size and sha256 (checked before every load: a damaged,
    foreign or stale file is never mapped)."""
    stamp = {"target": target, "sources": sources_digest(target), **file_digest(library)}
    stamp["compiler"] = _compiler_version()
    _write_atomically(stamp_path(library), json.dumps(stamp, indent=1))
    return library


def build_tf_ops(out_dir: Path) -> Path:
    """Build the TensorFlow op library against the installed TensorFlow; write its stamp."""
    info = tf_build_info()
    out = out_dir / LIBRARY_NAMES["tf_ops"]
    include = nvtx_include_dir()
    cflags = [
        *_COMMON_FLAGS,
        *info["compile_flags"],
        f"-I{include}",
        f"-I{sources_root()}",
        "-Wno-deprecated-declarations",
        "-Wno-unused-function",
        "-Wno-unknown-pragmas",
    ]
    ldflags = [*info["link_flags"], "-ldl", f"-Wl,-rpath,{info['tf_lib']}"]
    _compile_and_link(_sources("tf_ops"), out, cflags, ldflags)
    stamp = {
        "tf_version": info["tf_version"],
        "abi": info["abi"],
        **file_digest(out),
        "nvtx": nvtx_header_version(include),
        "sources": sources_digest("tf_ops"),
        "compiler": _compiler_version(),
    }
    _write_atomically(stamp_path(out), json.dumps(stamp, indent=1))
    return out


BUILDERS = {"recorder": build_recorder, "reader": build_reader, "host": build_host, "tf_ops": build_tf_ops}
assert set(BUILDERS) == set(TARGETS), "nvtx_plugins_tf/_native_libs.py LIBRARY_NAMES and BUILDERS disagree"


def build(out_dir: Path, targets: tuple[str, ...] = TARGETS) -> list[Path]:
    """Build ``targets`` into ``out_dir``; returns the libraries' paths."""
    return [BUILDERS[target](Path(out_dir)) for target in targets]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("targets", nargs="*", metavar="TARGET", help=f"any of {', '.join(TARGETS)} (default: all)")
    parser.add_argument("--out", type=Path, default=_HERE.parent / "nvtx_plugins_tf" / "_native")
    args = parser.parse_args(argv)
    unknown = sorted(set(args.targets) - set(TARGETS))
    if unknown:
        parser.error(f"unknown target(s) {', '.join(unknown)}; choose from {', '.join(TARGETS)}")
    try:
        for path in build(args.out, tuple(args.targets or TARGETS)):
            print(f"built {path}")
    except BuildError as exc:
        print(f"build failed: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
