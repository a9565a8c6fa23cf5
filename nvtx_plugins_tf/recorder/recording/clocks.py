"""Processes of many clocks on one timeline: the one rule ``merge`` (a merged recording),
``analyze`` (its ``pace`` across inputs) and the reports (the processes of one recording)
place them by.

Each process's clock has an offset, CLOCK_REALTIME minus CLOCK_MONOTONIC read together when
it opened its first segment (:attr:`.model.ProcessInfo.clock_offset`): its timestamp plus the
offset is the wall-clock time of the event. Hosts' monotonic clocks start at their boots, a
time namespace (``unshare --time --monotonic N``) moves its processes' by N s; their realtime
anchors move with them, so every one lands on the wall clock.

One clock, exactly: offsets within :data:`.model.SAME_CLOCK_NS` (1 ms) of a clock already met
are that clock (the first offset met of it): two recordings of one host, its processes,
containers sharing its kernel. Their anchors differ only by the time between the two reads
(tens of ns, measured), so they keep their exact monotonic order rather than each its own
anchor's. The reference clock is the one with the smallest offset (the earliest origin);
a process's shift onto it is its clock minus the reference.

What no anchor can tell: two hosts whose wall clocks disagree (NTP keeps them within about a
millisecond on a LAN) are placed as far apart as their wall clocks are.
"""

from __future__ import annotations

from .model import SAME_CLOCK_NS

__all__ = ["Clocks", "SAME_CLOCK_NS"]


class Clocks:
    """The clocks met so far, in the order met (``clock_of`` each process's offset in a fixed
    order: merge's is its inputs' order, each one's processes by start)."""

    def __init__(self) -> None:
        self._clocks: list[int] = []

    def clock_of(self, offset: int) -> int:
        """The clock of a process whose offset is ``offset``: the first met within
        :data:`SAME_CLOCK_NS`, else a new one (its offset)."""
        for clock in self._clocks:
            if abs(offset - clock) < SAME_CLOCK_NS:
                return clock
        self._clocks.append(offset)
        return offset

    @property
    def reference(self) -> int:
        """The smallest clock offset met (the earliest origin): ValueError when none was."""
        return min(self._clocks)

    def shift(self, offset: int) -> int:
        """ns to add to a timestamp of the clock of ``offset`` to put it on the reference
        clock (>= 0)."""
        return self.clock_of(offset) - self.reference

    def __len__(self) -> int:
        return len(self._clocks)
