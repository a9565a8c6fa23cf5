"""`nvtx-tf analyze` (issue 24, first part): many ranks' recordings and exports at once.

* Four ranks recorded by our recorder, rank 2 slowed in its data range: the statistics are the
  ranges' own (counts, sums, min, max, std exact against numpy on the raw durations; quartiles
  within the sketch's 1 % of an order statistic), the steps line up, and the summary names
  rank 2 and its `data` range.
* The same inputs on a real dask.distributed LocalCluster of 2 worker processes: the same
  tables, value for value.
* A recording, our SQLite export of it and our parquetdir export of it: the same rank tables;
  in a directory, the recording stands for its exports next to it.
* Bad inputs: one line naming them; an unreadable input is left out while the others count.
NVIDIA's recipes on nsys's exports against analyze on the same files: tests/test_nsys_recipes.py.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from conftest import _child_env

from nvtx_plugins_tf import cli
from nvtx_plugins_tf.recorder.analysis import sketch
from nvtx_plugins_tf.recorder.reports.ranges import load_ranges

RANKS, STEPS, SLOW = 4, 12, 2
MISSES = 2  # steps a loaded machine may give to another rank (see the stragglers test)
WORKLOAD = """
import sys, time, nvtx
rank = int(sys.argv[1])
for i in range({steps}):
    with nvtx.annotate(f"step {{i}}", domain="train"):
        with nvtx.annotate("data", domain="train"):
            time.sleep(0.030 if rank == {slow} else 0.002)
        with nvtx.annotate("compute", domain="train"):
            t = time.perf_counter()
            while time.perf_counter() - t < 0.003:
                pass
""".format(steps=STEPS, slow=SLOW)


def nvtx_tf(*args, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "nvtx_plugins_tf", *map(str, args)],
        env=_child_env(**(env or {})), capture_output=True, text=True, timeout=600,
    )  # fmt: skip


@pytest.fixture(scope="module")
def ranks(tmp_path_factory) -> Path:
    """RANKS recordings in one directory (rank K: rankK.nvtxrec), each also as SQLite."""
    folder = tmp_path_factory.mktemp("ranks")
    for rank in range(RANKS):
        proc = nvtx_tf("record", "-o", folder / f"rank{rank}", "--export", "sqlite", "--",
                       sys.executable, "-c", WORKLOAD, rank)  # fmt: skip
        assert proc.returncode == 0, proc.stderr
    return folder


def _rows(outdir: Path, name: str) -> list[tuple]:
    """A table's rows, NaN (the std of one range) as None so that rows compare equal."""
    return [tuple(None if v != v else v for v in row.values()) for row in _table(outdir, name)]


def _table(outdir: Path, name: str) -> list[dict]:
    return pq.read_table(outdir / f"{name}.parquet").to_pylist()


@pytest.fixture(scope="module")
def embedded(ranks, tmp_path_factory):
    out = tmp_path_factory.mktemp("embedded")
    inputs = [ranks / f"rank{r}.nvtxrec" for r in range(RANKS)]
    proc = nvtx_tf("analyze", *inputs, "-o", out)
    assert proc.returncode == 0, proc.stderr
    return out, proc.stdout


def test_statistics_are_the_ranges_own(ranks, embedded):
    out, _ = embedded
    durations: dict[str, list[int]] = {}
    for r in range(RANKS):
        rr = load_ranges(ranks / f"rank{r}.nvtxrec")
        for name, start, end in zip(rr.name.tolist(), rr.start.tolist(), rr.end.tolist()):
            durations.setdefault(rr.names[name], []).append(end - start)
    rows = {(row["Domain"], row["Text"]): row for row in _table(out, "all_stats")}
    for label in ("train:data", "train:compute"):
        d = np.array(durations[label], dtype=np.int64)
        row = rows[tuple(label.split(":"))]
        assert row["Count"] == len(d) == RANKS * STEPS
        assert (row["Sum"], row["Min"], row["Max"]) == (d.sum(), d.min(), d.max())
        assert row["Mean"] == pytest.approx(d.mean()) and row["Std (approx)"] == pytest.approx(d.std(ddof=1))
        order = np.sort(d)
        for column, q in (("Q1 (approx)", 0.25), ("Median (approx)", 0.5), ("Q3 (approx)", 0.75)):
            exact = order[int(np.floor(q * (len(d) - 1)))]
            assert abs(row[column] - exact) <= sketch.ALPHA * exact, (column, row[column], exact)
    per_rank = [row for row in _table(out, "rank_stats") if row["Text"] == "data"]
    assert sorted(row["RankName"].split(":")[0] for row in per_rank) == ["vm"] * RANKS or len(per_rank) == RANKS
    assert all(row["Count"] == STEPS for row in per_rank)
    assert sum(row["Sum"] for row in per_rank) == rows[("train", "data")]["Sum"]


