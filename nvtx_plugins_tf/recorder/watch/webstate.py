"""What ``watch --web``'s page shows, shared between the poll loop (which feeds it the
``--json`` objects, :meth:`WebState.add`) and the server's sessions (each takes a
:meth:`WebState.snapshot` at its own pace, in the server's thread): the terminal view's
:class:`.view.Board` (its rows and straggler lines) plus, per rank, its last :data:`HEAT`
steps for the heatmap, each with its ranges (what a click on a cell shows).

No Bokeh here: the page (:mod:`.web`) turns snapshots into its documents. Every cell carries a
sequence number, so that a session streams only the cells it has not sent yet.
"""

from __future__ import annotations

import threading
from array import array
from collections import deque
from dataclasses import dataclass

from .view import ROWS, Board

__all__ = ["HEAT", "RANGES", "Cell", "Snapshot", "WebState"]

#: the steps of the page's rolling heatmap (its columns)
HEAT = 60
#: the ranges kept of a rank-step (the largest first), for a click on its cell
RANGES = 50


@dataclass(frozen=True)
class Cell:
    """One rank-step of the heatmap: its sequence number (the order cells were added), step
    number, duration (ns), the names and ns of its ranges, the largest first (at most
    :data:`RANGES`: the names shared with the step's object, the ns in an ``array``, about
    1 KB a cell), with how many were left out and their ns."""

    seq: int
    step: int
    duration_ns: int
    names: tuple[str, ...]
    ns: array
    others: tuple[int, int] = (0, 0)

    @property
    def ranges(self) -> list[tuple[str, int]]:
        """``(name, ns)`` of the ranges kept, the largest first."""
        return list(zip(self.names, self.ns))


@dataclass
class Snapshot:
    """The page's state at one moment: the table's rows (rank, step, last, median, p95,
    slowest range, state: as the terminal's, without its heatmap column), how many ranks are
    not shown, the straggler and stale lines, the ranks of the heatmap (the table's, in its
    order), their cells newer than the sequence number asked for, the typical step time (ns:
    the heatmap's scale), the newest step number and the newest sequence number."""

    rows: list[tuple[str, ...]]
    hidden: int
    lines: list[str]
    ranks: list[str]
    cells: dict[str, list[Cell]]
    typical: float
    newest: int
    seq: int


class WebState:
    """The page's state, fed in one thread and read in others (a lock around both)."""

    def __init__(self) -> None:
        self.board = Board()
        self._lock = threading.Lock()
        self._cells: dict[str, deque] = {}
        self._seq = 0

    def add(self, objects: list[dict]) -> None:
        """The ``--json`` objects of one poll, in order."""
        with self._lock:
            for obj in objects:
                self.board.add(obj)
                if obj.get("kind") != "step":
                    continue
                self._seq += 1
                ranges = obj.get("ranges") or {}
                top = sorted(ranges.items(), key=lambda kv: (-kv[1], kv[0]))[:RANGES]  # (ties: by name)
                rest = (len(ranges) - len(top), sum(ranges.values()) - sum(ns for _, ns in top))
                names = tuple(name for name, _ in top)
                cell = Cell(self._seq, obj["step"], obj["duration_ns"], names, array("q", (ns for _, ns in top)), rest)
                self._cells.setdefault(obj["rank"], deque(maxlen=HEAT)).append(cell)

    def done(self, ranks: list[str]) -> bool:
        """These ranks' writers ended; whether that changed what is shown."""
        with self._lock:
            return [self.board.done(rank) for rank in ranks].count(True) > 0

    def snapshot(self, since: int = 0) -> Snapshot:
        """What the page shows now; the cells newer than sequence number ``since``."""
        with self._lock:
            board = self.board
            rows = [row[:-1] for row in board.rows(ROWS)]  # (the heatmap is the page's own)
            ranks = [row[0] for row in rows]
            cells = {}
            for rank in ranks:
                mine = self._cells.get(rank, ())
                cells[rank] = [c for c in mine if c.seq > since and c.step > board.newest - HEAT]
            return Snapshot(
                rows=rows,
                hidden=len(board.ranks) - len(rows),
                lines=list(board.lines),
                ranks=ranks,
                cells=cells,
                typical=board.typical(),
                newest=board.newest,
                seq=self._seq,
            )

    def cell(self, rank: str, step: int) -> Cell | None:
        """The cell of ``rank``'s step ``step``, while it is among its last :data:`HEAT`."""
        with self._lock:
            for c in self._cells.get(rank, ()):
                if c.step == step:
                    return c
        return None
