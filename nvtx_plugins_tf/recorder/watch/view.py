"""``watch``'s terminal view: a table per rank (its last, median and p95 step time over its
last :data:`WINDOW` steps, the range that took most of its last step, its state, a rolling
heatmap of its last steps as wide as the terminal leaves room for) and the straggler lines,
redrawn in place at each poll with ``rich`` (the ``watch`` extra).

:class:`Board` holds what is shown, fed the ``--json`` objects (:meth:`Board.add`);
:func:`render` draws it to a string (what tests read), :func:`live` redraws it on a terminal.
Names come from the recorded program: every one is shown through
:func:`nvtx_plugins_tf._printable.printable` (control characters escaped) and as plain text,
never as rich markup (a ``[bold]`` in a range name is text).
"""

from __future__ import annotations

import io
import re
from collections import deque
from dataclasses import dataclass, field

from ..._printable import printable

__all__ = ["WINDOW", "Board", "live", "render", "rich_available"]

#: the steps of a rank its median and p95 are taken over
WINDOW = 200
#: the straggler lines kept under the table
LINES = 8
#: the steps of the rolling heatmap (columns: the last HEAT step numbers any rank ended)
HEAT = 24
#: its shades: a step's time against the median of the ranks' median step times, from 1.0x or
#: less (the first) up a tenth a shade to 1.7x and more (the last); a step not ended yet: "·"
SHADES = "▁▂▃▄▅▆▇█"
#: the ranks shown at most: with more, the stale and named ones first, then the slowest by
#: median, and a line saying how many are not shown (a frame of 1,024 ranks stays a screen)
ROWS = 32


def rich_available() -> bool:
    """Whether ``rich`` (the ``watch`` extra) can be imported."""
    try:
        import rich  # noqa: F401
    except ImportError:
        return False
    return True


@dataclass
class _Rank:
    durations: deque = field(default_factory=lambda: deque(maxlen=WINDOW))
    recent: dict = field(default_factory=dict)  # step -> duration, the last HEAT steps
    step: int = -1
    top: tuple[str, int] = ("", 0)
    state: str = "live"


def _ms(ns: float) -> str:
    return f"{ns / 1e6:.1f}"


def _natural(name: str) -> list:
    """Sort key of a name whose numbers sort as numbers (``rank2`` before ``rank10``)."""
    return [(0, int(part), "") if part.isdigit() else (1, 0, part) for part in re.split(r"(\d+)", name)]


