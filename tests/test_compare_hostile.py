"""`nvtx-tf compare` (issue 46) under hostile inputs: compare's rows of the hostile-input tables
(as tests/test_analyze_hostile.py's for analyze).

* REFUSALS: bad input is one line ``nvtx-tf: error: ...`` and its exit code, and OUTDIR is
  untouched (an earlier run's outputs byte for byte) or not made at all.
* SIGNAL_POINTS: a real SIGINT or SIGTERM at a known point (while mapping, after the parquet
  table, while drawing the forest plot, while committing): OUTDIR holds the earlier run's outputs
  or this run's, whole, never a mix.
* An OUTDIR that holds analyze's outputs and other files: only compare's are replaced.
* A damaged (cut) recording: compared with its intact events, one line, exit 6.
* A non-UTF-8 OUTDIR, non-UTF-8 runs (read; a missing one named escaped, exit 7); control
  characters and '|' in range names: escaped on the terminal and in compare.md.
* A real full tmpfs (root only): exit 3, OUTDIR as it was, the disk as free as before.
* A foreign file among a run's recordings: left out and named, the rest compared, exit 6.
"""

from __future__ import annotations

import os
import signal
import subprocess
import textwrap
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from conftest import _child_env
from test_analyze_hostile import (
    EPOCH,
    KILL,
    NO_PID,
    PY,
    _mount_tmpfs,
    nvtx_tf,
    one_error,
    patched,
    snapshot,
    synth_rank,
)
from test_analyze_hostile import SIGNAL_POINTS as ANALYZE_POINTS

from nvtx_plugins_tf.recorder.recording._synth import SegmentWriter

pytest.importorskip("scipy")

OUTPUTS = ["compare.csv", "compare.md", "compare.parquet", "compare.png"]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    """base/ and new/: runs of 4 ranks (new/'s data 50 % slower); empty.nvtxrec: no range;
    nosteps/: a run without steps; earlier/: the outputs of `compare base --vs base2`."""
    root = tmp_path_factory.mktemp("corpus")
    for r in range(4):
        synth_rank(root / "base" / f"rank{r}.nvtxrec", NO_PID + r)
        synth_rank(root / "base2" / f"rank{r}.nvtxrec", NO_PID + 10 + r)
        synth_rank(root / "new" / f"rank{r}.nvtxrec", NO_PID + 20 + r, slow=100_000)
    SegmentWriter(pid=NO_PID + 39).thread(9).string(1, "a").segment.write(root / "empty.nvtxrec")
    synth_rank(root / "nosteps" / "r.nvtxrec", NO_PID + 38, steps=0, names=5)
    (root / "plain.txt").write_text("x")
    proc = nvtx_tf("compare", root / "base", "--vs", root / "base2", "-o", root / "earlier")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert sorted(os.listdir(root / "earlier")) == OUTPUTS
    return root


def _earlier(corpus: Path, tmp_path: Path) -> Path:
    import shutil

    return Path(shutil.copytree(corpus / "earlier", tmp_path / "out"))


# (id, argv, exit code, text of the one line, OUTDIR: "new" (must not be made), "earlier" (untouched) or None)
REFUSALS = [
    ("a missing baseline", ["{c}/nope", "--vs", "{c}/new", "-o", "{out}"], 7, "no such recording", "new"),
    ("a missing candidate", ["{c}/base", "--vs", "{c}/new", "{c}/nope", "-o", "{out}"], 7, "nope", "earlier"),
    ("a foreign file", ["{c}/plain.txt", "--vs", "{c}/new", "-o", "{out}"], 7, "plain.txt: not a recording", "new"),
    ("one run on both sides", ["{c}/base", "--vs", "{c}/base", "-o", "{out}"], 7, "give each recording to one run",
     "earlier"),
    ("no ranges", ["{c}/empty.nvtxrec", "--vs", "{c}/new", "-o", "{out}"], 5, "no NVTX ranges", "earlier"),
    ("a run without steps", ["{c}/nosteps", "--vs", "{c}/new", "-o", "{out}"], 2, "has no steps", "earlier"),
    ("--step naming nothing", ["{c}/base", "--vs", "{c}/new", "--step", "iter", "-o", "{out}"], 2, "'iter'", "new"),
    ("-o empty", ["{c}/base", "--vs", "{c}/new", "-o", ""], 2, "-o ''", None),
    ("-o /", ["{c}/base", "--vs", "{c}/new", "-o", "/"], 2, "-o '/'", None),
    ("-o under a file", ["{c}/base", "--vs", "{c}/new", "-o", "{c}/plain.txt/x"], 3, "plain.txt is a file", None),
    ("--vs missing", ["{c}/base", "-o", "{out}"], 2, "--vs", "new"),
]  # fmt: skip


