"""Loaded by Python at start-up in a process recorded with ``record --keras-layers`` or
``record --tf-ops`` (its folder is put first on PYTHONPATH, and NVTX_TF_KERAS_LAYERS=1 or
NVTX_TF_OP_RANGES=1 is set). With the first, when ``keras`` or ``tf_keras`` is imported,
its ``Model`` class is patched to annotate every model (nvtx_plugins_tf/_keras_autoannotate.py);
with the second, when ``tensorflow`` is imported, TensorFlow's own per-op ranges are switched
on (nvtx_plugins_tf/tf_ops_annotation.py).

PYTHONPATH reaches every descendant, also other Pythons (another venv, the system
Python) that cannot import nvtx_plugins_tf: there this module does nothing but run the
next ``sitecustomize`` on the path, as it does everywhere. Nothing of its own raises.
"""

import os
import sys

_TARGETS = ("keras", "tf_keras")
_HERE = os.path.dirname(os.path.abspath(__file__))


def _can_annotate(switch="NVTX_TF_KERAS_LAYERS"):
    """True when the switch is on and this interpreter can import our package and its
    ``nvtx`` dependency (checked without importing them, nor anything else)."""
    if os.environ.get(switch) != "1":
        return False
    try:
        import importlib.util

        spec = importlib.util.find_spec("nvtx_plugins_tf")
        if importlib.util.find_spec("nvtx") is None:
            return False
    except Exception:  # noqa: BLE001 - a broken path entry must not break the interpreter
        return False
    if spec is None or not spec.submodule_search_locations:
        return False
    return any(os.path.isfile(os.path.join(d, "_keras_autoannotate.py")) for d in spec.submodule_search_locations)


def _patch_keras(module):
    model = getattr(module, "Model", None)
    if model is not None:
        from nvtx_plugins_tf._keras_autoannotate import patch_model_class

        patch_model_class(model)


def _tf_op_ranges(module):
    try:
        from nvtx_plugins_tf.tf_ops_annotation import tf_op_ranges

        tf_op_ranges(True)
    except Exception as exc:  # noqa: BLE001 - the switch never changes the fate of the program
        print(
            f"nvtx_plugins_tf: warning: --tf-ops: TensorFlow's per-op ranges stay off ({exc})",
            file=sys.stderr,
            flush=True,
        )


def _install_finder(targets, after_import):
    """Call ``after_import(module)`` once one of ``targets`` has been imported."""
    import importlib.abc
    import importlib.util

    class _AfterImportFinder(importlib.abc.MetaPathFinder):
        def __init__(self):
            self._busy = False

        def find_spec(self, name, path=None, target=None):
            if name not in targets or self._busy:
                return None
            self._busy = True
            try:
                spec = importlib.util.find_spec(name)
            finally:
                self._busy = False
            if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
                return spec
            loader_exec = spec.loader.exec_module

            def exec_module(module):
                loader_exec(module)
                after_import(module)

            spec.loader.exec_module = exec_module
            return spec

    sys.meta_path.insert(0, _AfterImportFinder())


def _chain_next_sitecustomize():
    """Run the ``sitecustomize`` that this one hides (later on sys.path), if any."""
    import importlib.machinery
    import importlib.util

    paths = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", paths)
    if spec is not None and spec.loader is not None:
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)


if _can_annotate():
    _install_finder(_TARGETS, _patch_keras)
if _can_annotate("NVTX_TF_OP_RANGES"):
    _install_finder(("tensorflow",), _tf_op_ranges)
_chain_next_sitecustomize()
