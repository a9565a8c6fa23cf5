"""``watch --web``: the terminal view as a page, served by a Bokeh server (the ``web`` extra)
in a thread of its own beside the poll loop: a table per rank (its last, median and p95 step
time, the range that took most of its last step, its state), the straggler and stale lines,
and a rolling heatmap of the last :data:`.webstate.HEAT` steps of the table's ranks (a cell per
rank-step, its colour the step's time against the typical step time: white at 1.0x or less to
dark red at 1.7x and more, as the terminal's shades). A click on a cell lists that rank-step's
ranges (the work of each, less its children's; the largest first).

Each browser tab is a session of its own, updated every ``interval`` seconds from a
:meth:`.webstate.WebState.snapshot`: the table and the lines only when they changed, the
heatmap by streaming the cells it has not sent (binary arrays: 12 bytes a cell), so that the
page costs a few KB a second however long the run.

Names come from the recorded program: they reach the page as data (table cells, preformatted
text), never as HTML, with their control characters escaped
(:func:`nvtx_plugins_tf._printable.printable`).
"""

from __future__ import annotations

import queue
import threading

from ..._printable import printable
from .webstate import HEAT, WebState

__all__ = ["WebServer", "bokeh_available", "bind"]

#: the heatmap's colours, from a step at (or under) the typical time to one of 1.7x and more
PALETTE = ("#fff5f0", "#fee0d2", "#fcbba1", "#fc9272", "#fb6a4a", "#ef3b2c", "#cb181d", "#99000d")
#: the largest scale of the heatmap's colours: a step of this many typical steps or more
TOP = 1.7
COLUMNS = ("rank", "step", "last ms", "median ms", "p95 ms", "slowest range (last step)", "state")
_KEYS = ("rank", "step", "last", "median", "p95", "top", "state")
#: redraws a DataTable whose source's data was replaced by as many rows: Bokeh (3.9) redraws
#: it only when its rows' indices change, so a table of 4 ranks would stay at its first values
_REDRAW = "const view = Bokeh.index.find_one(table); if (view != null) view.updateGrid();"


def bokeh_available() -> bool:
    """Whether ``bokeh`` (the ``web`` extra) can be imported."""
    try:
        import bokeh  # noqa: F401
    except ImportError:
        return False
    return True


def bind(host: str, port: int) -> tuple[list, int]:
    """Listening sockets on ``host``:``port`` (0: any free port) and the port bound; raises
    :class:`OSError` (``socket.gaierror`` for a host that does not resolve) as ``bind`` does."""
    from bokeh.server.util import bind_sockets

    return bind_sockets(host, port)


