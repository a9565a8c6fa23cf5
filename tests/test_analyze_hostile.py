"""`nvtx-tf analyze` under hostile and real-world inputs (issue 33, analyze's rows): its outputs
appear in OUTDIR all at once or not at all, damage is never silent, each rank counts once.

One table per kind of check, each row named after the issue's row (``r1`` ... ``r19``, ``small``):

* REFUSALS: bad input is one line ``nvtx-tf: error: ...`` and its exit code, and OUTDIR is
  untouched (an earlier run's outputs byte for byte) or not made at all.
* SIGNAL_POINTS: a real SIGINT or SIGTERM sent by the process to itself at a known point of
  the work (while mapping, after the n-th table, while drawing, while committing), and one
  from outside at an unknown point: OUTDIR holds the earlier run's outputs or this run's,
  whole, never a mix, and no hidden folder.
* A real full tmpfs (root only), real dask.distributed clusters (the 'dask' extra).

The recordings are written by the format's Python writer (``_synth``): exact, small and
fast, with the steps and durations each row needs.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from conftest import SIGNAL_ELSEWHERE, _child_env

from nvtx_plugins_tf import cli
from nvtx_plugins_tf.recorder.recording._synth import SegmentWriter

# (the test's own LocalCluster warns when another one holds Dask's HTTP port)
pytestmark = pytest.mark.filterwarnings("ignore:Port .* is already in use:UserWarning")

PY = sys.executable
EPOCH = 1_700_000_000_000_000_000
NO_PID = 3_999_000  # (pids above any this machine hands out: `pack` packs a segment of a dead process)


def synth_rank(path: Path, pid: int, steps: int = 10, slow: int = 0, names: int = 0) -> Path:
    """A recording of one process: ``steps`` ranges 'step N', each holding 'data' (0.2 ms +
    ``slow`` ns) and 'compute'; ``names`` ranges of names of their own after them."""
    seg = SegmentWriter(pid=pid, start_ns=1000, start_realtime_ns=EPOCH, chunk_size=4096)
    t = seg.thread(pid)
    t.string(1, "data").string(2, "compute")
    for i in range(steps):
        t.string(10 + i, f"step {i}")
    now = 10_000
    for i in range(steps):
        t.push(now, 10 + i).push(now + 10, 1).pop(now + 200_010 + slow)
        t.push(now + 200_020 + slow, 2).pop(now + 999_990 + slow).pop(now + 1_000_000 + slow)
        now += 1_001_000 + slow
    for k in range(names):
        t.string(100_000 + k, f"name {k:06d}").push(now, 100_000 + k).pop(now + 5 + k)
        now += 100
    seg.write(path)
    return path


def nvtx_tf(*args, cwd=None, env: dict | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [PY, "-m", "nvtx_plugins_tf", *map(str, args)],
        env=_child_env(**(env or {})), capture_output=True, text=True, timeout=timeout, cwd=cwd,
    )  # fmt: skip


def patched(script: str, *args, cwd=None, env: dict | None = None, timeout: float = 120):
    """``nvtx-tf ARGS`` in a Python that first runs ``script`` (which patches a function to
    send the process a real signal at a known point), the command run from the process's own
    command line as ``nvtx-tf`` runs it (``cli.main()``: its quick exit included)."""
    code = textwrap.dedent(script) + "\nimport sys\nfrom nvtx_plugins_tf import cli\nsys.exit(cli.main())\n"
    return subprocess.run(
        [PY, "-c", code, *map(str, args)],
        env=_child_env(**(env or {})), capture_output=True, text=True, timeout=timeout, cwd=cwd,
    )  # fmt: skip


def snapshot(folder: Path) -> dict[str, bytes] | None:
    """Every file under ``folder`` (hidden ones too) by relative path; None when it is not there."""
    if not folder.exists():
        return None
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def one_error(proc: subprocess.CompletedProcess) -> str:
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("nvtx-tf: error: "), proc.stderr
    return lines[0]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    """runs/: four ranks (rank2 3 ms slower each step); empty.nvtxrec: no range; nosteps/: a
    rank without step ranges; earlier/: the outputs of `analyze runs:2` (two ranks: other
    tables than four ranks give)."""
    root = tmp_path_factory.mktemp("corpus")
    for r in range(4):
        synth_rank(root / "runs" / f"rank{r}.nvtxrec", NO_PID + r, slow=3_000_000 if r == 2 else 0)
    SegmentWriter(pid=NO_PID + 9).thread(9).string(1, "a").segment.write(root / "empty.nvtxrec")
    (root / "plain.txt").write_text("x")
    synth_rank(root / "nosteps" / "r.nvtxrec", NO_PID + 8, steps=0, names=5)
    proc = nvtx_tf("analyze", f"{root / 'runs'}:2", "-o", root / "earlier", "--csv")
    assert proc.returncode == 0, proc.stderr
    assert (root / "earlier" / "heatmap.png").exists()
    return root


def _earlier(corpus: Path, tmp_path: Path) -> Path:
    """A copy of the earlier run's OUTDIR, for a row to run into."""
    import shutil

    return Path(shutil.copytree(corpus / "earlier", tmp_path / "out"))