def test_pace_puts_every_rank_on_one_clock(embedded):
    out, _ = embedded
    pace = _table(out, "pace")
    assert len(pace) == RANKS * STEPS and {p["Name"] for p in pace} == {f"step {i}" for i in range(STEPS)}
    assert min(p["Start"] for p in pace) == 0
    for rank in range(RANKS):
        mine = [p for p in pace if p["Rank"] == rank]
        assert [p["Step"] for p in mine] == list(range(STEPS)) and mine[0]["Gap"] == 0
        assert all(b["Start"] - a["End"] == b["Gap"] >= 0 for a, b in zip(mine, mine[1:]))
        assert all(p["StartEpochNs"] > 1.6e18 for p in mine)  # wall clock (the recordings' anchors)


def test_stragglers_name_the_slow_rank_in_every_step_and_its_range(embedded):
    rows = _table(embedded[0], "stragglers")
    assert [r["Step"] for r in rows] == list(range(STEPS)) and all(r["Ranks"] == RANKS for r in rows)
    # (all steps but at most MISSES: on a loaded machine a healthy rank's 3 ms of compute can be
    # preempted for longer than the slow rank's excess, and that rank's work is then above it)
    named = [r for r in rows if r["Rank"] == SLOW]
    assert len(named) >= STEPS - MISSES, [r["Rank"] for r in rows]
    # (the same bound for the range named: a preempted step may put another range of that rank
    # above the median too; seen once under a load of 8 on 2 cores, in step 0)
    by_data = [r for r in named if r["TopRanges"].startswith("train:data +")]
    assert len(by_data) >= STEPS - MISSES, [r["TopRanges"] for r in named]
    # rank SLOW sleeps 30 ms where the others sleep 2: about 28 ms above the median a step
    assert statistics.median(r["Excess"] for r in named) > 20_000_000, [r["Excess"] for r in named]


def test_heatmap_of_ranks_by_steps(embedded, tmp_path):
    pytest.importorskip("PIL")
    from nvtx_plugins_tf.recorder.analysis.heatmap import MAX_CELLS, _binned, ratio_matrix

    png = embedded[0] / "heatmap.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000
    m = ratio_matrix([[10, 20, 30], [20, 20, 60], [30, 20]])
    assert m[1].tolist() == [1.0, 1.0, 60 / 45] and np.isnan(m[2, 2])
    big = np.ones((2048, 3000))
    big[1500, 2999] = 3.0  # one straggler cell: binned, it still shows
    small = _binned(big)
    assert small.shape == (MAX_CELLS[0], MAX_CELLS[1]) and small.max() == 3.0


def test_heatmap_cells_have_their_ratios_colours(tmp_path):
    """Each cell of the PNG is its ratio's colour: the median white, twice it (and beyond) the
    map's red end, half of it (and below) its blue end, a missing step grey; the colour bar
    runs from red at its top to blue at its bottom; the ranks' names label the rows."""
    pytest.importorskip("PIL")
    import io

    from PIL import Image

    from nvtx_plugins_tf.recorder.analysis.heatmap import COLORS, MISSING_COLOR, colors, plan, render_heatmap

    # (the steps' medians: 100 ns each)
    durations = [[100, 100, 100, 100], [100, 200, 50, 100], [100, 100, 100, 100], [100, 900, 10], [100] * 4]
    names = ["a", "b", "c", "d", "e"]
    pixels = np.asarray(Image.open(io.BytesIO(render_heatmap(durations, names, "t"))).convert("RGB"))
    p = plan(durations, names, "t")
    assert [t for _, t in p.y_ticks] == names and p.legend

    def at(rank: int, step: int) -> tuple:
        return tuple(pixels[round(p.y_pixel(rank)), round(p.x_pixel(step))].tolist())

    def hex_rgb(c: str) -> tuple:
        return tuple(int(c[i : i + 2], 16) for i in (1, 3, 5))

    white, blue, red = hex_rgb(COLORS[5]), hex_rgb(COLORS[0]), hex_rgb(COLORS[-1])
    assert at(0, 0) == white and at(1, 1) == red and at(3, 1) == red and at(1, 2) == blue and at(3, 2) == blue
    assert at(3, 3) == MISSING_COLOR and at(4, 3) == white
    # 1.5x: between white and red, as colors() says
    assert at(1, 1) != at(0, 1) and tuple(colors(np.array([[1.5]]))[0, 0].tolist()) not in (white, red)
    left, top, right, bottom = p.bar
    middle = (left + right) // 2
    assert tuple(pixels[top, middle].tolist()) == red and tuple(pixels[bottom - 1, middle].tolist()) == blue


