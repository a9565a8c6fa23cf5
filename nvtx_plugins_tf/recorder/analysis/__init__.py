"""Many ranks at once: ``nvtx-tf analyze`` (:func:`analyze`). Each input (a recording, or an
export: ours or nsys's) is mapped to its ranks' partial results where it is read
(:mod:`.mapper`, one task per input: in this process, or on Dask: :mod:`.engines`), and one
reducer makes the tables (:mod:`.reduce`): ``all_stats`` and ``rank_stats`` as the
``nvtx_sum`` recipe's, ``pace`` as the ``nvtx_pace`` recipe's, and a summary naming the
slowest rank. The same code on one process or a cluster, as NVIDIA's recipes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..._lazy import attach

if TYPE_CHECKING:
    from .engines import EngineUnavailable, check_scheduler_address, terminal_progress
    from .inputs import InputError, expand_inputs
    from .mapper import DEFAULT_STEPS, StepSpec
    from .outdir import OutdirError, check_outdir
    from .run import Analysis, NothingToAnalyze, StepNotFound, analyze, compute

# the public names, imported on first use (nvtx_plugins_tf/_lazy.py: the CLI starts the
# heatmap's process, .painter, before numpy and pyarrow are imported), and where each lives
_HOMES = {
    **dict.fromkeys(("EngineUnavailable", "check_scheduler_address", "terminal_progress"), ".engines"),
    **dict.fromkeys(("InputError", "expand_inputs"), ".inputs"),
    **dict.fromkeys(("DEFAULT_STEPS", "StepSpec"), ".mapper"),
    **dict.fromkeys(("OutdirError", "check_outdir"), ".outdir"),
    **dict.fromkeys(("Analysis", "NothingToAnalyze", "StepNotFound", "analyze", "compute"), ".run"),
}
__getattr__, __dir__ = attach(__name__, _HOMES)

__all__ = [
    "analyze",
    "compute",
    "Analysis",
    "StepSpec",
    "DEFAULT_STEPS",
    "InputError",
    "EngineUnavailable",
    "NothingToAnalyze",
    "OutdirError",
    "StepNotFound",
    "check_outdir",
    "check_scheduler_address",
    "expand_inputs",
    "terminal_progress",
]
