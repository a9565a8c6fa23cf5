"""``watch``'s chronic-lag rule (issue 47, acceptance 3 in short form) on synthetic steps, and
its terminal view and ``--json`` lines as text: no process, no clock.

* A/A: ranks alike but for noise and one-off stalls are never named (2,000 steps).
* A rank slowed 20 % in one range is named within 3 steps, with that range.
* One stall, however long, and two in a row are not named; a third in a row is.
* Under synchronous data parallelism (every rank's step as long as the slowest's) the work
  names the rank; ranks held up at once in different ranges are not named.
* The view escapes the names it shows and never reads them as rich markup.
"""

from __future__ import annotations

import json
import random
import re

import pytest

from nvtx_plugins_tf.recorder.watch.detect import Detector
from nvtx_plugins_tf.recorder.watch.jsonl import json_line, stale_object, step_object, straggler_object
from nvtx_plugins_tf.recorder.watch.steps import StepRecord

MS = 1_000_000


def _step(rank: str, n: int, ranges: dict[str, int], extra: int = 0) -> StepRecord:
    duration = sum(ranges.values()) + extra
    start = n * 200 * MS
    return StepRecord(rank, n, start, start + duration, duration, ranges)


def _run(steps: int, ranks: int, ranges_of, seed: int = 0) -> list:
    """Feed ``steps`` steps of ``ranks`` ranks (rank order shuffled each step) to a Detector;
    ``ranges_of(rank, step, rng)`` -> (ranges, extra ns). Returns the stragglers named."""
    rng = random.Random(seed)
    detector = Detector()
    names = [f"rank{r}" for r in range(ranks)]
    for name in names:
        detector.join(name)
    named = []
    for n in range(steps):
        order = list(range(ranks))
        rng.shuffle(order)
        for r in order:
            ranges, extra = ranges_of(r, n, rng)
            named += detector.add(_step(names[r], n, ranges, extra))
    return named


def _noisy(rng, load=30 * MS, compute=90 * MS, spread=0.03) -> dict[str, int]:
    return {
        "train:load": int(load * (1 + rng.uniform(-spread, spread))),
        "train:compute": int(compute * (1 + rng.uniform(-spread, spread))),
    }


@pytest.mark.parametrize("ranks", [2, 4, 8])
def test_a_a_run_names_no_straggler(ranks):
    """Ranks alike: noise of ±3 % a range, and one stall of 3x the step now and then on any
    rank (never two in a row on one rank)."""

    def ranges_of(r, n, rng):
        stall = 360 * MS if (n * 7 + r * 13) % 97 == 0 else 0
        return _noisy(rng), stall

    assert _run(2000, ranks, ranges_of) == []


@pytest.mark.parametrize("ranks", [3, 4, 8])
def test_a_rank_slowed_20_percent_in_one_range_is_named_within_3_steps(ranks):
    slow_from = 50

    def ranges_of(r, n, rng):
        ranges = _noisy(rng, spread=0.01)
        if r == 1 and n >= slow_from:
            ranges["train:load"] += 24 * MS  # 20 % of the 120 ms step, all in "load"
        return ranges, 0

    named = _run(slow_from + 20, ranks, ranges_of)
    assert len(named) == 1, named
    (s,) = named
    assert (s.rank, s.range) == ("rank1", "train:load")
    assert slow_from <= s.step <= slow_from + 2  # its 1st, 2nd or 3rd slow step
    assert s.first_step == slow_from and 20 * MS < s.excess_ns < 28 * MS


@pytest.mark.parametrize("stalls, named", [(1, False), (2, False), (3, True)])
def test_one_stall_is_not_chronic_lag(stalls, named):
    def ranges_of(r, n, rng):
        ranges = _noisy(rng, spread=0.0)
        if r == 0 and 10 <= n < 10 + stalls:
            ranges["train:load"] += 1000 * MS  # a second's stall
        return ranges, 0

    found = _run(40, 4, ranges_of)
    assert bool(found) is named, found
    if named:
        assert found[0].rank == "rank0" and found[0].step == 12


def test_synchronous_ranks_are_told_apart_by_their_work():
    """Every rank's step lasts as long as the slowest's (the others wait, outside any range):
    rank 3's "data" work is 30 % above the others', and it is named for it."""
    detector = Detector()
    for r in range(4):
        detector.join(f"rank{r}")
    named = []
    for n in range(10):
        for r in range(4):
            data = 40 * MS if r == 3 else 4 * MS
            ranges = {"data": data, "compute": 80 * MS}
            named += detector.add(StepRecord(f"rank{r}", n, 0, 130 * MS, 130 * MS, ranges))
    assert [(s.rank, s.range) for s in named] == [("rank3", "data")]
    assert named[0].step == 2  # (its 3rd step: 0.15 a step, capped at 0.2 less the slack)