# (id, argv, exit code, text of the one line, OUTDIR: "new" (must not be made) or "earlier" (untouched))
REFUSALS = [
    ("r1 no ranges, OUTDIR of an earlier run", ["{c}/empty.nvtxrec", "-o", "{out}"], 5, "no NVTX ranges", "earlier"),
    ("r14 a missing input", ["{c}/runs/nonexist", "-o", "{out}"], 7, "no such recording", "new"),
    ("r14 a missing input beside good ones", ["{c}/runs", "{c}/nope", "-o", "{out}"], 7, "nope", "new"),
    (
        "r14 an unreachable scheduler",
        ["{c}/runs", "-o", "{out}", "--scheduler", "tcp://127.0.0.1:9"],
        15,
        "cannot reach the Dask scheduler",
        "new",
    ),
    (
        "small --scheduler notaport",
        ["{c}/runs", "-o", "{out}", "--scheduler", "tcp://localhost:notaport"],
        2,
        "--scheduler 'tcp://localhost:notaport'",
        "new",
    ),  # fmt: skip
    ("small --scheduler foo", ["{c}/runs", "-o", "{out}", "--scheduler", "foo"], 2, "tcp://HOST:PORT", "new"),
    ("small --scheduler inproc", ["{c}/runs", "-o", "{out}", "--scheduler", "inproc://x"], 2, "inproc", "new"),
    ("small --scheduler empty", ["{c}/runs", "-o", "{out}", "--scheduler", ""], 2, "--scheduler ''", "new"),
    ("small --scheduler port 0", ["{c}/runs", "-o", "{out}", "--scheduler", "tcp://h:0"], 2, "PORT 1 to", "new"),
    ("small -o empty", ["{c}/runs", "-o", ""], 2, "-o ''", None),
    ("small -o /", ["{c}/runs", "-o", "/"], 2, "-o '/'", None),
    ("small -o /./", ["{c}/runs", "-o", "/./"], 2, "-o '/./'", None),
    ("small --step nope", ["{c}/runs", "-o", "{out}", "--step", "nope"], 2, "step@default", "earlier"),
    ("small --step in another domain", ["{c}/runs", "-o", "{out}", "--step", "step@train"], 2, "'train'", "new"),
    ("small -o under a file", ["{c}/runs", "-o", "{c}/plain.txt/x/o"], 3, "plain.txt is a file", None),
]


@pytest.mark.parametrize("row", REFUSALS, ids=[r[0] for r in REFUSALS])
def test_bad_input_is_one_line_and_leaves_outdir_as_it_was(corpus, tmp_path, row):
    _, argv, code, needle, outdir = row
    out = _earlier(corpus, tmp_path) if outdir == "earlier" else tmp_path / "new" / "out"
    before = snapshot(out)
    proc = nvtx_tf("analyze", *(a.format(c=corpus, out=out) for a in argv))
    assert proc.returncode == code, proc.stderr
    assert needle in one_error(proc)
    assert snapshot(out) == before
    assert outdir != "new" or not (tmp_path / "new").exists()  # (nor a parent made for it)
    assert "Traceback" not in proc.stderr