def test_summary_names_the_slow_rank_and_its_range(embedded):
    _, stdout = embedded
    lines = stdout.splitlines()
    assert lines[0].startswith(f"{RANKS} rank(s) in {RANKS} input(s)")
    slow = next(line for line in lines if line.startswith("straggler: "))
    times = int(slow.split(" waited for in ")[1].split(" of ")[0])
    assert times >= STEPS - MISSES and f" of {STEPS} steps" in slow, slow
    behind = next(line for line in lines if line.startswith("its ranges above the median rank"))
    assert behind.split(": ", 1)[1].startswith("train:data +"), behind
    rank_names = {row["Rank"]: row["RankName"] for row in _table(embedded[0], "rank_stats")}
    assert rank_names[SLOW] in slow, (slow, rank_names)
    assert len(lines) <= 10


def test_a_dask_cluster_gives_the_same_tables(ranks, embedded, tmp_path):
    pytest.importorskip("distributed", reason="the 'dask' extra")
    out = tmp_path / "dask"
    proc = nvtx_tf("analyze", *(ranks / f"rank{r}.nvtxrec" for r in range(RANKS)), "-o", out, "--workers", "2")
    assert proc.returncode == 0, proc.stderr
    for name in ("all_stats", "rank_stats", "pace", "stragglers"):
        assert _rows(out, name) == _rows(embedded[0], name), name
    assert proc.stdout.splitlines()[:-1] == embedded[1].splitlines()[:-1]  # (the last line names OUTDIR)


def test_a_recording_and_its_exports_are_the_same_rank(ranks, tmp_path):
    rec = ranks / "rank0.nvtxrec"
    assert nvtx_tf("export", "-t", "parquetdir", "-o", tmp_path / "rank0_pqtdir", rec).returncode == 0
    tables = []
    for source in (rec, ranks / "rank0.sqlite", tmp_path / "rank0_pqtdir"):
        out = tmp_path / f"out_{source.name}"
        proc = nvtx_tf("analyze", source, "-o", out)
        assert proc.returncode == 0, proc.stderr
        rows = _table(out, "rank_stats")
        tables.append(sorted((r["Domain"], r["Text"], r["Count"], r["Sum"], r["Min"], r["Max"]) for r in rows))
        pace = _table(out, "pace")
        tables.append([(p["Step"], p["Start"], p["Duration"], p["StartEpochNs"]) for p in pace])
    assert tables[0] == tables[2] == tables[4] and tables[1] == tables[3] == tables[5]


def test_a_directory_stands_for_its_inputs_and_dir_n_for_the_first(ranks, tmp_path):
    """A recording's exports next to it (``record -o DIR/rankK`` writes rankK.sqlite too) are
    the same rank: the recording stands for them."""
    proc = nvtx_tf("analyze", f"{ranks}:2", "-o", tmp_path / "two")
    assert proc.returncode == 0, proc.stderr
    files = {row["File"] for row in _table(tmp_path / "two", "rank_stats")}
    assert files == {str(ranks / "rank0.nvtxrec"), str(ranks / "rank1.nvtxrec")}  # (name order)
    proc = nvtx_tf("analyze", ranks, "-o", tmp_path / "all")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"{RANKS} rank(s) in {RANKS} input(s)")


