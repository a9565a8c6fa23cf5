"""``watch``'s reads in parts (issue 47: a read costs what was written since): a live rank's
recording is decoded where the last read stopped (cc_ops/reader/segment_live.cc) and mapped
as a window (analysis/live_mapper.py), and every step is what one read of the same bytes
gives, to the ns, across chunks sealed between reads (4 KiB chunks), threads, start/end
ranges ended on another thread, and strings first named between reads. What cannot be read
in parts falls back to whole reads, said (``RankSource.live_off``), with the same steps.

A rank (the recorder attached, its segment raw as a live one is) runs blocks of code, each
when told; the test reads between blocks, so a read in parts and a whole read see the same
bytes.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

BLOCKS_RANK = """
import json, os, sys, threading, time, nvtx
here, blocks = sys.argv[1], json.loads(sys.argv[2])
def steps(first, n, inner=200):
    for i in range(first, first + n):
        nvtx.push_range(f"step {i}", domain="bench")
        for k in range(inner - 1):
            nvtx.push_range(f"r{k % 20}", domain="bench")
            nvtx.pop_range(domain="bench")
        nvtx.pop_range(domain="bench")
for b, code in enumerate(blocks):
    while not os.path.exists(os.path.join(here, f"go{b}")):
        time.sleep(0.002)
    exec(code)
    open(os.path.join(here, f"done{b}"), "w").close()
while not os.path.exists(os.path.join(here, "end")):
    time.sleep(0.002)
