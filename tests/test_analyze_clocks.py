"""`analyze` over ranks of different clocks: one timeline, by the rule `merge` uses (issue 36,
"Many hosts").

Four ranks of tests/nsys/rank_steps.c (``step`` ranges around ``data`` and ``compute``), run
at once under the real recorder, each into its own recording, as four hosts would:

* ``rank0``: this host;
* ``rank1``: in its own Linux time namespace (``unshare --time --monotonic 3000``): its
  CLOCK_MONOTONIC 3000 s ahead of the others';
* ``rank2``: this host, its ``data`` three times longer: the straggler;
* ``rank3``: a host whose wall clock runs 250 ms ahead (NTP skew: tests/native/realtime_skew.c
  preloaded, CLOCK_REALTIME only).

What is checked: ``analyze`` names rank2 in every step (by the work inside each step, on each
rank's own clock: rank3's clock running ahead does not make it the straggler); pace's
``ClockOffsetNs`` is each recording's clock offset as ``merge`` plans it: rank0 and rank2 (one
host) share one exactly, so their steps keep their exact monotonic order; rank1's is 3000 s
below, rank3's 250 ms above (what its anchor says: no anchor can tell a wrong wall clock);
``StartEpochNs - ClockOffsetNs`` is each step's own monotonic start as recorded; the steps
of the merged recording (``nvtx-tf merge``) are where analyze puts them; and an export of the
namespaced rank (our SQLite) is placed by its session start to the same nanosecond.
"""

from __future__ import annotations

import sqlite3
import subprocess
from contextlib import closing
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from conftest import _child_env, needs_time_namespaces, nvtx_tf_ok

from nvtx_plugins_tf.recorder.recording._synth import SegmentWriter
from nvtx_plugins_tf.recorder.recording.clocks import SAME_CLOCK_NS, Clocks
from nvtx_plugins_tf.recorder.recording.reader import load

SOURCE = Path(__file__).resolve().parent / "nsys" / "rank_steps.c"
STEPS, SLOW = 8, 2
NAMESPACE_S = 3000
SKEW_NS = 250_000_000


def _pace(out: Path) -> dict[str, list[dict]]:
    by_rank: dict[str, list[dict]] = {}
    for row in pq.read_table(out / "pace.parquet").to_pylist():
        by_rank.setdefault(row["RankName"], []).append(row)
    return by_rank


@pytest.fixture(scope="module")
def ranks(c_sample, tmp_path_factory) -> Path:
    """A folder of rank0..rank3.nvtxrec (see the module docstring)."""
    needs_time_namespaces()
    workload, skew = c_sample(SOURCE), c_sample("realtime_skew", "-shared", "-fPIC")
    tmp = tmp_path_factory.mktemp("clocks")
    procs = []
    for rank in range(4):
        env = _child_env(tmp / f"rank{rank}.nvtxrec")
        prefix = ["unshare", "--time", "--fork", f"--monotonic={NAMESPACE_S}"] if rank == 1 else []
        if rank == 3:
            env.update(LD_PRELOAD=str(skew), REALTIME_SKEW_NS=str(SKEW_NS))
        procs.append(subprocess.Popen([*prefix, str(workload), str(rank), str(STEPS), str(SLOW)], env=env))
    assert [p.wait(timeout=120) for p in procs] == [0] * 4
    return tmp


@pytest.fixture(scope="module")
def analysis(ranks) -> tuple[dict, str]:
    out = ranks / "out"
    proc = nvtx_tf_ok("analyze", *(ranks / f"rank{r}.nvtxrec" for r in range(4)), "--step", "step", "-o", out)
    return _pace(out), proc.stdout


def test_the_straggler_is_the_slow_rank_not_the_one_whose_clock_runs_ahead(ranks, analysis):
    """rank2's data takes 2-3 ms more a step; a step of another rank preempted for longer on a
    busy machine may name that rank (its sleeps did last longer), so: most steps, and the
    summary's straggler."""
    named = [row["RankName"] for row in pq.read_table(ranks / "out" / "stragglers.parquet").to_pylist()]
    assert len(named) == STEPS
    assert named.count("rank2") > STEPS // 2, named
    assert "straggler: rank2, the rank the others waited for in" in analysis[1], analysis[1]


def test_each_rank_on_its_clock_by_merges_rule(ranks, analysis):
    pace, stdout = analysis
    assert sorted(pace) == [f"rank{r}" for r in range(4)]
    offset = {}
    for name, rows in pace.items():
        assert len(rows) == STEPS
        (offset[name],) = {row["ClockOffsetNs"] for row in rows}
        # the step's own monotonic start, as recorded, plus the clock's offset
        recorded = sorted(r.start_ns for r in load(ranks / f"{name}.nvtxrec").find("step"))
        assert [row["StartEpochNs"] - offset[name] for row in rows] == recorded, name
    # one host, one clock: rank0 and rank2 keep their exact monotonic order
    assert offset["rank2"] == offset["rank0"]
    # the namespace's clock 3000 s ahead; the skewed host's wall clock 250 ms ahead
    assert abs(offset["rank1"] - offset["rank0"] + NAMESPACE_S * 10**9) < SAME_CLOCK_NS
    assert abs(offset["rank3"] - offset["rank0"] - SKEW_NS) < SAME_CLOCK_NS
    assert "clocks: 3, on one wall clock by their realtime anchors as merge aligns them" in stdout
    assert "rank1 -3,000.00" in stdout or "rank1 -2,999.99" in stdout, stdout
    # the ranks ran together: on the wall clock their first steps are within a second
    firsts = [rows[0]["StartEpochNs"] for rows in pace.values()]
    assert max(firsts) - min(firsts) < 10**9, firsts