def test_an_unreadable_input_is_left_out_and_named(ranks, tmp_path):
    broken = tmp_path / "broken.sqlite"
    import sqlite3

    sqlite3.connect(broken).execute("CREATE TABLE other (x)").connection.commit()
    proc = nvtx_tf("analyze", ranks / "rank1.nvtxrec", broken, "-o", tmp_path / "out")
    assert proc.returncode == 6, proc.stderr  # (issue 48: an input that does not count is no success)
    (warning,) = proc.stderr.strip().splitlines()
    assert warning.startswith(f"nvtx-tf: error: left out: {broken}: ") and "NVTX_EVENTS" in warning
    assert warning.endswith("; the tables count the other inputs")
    assert "1 input(s) left out" in proc.stdout.splitlines()[0]
    assert pq.read_table(tmp_path / "out" / "rank_stats.parquet").num_rows > 0  # (the rest written)


@pytest.mark.parametrize("native", ["1", "0"])
def test_a_recording_of_no_readable_segment_is_left_out_and_named(ranks, tmp_path, native):
    """A recording whose only segment cannot be read (its header's chunk size is not one the
    recorder writes) is left out with the reader's reason, not taken for a rank without
    ranges; alone, it is an error naming it (the native and the numpy mappers alike)."""
    bad = tmp_path / "bad.nvtxrec"
    from nvtx_plugins_tf.recorder.recording._synth import SegmentWriter

    SegmentWriter(pid=3, chunk_size=512).thread(3).string(1, "a").push(10, 1).pop(20).segment.write(bad)
    env = dict(NVTX_TF_ANALYZE_NATIVE=native)
    proc = nvtx_tf("analyze", ranks / "rank1.nvtxrec", bad, "-o", tmp_path / "out", env=env)
    assert proc.returncode == 6, proc.stderr
    (warning,) = proc.stderr.strip().splitlines()
    assert warning.startswith(f"nvtx-tf: error: left out: {bad}: no segment could be read: "), warning
    assert "chunk size" in warning and "1 input(s) left out" in proc.stdout.splitlines()[0]
    alone = nvtx_tf("analyze", bad, "-o", tmp_path / "out2", env=env)
    assert alone.returncode != 0 and str(bad) in alone.stderr and "chunk size" in alone.stderr, alone.stderr
    assert "no NVTX ranges" not in alone.stderr and "Traceback" not in alone.stderr


def test_damaged_parquetdirs_are_left_out_and_named(ranks, tmp_path):
    """A parquetdir whose NVTX_EVENTS.parquet is cut short, empty, or lacks a column the
    ranges need: each left out with a line naming it and what is wrong."""
    proc = nvtx_tf("export", "-t", "parquetdir", "-o", tmp_path / "good_pqtdir", ranks / "rank0.nvtxrec")
    assert proc.returncode == 0, proc.stderr
    good = (tmp_path / "good_pqtdir" / "NVTX_EVENTS.parquet").read_bytes()
    cases = {"cut": good[:1000], "empty": b""}
    for name, data in cases.items():
        (tmp_path / f"{name}_pqtdir").mkdir()
        (tmp_path / f"{name}_pqtdir" / "NVTX_EVENTS.parquet").write_bytes(data)
    (tmp_path / "nostart_pqtdir").mkdir()
    table = pq.read_table(tmp_path / "good_pqtdir" / "NVTX_EVENTS.parquet").drop_columns(["start"])
    pq.write_table(table, tmp_path / "nostart_pqtdir" / "NVTX_EVENTS.parquet")
    dirs = [tmp_path / f"{n}_pqtdir" for n in ("good", "cut", "empty", "nostart")]
    proc = nvtx_tf("analyze", *dirs, "-o", tmp_path / "out")
    assert proc.returncode == 6, proc.stderr
    warnings = proc.stderr.strip().splitlines()
    assert [w.split(": ")[3] for w in warnings] == [str(d) for d in dirs[1:]], warnings
    assert "no 'start' column" in warnings[2] and "3 input(s) left out" in proc.stdout.splitlines()[0]
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize(
    "args, code, needle",
    [
        (["{tmp}/missing", "-o", "{tmp}/o"], 7, "no such recording, export or directory"),
        (["{tmp}/empty_dir", "-o", "{tmp}/o"], 7, "no recording (.nvtxrec), SQLite or parquetdir export in it"),
        (["{tmp}/plain.txt", "-o", "{tmp}/o"], 7, "not a recording, an SQLite file"),
        (["{tmp}/plain.txt"], 2, "the following arguments are required: -o/--output"),
        (["{tmp}/x", "-o", "{tmp}/o", "--workers", "0"], 2, "argument --workers: '0'"),
        (["{tmp}/x", "-o", "{tmp}/o", "--workers", "2", "--scheduler", "tcp://127.0.0.1:9"], 2, "give one"),
        (["{tmp}/x", "-o", "{tmp}/o", "--step", "@Keras"], 2, "--step '@Keras'"),
        (["{tmp}/x", "-o", "{tmp}/afile/o"], 3, "cannot create output directory"),
    ],
)
def test_bad_input_is_one_line_and_its_code(tmp_path, args, code, needle):
    (tmp_path / "empty_dir").mkdir()
    (tmp_path / "plain.txt").write_text("x")
    (tmp_path / "afile").write_text("x")
    proc = nvtx_tf("analyze", *(a.format(tmp=tmp_path) for a in args))
    assert proc.returncode == code, proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("nvtx-tf: error: ") and needle in line, line


