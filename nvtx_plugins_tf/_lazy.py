"""A package's public names imported on first use (PEP 562), for the packages whose
``__init__`` would otherwise import every submodule: a command then imports only what it
runs (``analyze`` neither the exports' writers nor the reports; a tenth of its start-up).

>>> import sys
>>> from nvtx_plugins_tf import recorder
>>> "render_timeline" in dir(recorder), recorder.render_timeline.__module__
(True, 'nvtx_plugins_tf.recorder.timeline.render')
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any


def attach(package: str, homes: dict[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for ``package``, whose public names ``homes`` maps to the
    submodule (relative, ``.exports``) each is imported from on first use."""
    module = importlib.import_module(package)

    def __getattr__(name: str) -> Any:
        home = homes.get(name)
        if home is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(home, package), name)
        setattr(module, name, value)  # (the next access finds it without this function)
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(module)) | set(homes))

    return __getattr__, __dir__
