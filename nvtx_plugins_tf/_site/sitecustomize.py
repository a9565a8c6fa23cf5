"""Loaded by Python at start-up in a process recorded with ``record --keras-layers``
(its folder is put first on PYTHONPATH). When ``keras`` or ``tf_keras`` is imported, its
``Model`` class is patched to annotate every model (nvtx_plugins_tf/_keras_autoannotate.py).
Another ``sitecustomize`` later on the path still runs."""

import importlib.abc
import importlib.util
import os
import sys

_TARGETS = ("keras", "tf_keras")
_HERE = os.path.dirname(os.path.abspath(__file__))


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
    paths = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", paths)
    if spec is not None and spec.loader is not None:
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)


_chain_next_sitecustomize()
