"""`report`: numbered names grouped, long names shortened (whole in CSV), processes named;
`report --pairs` on a recording, our SQLite export and a real nsys export."""

import csv
import io
import shutil
import sqlite3
import subprocess
import sys
import textwrap
from contextlib import closing
from pathlib import Path

import nsys_oracle as oracle

from nvtx_plugins_tf.cli._common import EXIT_NO_RANGE_IDS

REPO = Path(__file__).resolve().parents[1]

SCRIPT = textwrap.dedent(
    """
    import nvtx
    for i in range(12):
        with nvtx.annotate(f"batch {i}", domain="Keras"):
            pass
    for i in (1, 2):
        with nvtx.annotate(f"Dense {i}", domain="Forward"):
            pass
    # TensorFlow's XLA ranges: TraceMe metadata after a ':' (TSL's "XlaPass:#name=...#").
    with nvtx.annotate("XlaPass:#name=cluster_0," + "x" * 180 + "#", domain="TSL"):
        pass
    with nvtx.annotate("XlaCompile:#module=cluster_1,program_id=7#", domain="TSL"):
        pass
    """
)


def _record(tmp_path, child_env, text=SCRIPT):
    """``record`` a script made of ``text``; (prefix, record's output)."""
    script = tmp_path / "script.py"
    script.write_text(text)
    prefix = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, "-m", "nvtx_plugins_tf", "record", "-o", str(prefix), "--", sys.executable, str(script)],
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    return prefix, proc.stdout


