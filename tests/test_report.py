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
    with nvtx.annotate("XlaPass#name=cluster_0," + "x" * 180 + "#", domain="TSL"):
        pass
    """
)


def _record(tmp_path, child_env):
    script = tmp_path / "numbered.py"
    script.write_text(SCRIPT)
    prefix = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "nvtx_plugins_tf", "record", "-o", str(prefix), "--",
                           sys.executable, str(script)], env=child_env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return prefix, proc.stdout


def _report(*args, env):
    proc = subprocess.run([sys.executable, "-m", "nvtx_plugins_tf", "report", *map(str, args)], env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_numbered_names_share_a_row_by_default(tmp_path, child_env):
    prefix, out = _record(tmp_path, child_env)
    for text in (out, _report(str(prefix) + ".nvtxrec", env=child_env()), _report(str(prefix) + ".sqlite", env=child_env())):
        rows = [line for line in text.splitlines() if line.rstrip().endswith(("Keras:batch *", "Forward:Dense 1",
                                                                             "Forward:Dense 2", "TSL:XlaPass"))]
        assert len(rows) == 4, text
        assert " 12 " in next(r for r in rows if r.endswith("batch *"))
        assert "batch 3" not in text


def test_keep_numbered_and_csv_keep_every_name_whole(tmp_path, child_env):
    prefix, _ = _record(tmp_path, child_env)
    table = _report(str(prefix) + ".sqlite", "--keep-numbered", env=child_env())
    assert "Keras:batch 11" in table
    assert "…" in table  # the 200-character XLA-style name is shortened in the table
    rows = list(csv.DictReader(io.StringIO(_report(str(prefix) + ".sqlite", "--keep-numbered", "--format", "csv",
                                                   env=child_env()))))
    names = {r["Range"] for r in rows}
    assert {f"Keras:batch {i}" for i in range(12)} <= names
    assert any(n.startswith("TSL:XlaPass#name=cluster_0,") and len(n) > 180 for n in names)


def test_by_process_shows_the_command_line(tmp_path, child_env):
    prefix, _ = _record(tmp_path, child_env)
    out = _report(str(prefix) + ".nvtxrec", "--by-process", env=child_env())
    assert "PID" in out.splitlines()[0]
    assert "numbered.py" in out