def test_r1_r15_a_run_replaces_every_output_and_removes_a_stale_heatmap(corpus, tmp_path):
    """r15: a run without steps into the folder of a run with steps: its heatmap.png goes (it
    would picture another run), and so do its .csv tables, this run being without --csv; a file
    of the user's there stays."""
    out = _earlier(corpus, tmp_path)
    assert (out / "pace.csv").is_file()
    (out / "notes.txt").write_text("mine")
    proc = nvtx_tf("analyze", corpus / "nosteps", "-o", out)
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in out.iterdir()) == sorted(
        [f"{t}.parquet" for t in ("all_stats", "rank_stats", "pace", "stragglers")] + ["notes.txt"]
    )
    assert pq.read_table(out / "pace.parquet").num_rows == 0
    assert {r["File"] for r in pq.read_table(out / "rank_stats.parquet").to_pylist()} == {
        str(corpus / "nosteps" / "r.nvtxrec")
    }


# r2: where the process sends itself the signal (a patch, then the real signal and its handler).
# _kill_elsewhere: the same signal reaching another thread (conftest.SIGNAL_ELSEWHERE).
KILL = (
    "import os, signal\ndef _kill():\n    os.kill(os.getpid(), signal.{sig})\n"
    + SIGNAL_ELSEWHERE
    + "def _kill_elsewhere():\n    signal_elsewhere(signal.{sig})\n"
)
SIGNAL_POINTS = {
    "while mapping": """
        from nvtx_plugins_tf.recorder.analysis import engines
        _orig = engines.map_input
        def map_input(path, step=None, **kw):
            _kill()
            return _orig(path, step, **kw)
        engines.map_input = map_input
    """,
    "after the first table": """
        import pyarrow.parquet as pq
        _orig = pq.write_table
        def write_table(*a, **k):
            _orig(*a, **k)
            _kill()
        pq.write_table = write_table
    """,
    "after the third CSV": """
        import pyarrow.csv as pacsv
        _orig, _n = pacsv.write_csv, []
        def write_csv(*a, **k):
            _orig(*a, **k)
            _n.append(1)
            if len(_n) == 3:
                _kill()
        pacsv.write_csv = write_csv
    """,
    "while drawing the heatmap": """
        from nvtx_plugins_tf.recorder.analysis import heatmap
        _orig = heatmap.render_heatmap
        def render_heatmap(*a, **k):
            _kill()
            return _orig(*a, **k)
        heatmap.render_heatmap = render_heatmap
    """,
    "while committing (held back: delivered once the outputs are in)": """
        _orig, _n = os.replace, []
        def replace(*a, **k):
            _n.append(1)
            if len(_n) == 2:
                _kill()
            return _orig(*a, **k)
        os.replace = replace
    """,
    "while committing, the signal reaching another thread (held back too)": """
        _orig, _n = os.replace, []
        def replace(*a, **k):
            _n.append(1)
            if len(_n) == 2:
                _kill_elsewhere()
            return _orig(*a, **k)
        os.replace = replace
    """,
    # issue 49: a signal that comes once the outputs are in, before or after the command returns
    "after the commit, the signal reaching another thread": """
        from nvtx_plugins_tf.recorder.analysis import outdir
        _orig = outdir._Staging.commit
        def commit(self, names):
            _orig(self, names)
            _kill_elsewhere()
        outdir._Staging.commit = commit
    """,
    "as the command returns, the signal reaching another thread": """
        from nvtx_plugins_tf.cli import _quick_exit
        _orig = _quick_exit.end_if_asked
        def end_if_asked(code):
            _kill_elsewhere()
            _orig(code)
        _quick_exit.end_if_asked = end_if_asked
    """,
}