def _report(*args, env):
    proc = subprocess.run(
        [sys.executable, "-m", "nvtx_plugins_tf", "report", *map(str, args)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_numbered_names_share_a_row_by_default(tmp_path, child_env):
    prefix, out = _record(tmp_path, child_env)
    reports = (_report(str(prefix) + ".nvtxrec", env=child_env()), _report(str(prefix) + ".sqlite", env=child_env()))
    for text in (out, *reports):
        rows = [
            line
            for line in text.splitlines()
            if line.rstrip().endswith(
                ("Keras:batch *", "Forward:Dense 1", "Forward:Dense 2", "TSL:XlaPass", "TSL:XlaCompile")
            )
        ]
        assert len(rows) == 5, text
        assert " 12 " in next(r for r in rows if r.endswith("batch *"))
        assert "batch 3" not in text


def test_keep_numbered_and_csv_keep_every_name_whole(tmp_path, child_env):
    prefix, _ = _record(tmp_path, child_env)
    table = _report(str(prefix) + ".sqlite", "--keep-numbered", env=child_env())
    assert "Keras:batch 11" in table
    assert "…" in table  # the 200-character XLA-style name is shortened in the table
    rows = list(
        csv.DictReader(
            io.StringIO(_report(str(prefix) + ".sqlite", "--keep-numbered", "--format", "csv", env=child_env()))
        )
    )
    names = {r["Range"] for r in rows}
    assert {f"Keras:batch {i}" for i in range(12)} <= names
    assert any(n.startswith("TSL:XlaPass:#name=cluster_0,") and len(n) > 180 for n in names)


def test_by_process_shows_the_command_line(tmp_path, child_env):
    prefix, _ = _record(tmp_path, child_env)
    out = _report(str(prefix) + ".nvtxrec", "--by-process", env=child_env())
    assert "PID" in out.splitlines()[0]
    assert "script.py" in out


TRAINING = textwrap.dedent(
    """
    import tensorflow as tf
    import nvtx_plugins_tf as nvtx_tf
    w1, w2 = tf.Variable(tf.ones([4, 8])), tf.Variable(tf.ones([8, 1]))

    @tf.function
    def step(x):
        with tf.GradientTape() as tape:
            x, ctx = nvtx_tf.ops.start(x, "Dense 1", "Forward", grad_domain_name="Backward")
            x = nvtx_tf.ops.end(tf.nn.relu(x @ w1), ctx)
            x, ctx = nvtx_tf.ops.start(x, "Dense 2", "Forward", grad_message="Dense 2 grad",
                                       grad_domain_name="Backward")
            loss = tf.reduce_sum(tf.square(nvtx_tf.ops.end(x @ w2, ctx)))
        return tape.gradient(loss, [w1, w2])

    for _ in range(5):
        step(tf.ones([2, 4]))
    """
)


def _check_pairs(out: str) -> None:
    """``report --pairs`` of TRAINING: each forward range with its backward range, 5 steps."""
    assert out.splitlines()[0].split()[0] == "Pairs", out
    lines = out.splitlines()[2:]
    assert any(line.endswith("Forward:Dense 1  Backward:Dense 1") and line.split()[0] == "5" for line in lines), out
    assert any(line.endswith("Forward:Dense 2  Backward:Dense 2 grad") and line.split()[0] == "5" for line in lines), (
        out
    )
    assert len(lines) == 2, out


def test_pairs_links_each_backward_range_to_its_forward_range(tmp_path, child_env):
    """From the recording and from our SQLite export of it (the forward row's rangeId is the
    backward row's int64Value)."""
    prefix, _ = _record(tmp_path, child_env, TRAINING)
    for path in (str(prefix) + ".nvtxrec", str(prefix) + ".sqlite"):
        _check_pairs(_report(path, "--pairs", env=child_env()))


def test_pairs_on_a_real_nsys_export(tmp_path):
    """nsys 2022.4 exports the ids it handed the program as rangeId: the same pairs. A file
    without them (rangeId NULL) says so in one line, with its own exit code."""
    nsys = oracle.nsys_or_skip()
    script = tmp_path / "train.py"
    script.write_text(TRAINING)
    env = oracle.clean_env(PYTHONPATH=str(REPO))
    sqlite = oracle.run_nsys(nsys, [sys.executable, script], tmp_path / "nsys", env=env).sqlite
    _check_pairs(_report(sqlite, "--pairs", env=env))
    no_ids = tmp_path / "no_ids.sqlite"
    shutil.copy(sqlite, no_ids)
    with closing(sqlite3.connect(no_ids)) as con, con:
        con.execute("UPDATE NVTX_EVENTS SET rangeId = NULL")
    proc = subprocess.run(
        [sys.executable, "-m", "nvtx_plugins_tf", "report", "--pairs", str(no_ids)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == EXIT_NO_RANGE_IDS and proc.stdout == "", (proc.returncode, proc.stderr)
    assert proc.stderr.startswith("nvtx-tf: error: ") and "rangeId" in proc.stderr, proc.stderr
    assert len(proc.stderr.splitlines()) == 1, proc.stderr


def test_pairs_link_within_a_process():
    """Range ids are per process: two processes' forward ranges with the same id each keep
    their own backward range."""
    from nvtx_plugins_tf.recorder.recording.model import Range
    from nvtx_plugins_tf.recorder.reports.pairs import pair_ranges

    def start_end(name, pid, start, range_id, payload=None):
        kind = None if payload is None else "i64"
        return Range(
            name,
            "",
            start,
            start + 10,
            pid,
            pid,
            pid,
            "start-end",
            payload=payload,
            payload_type=kind,
            range_id=range_id,
        )

    forward = [start_end("A", 1, 0, 7), start_end("B", 2, 5, 7)]
    ranges = forward + [start_end("a", 1, 20, 8, payload=7), start_end("b", 2, 25, 9, payload=7)]
    assert sorted((f.message, b.message) for f, b in pair_ranges(ranges)) == [("A", "a"), ("B", "b")]


def test_summary_top_keeps_the_first_rows_of_each_process():
    """``report --top N --by-process``: N rows per process, the most total time first (the
    selection lives in Summary.top, the command line only asks for it)."""
    from nvtx_plugins_tf.recorder.reports.summary import summarize_arrays

    # process 1: a 30, b 20, c 10 ns; process 2: a 5, b 50 ns
    durations = [30, 20, 10, 5, 50]
    summary = summarize_arrays(durations, ["a", "b", "c"], [0, 1, 2, 0, 1], [0] * 5, pids=[1, 1, 1, 2, 2])
    top = summary.top(1)
    assert [(r.pid, r.range) for r in top.rows] == [(1, "a"), (2, "b")]
    assert [(r.pid, r.range) for r in summary.top(2).rows] == [(1, "a"), (1, "b"), (2, "b"), (2, "a")]
    assert len(summary.rows) == 5  # (a new Summary: the one asked is left whole)
    plain = summarize_arrays(durations, ["a", "b", "c"], [0, 1, 2, 0, 1], [0] * 5)
    assert [r.range for r in plain.top(2).rows] == ["b", "a"]  # b 70 ns, a 35 ns