def test_an_unreachable_scheduler_is_one_line(ranks, tmp_path):
    pytest.importorskip("distributed", reason="the 'dask' extra")
    proc = nvtx_tf("analyze", ranks / "rank0.nvtxrec", "-o", tmp_path / "o", "--scheduler", "tcp://127.0.0.1:9")
    assert proc.returncode == cli.EXIT_DASK_UNAVAILABLE == 15, proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith("nvtx-tf: error: cannot reach the Dask scheduler")


@pytest.mark.parametrize("seed", range(5))
def test_step_work_is_each_ranges_overlap_with_each_step(seed):
    """The mapper's vectorised step work against the definition, pair by pair: random steps
    (some overlapping, some short) and ranges (before the first step, across several steps,
    after the last; a few longer than every step, the epoch's among them)."""
    from nvtx_plugins_tf.recorder.analysis.mapper import _step_work

    rng = np.random.default_rng(seed)
    starts = np.sort(rng.integers(0, 10_000, 40))
    ends = starts + rng.integers(1, 600, 40)
    r_start = rng.integers(-500, 11_000, 3000)
    r_end = r_start + rng.integers(0, 900, 3000)
    r_start[:3], r_end[:3] = -1000, 20_000  # around every step (not work inside any)
    r_start[3], r_end[3] = 500, 9_000  # longer than every step, inside the run
    names = rng.integers(0, 6, 3000)
    used, matrix, incl = _step_work(starts, ends, r_start, r_end, names, 6)
    assert (incl == matrix).all()  # (no parents given: nothing nested, inclusive = exclusive)
    work = [{("d", f"m{n}"): int(v) for n, v in zip(used.tolist(), row) if v} for row in matrix.tolist()]
    longest = int((ends - starts).max())
    for k, (s, e) in enumerate(zip(starts.tolist(), ends.tolist())):
        expected: dict = {}
        for rs, re_, n in zip(r_start.tolist(), r_end.tolist(), names.tolist()):
            cover = min(re_, e) - max(rs, s)
            if cover > 0 and not (re_ - rs > longest and rs <= s and re_ >= e):
                expected[("d", f"m{n}")] = expected.get(("d", f"m{n}"), 0) + cover
        assert work[k] == expected, k


TIME_NAMESPACE_WORKLOAD = """
import ctypes, os, sys, time, nvtx

def steps():
    for i in range(4):
        with nvtx.annotate(f"step {i}", domain="train"):
            with nvtx.annotate("compute", domain="train"):
                time.sleep(0.006)  # (24 ms a process: past the TSC clock's longest line, 10 ms)

libc = ctypes.CDLL(None, use_errno=True)
if libc.unshare(0x80) != 0:  # CLONE_NEWTIME: the children forked from now on
    sys.exit(77)
try:
    with open("/proc/self/timens_offsets", "w") as f:
        f.write("monotonic 1000 0\\n")  # their CLOCK_MONOTONIC 1000 s ahead
except OSError:
    sys.exit(77)
steps()
child = os.fork()
if child == 0:
    steps()
    os._exit(0)
os.waitpid(child, 0)
"""


