"""`report`: numbered names grouped, long names shortened (whole in CSV), processes named."""

import csv
import io
import subprocess
import sys
import textwrap

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


def test_pairs_links_each_backward_range_to_its_forward_range(tmp_path, child_env):
    prefix, _ = _record(tmp_path, child_env, TRAINING)
    out = _report(str(prefix) + ".nvtxrec", "--pairs", env=child_env())
    assert out.splitlines()[0].split()[0] == "Pairs"
    lines = out.splitlines()[2:]
    assert any(line.endswith("Forward:Dense 1  Backward:Dense 1") and line.split()[0] == "5" for line in lines), out
    assert any(line.endswith("Forward:Dense 2  Backward:Dense 2 grad") and line.split()[0] == "5" for line in lines), (
        out
    )
    assert len(lines) == 2, out
