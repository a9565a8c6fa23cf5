"""Reports of a recording or of an SQLite file in nsys's schema (ours or ``nsys export``'s):
the range summary (:mod:`.summary`, ``nvtx_sum``), nsys's other NVTX reports
(:mod:`.nsys_reports`, computed from the arrays of :mod:`.ranges`), backward/forward pairs
(:mod:`.pairs`); how ranges are named in all of them (:mod:`.names`), text tables
(:mod:`._table`).

Builds on :mod:`..recording`, the one-pass driver of :mod:`..exports` and the readers of
nsys's exports (:mod:`..nsys_inputs`).
"""

from __future__ import annotations

from .nsys_reports import Report, nsys_report
from .summary import RecordingSummary, Summary, summarize

__all__ = ["RecordingSummary", "Report", "Summary", "nsys_report", "summarize"]