@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM"])
@pytest.mark.parametrize("point", list(SIGNAL_POINTS))
def test_r2_a_signal_leaves_outdir_as_it_was(corpus, tmp_path, sig, point):
    out = _earlier(corpus, tmp_path)
    before = snapshot(out)
    script = KILL.format(sig=sig) + textwrap.dedent(SIGNAL_POINTS[point]).replace("{sig}", sig)
    proc = patched(script, "analyze", corpus / "runs", "-o", out, "--csv")
    assert proc.returncode == 128 + getattr(signal, sig), proc.stderr
    assert one_error(proc).startswith(f"nvtx-tf: error: {'interrupted' if sig == 'SIGINT' else 'terminated'}")
    after = snapshot(out)
    if "commit" in point or "returns" in point:  # this run's outputs, whole
        assert sorted(after) == sorted(before), (sorted(after), proc.stderr)
        assert not [k for k in after if k.endswith(".csv") and after[k] == before[k]]
        assert {r["RankName"] for r in pq.read_table(out / "rank_stats.parquet").to_pylist()} == {
            f"rank{r}" for r in range(4)
        }
    else:
        assert after == before


def test_r2_a_signal_into_a_new_outdir_makes_nothing(corpus, tmp_path):
    out = tmp_path / "a" / "b" / "out"
    proc = patched(KILL.format(sig="SIGTERM") + textwrap.dedent(SIGNAL_POINTS["after the first table"]),
                   "analyze", corpus / "runs", "-o", out)  # fmt: skip
    assert proc.returncode == 128 + signal.SIGTERM, proc.stderr
    assert list(tmp_path.iterdir()) == []


def test_r2_a_signal_from_outside_leaves_one_run_whole(corpus, tmp_path):
    """SIGTERM from another process as soon as anything new shows in OUTDIR (a large run:
    30,000 range names a rank): OUTDIR then holds the earlier run's outputs or this run's,
    whole, never a mix, and no hidden folder."""
    import time

    for r in range(2):
        synth_rank(tmp_path / "big" / f"r{r}.nvtxrec", NO_PID + 20 + r, names=30_000)
    out = _earlier(corpus, tmp_path)
    before = snapshot(out)
    proc = subprocess.Popen(
        [PY, "-m", "nvtx_plugins_tf", "analyze", tmp_path / "big", "-o", out],
        env=_child_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip

    def state():
        return sorted((p.name, p.stat().st_mtime_ns) for p in out.iterdir())

    initial = state()
    while proc.poll() is None and state() == initial:
        time.sleep(0.001)
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=120)
    after = snapshot(out)
    assert sorted(after) == sorted(before), stderr  # (no hidden folder left)
    changed = {k for k in after if after[k] != before[k]}
    assert changed == set() or changed >= {k for k in after if not k.endswith(".png")}, changed
    assert "Traceback" not in stderr


def test_r10_sigint_while_mapping_starts_no_queued_input_and_waits_for_none(corpus, tmp_path):
    """SIGINT while the first of six inputs is read: no queued input is started afterwards,
    and the command ends without waiting for the reads under way (one never ends here)."""
    inputs = [synth_rank(tmp_path / "six" / f"r{i}.nvtxrec", NO_PID + 30 + i) for i in range(6)]
    started = tmp_path / "started"
    started.mkdir()
    script = f"""
        import os, signal, threading, time
        from pathlib import Path
        from nvtx_plugins_tf.recorder.analysis import engines
        _orig = engines.map_input
        def map_input(path, step=None, **kw):
            (Path({str(started)!r}) / Path(path).name).touch()
            if Path(path).name == "r0.nvtxrec":
                os.kill(os.getpid(), signal.SIGINT)
                threading.Event().wait()  # (a read that takes forever)
            time.sleep(0.5)
            return _orig(path, step, **kw)
        engines.map_input = map_input
    """
    proc = patched(script, "analyze", *inputs, "-o", tmp_path / "out", timeout=60)
    assert proc.returncode == 130, proc.stderr
    assert one_error(proc).startswith("nvtx-tf: error: interrupted (SIGINT)")
    from nvtx_plugins_tf.recorder.analysis.engines import embedded_threads

    assert len(list(started.iterdir())) <= min(embedded_threads(), 5), sorted(p.name for p in started.iterdir())
    assert not (tmp_path / "out").exists()