@pytest.mark.parametrize("row", REFUSALS, ids=[r[0] for r in REFUSALS])
def test_bad_input_is_one_line_and_leaves_outdir_as_it_was(corpus, tmp_path, row):
    _, argv, code, text, outdir = row
    out = _earlier(corpus, tmp_path) if outdir == "earlier" else tmp_path / "new" / "out"
    before = snapshot(out)
    proc = nvtx_tf("compare", *(a.format(c=corpus, out=out) for a in argv))
    assert proc.returncode == code, proc.stdout + proc.stderr
    assert text in one_error(proc)
    assert "Traceback" not in proc.stderr
    if outdir == "earlier":
        assert snapshot(out) == before
    elif outdir == "new":
        assert not (tmp_path / "new").exists()


SIGNAL_POINTS = {
    "while mapping": ANALYZE_POINTS["while mapping"],
    "after the parquet table": ANALYZE_POINTS["after the first table"],
    "while drawing the forest plot": """
        from nvtx_plugins_tf.recorder.compare import outputs
        _orig = outputs._forest
        def _forest(*a, **k):
            _kill()
            return _orig(*a, **k)
        outputs._forest = _forest
    """,
    "while committing (held back: delivered once the outputs are in)": ANALYZE_POINTS[
        "while committing (held back: delivered once the outputs are in)"
    ],
    # (compare ends its process at once as analyze does: a signal as it returns is still 128 + N)
    "as the command returns, the signal reaching another thread": ANALYZE_POINTS[
        "as the command returns, the signal reaching another thread"
    ],
}


@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM"])
@pytest.mark.parametrize("point", list(SIGNAL_POINTS))
def test_a_signal_leaves_outdir_whole(corpus, tmp_path, sig, point):
    out = _earlier(corpus, tmp_path)
    before = snapshot(out)
    script = KILL.format(sig=sig) + textwrap.dedent(SIGNAL_POINTS[point])
    proc = patched(script, "compare", corpus / "base", "--vs", corpus / "new", "-o", out)
    assert proc.returncode == 128 + getattr(signal, sig), proc.stdout + proc.stderr
    words = f"nvtx-tf: error: {'interrupted' if sig == 'SIGINT' else 'terminated'}"
    if "returns" in point:  # (after the command's own line: the regression it found)
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 2 and lines[0].startswith("nvtx-tf: error: regression:"), proc.stderr
        assert lines[1].startswith(words) and "as the command ended" in lines[1], proc.stderr
    else:
        assert one_error(proc).startswith(words)
    after = snapshot(out)
    if "commit" in point or "returns" in point:  # this run's outputs, whole: new/ is slower
        assert sorted(after) == OUTPUTS
        verdicts = {r["Range"]: r["Verdict"] for r in pq.read_table(out / "compare.parquet").to_pylist()}
        assert verdicts["data"] == "slower", verdicts
    else:
        assert after == before


def test_a_signal_into_a_new_outdir_makes_nothing(corpus, tmp_path):
    out = tmp_path / "a" / "b" / "out"
    script = KILL.format(sig="SIGTERM") + textwrap.dedent(SIGNAL_POINTS["after the parquet table"])
    proc = patched(script, "compare", corpus / "base", "--vs", corpus / "new", "-o", out)
    assert proc.returncode == 128 + signal.SIGTERM, proc.stderr
    assert list(tmp_path.iterdir()) == []