class _Page:
    """One session's document: built by :meth:`build`, brought up to date by :meth:`update`."""

    def __init__(self, state: WebState, title: str):
        self.state, self.title = state, title
        self.rows: list = []
        self.lines: list = []
        self.ranks: list[str] = []
        self.seq = 0
        self.newest = -1
        self.typical = 0.0

    def build(self, doc, interval: float) -> None:
        from bokeh.events import Tap
        from bokeh.layouts import column
        from bokeh.models import (
            ColorBar,
            ColumnDataSource,
            CustomJS,
            DataTable,
            FixedTicker,
            LinearColorMapper,
            PreText,
            Range1d,
            TableColumn,
        )
        from bokeh.plotting import figure

        self.table = ColumnDataSource({key: [] for key in _KEYS}, name="ranks")
        widths = {"step": 60, "state": 70, "top": 260}
        columns = [TableColumn(field=k, title=t, width=widths.get(k, 90)) for k, t in zip(_KEYS, COLUMNS)]
        self.grid = grid = DataTable(source=self.table, columns=columns, index_position=None, width=900, height=300,
                         sortable=False, reorderable=False, name="ranks_table")  # fmt: skip
        self.text = PreText(text="", name="lines", width=900)
        import numpy as np

        self.heat = ColumnDataSource(
            {"x": np.zeros(0, np.int32), "y": np.zeros(0, np.int32), "ms": np.zeros(0, np.float32)}, name="heat"
        )
        self.mapper = LinearColorMapper(palette=list(PALETTE), low=0, high=1)
        self.x_range, self.y_range = Range1d(-0.5, HEAT - 0.5), Range1d(0.5, -0.5)
        fig = figure(
            title="step time by rank: the last steps (click a cell for its ranges)",
            x_range=self.x_range, y_range=self.y_range, width=940, height=220, tools="", toolbar_location=None,
            x_axis_label="step", name="heatmap",
        )  # fmt: skip
        fig.rect(x="x", y="y", width=1, height=1, source=self.heat, line_color=None,
                 fill_color={"field": "ms", "transform": self.mapper})  # fmt: skip
        fig.grid.visible = False
        fig.add_layout(ColorBar(color_mapper=self.mapper, title="ms", width=10), "right")
        self.ticker = FixedTicker(ticks=[])
        fig.yaxis.ticker = self.ticker
        fig.on_event(Tap, self.tap)
        self.fig = fig
        self.picked = PreText(text="click a cell of the heatmap: that rank-step's ranges", name="picked", width=900)
        self.ranges = ColumnDataSource({"range": [], "ms": [], "share": [], "ns": []}, name="ranges")
        cols = [TableColumn(field="range", title="range", width=500), TableColumn(field="ms", title="ms", width=90),
                TableColumn(field="share", title="% of the step", width=110)]  # fmt: skip
        picked_table = DataTable(source=self.ranges, columns=cols, index_position=None, width=900, height=60,
                                 sortable=False, name="ranges_table")  # fmt: skip
        self.picked_grid = picked_table
        for source, table in ((self.table, grid), (self.ranges, picked_table)):
            source.js_on_change("data", CustomJS(args={"table": table}, code=_REDRAW))
        header = PreText(text=printable(self.title), name="title")
        doc.title = "nvtx-tf watch"
        doc.add_root(column(header, grid, self.text, fig, self.picked, picked_table))
        self.update()
        doc.add_periodic_callback(self.update, max(50, int(interval * 1000)))

    def update(self) -> None:
        """Bring the document up to date with the state (what changed only), in one message."""
        doc = self.table.document
        doc.hold("combine")
        try:
            self._update()
        finally:
            doc.unhold()

    def _update(self) -> None:
        snap = self.state.snapshot(self.seq)
        if snap.rows != self.rows:
            self.rows = snap.rows
            self.table.data = {key: [printable(r[i]) for r in snap.rows] for i, key in enumerate(_KEYS)}
            self.grid.height = 30 + 26 * max(1, len(snap.rows))
        more = [f"... and {snap.hidden} more rank(s): the stale, the named and the slowest are shown"]
        lines = (more if snap.hidden else []) + snap.lines
        if lines != self.lines:
            self.lines = lines
            self.text.text = "\n".join(printable(line) for line in lines)
        if snap.typical > 0 and abs(snap.typical - self.typical) > 0.01 * snap.typical:
            self.typical = snap.typical
            self.mapper.update(low=snap.typical / 1e6, high=TOP * snap.typical / 1e6)
        if snap.ranks != self.ranks:  # (ranks joined, or others are shown: the heatmap anew)
            self.ranks = snap.ranks
            snap = self.state.snapshot(0)
            self.ranks = snap.ranks
            self.ticker.ticks = list(range(len(self.ranks)))
            self.fig.yaxis.major_label_overrides = {i: printable(r) for i, r in enumerate(self.ranks)}
            self.y_range.update(start=len(self.ranks) - 0.5, end=-0.5)
            self.fig.height = 80 + 22 * max(1, len(self.ranks))
            self.heat.data = self._columns(snap)
        else:
            new = self._columns(snap)
            if len(new["x"]):
                self.heat.stream(new, rollover=HEAT * max(1, len(self.ranks)))
        self.seq = snap.seq
        if snap.newest != self.newest:
            self.newest = snap.newest
            self.x_range.update(start=max(HEAT, snap.newest + 1) - HEAT - 0.5, end=max(HEAT, snap.newest + 1) - 0.5)

    def _columns(self, snap) -> dict:
        import numpy as np

        x, y, ms = [], [], []
        for i, rank in enumerate(self.ranks):
            for cell in snap.cells.get(rank, ()):
                x.append(cell.step)
                y.append(i)
                ms.append(cell.duration_ns / 1e6)
        return {"x": np.array(x, np.int32), "y": np.array(y, np.int32), "ms": np.array(ms, np.float32)}

    def tap(self, event) -> None:
        """A click on the heatmap: the ranges of the rank-step under it."""
        if event.x is None or event.y is None:
            return
        step, index = int(round(event.x)), int(round(event.y))
        if not 0 <= index < len(self.ranks):
            return
        rank = self.ranks[index]
        cell = self.state.cell(rank, step)
        if cell is None:
            self.picked.text = printable(f"{rank} step {step}: not ended yet, or no longer kept")
            self.ranges.data = {"range": [], "ms": [], "share": [], "ns": []}
            return
        others, rest = cell.others
        note = f" (and {others} smaller ranges, {rest / 1e6:.1f} ms)" if others else ""
        self.picked.text = printable(
            f"{rank} step {step}: {cell.duration_ns / 1e6:.1f} ms; its ranges (each less its children){note}"
        )
        share = [f"{100 * ns / cell.duration_ns:.1f}" if cell.duration_ns else "-" for _, ns in cell.ranges]
        self.picked_grid.height = 30 + 26 * min(max(1, len(cell.ranges)), 12)
        self.ranges.data = {
            "range": [printable(name) for name, _ in cell.ranges],
            "ms": [f"{ns / 1e6:.1f}" for _, ns in cell.ranges],
            "share": share,
            "ns": [ns for _, ns in cell.ranges],
        }


