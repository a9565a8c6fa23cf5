"""Loaded by Python at start-up in a process recorded with ``record --keras-layers``
(its folder is put first on PYTHONPATH, and NVTX_TF_KERAS_LAYERS=1 is set). When
``keras`` or ``tf_keras`` is imported, its ``Model`` class is patched to annotate every
model (nvtx_plugins_tf/_keras_autoannotate.py).

PYTHONPATH reaches every descendant, also other Pythons (another venv, the system
Python) that cannot import nvtx_plugins_tf: there this module does nothing but run the
next ``sitecustomize`` on the path, as it does everywhere. Nothing of its own raises.
"""

import os
import sys

_TARGETS = ("keras", "tf_keras")
_HERE = os.path.dirname(os.path.abspath(__file__))


def _can_annotate():
    """True when the switch is on and this interpreter can import our package and its
    ``nvtx`` dependency (checked without importing them, nor anything else)."""
    if os.environ.get("NVTX_TF_KERAS_LAYERS") != "1":
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


def _install_finder():
    import importlib.abc
    import importlib.util

    class _KerasFinder(importlib.abc.MetaPathFinder):
        def __init__(self):
            self._busy = False

        def find_spec(self, name, path=None, target=None):
            if name not in _TARGETS or self._busy:
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
                model = getattr(module, "Model", None)
                if model is not None:
                    from nvtx_plugins_tf._keras_autoannotate import patch_model_class

                    patch_model_class(model)

            spec.loader.exec_module = exec_module
            return spec

    sys.meta_path.insert(0, _KerasFinder())


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
    _install_finder()
_chain_next_sitecustomize()