def _mount_tmpfs(folder: Path, size: str) -> None:
    folder.mkdir()
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)], capture_output=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs (root needed): {proc.stderr.decode().strip()}")


@pytest.mark.parametrize("outdir", ["new", "earlier"])
def test_r3_a_full_disk_is_exit_3_and_leaves_nothing_partial(corpus, tmp_path, outdir):
    """A real 2 MB tmpfs, the outputs of two ranks of 30,000 range names each about 12 MB:
    exit 3, one line naming the output and the disk full, the disk as free as before."""
    for r in range(2):
        synth_rank(tmp_path / "big" / f"r{r}.nvtxrec", NO_PID + 40 + r, names=30_000)
    full = tmp_path / "full"
    _mount_tmpfs(full, "2m")
    try:
        out = full / "an"
        if outdir == "earlier":
            import shutil

            shutil.copytree(corpus / "earlier", out)
        before, free = snapshot(out), os.statvfs(full).f_bfree
        proc = nvtx_tf("analyze", tmp_path / "big", "-o", out)
        assert proc.returncode == cli.EXIT_OUTPUT_NOT_WRITABLE == 3, proc.stderr
        line = one_error(proc)
        assert f"cannot write {out}/" in line and "No space left on device" in line, line
        assert snapshot(out) == before and os.statvfs(full).f_bfree == free
        assert sorted(p.name for p in full.iterdir()) == ([] if outdir == "new" else ["an"])
    finally:
        subprocess.run(["umount", str(full)], check=True)