"""


class BlockRank:
    """A rank that runs ``blocks`` (Python code, ``steps(first, n)`` at hand) one at a time."""

    def __init__(self, tmp: Path, env: dict, blocks: list[str]):
        self.tmp, self.n = tmp, len(blocks)
        script = tmp / "rank.py"
        script.write_text(BLOCKS_RANK)
        self.proc = subprocess.Popen(
            [sys.executable, str(script), str(tmp), json.dumps(blocks)], env=env, stderr=subprocess.PIPE
        )
        self.next = 0

    def run_block(self) -> None:
        b, self.next = self.next, self.next + 1
        (self.tmp / f"go{b}").touch()
        deadline = time.monotonic() + 120  # (a guard against a hang, not a figure)
        while not (self.tmp / f"done{b}").exists():
            assert self.proc.poll() is None, self.proc.stderr.read()
            assert time.monotonic() < deadline
            time.sleep(0.005)

    def end(self) -> None:
        """Let it run its blocks left (a test that stopped early) and end."""
        for b in range(self.next, self.n):
            (self.tmp / f"go{b}").touch()
        (self.tmp / "end").touch()
        try:
            assert self.proc.wait(timeout=120) == 0, self.proc.stderr.read()
        finally:
            self.proc.kill()


def _steps(results, assembler=None) -> list:
    """Every step of ``results`` (a read's), as (number, start, end, ranges) on the rank's clock."""
    from nvtx_plugins_tf.recorder.watch.steps import StepAssembler

    assembler = assembler or StepAssembler()
    return [(s.step, s.start_ns, s.end_ns, s.ranges) for r in results for s in assembler.raw_steps(r)]


def _whole(rec: Path, step) -> list:
    from nvtx_plugins_tf.recorder.analysis.mapper import map_input

    return _steps(map_input(rec, step, name_stats=False))


def _read_each_block(rank: "BlockRank", rec: Path, spec: str) -> tuple[list, list]:
    """Run each of ``rank``'s blocks and read it in parts after each, checking every step so far
    against a whole read of the same bytes: (the steps, the last read's results)."""
    from nvtx_plugins_tf.recorder.analysis.live_mapper import LiveMapping
    from nvtx_plugins_tf.recorder.analysis.mapper import StepSpec
    from nvtx_plugins_tf.recorder.watch.steps import StepAssembler

    step = StepSpec.parse(spec)
    live, assembler, polled, results = LiveMapping(rec, step), StepAssembler(), [], []
    try:
        for _ in range(rank.n):
            rank.run_block()
            results = live.read()
            assert results is not None, live.failed
            polled += _steps(results, assembler)
            assert polled == _whole(rec, step)
    finally:
        rank.end()
    return polled, results


@pytest.mark.parametrize("chunk", [None, 4096], ids=["256KiB-chunks", "4KiB-chunks"])
def test_a_read_costs_what_was_written_since_and_gives_a_whole_reads_steps(tmp_path, recorder_env, chunk):
    from nvtx_plugins_tf.recorder.analysis.live_mapper import LiveMapping
    from nvtx_plugins_tf.recorder.analysis.mapper import StepSpec
    from nvtx_plugins_tf.recorder.watch.steps import StepAssembler

    rec = tmp_path / "rank0.nvtxrec"
    rec.mkdir()
    extra = {"NVTX_TF_CHUNK_SIZE": str(chunk)} if chunk else {}
    # a burst of 50 steps, then blocks of 10, one of them naming 3 new ranges
    blocks = ["steps(0, 50)"] + [f"steps({50 + 10 * b}, 10)" for b in range(6)]
    blocks[3] += (
        "\nfor n in ('new a', 'new b', 'new c'):\n    nvtx.push_range(n, domain='bench')\n"
        "    nvtx.pop_range(domain='bench')"
    )
    rank = BlockRank(tmp_path, recorder_env(rec, **extra), blocks)
    step = StepSpec.parse("step@bench")
    live, assembler, polled = LiveMapping(rec, step), StepAssembler(), []
    try:
        for b in range(len(blocks)):
            rank.run_block()
            results = live.read()
            assert results is not None, live.failed
            # what the read decoded: the block's ranges, not the whole recording's
            assert live.decoded == 200 * (50 if b == 0 else 10) + (3 if b == 3 else 0)
            # the window: the last step (its 200 ranges) and what ended after its start, not the run
            assert live.kept == 200 + (3 if b == 3 else 0), live.kept
            polled += _steps(results, assembler)
            # the same bytes read whole: the same steps, every field
            assert polled == _whole(rec, step)
    finally:
        rank.end()
    assert [s[0] for s in polled] == list(range(110))


def test_the_longest_step_is_over_every_step_not_the_windows(tmp_path, recorder_env):
    """A range longer than every step is not work inside one (analyze's rule): "every step"
    is the run's, the long first step dropped from the window included. A range around a few
    short steps later, shorter than that first step, is work in each of them."""

    rec = tmp_path / "rank0.nvtxrec"
    rec.mkdir()
    blocks = [
        "nvtx.push_range('step 0', domain='bench'); time.sleep(0.3); nvtx.pop_range(domain='bench')\nsteps(1, 3, 20)",
        "steps(4, 3, 20)",
        "nvtx.push_range('around', domain='bench')\nsteps(7, 3, 20)\nnvtx.pop_range(domain='bench')",
    ]
    polled, results = _read_each_block(BlockRank(tmp_path, recorder_env(rec), blocks), rec, "step@bench")
    assert results[0].first_step > 0  # (the long step was dropped from the window)
    assert all(s[3].get("bench:around") == s[2] - s[1] for s in polled[7:])


THREADS_RANK_BLOCK = """
def io(rid):
    time.sleep(0.001)
    nvtx.end_range(rid)
for i in range({first}, {first} + 8):
    nvtx.push_range("step", domain="bench")
    rid = nvtx.start_range(f"io {{i % 3}}", domain="bench")
    t = threading.Thread(target=io, args=(rid,))
    t.start()
    def worker(i=i):
        for k in range(30):
            nvtx.push_range(f"w{{k % 4}}", domain="bench")
            nvtx.pop_range(domain="bench")
    w = threading.Thread(target=worker)
    w.start(); w.join(); t.join()
    nvtx.pop_range(domain="bench")
"""


def test_threads_and_ranges_ended_on_another_thread(tmp_path, recorder_env):
    """Start/end ranges ended on another thread, a thread's chunk per worker: a read in parts
    meets the end before the start or after it as the chunks come; the steps are a whole read's."""

    rec = tmp_path / "rank0.nvtxrec"
    rec.mkdir()
    blocks = [THREADS_RANK_BLOCK.format(first=8 * b) for b in range(5)]
    rank = BlockRank(tmp_path, recorder_env(rec, NVTX_TF_CHUNK_SIZE="4096"), blocks)
    polled, _ = _read_each_block(rank, rec, "step@bench")
    assert len(polled) == 40
    assert all(any(name.startswith("bench:io") for name in s[3]) for s in polled)


def test_a_step_left_open_across_reported_ones_falls_back_to_whole_reads(tmp_path, recorder_env):
    """A step range open across later steps (an outer "step"): once steps after its start were
    dropped from the window, its numbers would not be a whole read's: the rank is read whole
    from then on, said."""
    from nvtx_plugins_tf.recorder.watch.tail import RankSource

    rec = tmp_path / "rank0.nvtxrec"
    rec.mkdir()
    blocks = [
        "nvtx.push_range('step', domain='bench')\nsteps(0, 3)",
        "steps(3, 3)",
        "nvtx.pop_range(domain='bench')\nsteps(6, 2)",
    ]
    rank = BlockRank(tmp_path, recorder_env(rec), blocks)
    source = RankSource(rec)
    try:
        for _ in blocks:
            rank.run_block()
            source.read()
        assert source.live_maps >= 1
        assert source.live_off == "a step ended after a later one was reported"
        assert source.maps == source.live_maps + 2  # (the first read, whole; the last, whole again)
    finally:
        rank.end()


def _end_of_data(segment: Path, chunk: int) -> int:
    """The file offset just past the last record of the segment's one chunk in use."""
    data = segment.read_bytes()
    last = len(data.rstrip(b"\0"))
    return (last + 7) // 8 * 8


def test_damage_in_new_bytes_falls_back_to_whole_reads(tmp_path, recorder_env):
    """A record that cannot be one after where the last read stopped: the read in parts
    stops, the rank is read whole from then on (and its damage said as a whole read says it)."""
    from nvtx_plugins_tf.recorder.recording.reader import segment_files
    from nvtx_plugins_tf.recorder.watch.tail import RankSource

    rec = tmp_path / "rank0.nvtxrec"
    rec.mkdir()
    rank = BlockRank(tmp_path, recorder_env(rec), ["steps(0, 3)", "steps(3, 3)", "steps(6, 3)"])
    source = RankSource(rec)
    try:
        rank.run_block()
        source.read()  # (whole: it chooses the step)
        rank.run_block()
        source.read()
        assert source.live_maps == 1 and not source.live_off
        segment = segment_files(rec)[0]
        at = _end_of_data(segment, 0)
        with open(segment, "r+b") as f:  # (a word no record starts with, where the next would)
            f.seek(at)
            f.write(b"\xee" * 8)
        source.read()
        assert source.live_off == "damage in what was written since"
        assert source.results and source.results[0].n_steps == 6  # (read whole: the steps stand)
    finally:
        rank.end()