def test_the_steps_are_where_merge_puts_them(ranks, analysis):
    """analyze of the four recordings against analyze of their merge: every step at the same
    wall-clock time, within merge's one-clock tolerance (both place each clock by its anchor)."""
    pace, _ = analysis
    nvtx_tf_ok("merge", *(ranks / f"rank{r}.nvtxrec" for r in range(4)), "-o", ranks / "merged" / "job")
    nvtx_tf_ok("analyze", ranks / "merged" / "job.nvtxrec", "--step", "step", "-o", ranks / "merged_out")
    merged = _pace(ranks / "merged_out")
    assert len(merged) == 4
    for r in range(4):
        (pid,) = load(ranks / f"rank{r}.nvtxrec").processes
        (rows,) = [rows for name, rows in merged.items() if name.endswith(f":{pid}")]
        apart = [m["StartEpochNs"] - a["StartEpochNs"] for m, a in zip(rows, pace[f"rank{r}"])]
        assert all(abs(d) < SAME_CLOCK_NS for d in apart), (r, apart)


def test_an_export_of_the_namespaced_rank_is_placed_by_its_session_start(ranks, analysis):
    pace, _ = analysis
    nvtx_tf_ok("export", ranks / "rank1.nvtxrec", "-o", ranks / "exported" / "rank1")
    out = ranks / "with_export"
    nvtx_tf_ok("analyze", ranks / "rank0.nvtxrec", ranks / "exported" / "rank1.sqlite", "--step", "step", "-o", out)
    rows = _pace(out)["rank1"]
    assert {row["ClockOffsetNs"] for row in rows} == {None}  # (an export: no monotonic clock known)
    assert [row["StartEpochNs"] for row in rows] == [row["StartEpochNs"] for row in pace["rank1"]]


# ------------------------------------------------------------------ hostile anchors (synthetic)
EPOCH = 1_700_000_000 * 10**9


def synth_rank(path: Path, pid: int, realtime_ns: int, start_ns: int = 1000) -> Path:
    """A recording of one process (the format's Python writer): 3 'step N' ranges each
    around 'data', its realtime anchor ``realtime_ns`` with its monotonic ``start_ns``."""
    seg = SegmentWriter(pid=pid, start_ns=start_ns, start_realtime_ns=realtime_ns, chunk_size=4096)
    t = seg.thread(pid)
    t.string(1, "data")
    now = start_ns + 10_000
    for i in range(3):
        t.string(10 + i, f"step {i}").push(now, 10 + i).push(now + 10, 1).pop(now + 200_010).pop(now + 1_000_000)
        now += 1_001_000
    seg.write(path)
    return path


#: (row, the second rank's realtime anchor and monotonic start (the first's: EPOCH, 1000),
#: the summary's line, the two ranks' ClockOffsetNs: equal, or its difference; None: null)
ANCHORS = [
    ("none-written", (0, 1000), "no wall-clock anchor (an older recorder, or a garbled header): b;", None),
    # (before: "nvtx-tf: error: OverflowError: Python int too large to convert to C long", exit 1)
    ("beyond-int64", (2**64 - 1, 1000), "no wall-clock anchor (an older recorder, or a garbled header): b;", None),
    ("in-1970", (5, 10**15), "clocks: 2, on one wall clock", 5 - 10**15 - (EPOCH - 1000)),
    ("just-under-1-ms-apart", (EPOCH + SAME_CLOCK_NS - 1, 1000), None, 0),
    ("1-ms-apart", (EPOCH + SAME_CLOCK_NS, 1000), "clocks: 2, on one wall clock", SAME_CLOCK_NS),
]


@pytest.mark.parametrize("row", ANCHORS, ids=[r[0] for r in ANCHORS])
def test_hostile_anchors(tmp_path, row):
    """Whatever a header's anchor holds: exit 0, the tables written, the summary saying what
    it did; a rank without a usable anchor stays on its session's clock, said in one line."""
    _, (realtime, start), line, apart = row
    a, b = synth_rank(tmp_path / "a.nvtxrec", 101, EPOCH), synth_rank(tmp_path / "b.nvtxrec", 102, realtime, start)
    proc = nvtx_tf_ok("analyze", a, b, "-o", tmp_path / "out")
    assert "Traceback" not in proc.stderr
    if line is None:
        assert not [ln for ln in proc.stdout.splitlines() if ln.startswith(("clocks:", "no wall-clock"))], proc.stdout
    else:
        assert line in proc.stdout, proc.stdout
    pace = _pace(tmp_path / "out")
    (offset_a,), (offset_b,) = ({r["ClockOffsetNs"] for r in pace[n]} for n in ("a", "b"))
    assert offset_a == EPOCH - 1000
    assert (offset_b is None) if apart is None else (offset_b - offset_a == apart)


def test_an_anchor_beyond_int64_is_none_for_the_export_too(tmp_path):
    """(before: ``nvtx-tf: error: OverflowError: Python int too large to convert to SQLite
    INTEGER``, exit 1)"""
    rec = synth_rank(tmp_path / "b.nvtxrec", 102, 2**64 - 1)
    nvtx_tf_ok("export", rec, "-o", tmp_path / "b")
    with closing(sqlite3.connect(tmp_path / "b.sqlite")) as db:
        assert db.execute("SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME").fetchall() == [(None,)]


def test_clocks_are_merges_rule():
    """The first offset met within 1 ms is the clock: a chain 0, 0.9, 1.8 ms is two clocks (0
    and 1.8 ms), in the order met; the reference is the smallest."""
    clocks = Clocks()
    assert [clocks.clock_of(o) for o in (0, 900_000, 1_800_000, 1_700_000)] == [0, 0, 1_800_000, 1_800_000]
    assert (len(clocks), clocks.reference, clocks.shift(1_799_999)) == (2, 0, 1_800_000)
