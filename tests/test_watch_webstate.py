"""What ``watch --web``'s page holds, without a browser (tests/test_watch_web.py opens it in
Chromium): the state fed by the poll loop (rows as the terminal's, cells streamed once each,
a step's ranges kept the largest first with the rest summed), and a page's Bokeh document
built on it (names escaped, a click on a cell listing its ranges to the ns).
"""

from __future__ import annotations

import pytest

from nvtx_plugins_tf.recorder.watch.view import Board
from nvtx_plugins_tf.recorder.watch.webstate import HEAT, RANGES, WebState


def _step(rank: str, step: int, ms: float, ranges: dict | None = None) -> dict:
    ns = int(ms * 1e6)
    return {"kind": "step", "rank": rank, "step": step, "start_ns": 0, "end_ns": ns, "duration_ns": ns,
            "ranges": ranges if ranges is not None else {"t:load": ns // 4, "t:compute": ns - ns // 4}}  # fmt: skip


def test_rows_are_the_terminals_and_cells_come_once():
    state, board = WebState(), Board()
    objects = [_step(f"rank{r}", n, 100 + 50 * (r == 2)) for n in range(5) for r in range(3)]
    objects.append({"kind": "straggler", "rank": "rank2", "range": "t:load", "step": 3, "excess_ns": 50_000_000})
    state.add(objects)
    for obj in objects:
        board.add(obj)
    snap = state.snapshot()
    assert snap.rows == [row[:-1] for row in board.rows()]  # (the heatmap column is the page's own)
    assert snap.ranks == ["rank0", "rank1", "rank2"] and snap.hidden == 0 and snap.newest == 4
    assert snap.lines == ["straggler: rank2 t:load +50.0 ms a step (named at step 3)"]
    assert sum(len(c) for c in snap.cells.values()) == 15 and snap.seq == 15
    state.add([_step("rank1", 5, 120)])
    later = state.snapshot(since=snap.seq)
    assert {r: [c.step for c in cells] for r, cells in later.cells.items()} == {"rank0": [], "rank1": [5], "rank2": []}
    assert state.snapshot(since=later.seq).cells == {"rank0": [], "rank1": [], "rank2": []}


def test_only_the_last_heat_steps_are_kept():
    state = WebState()
    state.add([_step("rank0", n, 100) for n in range(HEAT + 10)])
    cells = state.snapshot().cells["rank0"]
    assert [c.step for c in cells] == list(range(10, HEAT + 10))
    assert state.cell("rank0", 9) is None and state.cell("rank0", 10).step == 10


def test_a_steps_ranges_the_largest_first_and_the_rest_summed():
    ranges = {f"r{k:03d}": 1000 + k for k in range(RANGES + 20)}
    ranges["tie_b"] = ranges["tie_a"] = 10_000
    state = WebState()
    state.add([_step("rank0", 0, 1, ranges)])
    cell = state.cell("rank0", 0)
    assert cell.ranges[:2] == [("tie_a", 10_000), ("tie_b", 10_000)]
    assert [ns for _, ns in cell.ranges] == sorted(ranges.values(), reverse=True)[:RANGES]
    kept = dict(cell.ranges)
    assert cell.others == (len(ranges) - RANGES, sum(ns for name, ns in ranges.items() if name not in kept))


def test_the_page_escapes_names_and_a_click_lists_the_ranges():
    pytest.importorskip("bokeh", reason="the 'web' extra")
    from bokeh.document import Document
    from bokeh.events import Tap

    from nvtx_plugins_tf.recorder.watch.web import _Page

    hostile = "x\x1b]0;owned\x07<b>y</b>"
    state = WebState()
    state.add([_step("rank0", 0, 100), _step(f"rank\n{hostile}", 0, 150, {hostile: 9, "t:load": 7})])
    page, doc = _Page(state, "title\x1b"), Document()
    page.build(doc, 0.5)
    table = doc.get_model_by_name("ranks").data
    assert table["rank"] == ["rank0", "rank\\nx\\x1b]0;owned\\x07<b>y</b>"]
    assert table["top"][1] == "x\\x1b]0;owned\\x07<b>y</b> 0.0 ms"
    assert doc.get_model_by_name("title").text == "title\\x1b"
    heat = doc.get_model_by_name("heat").data
    assert list(heat["x"]) == [0, 0] and list(heat["y"]) == [0, 1] and list(heat["ms"]) == [100.0, 150.0]
    fig = doc.get_model_by_name("heatmap")
    page.tap(Tap(fig, x=0.2, y=1.3))
    assert doc.get_model_by_name("picked").text.startswith("rank\\nx\\x1b]0;owned\\x07<b>y</b> step 0: 150.0 ms")
    ranges = doc.get_model_by_name("ranges").data
    assert ranges["range"] == ["x\\x1b]0;owned\\x07<b>y</b>", "t:load"] and ranges["ns"] == [9, 7]
    page.tap(Tap(fig, x=1.0, y=0.0))  # (step 1 of rank0: not ended)
    assert doc.get_model_by_name("picked").text == "rank0 step 1: not ended yet, or no longer kept"
    assert doc.get_model_by_name("ranges").data["range"] == []
    state.add([_step("rank0", 1, 110)])
    page.update()  # (one new cell streamed)
    heat = doc.get_model_by_name("heat").data
    assert list(heat["x"]) == [0, 0, 1] and list(heat["y"]) == [0, 1, 0]
