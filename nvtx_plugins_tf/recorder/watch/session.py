"""One ``watch``: the ranks tailed (:mod:`.tail`), their new steps (:mod:`.steps`), the
stragglers (:mod:`.detect`) and the stale ranks, poll after poll, as the objects of the
``--json`` contract (:mod:`.jsonl`) that both views show.

A rank is stale when its writer is gone without closing its segment (SIGKILL, a crash: its
lock released, the segment not marked closed), seen at the first poll after it went; or when
its ranges have not changed for ``stale_after`` seconds while its writer still runs (a hung
rank; said again if it hangs again after writing more). A rank whose writer ended normally is
not stale: it is done.
"""

from __future__ import annotations

import time

from ..analysis.mapper import StepSpec
from .detect import Detector
from .jsonl import stale_object, step_object, straggler_object
from .steps import StepAssembler
from .tail import RankSource, Tailer

__all__ = ["CPU_BUDGET", "STALE_AFTER", "Watch", "pause"]

#: seconds without a new range after which a rank still written is stale
STALE_AFTER = 30.0
#: the share of one core ``watch``'s reads may take on average (issue 47: "cheap enough to
#: leave enabled", 15 % of a core)
CPU_BUDGET = 0.15


def pause(interval: float, budget: float, wall: float, cpu: float) -> float:
    """Seconds to wait before the next poll, after one that took ``wall`` seconds and ``cpu``
    seconds of CPU: the next starts ``interval`` after this one did, or later when this one's
    CPU over that time would exceed ``budget`` (a share of one core): a live rank is read in
    parts (what was written since), but a recording read whole costs more as the run grows,
    and then the polls space out instead of the CPU rising.

    >>> pause(0.5, 0.15, wall=0.1, cpu=0.03), pause(0.5, 0.15, wall=0.4, cpu=0.3)
    (0.4, 1.6)
    """
    return max(0.0, max(interval, cpu / budget) - wall)


class Watch:
    """The state of one ``watch`` of the recordings named by ``values`` (recordings or folders
    of them); ``step``: ``NAME[@DOMAIN]`` of the step ranges (None: as ``analyze`` chooses);
    ``stale_after``: seconds without a new range after which a rank still written is stale;
    ``tailer``: what reads the ranks (default: a :class:`.tail.Tailer` of ``values`` here; a
    :class:`.hosts.HostsTailer` reads them on the workers of a Dask cluster)."""

    def __init__(self, values: list[str], step: str | None = None, stale_after: float = STALE_AFTER, tailer=None):
        self.tailer = tailer if tailer is not None else Tailer(values, StepSpec.parse(step) if step else None)
        self.steps = StepAssembler()
        take = getattr(self.tailer, "take", None)  # (a host's reader sent the steps: placed here)
        self._new_steps = self.steps.new_steps if take is None else (lambda r: self.steps.placed(r, take(r)))
        self.detector = Detector()
        self.stale_after = stale_after
        #: lines for the user, each once: a damaged recording (its intact events count), one
        #: left out (it could not be read once its writers ended)
        self.notes: list[str] = []
        self._stale: set[str] = set()
        self._left: set[str] = set()
        self._noted: set[str] = set()
        self._tailer_notes: list[str] = []
        self.steps_seen = 0

    @property
    def done(self) -> bool:
        """Every rank met has a writer that ended (read once after it did)."""
        return self.tailer.all_done

    def _ranks_of(self, source: RankSource) -> list[str]:
        if source.results:
            return [self.steps.name_of(r) for r in source.results]
        name = source.path.name
        return [name[: -len(".nvtxrec")] if name.endswith(".nvtxrec") else name]

    def poll(self) -> list[dict]:
        """Read every rank again; returns the new ``step``, ``straggler`` and ``stale`` objects."""
        out: list[dict] = []
        sources = self.tailer.poll()
        for line in getattr(self.tailer, "notes", ())[len(self._tailer_notes) :]:
            self._tailer_notes.append(line)
            self.notes.append(line)
        now = time.monotonic()  # (the clock of RankSource.changed_at)
        for source in sources:  # (every rank read is awaited before any step is judged)
            for rank in self._ranks_of(source) if source.results else ():
                if rank not in self._left:
                    self.detector.join(rank)
        for source in sources:
            for result in source.results:
                for record in self._new_steps(result):
                    self.steps_seen += 1
                    out.append(step_object(record))
                    out.extend(straggler_object(s) for s in self.detector.add(record))
                # (damage is said from the read after its writers ended: a read racing a live
                # writer may meet an event before the string that names it)
                if source.done and result.damage and result.file not in self._noted:
                    self._noted.add(result.file)
                    self.notes.append(f"damaged recording {result.file}: {result.damage}; its intact events count")
        for source in sources:
            if source.left_out and str(source.path) not in self._noted:
                self._noted.add(str(source.path))
                self.notes.append(f"left out: {source.path}: {source.error}")
            ranks = self._ranks_of(source)
            hung = source.state == "live" and now - source.changed_at > self.stale_after
            if source.state == "lost" or hung:
                for rank in ranks:
                    if rank not in self._stale:
                        self._stale.add(rank)
                        out.append(stale_object(rank))
            elif source.state == "live":
                self._stale.difference_update(ranks)  # (writing again: may be stale again later)
            if source.done:
                for rank in ranks:
                    if rank not in self._left:
                        self._left.add(rank)
                        out.extend(straggler_object(s) for s in self.detector.leave(rank))
        return out
