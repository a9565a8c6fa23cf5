"""Two sides' runs compared: ``nvtx-tf compare`` (:func:`compare`). Each side's runs are read by
``analyze``'s mapping code (:mod:`.load`) into per-step, per-rank, per-range times
(:mod:`.data`); the warm-up is cut (:mod:`.warmup`); the effect of the change on each range and
on the step is estimated with an interval at the level the runs are replicated at
(:mod:`.stats`); the verdicts and the attribution of the step's change follow (:mod:`.verdict`),
and the outputs (:mod:`.outputs`). :mod:`.synthetic` makes runs of known truth for the tests.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..._lazy import attach

if TYPE_CHECKING:
    from .data import Run
    from .load import Loaded, load_runs
    from .outputs import summary_lines, write_outputs
    from .verdict import Comparison, compare_runs

_HOMES = {
    "Run": ".data",
    **dict.fromkeys(("Loaded", "load_runs"), ".load"),
    **dict.fromkeys(("summary_lines", "write_outputs"), ".outputs"),
    **dict.fromkeys(("Comparison", "compare_runs"), ".verdict"),
}
__getattr__, __dir__ = attach(__name__, _HOMES)

__all__ = ["Comparison", "Loaded", "Run", "compare_runs", "load_runs", "summary_lines", "write_outputs"]
