"""``nvtx-tf watch``: a running job's step pace across ranks, live, read from the recordings
while they are written (no code inside the job). One concern a module: the ranks tailed
(:mod:`.tail`), their steps on one clock (:mod:`.steps`), the chronic-lag rule
(:mod:`.detect`), one poll of them all (:mod:`.session`), the ``--json`` contract
(:mod:`.jsonl`), the terminal view (:mod:`.view`, with ``rich``: the ``watch`` extra) and the
web page (:mod:`.webstate`, what it shows, and :mod:`.web`, its Bokeh server: the ``web``
extra); ``--scheduler``: each host's ranks read on its Dask worker (:mod:`.hosts`).

The top layer of the recorder with ``outputs`` and ``merge``: it reads through ``analysis``'s
mapper, so that its steps are ``analyze``'s to the ns.
"""

from __future__ import annotations

from .detect import Detector, Straggler
from .session import STALE_AFTER, Watch
from .steps import StepAssembler, StepRecord
from .tail import Tailer, WatchInputError

__all__ = [
    "STALE_AFTER",
    "Detector",
    "StepAssembler",
    "StepRecord",
    "Straggler",
    "Tailer",
    "Watch",
    "WatchInputError",
]
