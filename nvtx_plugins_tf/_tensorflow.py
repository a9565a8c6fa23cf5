"""Which TensorFlow this package works with, and the one line said when there is none.

The package does not make pip install TensorFlow (``tensorflow`` is the ``tf`` extra, not a
requirement): a requirement on the name ``tensorflow`` would put a second TensorFlow next to
``tensorflow-cpu``, ``tf-nightly`` or one built from source, which pip cannot tell apart from
a missing one. So the parts that need TensorFlow (``ops``, ``keras``, ``hooks``,
``tf_op_ranges``) ask :func:`require` first, and whatever ``import tensorflow`` finds is used
when it is :data:`MINIMUM` or later (docs/install.md#which-tensorflow).
"""

from __future__ import annotations

import importlib.util
import re
from types import ModuleType

#: The oldest TensorFlow release this package is built and tested against.
MINIMUM = (2, 16)
INSTALL_HINT = "pip install 'nvtx_plugins_tf[tf]' (or tensorflow-cpu, tf-nightly: see docs/install.md)"


class TensorFlowMissing(ImportError):
    """No usable TensorFlow: not installed, or older than :data:`MINIMUM`."""


def version_tuple(version: str) -> tuple[int, int] | None:
    """(major, minor) of a TensorFlow version string (``2.16.2``, ``2.23.0-dev20261026``,
    ``2.17.0+nv24.08``), or None when it does not start with two numbers.

    >>> version_tuple("2.23.0-dev20261026")
    (2, 23)
    """
    found = re.match(r"(\d+)\.(\d+)", version)
    return (int(found.group(1)), int(found.group(2))) if found else None


def problem(version: str) -> str | None:
    """Why TensorFlow ``version`` cannot be used, or None when it can."""
    found = version_tuple(version)
    if found is not None and found < MINIMUM:
        oldest = ".".join(map(str, MINIMUM))
        return f"TensorFlow {version} is older than {oldest}, the oldest this package supports; {INSTALL_HINT}"
    return None


def require() -> ModuleType:
    """``tensorflow``, imported, when it is installed and :data:`MINIMUM` or later; else
    :class:`TensorFlowMissing` with one line that says what to install."""
    if importlib.util.find_spec("tensorflow") is None:
        raise TensorFlowMissing(f"nvtx_plugins_tf: TensorFlow is not installed; {INSTALL_HINT}")
    import tensorflow as tf

    why = problem(getattr(tf, "__version__", ""))
    if why is not None:
        raise TensorFlowMissing(f"nvtx_plugins_tf: {why}")
    return tf