@pytest.mark.parametrize("clock", ["monotonic", "tsc"])
def test_pace_puts_a_process_on_another_clock_on_the_wall_clock(tmp_path, clock):
    """A recording of two processes whose monotonic clocks are 1000 s apart (the child in a
    time namespace): each rank's steps on the wall clock by its own anchor, as merge aligns
    them, so the child's steps follow the parent's by milliseconds, not 1000 s. Under the
    TSC clock the child's line starts on its own clock at the fork (before: it went on from
    the parent's, then jumped 1000 s at its next anchor, inside a step)."""
    proc = subprocess.run(
        [sys.executable, "-m", "nvtx_plugins_tf", "record", "-o", str(tmp_path / "two"), "--",
         sys.executable, "-c", TIME_NAMESPACE_WORKLOAD],
        env=dict(_child_env(), NVTX_TF_RECORDER_CLOCK=clock), capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    if proc.returncode == 77:
        pytest.skip("time namespaces unavailable (root and Linux >= 5.6 needed)")
    assert proc.returncode == 0, proc.stderr
    proc = nvtx_tf("analyze", tmp_path / "two.nvtxrec", "-o", tmp_path / "out")
    assert proc.returncode == 0, proc.stderr
    pace = _table(tmp_path / "out", "pace")
    by_rank: dict[str, list] = {}
    for row in pace:
        by_rank.setdefault(row["RankName"], []).append(row)
    assert len(by_rank) == 2, by_rank.keys()
    parent, child = sorted(by_rank.values(), key=lambda rows: rows[0]["StartEpochNs"])
    gap = child[0]["StartEpochNs"] - parent[-1]["StartEpochNs"]
    assert 0 < gap < 60 * 10**9, gap
    assert all(row["Duration"] < 10**9 for row in parent + child), [row["Duration"] for row in child]


def _nested_ranges(rng, threads: int, per_thread: int):
    """Random push/pop ranges, nested as NVTX makes them on each thread, every event at its own
    time, and each one's parent by a stack: the definition."""
    start, end, thread, parent = [], [], [], []
    for t in range(threads):
        stack: list[int] = []
        now = opened = 0
        while opened < per_thread or stack:
            now += int(rng.integers(1, 4))
            if opened < per_thread and (not stack or rng.random() < 0.55):
                parent.append(stack[-1] if stack else -1)
                stack.append(len(start))
                start.append(now), end.append(None), thread.append(t)
                opened += 1
            else:
                end[stack.pop()] = now
    return (np.array(v, dtype=np.int64) for v in (start, end, thread, parent))


@pytest.mark.parametrize("seed", range(4))
def test_parents_are_the_innermost_open_range_of_the_thread(seed):
    from nvtx_plugins_tf.recorder.analysis.mapper import _parents

    start, end, thread, parent = _nested_ranges(np.random.default_rng(seed), 3, 400)
    shuffle = np.random.default_rng(seed).permutation(len(start))  # (any input order)
    found = _parents(start[shuffle], end[shuffle], thread[shuffle], np.ones(len(start), dtype=bool))
    assert (np.where(found >= 0, shuffle[np.maximum(found, 0)], -1) == parent[shuffle]).all()


def test_parents_at_equal_times():
    """Events in one ns: at equal starts the longer range is the outer; a 0 ns range at a
    range's start is inside it, and does not count as closed before it (its depth)."""
    from nvtx_plugins_tf.recorder.analysis.mapper import _parents

    # A [0, 9) holds C [2, 5), which holds B [2, 2) and D [3, 4); E [5, 5) follows C, in A
    start, end = np.array([0, 2, 2, 3, 5]), np.array([9, 5, 2, 4, 5])
    assert _parents(start, end, np.zeros(5, int), np.ones(5, bool)).tolist() == [-1, 0, 1, 1, 0]


def test_step_work_is_exclusive_of_the_children():
    """compute [10, 90) holds forward [20, 50) and [60, 80): compute's own work is 30 ns,
    forward's 50, not compute's 80 counted on top of its children's; its inclusive time is
    80. wrap [95, 99) is all its child data's: exclusive 0, inclusive 4, still a column."""
    from nvtx_plugins_tf.recorder.analysis.mapper import _parents, _step_work

    start, end = np.array([10, 20, 60, 95, 95]), np.array([90, 50, 80, 99, 99])
    names = np.array([0, 1, 1, 3, 2])  # compute, forward, forward, wrap, data
    parent = _parents(start, end, np.zeros(5, dtype=np.int64), np.ones(5, dtype=bool))
    assert parent.tolist() == [-1, 0, 0, -1, 3]
    used, work, incl = _step_work(np.array([0]), np.array([100]), start, end, names, 4, parent)
    assert dict(zip(used.tolist(), work[0].tolist())) == {0: 30, 1: 50, 2: 4, 3: 0}
    assert dict(zip(used.tolist(), incl[0].tolist())) == {0: 80, 1: 50, 2: 4, 3: 4}


def _stragglers_step_by_step(ranks, gid, keys) -> dict[str, list]:
    """The stragglers table one step at a time, as reduce.py computed it before grouping the
    steps (the reference of the test below)."""
    from nvtx_plugins_tf.recorder.recording.model import range_label

    cols = ("Step", "Ranks", "Rank", "RankName", "StepDuration", "MedianStepDuration", "Excess", "TopRanges")
    out = {k: [] for k in cols}
    steps = max(r.n_steps for r in ranks)
    used = np.unique(np.concatenate([gid[i][r.work_rows] for i, r in enumerate(ranks)]))
    column = {int(k): j for j, k in enumerate(used.tolist())}
    work = np.zeros((len(ranks), steps, len(used)), dtype=np.int64)
    durations = np.zeros((len(ranks), steps), dtype=np.int64)
    has = np.zeros((len(ranks), steps), dtype=bool)
    for i, r in enumerate(ranks):
        work[i, : len(r.step_work)][:, [column[int(k)] for k in gid[i][r.work_rows]]] = r.step_work
        durations[i, : r.n_steps] = r.step_end - r.step_start
        has[i, : min(r.n_steps, len(r.step_work))] = True
    for step in range(steps):
        present = np.flatnonzero(has[:, step])
        if len(present) < 2:
            continue
        w = work[present, step, :]
        above = w - np.median(w, axis=0)
        excess = np.where(above > 0, above, 0).sum(axis=1)
        best = int(np.argmax(excess))
        median = int(np.median(durations[present, step]))
        if excess[best] <= 0 or np.count_nonzero(excess == excess[best]) > 1:
            row = (step, len(present), None, None, None, median, None, "")
        else:
            index = int(present[best])
            top = sorted(
                ((float(v), keys[int(used[j])]) for j, v in enumerate(above[best].tolist()) if v > 0), reverse=True
            )[:3]
            top_text = "; ".join(f"{range_label(*k)} +{int(v)}" for v, k in top)
            row = (step, len(present), index, ranks[index].name, int(durations[index, step]), median)
            row += (int(excess[best]), top_text)
        for k, v in zip(cols, row):
            out[k].append(v)
    return out


@pytest.mark.parametrize("seed", range(6))
def test_stragglers_grouped_by_the_ranks_present_are_the_step_by_step_ones(seed):
    """The stragglers table, its steps' medians taken a group of steps at a time (the steps
    the same ranks have), is the one of a step at a time: ranks of fewer steps, a rank whose
    work stops early, ties, steps where no rank is above the others."""
    from nvtx_plugins_tf.recorder.analysis.rank_result import RankResult
    from nvtx_plugins_tf.recorder.analysis.stragglers import _stragglers

    rng = np.random.default_rng(seed)
    keys = [("", f"name{k}") for k in range(6)]
    ranks, gid = [], []
    for i in range(int(rng.integers(2, 7))):
        steps = int(rng.integers(1, 40))
        names = rng.choice(6, size=int(rng.integers(1, 5)), replace=False)
        r = RankResult(f"r{i}", f"f{i}", i, 0, 0)
        r.step_start = np.cumsum(rng.integers(1, 100, steps))
        r.step_end = r.step_start + rng.integers(0, 50, steps)
        r.work_rows = np.arange(len(names), dtype=np.int64)
        work_steps = steps if rng.random() < 0.7 else int(rng.integers(0, steps + 1))
        r.step_work = rng.integers(0, 4, (work_steps, len(names))) * int(rng.integers(1, 3))
        ranks.append(r)
        gid.append(names.astype(np.int64))
    ours = {name: column.to_pylist() for name, column in _stragglers(ranks, gid, keys).items()}
    assert ours == _stragglers_step_by_step(ranks, gid, keys)