@pytest.fixture(scope="module")
def damaged(corpus, tmp_path_factory) -> dict[str, Path]:
    """A raw recording cut in the middle of its segment, a packed one cut too (2,000 steps:
    many chunks; what is before the cut is intact)."""
    root = tmp_path_factory.mktemp("damaged")
    raw = synth_rank(root / "raw.nvtxrec", NO_PID + 50, steps=2000)
    (seg,) = raw.glob("*.nvtxseg")
    seg.write_bytes(seg.read_bytes()[: seg.stat().st_size // 2])
    packed = synth_rank(root / "packed.nvtxrec", NO_PID + 51, steps=2000)
    proc = nvtx_tf("pack", packed)
    assert proc.returncode == 0, proc.stderr
    (seg,) = packed.glob("*.nvtxsegz")
    seg.write_bytes(seg.read_bytes()[: seg.stat().st_size // 2])
    return {"raw": raw, "packed": packed}


@pytest.mark.parametrize("which", [["raw"], ["packed"], ["raw", "packed"]])
def test_r5_damage_is_one_line_per_input_and_exit_6_with_the_intact_events_written(corpus, damaged, tmp_path, which):
    """As `report` and `export`: the tables of the intact events are written, each damaged
    input named with its damage on a line of its own, exit 6."""
    out = tmp_path / "out"
    proc = nvtx_tf("analyze", *(damaged[w] for w in which), corpus / "runs" / "rank0.nvtxrec", "-o", out)
    assert proc.returncode == cli.EXIT_DAMAGED == 6, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == len(which), lines
    for line, w in zip(lines, which):
        assert line.startswith(f"nvtx-tf: error: damaged recording {damaged[w]}: ") and "chunk" in line, line
        assert "intact events" in line
    rows = pq.read_table(out / "rank_stats.parquet").to_pylist()
    counted = {r["RankName"]: r["Count"] for r in rows if r["Text"] == "data"}
    assert counted["rank0"] == 10 and all(0 < counted[w] < 2000 for w in which), counted
    assert proc.stdout.splitlines()[0].startswith(f"{len(which) + 1} rank(s)")


def _ranks(out: Path) -> set[str]:
    return {r["RankName"] for r in pq.read_table(out / "rank_stats.parquet").to_pylist()}


def _dedupe_rows(c: Path, t: Path):
    """(id, inputs, the rank names expected, a warning expected)."""
    rec = c / "runs" / "rank0.nvtxrec"
    return [
        ("two spellings of one path", [rec, c / "runs" / ".." / "runs" / "rank0.nvtxrec"], {"rank0"}, False),
        ("a relative and an absolute path", [os.path.relpath(rec), rec], {"rank0"}, False),
        ("a recording and its SQLite export elsewhere", [rec, t / "copy.sqlite"], {"rank0"}, True),
        ("a recording and its parquetdir export elsewhere", [t / "copy_pqtdir", rec], {"copy_pqtdir"}, True),
        ("DIR/ and one of its exports", [t / "dir", t / "dir" / "rank0.sqlite"], {"rank0", "rank1"}, True),
        ("a symlink inside DIR", [t / "linked"], {"rank0"}, False),
    ]


def test_r6_a_rank_counts_once(corpus, tmp_path):
    import shutil

    rec = corpus / "runs" / "rank0.nvtxrec"
    for kind, target in (("sqlite", tmp_path / "copy.sqlite"), ("parquetdir", tmp_path / "copy_pqtdir")):
        assert nvtx_tf("export", "-t", kind, "-o", target, rec).returncode == 0
    (tmp_path / "dir").mkdir()
    for r in range(2):
        shutil.copytree(corpus / "runs" / f"rank{r}.nvtxrec", tmp_path / "dir" / f"rank{r}.nvtxrec")
    assert nvtx_tf("export", "-t", "sqlite", tmp_path / "dir" / "rank0.nvtxrec").returncode == 0
    (tmp_path / "linked").mkdir()
    shutil.copytree(rec, tmp_path / "linked" / "rank0.nvtxrec")
    (tmp_path / "linked" / "zlink.nvtxrec").symlink_to(tmp_path / "linked" / "rank0.nvtxrec")
    failures = []
    for name, inputs, expected, warned in _dedupe_rows(corpus, tmp_path):
        out = tmp_path / f"out_{len(failures)}_{name.replace(' ', '_').replace('/', '')}"
        proc = nvtx_tf("analyze", *inputs, "-o", out)
        if proc.returncode != 0 or _ranks(out) != expected or ("counted once" in proc.stderr) != warned:
            failures.append((name, proc.returncode, _ranks(out) if out.exists() else None, proc.stderr))
    assert not failures, failures


def test_r6_ranks_of_one_name_from_two_folders_are_told_apart(tmp_path):
    for host, pid in (("hostA", NO_PID + 60), ("hostB", NO_PID + 61)):
        synth_rank(tmp_path / host / "rank0.nvtxrec", pid)
    proc = nvtx_tf("analyze", tmp_path / "hostA" / "rank0.nvtxrec", tmp_path / "hostB" / "rank0.nvtxrec",
                   "-o", tmp_path / "out")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert _ranks(tmp_path / "out") == {"hostA/rank0", "hostB/rank0"}
    assert {r["RankName"] for r in pq.read_table(tmp_path / "out" / "pace.parquet").to_pylist()} == _ranks(
        tmp_path / "out"
    )


@pytest.mark.parametrize(
    "slow",
    [
        pytest.param([0, 0], id="r7 identical ranks"),
        pytest.param([0, 0, 0], id="r7 three identical ranks"),
        pytest.param([0, 0, 2_000_000, 2_000_000], id="r7 a tie of two slow ranks"),
    ],
)
def test_r7_no_straggler_without_excess_and_none_in_a_tie(tmp_path, slow):
    inputs = [synth_rank(tmp_path / "r" / f"r{i}.nvtxrec", NO_PID + 70 + i, slow=s) for i, s in enumerate(slow)]
    proc = nvtx_tf("analyze", *inputs, "-o", tmp_path / "out")
    assert proc.returncode == 0, proc.stderr
    rows = pq.read_table(tmp_path / "out" / "stragglers.parquet").to_pylist()
    assert len(rows) == 10 and all(r["Rank"] is None and r["RankName"] is None for r in rows), rows[0]
    assert not any(line.startswith("straggler:") for line in proc.stdout.splitlines()), proc.stdout
    assert any(line.startswith("no straggler") for line in proc.stdout.splitlines()), proc.stdout


def test_r12_an_outdir_whose_name_is_not_utf8_works(corpus, tmp_path):
    """(analyze's part of row 12) Linux paths are bytes: OUTDIR an_\\xff is made and written."""
    out = os.fsencode(tmp_path) + b"/an_\xff"
    proc = subprocess.run([PY, "-m", "nvtx_plugins_tf", "analyze", os.fsencode(corpus / "runs"), b"-o", out],
                          env=_child_env(), capture_output=True, timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert sorted(os.fsdecode(n) for n in os.listdir(out)) == sorted(
        [f"{t}.parquet" for t in ("all_stats", "rank_stats", "pace", "stragglers")] + ["heatmap.png"]
    )


def test_r7_one_slow_rank_is_still_named(corpus, tmp_path):
    proc = nvtx_tf("analyze", corpus / "runs", "-o", tmp_path / "out")
    assert proc.returncode == 0, proc.stderr
    assert "straggler: rank2, the rank the others waited for in 10 of 10 steps" in proc.stdout


def test_r16_the_heatmap_counts_steps_on_its_axis_and_shows_missing_cells(tmp_path):
    """10,000 steps (binned by 10): the x axis in step numbers up to 10,000; a rank with
    fewer steps: its missing cells grey (MISSING_COLOR), not the white of 1x, said in a legend."""
    pytest.importorskip("PIL")
    import io

    from PIL import Image

    from nvtx_plugins_tf.recorder.analysis.heatmap import MISSING_COLOR, plan, render_heatmap

    rng = np.random.default_rng(0)
    durations = [rng.integers(900, 1100, 10_000).tolist() for _ in range(4)]
    durations[1] = durations[1][:6000]
    picture = plan(durations, [f"r{i}" for i in range(4)], "t")
    assert picture.x_extent == (-0.5, 9999.5) and picture.x_label.startswith("step (binned by 10")
    ticks = [v for v, _ in picture.x_ticks if 0 <= v <= 10_000]
    assert max(ticks) >= 8000, ticks
    assert picture.legend == "no such step (the rank has fewer)"
    pixels = np.asarray(Image.open(io.BytesIO(render_heatmap(durations, [f"r{i}" for i in range(4)], "t"))))
    assert pixels.shape[:2] == picture.size[::-1]
    assert (pixels[:, :, :3] == MISSING_COLOR).all(axis=2).sum() > 10_000
    whole = plan([[1, 2, 3], [1, 2, 3]], ["a", "b"], "t")
    assert whole.legend is None and whole.x_extent == (-0.5, 2.5) and whole.x_label == "step"


def test_small_help_names_the_outputs_and_outdir(corpus):
    proc = nvtx_tf("analyze", "--help")
    text = " ".join(proc.stdout.split())
    assert proc.returncode == 0 and "stragglers" in text and "heatmap.png" in text and "-o OUTDIR" in text, text
    assert "PREFIX " not in text.replace("PREFIX.", "").replace("PREFIX_", "")
    proc = nvtx_tf("analyze", corpus / "runs", "-o", "/proc/x")
    assert "-o OUTDIR" in one_error(proc) and proc.returncode == 3


# -- Dask: real clusters ------------------------------------------------------------------


@pytest.fixture(scope="module")
def dask_cluster():
    """A LocalCluster of one worker process, started in this process's folder."""
    distributed = pytest.importorskip("distributed", reason="the 'dask' extra")
    cluster = distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None)
    yield cluster
    cluster.close()


def test_r8_relative_paths_reach_the_workers(corpus, tmp_path, dask_cluster):
    """The client in another folder than the worker: the inputs go to it as absolute paths."""
    import shutil

    shutil.copytree(corpus / "runs", tmp_path / "runs")
    proc = nvtx_tf("analyze", "runs/rank0.nvtxrec", "runs:2", "-o", "out", "--scheduler",
                   dask_cluster.scheduler_address, cwd=tmp_path)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert {r["File"] for r in pq.read_table(tmp_path / "out" / "rank_stats.parquet").to_pylist()} == {
        str(tmp_path / "runs" / f"rank{r}.nvtxrec") for r in range(2)
    }


def test_r8_an_input_a_worker_cannot_read_names_the_worker(dask_cluster):
    import distributed

    from nvtx_plugins_tf.recorder.analysis.engines import _safe_map

    with distributed.Client(dask_cluster) as client:
        (worker,) = client.scheduler_info()["workers"]
        ranks, line = client.submit(_safe_map, "/nonexistent/r0.nvtxrec", None, pure=False).result()
    assert ranks == [] and line.startswith("/nonexistent/r0.nvtxrec: ") and f"(on the Dask worker {worker})" in line


def test_r9_a_scheduler_without_workers_is_a_bounded_wait_and_one_line(corpus, tmp_path):
    distributed = pytest.importorskip("distributed", reason="the 'dask' extra")
    with distributed.LocalCluster(n_workers=0, processes=True, dashboard_address=None) as empty:
        proc = nvtx_tf("analyze", corpus / "runs", "-o", tmp_path / "out", "--scheduler", empty.scheduler_address,
                       env={"NVTX_TF_ANALYZE_WORKER_WAIT": "1"}, timeout=120)  # fmt: skip
    assert proc.returncode == cli.EXIT_DASK_UNAVAILABLE, proc.stderr
    assert one_error(proc) == f"nvtx-tf: error: no workers at {empty.scheduler_address} after 1 s"
    assert not (tmp_path / "out").exists()


def test_r19_many_local_workers_shut_down_quietly(corpus, tmp_path):
    pytest.importorskip("distributed", reason="the 'dask' extra")
    proc = nvtx_tf("analyze", corpus / "runs", "-o", tmp_path / "out", "--workers", "16", timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == "", proc.stderr
    assert "straggler: rank2" in proc.stdout


DASK_SIGNAL_POINTS = {
    "while the tasks run": """
        _orig = distributed.Client.map
        def map(self, *a, **k):
            futures = _orig(self, *a, **k)
            os.kill(os.getpid(), signal.SIGINT)
            return futures
        distributed.Client.map = map
    """,
    "while the cluster starts its workers": """
        import distributed.worker
        _orig = distributed.worker.Worker.start_unsafe
        async def start_unsafe(self):
            os.kill(os.getpid(), signal.SIGINT)
            return await _orig(self)
        distributed.worker.Worker.start_unsafe = start_unsafe
    """,
    # (every result in: the cluster closes in a thread of its own beside the reduce)
    "while the cluster closes beside the reduce": """
        _orig = distributed.Client.close
        def close(self, *a, **k):
            os.kill(os.getpid(), signal.SIGINT)
            return _orig(self, *a, **k)
        distributed.Client.close = close
    """,
}


@pytest.mark.parametrize("point", list(DASK_SIGNAL_POINTS))
def test_r19_sigint_with_workers_is_one_line(corpus, tmp_path, point):
    pytest.importorskip("distributed", reason="the 'dask' extra")
    script = "import os, signal\nimport distributed\n" + textwrap.dedent(DASK_SIGNAL_POINTS[point])
    proc = patched(script, "analyze", corpus / "runs", "-o", tmp_path / "out", "--workers", "2", timeout=300)
    assert proc.returncode == 130, proc.stderr
    assert one_error(proc) == "nvtx-tf: error: interrupted (SIGINT); partial outputs removed"
    assert not (tmp_path / "out").exists()