def test_ranks_held_up_in_different_ranges_at_once_are_not_named():
    """A loaded host (seen in benchmarks/bench_watch_aa.py's A/A job): for 3 steps three of
    the four ranks wake late, rank0 and rank2 in "comm", rank3 in "compute", all three steps as
    long. None of them is slower than its peers: each one's range is above that range's median,
    but its work is the median work."""

    def ranges_of(r, n, rng):
        ranges = {"train:data": 30 * MS, "train:compute": 60 * MS, "train:comm": 30 * MS}
        if 10 <= n < 13 and r in (0, 2):
            ranges["train:comm"] += 280 * MS
        if 10 <= n < 13 and r == 3:
            ranges["train:compute"] += 280 * MS
        return ranges, 0

    assert _run(40, 4, ranges_of) == []


def test_a_rank_gone_is_not_waited_for_and_a_late_one_holds_no_one_back():
    detector = Detector()
    for r in ("a", "b", "c"):
        detector.join(r)
    slow = []
    for n in range(5):  # "c" never writes a step: its writer is gone after step 2
        for r in ("a", "b"):
            slow += detector.add(StepRecord(r, n, 0, 100 * MS, 100 * MS, {"x": 100 * MS}))
        if n == 2:
            slow += detector.leave("c")
    assert detector._pending == {}  # every step judged
    for n in range(3):  # a rank that joins late, numbering its steps from 0: already judged
        assert detector.add(StepRecord("late", n, 0, 900 * MS, 900 * MS, {"x": 900 * MS})) == []
    assert slow == []


def test_json_lines_keep_the_contract():
    record = StepRecord("rank\x1b[2J", 3, 10, 25, 15, {"a:b": 15})
    line = json_line(step_object(record))
    assert "\n" not in line and "\x1b" not in line and line.isascii()
    obj = json.loads(line)
    assert list(obj) == ["kind", "rank", "step", "start_ns", "end_ns", "duration_ns", "ranges"]
    assert obj == {"kind": "step", "rank": "rank\x1b[2J", "step": 3, "start_ns": 10, "end_ns": 25,
                   "duration_ns": 15, "ranges": {"a:b": 15}}  # fmt: skip
    from nvtx_plugins_tf.recorder.watch.detect import Straggler

    named = straggler_object(Straggler("r", "load", 5, 3, 7))
    assert list(named) == ["kind", "rank", "range", "step", "excess_ns"]
    assert json.loads(json_line(stale_object("r\udcff"))) == {"kind": "stale", "rank": "r\udcff"}


def test_the_view_escapes_names_and_reads_no_markup():
    pytest.importorskip("rich", reason="the 'watch' extra")
    from nvtx_plugins_tf.recorder.watch.view import Board, render

    board = Board()
    for n, d in enumerate((100, 110, 120, 130)):
        board.add(step_object(StepRecord("rank0", n, 0, d * MS, d * MS, {"[bold]load\x1b[31m": d * MS})))
    board.add(step_object(StepRecord("rank1\nfake", 0, 0, 90 * MS, 90 * MS, {})))
    board.add(straggler_object(__import__("nvtx_plugins_tf.recorder.watch.detect", fromlist=["x"]).Straggler(
        "rank0", "[bold]load\x1b[31m", 3, 1, 20 * MS)))  # fmt: skip
    board.add(stale_object("rank1\nfake"))
    text = render(board, width=160)
    assert "\x1b" not in text and "[bold]load\\x1b[31m" in text
    assert "rank1\\nfake" in text and "stale" in text
    row = next(line for line in text.splitlines() if "rank0 " in line)
    # last, median and p95 (numpy's linear quantiles) of 100, 110, 120, 130 ms
    assert "130.0" in row and "115.0" in row and "128.5" in row and "straggler" in row
    assert "straggler: rank0 [bold]load\\x1b[31m +20.0 ms a step" in text


def test_a_frame_of_many_ranks_shows_the_ones_that_matter():
    pytest.importorskip("rich", reason="the 'watch' extra")
    from nvtx_plugins_tf.recorder.watch.detect import Straggler
    from nvtx_plugins_tf.recorder.watch.view import ROWS, Board, render

    board = Board()
    for r in range(200):
        board.add(step_object(StepRecord(f"rank{r}", 0, 0, (100 + r % 50) * MS, (100 + r % 50) * MS, {})))
    board.add(stale_object("rank3"))
    board.add(straggler_object(Straggler("rank7", "x", 0, 0, MS)))
    rows = board.rows()
    assert len(rows) == ROWS and rows[0][0] == "rank3" and rows[1][0] == "rank7"
    assert rows[2][3] == "149.0"  # then the slowest by median
    assert f"... and {200 - ROWS} more rank(s)" in render(board)