def test_an_existing_outdir_keeps_its_other_files_and_analyzes_outputs(corpus, tmp_path):
    out = tmp_path / "out"
    assert nvtx_tf("analyze", corpus / "base", "-o", out).returncode == 0
    (out / "notes.txt").write_text("mine")
    analyzed = {n: (out / n).read_bytes() for n in os.listdir(out)}
    proc = nvtx_tf("compare", corpus / "base", "--vs", corpus / "new", "-o", out)
    assert proc.returncode == 16, proc.stderr
    assert {n: (out / n).read_bytes() for n in analyzed} == analyzed
    assert set(OUTPUTS) <= set(os.listdir(out))


def test_a_damaged_recording_is_compared_with_its_intact_events_exit_6(corpus, tmp_path):
    run = tmp_path / "cut"
    for r in range(4):
        rec = synth_rank(run / f"rank{r}.nvtxrec", NO_PID + 60 + r, steps=400)
    (seg,) = rec.glob("*.nvtxseg")
    seg.write_bytes(seg.read_bytes()[: seg.stat().st_size // 2])
    proc = nvtx_tf("compare", corpus / "base", "--vs", run, "-o", tmp_path / "out")
    assert proc.returncode == 6, proc.stdout + proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.startswith("nvtx-tf: error:")]
    assert len(lines) == 1, proc.stderr
    line = lines[0]
    assert "its ranks have 130 to 400 steps; the first 130 compared" in proc.stderr  # (a warning)
    assert line.startswith(f"nvtx-tf: error: damaged recording {rec}") and "intact events" in line
    assert sorted(os.listdir(tmp_path / "out")) == OUTPUTS


def test_an_outdir_whose_name_is_not_utf8_works(corpus, tmp_path):
    out = os.fsencode(tmp_path) + b"/cmp_\xff"
    argv = [PY, "-m", "nvtx_plugins_tf", "compare", os.fsencode(corpus / "base"), b"--vs",
            os.fsencode(corpus / "new"), b"-o", out]  # fmt: skip
    # (a UTF-8 locale's strict stdout: the line naming the outputs must not fail on the name)
    proc = subprocess.run(argv, env=_child_env(PYTHONIOENCODING="utf-8:strict"), capture_output=True, timeout=300)
    assert proc.returncode == 16, proc.stderr
    assert sorted(os.fsdecode(n) for n in os.listdir(out)) == OUTPUTS
    assert b"cmp_\\udcff/compare.md" in proc.stdout, proc.stdout


def _named_rank(path: Path, pid: int, name: str, slow: int) -> None:
    """A rank whose steps hold one range named ``name`` (control characters and all)."""
    seg = SegmentWriter(pid=pid, start_ns=1000, start_realtime_ns=EPOCH, chunk_size=4096)
    t = seg.thread(pid)
    t.string(1, name)
    for i in range(20):
        t.string(10 + i, f"step {i}")
    now = 10_000
    for i in range(20):
        t.push(now, 10 + i).push(now + 10, 1).pop(now + 500_000 + slow).pop(now + 600_000 + slow)
        now += 700_000 + slow
    seg.write(path)


def test_control_characters_in_range_names_are_escaped(tmp_path):
    name = "evil\x1b[2J|row\nnext\u202e"
    for r in range(4):
        _named_rank(tmp_path / "a" / f"r{r}.nvtxrec", NO_PID + 70 + r, name, 0)
        _named_rank(tmp_path / "b" / f"r{r}.nvtxrec", NO_PID + 80 + r, name, 100_000)
    proc = nvtx_tf("compare", tmp_path / "a", "--vs", tmp_path / "b", "-o", tmp_path / "out")
    assert proc.returncode == 16, proc.stderr
    for text in (proc.stdout, proc.stderr, (tmp_path / "out" / "compare.md").read_text()):
        assert "\x1b" not in text and "\u202e" not in text and "evil" in text
    assert "evil\\x1b[2J|row\\nnext\\u202e" in proc.stdout
    md = (tmp_path / "out" / "compare.md").read_text()
    assert "evil\\\\x1b[2J\\|row\\\\nnext\\\\u202e" in md
    rows = {r["Range"] for r in pq.read_table(tmp_path / "out" / "compare.parquet").to_pylist()}
    assert name in rows  # (the table keeps the name as recorded)


@pytest.mark.parametrize("outdir", ["new", "earlier"])
def test_a_full_disk_is_exit_3_and_leaves_nothing_partial(corpus, tmp_path, outdir):
    """A real tmpfs filled but for 8 KB (compare's outputs need more: the parquet table and the
    forest plot): exit 3, one line naming the output and the disk full, OUTDIR as it was (an
    earlier run's outputs byte for byte, or none), the disk as free as before."""
    full = tmp_path / "full"
    _mount_tmpfs(full, "1m")
    try:
        out = full / "cmp"
        if outdir == "earlier":
            import shutil

            shutil.copytree(corpus / "earlier", out)
        stat = os.statvfs(full)
        (full / "filler").write_bytes(b"\0" * (stat.f_bavail * stat.f_frsize - 8192))
        before, free = snapshot(out), os.statvfs(full).f_bfree
        proc = nvtx_tf("compare", corpus / "base", "--vs", corpus / "new", "-o", out)
        assert proc.returncode == 3, proc.stdout + proc.stderr
        line = one_error(proc)
        assert f"cannot write {out}/compare." in line and "No space left on device" in line, line
        assert "Traceback" not in proc.stderr
        assert snapshot(out) == before and os.statvfs(full).f_bfree == free
        assert sorted(p.name for p in full.iterdir()) == (["filler"] if outdir == "new" else ["cmp", "filler"])
    finally:
        subprocess.run(["umount", str(full)], check=True)


def test_runs_whose_paths_are_not_utf8_are_compared(corpus, tmp_path):
    """A baseline folder and a candidate recording named with a byte that is not UTF-8: read,
    compared (exit 16: new/ is slower) and named escaped on the terminal; a missing one of
    such a name is exit 7, its name escaped in the one line."""
    import shutil

    base, cand = os.fsencode(tmp_path) + b"/base_\xff", os.fsencode(tmp_path) + b"/new_\xfe"
    shutil.copytree(corpus / "base", os.fsdecode(base))
    shutil.copytree(corpus / "new", os.fsdecode(cand))
    argv = [PY, "-m", "nvtx_plugins_tf", "compare", base, b"--vs", cand, b"-o", os.fsencode(tmp_path) + b"/out"]
    proc = subprocess.run(argv, env=_child_env(PYTHONIOENCODING="utf-8:strict"), capture_output=True, timeout=300)
    assert proc.returncode == 16, proc.stderr
    assert b"Traceback" not in proc.stderr and b"regression:" in proc.stderr
    assert sorted(os.listdir(tmp_path / "out")) == OUTPUTS
    missing = os.fsencode(tmp_path) + b"/gone_\xfd"
    argv = [PY, "-m", "nvtx_plugins_tf", "compare", base, b"--vs", missing]
    proc = subprocess.run(argv, env=_child_env(PYTHONIOENCODING="utf-8:strict"), capture_output=True, timeout=300)
    assert proc.returncode == 7, proc.stderr
    lines = proc.stderr.decode("utf-8").strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("nvtx-tf: error:") and "gone_\\udcfd" in lines[0], lines


def test_a_foreign_file_among_a_runs_recordings_is_left_out_exit_6(corpus, tmp_path):
    """A run's folder holding, beside its ranks, a 'recording' whose segment is foreign bytes:
    that input left out and named (one line), the others compared, the outputs written, exit 6."""
    import shutil

    run = Path(shutil.copytree(corpus / "base2", tmp_path / "run"))
    junk = run / "rank9.nvtxrec"
    junk.mkdir()
    (junk / "123-456.nvtxseg").write_bytes(os.urandom(4096))
    proc = nvtx_tf("compare", corpus / "base", "--vs", run, "-o", tmp_path / "out")
    assert proc.returncode == 6, proc.stdout + proc.stderr
    line = one_error(proc)
    assert str(junk) in line and ("left out" in line or "damaged" in line), line
    assert "Traceback" not in proc.stderr
    assert sorted(os.listdir(tmp_path / "out")) == OUTPUTS
