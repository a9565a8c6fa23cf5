"""Reports of a recording or of an SQLite file in nsys's schema (ours or ``nsys export``'s):
the range summary (:mod:`.summary`, ``nvtx_sum``), nsys's other NVTX reports
(:mod:`.nsys_reports`, computed from the arrays of :mod:`.ranges`), backward/forward pairs
(:mod:`.pairs`); how ranges are named in all of them (:mod:`.names`), text tables
(:mod:`._table`).

Builds on :mod:`..recording`, the one-pass driver of :mod:`..exports` and the readers of
nsys's exports (:mod:`..nsys_inputs`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..._lazy import attach

if TYPE_CHECKING:
    from .nsys_reports import Report, nsys_report
    from .summary import RecordingSummary, Summary, summarize

# the public names, imported on first use (nvtx_plugins_tf/_lazy.py), and where each lives
_HOMES = {
    **dict.fromkeys(("Report", "nsys_report"), ".nsys_reports"),
    **dict.fromkeys(("RecordingSummary", "Summary", "summarize"), ".summary"),
}
__getattr__, __dir__ = attach(__name__, _HOMES)

__all__ = ["RecordingSummary", "Report", "Summary", "nsys_report", "summarize"]