class WebServer:
    """The page of ``state`` served by Bokeh on ``sockets`` (from :func:`bind`) in a thread of
    its own until :meth:`close`; ``origins``: the ``host:port`` values a browser may open it
    by (Bokeh refuses the page's websocket from any other origin)."""

    def __init__(self, state: WebState, sockets: list, origins: list[str], title: str, interval: float):
        self.state, self.title, self.interval = state, title, interval
        self._sockets, self._origins = sockets, origins
        self._ready: queue.Queue = queue.Queue()
        self._loop = None
        self._thread = threading.Thread(target=self._run, name="watch-web", daemon=True)
        self._thread.start()
        kind, value = self._ready.get()
        if kind == "error":
            raise value

    def _run(self) -> None:
        import asyncio

        from bokeh.application import Application
        from bokeh.application.handlers.function import FunctionHandler
        from bokeh.server.server import BaseServer
        from bokeh.server.tornado import BokehTornado
        from tornado.httpserver import HTTPServer
        from tornado.ioloop import IOLoop

        asyncio.set_event_loop(asyncio.new_event_loop())
        try:
            loop = IOLoop.current()
            app = Application(FunctionHandler(lambda doc: _Page(self.state, self.title).build(doc, self.interval)))
            tornado_app = BokehTornado({"/": app}, extra_websocket_origins=self._origins)
            http = HTTPServer(tornado_app)
            http.add_sockets(self._sockets)
            server = BaseServer(loop, tornado_app, http)
            server.start()
        except BaseException as exc:  # (said in the caller's thread)
            for s in self._sockets:
                s.close()
            self._ready.put(("error", exc))
            return
        self._loop, self._server = loop, server
        self._ready.put(("ok", None))
        loop.start()
        loop.close(all_fds=True)

    def close(self) -> None:
        """Stop serving (the sessions' sockets closed) and wait for the thread."""
        if self._loop is None:
            return

        def stop() -> None:
            self._server.stop()
            self._loop.stop()

        self._loop.add_callback(stop)
        self._thread.join(timeout=10)
        self._loop = None