def _quantile(values: list[int], q: float) -> float:
    """numpy's linear quantile of ``values`` (not empty)."""
    s = sorted(values)
    pos = q * (len(s) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


class Board:
    """What the terminal view shows, fed the ``--json`` objects in the order they come."""

    def __init__(self) -> None:
        self.ranks: dict[str, _Rank] = {}
        self.lines: deque = deque(maxlen=LINES)
        self._named: dict[str, dict] = {}  # rank -> its straggler object
        self._keys: dict[str, list] = {}  # rank -> its sort key (_natural), made once
        self.newest = -1  #: the highest step number met

    def add(self, obj: dict) -> None:
        """One ``step``, ``straggler`` or ``stale`` object (others are left out)."""
        rank = self.ranks.setdefault(obj.get("rank", ""), _Rank())
        kind = obj.get("kind")
        if kind == "step":
            rank.durations.append(obj["duration_ns"])
            rank.step = obj["step"]
            self.newest = max(self.newest, obj["step"])
            rank.recent[obj["step"]] = obj["duration_ns"]
            for old in [s for s in rank.recent if s <= self.newest - HEAT]:
                del rank.recent[old]
            ranges = obj.get("ranges") or {}
            rank.top = max(ranges.items(), key=lambda kv: (kv[1], kv[0]), default=("", 0))
            if rank.state == "stale":
                rank.state = "live"
        elif kind == "straggler":
            self._named[obj["rank"]] = obj
            excess = _ms(obj["excess_ns"])
            self.lines.append(
                f"straggler: {obj['rank']} {obj['range']} +{excess} ms a step (named at step {obj['step']})"
            )
        elif kind == "stale":
            rank.state = "stale"
            self.lines.append(f"stale: {obj['rank']} (its writer is gone, or it has not written for a while)")

    def done(self, rank: str) -> bool:
        """``rank``'s writer ended; returns whether that changed what is shown."""
        r = self.ranks.get(rank)
        if r is None or r.state in ("stale", "done"):
            return False
        r.state = "done"
        return True

    def heat(self, rank: str, typical: float) -> str:
        """``rank``'s row of the rolling heatmap: a shade (:data:`SHADES`) per step of the
        last :data:`HEAT`, its time against ``typical`` ns."""
        recent = self.ranks[rank].recent
        cells = []
        for step in range(self.newest - HEAT + 1, self.newest + 1):
            if step < 0:
                continue
            d = recent.get(step)
            if d is None or typical <= 0:
                cells.append("·")
                continue
            level = int(round((d / typical - 1.0) * 10))
            cells.append(SHADES[min(max(level, 0), len(SHADES) - 1)])
        return "".join(cells)

    def _medians(self) -> dict[str, float]:
        """Each rank's median step time (ns) over its last :data:`WINDOW` steps, ranks with a step."""
        return {name: _quantile(list(r.durations), 0.5) for name, r in self.ranks.items() if r.durations}

    def typical(self, medians: dict[str, float] | None = None) -> float:
        """The median of the ranks' median step times (ns; 0 before any step); ``medians``:
        :meth:`_medians`, when the caller has them."""
        values = list((self._medians() if medians is None else medians).values())
        return _quantile(values, 0.5) if values else 0.0

    def rows(self, limit: int = ROWS) -> list[tuple[str, ...]]:
        """The table's rows: rank, step, last, median, p95 (ms), slowest range, state, its row
        of the rolling heatmap (:meth:`heat`); by name
        (``rank2`` before ``rank10``), or with more than ``limit`` ranks, the ``limit`` that
        matter most (stale, named, then the slowest by median)."""
        for name in self.ranks.keys() - self._keys.keys():
            self._keys[name] = _natural(name)
        ranks = sorted(self.ranks.items(), key=lambda item: self._keys[item[0]])
        medians = self._medians()  # (once a frame: a sort of each rank's window)
        if len(ranks) > limit:

            def weight(item):
                name, r = item
                return (r.state != "stale", name not in self._named, -medians.get(name, 0))

            ranks = sorted(ranks, key=weight)[:limit]
        typical = self.typical(medians)
        out = []
        for name, r in ranks:
            d = list(r.durations)
            if d:
                cells = (str(r.step), _ms(d[-1]), _ms(medians[name]), _ms(_quantile(d, 0.95)))
            else:
                cells = ("-", "-", "-", "-")
            top = f"{r.top[0]} {_ms(r.top[1])} ms" if r.top[0] else "-"
            state = "straggler" if name in self._named and r.state == "live" else r.state
            out.append((name, *cells, top, state, self.heat(name, typical)))
        return out


#: columns left to the table beside the heatmap (room for rank and range names of ~25 characters)
_TABLE_WIDTH = 104


def _renderable(board: Board, title: str, width: int):
    """The view at ``width`` columns: the heatmap shows the last steps that fit (none below 8)."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    heat = min(HEAT, width - _TABLE_WIDTH)
    table = Table(title=Text(printable(title)), title_justify="left")
    for header, justify in (("rank", "left"), ("step", "right"), ("last ms", "right"), ("median ms", "right"),
                            ("p95 ms", "right"), ("slowest range (last step)", "left"), ("state", "left")):  # fmt: skip
        table.add_column(header, justify=justify)
    if heat >= 8:
        table.add_column(f"last {heat} steps", no_wrap=True)
    rows = board.rows()
    for row in rows:
        cells = [*row[:-1], row[-1][-heat:]] if heat >= 8 else row[:-1]
        table.add_row(*(Text(printable(cell)) for cell in cells))
    more = len(board.ranks) - len(rows)
    hidden = [Text(f"... and {more} more rank(s): the stale, the named and the slowest are shown")] if more else []
    return Group(table, *hidden, *(Text(printable(line)) for line in board.lines))


def render(board: Board, title: str = "nvtx-tf watch", width: int = 120) -> str:
    """The view as plain text (no colours, no terminal codes), ``width`` columns wide."""
    from rich.console import Console

    out = io.StringIO()
    console = Console(file=out, width=width, color_system=None, force_terminal=False, legacy_windows=False)
    console.print(_renderable(board, title, width))
    return out.getvalue()


class live:
    """A ``with`` block redrawing ``board`` in place on the terminal: call :meth:`update` after
    each poll. Not on a terminal, each update prints the frame (a log of frames)."""

    def __init__(self, board: Board, title: str = "nvtx-tf watch"):
        from rich.console import Console
        from rich.live import Live

        self.board, self.title = board, title
        self._console = Console()
        first = _renderable(board, title, self._console.width)
        self._live = Live(first, console=self._console, auto_refresh=False, transient=False)

    def __enter__(self) -> "live":
        if self._console.is_terminal:
            self._live.__enter__()
        return self

    def update(self) -> None:
        """Redraw the view from the board as it is now."""
        if self._console.is_terminal:
            self._live.update(_renderable(self.board, self.title, self._console.width), refresh=True)
        else:
            self._console.print(_renderable(self.board, self.title, self._console.width))

    def __exit__(self, *exc) -> None:
        if self._console.is_terminal:
            self._live.__exit__(*exc)
