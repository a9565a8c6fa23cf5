"""Build hooks: compile the native libraries into nvtx_plugins_tf/_native.

The recorder, the reader and the host-range library (``libnvtx_host.so``, used by the
Keras callback and the session hook) are always built: they need only g++ and the
nvidia-nvtx headers, a build requirement. The targets and file names come from
build_tools/build_native.py, which reads the names from nvtx_plugins_tf/_native_libs.py.
The TensorFlow op library is built here only when TensorFlow is importable in the
build environment (``pip install --no-build-isolation``); otherwise the package builds
it on first use against the TensorFlow it runs with (see nvtx_plugins_tf/ops/_loader.py),
or ``python -m nvtx_plugins_tf build`` does. The build logic and the C++ sources ship
inside the package as ``nvtx_plugins_tf/_build`` so that a rebuild works from an
installed wheel too.
"""

import importlib.util
import shutil
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build import build
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py
from setuptools.errors import CompileError

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT / "build_tools"))
import build_native  # noqa: E402  (build_tools/ is not a package; this is the build script)

sys.path.pop(0)


def require_compiler(editable: bool) -> None:
    """Stop before anything is built when the compiler is missing: one message (setuptools
    prints a CompileError as ``error: MESSAGE``, without a traceback), then pip's frame."""
    if shutil.which(build_native.COMPILER) is None:
        again = "pip install -e ." if editable else "pip install ."
        raise CompileError(f"nvtx_plugins_tf: {build_native.no_compiler_message(then=again)}")


class BuildFirstChecksCompiler(build):
    """``pip install .`` (bdist_wheel) runs build: check before build_py's file listing."""

    def run(self):
        require_compiler(editable=False)
        super().run()


class BuildNative(build_ext):
    """Each Extension names one target of build_tools/build_native.py; a failed build stops
    the install with the compiler's command and output, not a traceback."""

    def run(self):
        require_compiler(editable=self.editable_mode)  # pip install -e runs build_ext alone
        if "tf_ops" not in TARGETS:
            print(
                "nvtx_plugins_tf: TensorFlow not in the build environment; the op library is built "
                f"on first use (or by: {build_native.REBUILD_COMMAND})",
                file=sys.stderr,
            )
        super().run()

    def get_ext_filename(self, ext_name):
        return str(Path(*ext_name.split(".")[:-1]) / build_native.LIBRARY_NAMES[ext_name.split(".")[-1]])

    def _stamps(self):
        """(built, in-place) paths of each library's build stamp (``libX.json``): setuptools
        copies an editable install's libraries back into the source tree, not their stamps,
        and the loaders refuse a library without one."""
        build_py = self.get_finalized_command("build_py")
        for ext in self.extensions:
            inplace_file, regular_file = self._get_inplace_equivalent(build_py, ext)
            yield (build_native.stamp_path(Path(regular_file)), build_native.stamp_path(Path(inplace_file)))

    def copy_extensions_to_source(self):
        super().copy_extensions_to_source()
        for regular, inplace in self._stamps():
            self.copy_file(str(regular), str(inplace), level=self.verbose)

    def _get_output_mapping(self):
        yield from super()._get_output_mapping()
        if self.inplace:
            yield from ((str(regular), str(inplace)) for regular, inplace in self._stamps())

    def build_extension(self, ext):
        target = ext.name.split(".")[-1]
        out_dir = Path(self.get_ext_fullpath(ext.name)).parent
        try:
            build_native.BUILDERS[target](out_dir)
        except build_native.BuildError as exc:  # the message holds the command and its output
            raise CompileError(f"nvtx_plugins_tf: building the {target} library failed: {exc}") from None


class BuildPyWithSources(build_py):
    """Ship cc_ops/ and the build script inside the package for rebuilds."""

    def run(self):
        super().run()
        if self.editable_mode:
            return
        dest = Path(self.build_lib) / "nvtx_plugins_tf" / "_build"
        dest.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / "build_tools" / "build_native.py", dest / "build_native.py")
        (dest / "__init__.py").write_text("")
        shutil.copytree(ROOT / "cc_ops", dest / "cc_ops", dirs_exist_ok=True)


TARGETS = list(build_native.TARGETS)
if importlib.util.find_spec("tensorflow") is None:
    TARGETS.remove("tf_ops")

setup(
    ext_modules=[Extension(f"nvtx_plugins_tf._native.{t}", sources=[]) for t in TARGETS],
    cmdclass={"build": BuildFirstChecksCompiler, "build_ext": BuildNative, "build_py": BuildPyWithSources},
)