def test_steps_follow_time_not_count_across_reads():
    """A read of a live recording may miss a step a later read has (an event read before the
    string naming it): the steps after the last one reported are those reported next,
    numbered as the later read numbers them, none twice."""
    import numpy as np

    from nvtx_plugins_tf.recorder.analysis.rank_result import RankResult
    from nvtx_plugins_tf.recorder.watch.steps import StepAssembler

    def read(starts):
        r = RankResult("rank0", "/x/rank0.nvtxrec", 1, 10, 0)
        r.step_start = np.array(starts, dtype=np.int64)
        r.step_end = r.step_start + 5
        r.clock_offset = 1000
        return r

    steps = StepAssembler()
    first = steps.new_steps(read([0, 20]))  # (step 10 missed by this read)
    second = steps.new_steps(read([0, 10, 20, 30, 40]))
    assert [(s.step, s.start_ns) for s in first] == [(0, 0), (1, 20)]
    assert [(s.step, s.start_ns) for s in second] == [(3, 30), (4, 40)]
    assert steps.new_steps(read([0, 10, 20, 30, 40])) == []


def test_what_a_rec_stands_for(tmp_path):
    """A recording, a folder of them (none yet is fine: its ranks may start later), a folder of
    segments (a recording made without record); anything else is one error naming it."""
    from nvtx_plugins_tf.recorder.watch.tail import WatchInputError, expand_recordings

    (tmp_path / "b.nvtxrec").mkdir()
    (tmp_path / "a.nvtxrec").mkdir()
    (tmp_path / "notes.txt").write_text("x")
    (tmp_path / "raw").mkdir()
    (tmp_path / "raw" / "1-2.nvtxseg").write_bytes(b"")
    (tmp_path / "empty").mkdir()
    assert [p.name for p in expand_recordings([str(tmp_path)])] == ["a.nvtxrec", "b.nvtxrec"]
    assert [p.name for p in expand_recordings([str(tmp_path / "b"), str(tmp_path / "raw")])] == ["b.nvtxrec", "raw"]
    assert expand_recordings([str(tmp_path / "empty")]) == []
    assert len(expand_recordings([str(tmp_path), str(tmp_path / "a.nvtxrec")])) == 2  # (each once)
    for value, words in (("", "REC ''"), (str(tmp_path / "notes.txt"), "not a recording"), ("/no/such", "no such")):
        with pytest.raises(WatchInputError, match=re.escape(words)):
            expand_recordings([value])


def test_the_rolling_heatmap_shades_each_step_against_the_typical_one():
    from nvtx_plugins_tf.recorder.watch.view import HEAT, SHADES, Board

    board = Board()
    for n in range(30):
        for r, ms in ((0, 100), (1, 100), (2, 100 + 10 * (n % 8))):  # rank2: 1.0x .. 1.7x in tenths
            if r == 0 and n >= 28:
                continue  # (rank0 has not ended its last two steps yet)
            board.add(step_object(StepRecord(f"rank{r}", n, 0, ms * MS, ms * MS, {})))
    typical = board.typical()
    assert typical == 100 * MS
    assert board.heat("rank0", typical) == "▁" * (HEAT - 2) + "··"
    assert board.heat("rank2", typical) == "".join(SHADES[n % 8] for n in range(30 - HEAT, 30))
    assert board.rows()[2][-1] == board.heat("rank2", typical)


@pytest.mark.parametrize("width, steps", [(80, 0), (111, 0), (120, 16), (200, 24)])
def test_the_heatmap_takes_the_room_the_terminal_leaves(width, steps):
    pytest.importorskip("rich", reason="the 'watch' extra")
    from nvtx_plugins_tf.recorder.watch.view import Board, render

    board = Board()
    for n in range(30):
        board.add(step_object(StepRecord("rank0", n, 0, 100 * MS, 100 * MS, {"train:compute": 90 * MS})))
    text = render(board, width=width)
    row = next(line for line in text.splitlines() if "rank0" in line)
    assert "train:compute 90.0 ms" in row and max(len(line) for line in text.splitlines()) <= width
    assert row.count("▁") == steps and (f"last {steps} steps" in text) == bool(steps)
