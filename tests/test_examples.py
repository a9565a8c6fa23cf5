"""Each example runs in a few seconds under `python -m nvtx_plugins_tf record` and records
the ranges it promises; every file of examples/ is run here."""

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

from nvtx_plugins_tf import recorder
from nvtx_plugins_tf._tensorflow import version_tuple
from nvtx_plugins_tf.recorder.reports.names import NAME_WIDTH

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"


@pytest.fixture
def _record(tmp_path, child_env):
    return lambda script, *args: _record_example(tmp_path, child_env(), script, *args)


def _record_example(tmp_path, env, script, *args):
    prefix = tmp_path / Path(script).stem
    command = [
        sys.executable,
        "-m",
        "nvtx_plugins_tf",
        "record",
        "-o",
        str(prefix),
        "--",
        sys.executable,
        str(EXAMPLES / script),
        *args,
    ]
    proc = subprocess.run(command, env=env, capture_output=True, text=True, timeout=240, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    assert _our_warnings(proc.stderr) == [], proc.stderr[-4000:]
    assert Path(str(prefix) + ".json").is_file()
    return recorder.load(str(prefix) + ".nvtxrec"), proc.stdout


def _our_warnings(stderr: str) -> list[str]:
    """Warning lines about NVTX in a run's stderr: ours (Python warnings say
    ``nvtx_plugins_tf:``, the CLI ``nvtx-tf: warning``) and those of TensorFlow or Keras that
    name an NVTX op, layer or domain (e.g. pfor's "Using a while_loop for converting
    NvtxStart", a Keras warning about the NVTXEnd layer)."""
    found = []
    for line in stderr.splitlines():
        lower = line.lower()
        ours = "nvtx_plugins_tf:" in line or "nvtx-tf: warning" in line
        warning = "warn" in lower or line.startswith("W0000") or line.startswith("E0000")
        if ours or (warning and ("nvtx" in lower or "domain" in lower)):
            found.append(line)
    return found


def test_our_warnings_finds_nvtx_warnings():
    """The filter the example tests rely on: our warnings and others' that name NVTX."""
    stderr = "\n".join(
        [
            "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR",
            "I0000 00:00:1.0 1 port.cc:153] oneDNN custom operations are on.",
            "x.py:3: RuntimeWarning: nvtx_plugins_tf: NVTXEnd could not read the domain name",
            "WARNING:tensorflow:Using a while_loop for converting NvtxStart cause there is no converter",
            "W0000 00:00:1.0 1 op_kernel.cc:1] NvtxEnd: bad range id",
            "nvtx-tf: warning: no NVTX events recorded",
        ]
    )
    assert len(_our_warnings(stderr)) == 4


# Each example, with the arguments that make it quick.
EXAMPLE_ARGS = {
    "keras_example.py": ["--epochs", "1", "--steps", "2", "--small"],
    "multi_inputs_outputs.py": ["--steps", "2"],
    "custom_training_loop.py": ["--steps", "2"],
    "auto_annotate.py": ["--steps", "1", "--batch-size", "4"],
    "backward_pairs.py": ["--steps", "2"],
    "tf_op_ranges.py": ["--steps", "2"],
    "tf_profiler.py": ["--steps", "2"],
    "xla.py": ["--steps", "2"],
    "train.py": [],
    "tf_data_pipeline.py": ["--elements", "16", "--batch-size", "8"],
    "tf_session_example.py": ["--steps", "2", "--skip", "1"],
}


def test_examples_are_listed():
    assert {p.name for p in EXAMPLES.glob("*.py")} == set(EXAMPLE_ARGS)


@pytest.mark.parametrize("script", sorted(EXAMPLE_ARGS))
def test_example_under_tf_keras_is_clean(script, tmp_path, child_env):
    """Under TF_USE_LEGACY_KERAS=1 (tf_keras) too, every example runs with no warning about
    NVTX (issue 20.8: tf_keras traced NVTXEnd alone in its output-signature graph, with a
    placeholder domain_id, and it warned that the domain could not be read). Under Keras 3
    the recorded runs below check the same."""
    pytest.importorskip("tf_keras")
    args = list(EXAMPLE_ARGS[script])
    if script == "tf_profiler.py":
        args += ["--logdir", str(tmp_path / "tb")]
    env = child_env(tmp_path / "rec", TF_USE_LEGACY_KERAS="1")
    proc = subprocess.run(
        [sys.executable, str(EXAMPLES / script), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert _our_warnings(proc.stderr) == [], proc.stderr[-4000:]


def test_keras_example(_record):
    rec, out = _record("keras_example.py", "--epochs", "2", "--steps", "3", "--small")
    assert "keras_example: loss" in out
    for i in range(1, 6):
        assert rec.count(message=f"Dense {i}", domain="Forward") == 6
        assert rec.count(message=f"Dense {i} grad", domain="Gradient") == 6
    assert rec.count(message="Train", domain="Keras") == 1
    assert rec.count(message="epoch 1", domain="Keras") == 1
    assert len([r for r in rec.events if r.domain == "Keras" and r.message.startswith("batch ")]) == 6
    assert not rec.open_ranges


def test_train(_record):
    rec, out = _record("train.py", "--batch-size", "8", "--profile-batches", "1", "2")
    assert "train: 1 epoch(s) done" in out
    assert rec.count(message="Train", domain="Keras") == 1
    assert len([r for r in rec.events if r.domain == "Keras" and r.message.startswith("batch ")]) == 4
    assert rec.count(message="profile", domain="Keras") == 1
    assert not rec.open_ranges


def test_train_by_default_has_steps_for_the_timeline(_record):
    """With no argument (as README quick start 3 and docs/recorder.md run it), train.py trains
    8 batches: the timeline's default window (steps 1 on) shows 7 of them (issue 45, row 8: it
    trained one, and the PNG titled 'steps 1:' showed batch 0 only)."""
    rec, _ = _record("train.py")
    batches = sorted(r.payload for r in rec.find(domain="Keras") if r.message.startswith("batch "))
    assert batches == list(range(8))


def test_tf_session_example(_record):
    rec, _ = _record("tf_session_example.py", "--steps", "4", "--skip", "1")
    assert [r.message for r in sorted(rec.find(), key=lambda r: r.start_ns) if r.message.startswith("step ")] == [
        "step 1",
        "step 2",
        "step 3",
    ]
    assert rec.count(message="Session") == 1
    for name in ("hidden", "output"):
        assert rec.count(message=name, domain="Forward") == 4
        assert rec.count(message=name, domain="Backward") == 4
    assert not rec.open_ranges


def test_custom_training_loop(_record):
    rec, _ = _record("custom_training_loop.py", "--steps", "3")
    steps = rec.find(message="train_step", domain="Loop")
    assert sorted(r.payload for r in steps) == [0, 1, 2]
    for name in ("layer 1", "layer 2", "loss"):
        assert rec.count(message=name, domain="Forward") == 3
        assert rec.count(message=name, domain="Backward") == 3
    assert not rec.open_ranges


def test_multi_inputs_outputs(_record):
    rec, _ = _record("multi_inputs_outputs.py", "--steps", "2")
    assert rec.count(message="Merge", domain="Forward") == 2
    assert rec.count(message="Heads", domain="Forward") == 2
    assert rec.count(message="Merge grad", domain="Backward") == 2
    assert rec.count(message="Heads grad", domain="Backward") == 2
    assert not rec.open_ranges


def test_tf_data_pipeline(_record):
    rec, _ = _record("tf_data_pipeline.py", "--elements", "32", "--batch-size", "8")
    decode = rec.find(message="decode", domain="Data")
    assert len(decode) == 32
    assert rec.count(message="augment", domain="Data") == 32
    consume = rec.find(message="consume", domain="Train")
    assert len(consume) == 4
    main_tid = consume[0].tid
    assert all(r.tid == r.pid for r in consume)  # the main thread
    assert all(r.tid != main_tid for r in decode)  # tf.data's own threads
    assert not rec.open_ranges


def test_auto_annotate(_record):
    rec, out = _record("auto_annotate.py", "--steps", "1", "--batch-size", "4")
    assert "annotated layers" in out
    forward = {r.message for r in rec.find(domain="Forward")}
    backward = {r.message for r in rec.find(domain="Backward")}
    assert len(forward) > 100
    assert forward == backward
    assert "Conv1" in forward and "predictions" in forward
    assert rec.count(message="batch 0", domain="Keras") == 1
    assert not rec.open_ranges


def test_tf_op_ranges(_record):
    rec, out = _record("tf_op_ranges.py", "--steps", "3")
    assert "tf_op_ranges: loss" in out
    steps = rec.find(message="train_step", domain="Loop")
    matmuls = [r for r in rec.find(domain="TSL") if r.message.startswith("MatMul:")]
    assert len(steps) == 4 and len(matmuls) == 3  # the traced first step ran without op ranges
    assert all(any(s.start_ns <= m.start_ns and m.end_ns <= s.end_ns for s in steps) for m in matmuls)
    assert not rec.open_ranges


def test_tf_profiler(_record, tmp_path):
    rec, out = _record("tf_profiler.py", "--steps", "3", "--logdir", str(tmp_path / "tb"))
    assert "tf_profiler: 'Dense 1' x3" in out and "tf_profiler: 'Dense 2' x3" in out
    assert rec.count(message="Dense 1", domain="Forward") == 4  # NVTX sees the traced step too


def _report(prefix, *args, env):
    proc = subprocess.run(
        [sys.executable, "-m", "nvtx_plugins_tf", "report", f"{prefix}.nvtxrec", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def _enclosing(ranges, inner):
    """The ranges of ``ranges`` whose time span holds ``inner``'s."""
    return [r for r in ranges if r.start_ns <= inner.start_ns and inner.end_ns <= r.end_ns]


def test_backward_pairs(_record, tmp_path, child_env):
    steps = 3
    rec, out = _record("backward_pairs.py", "--steps", str(steps))
    assert "backward_pairs: loss" in out
    step_ranges = rec.find(message="train_step", domain="Loop")
    assert sorted(r.payload for r in step_ranges) == list(range(steps))
    forward = {r.range_id: r for r in rec.find(domain="Forward")}
    backward = rec.find(domain="Backward")
    names = ("Dense 1", "Dense 2", "loss")
    assert len(forward) == len(backward) == len(names) * steps  # (range ids are unique)
    # Each backward range's payload names one forward range: same name, same step.
    for b in backward:
        f = forward[b.payload]
        assert f.message == b.message and f.end_ns <= b.start_ns, (f, b)
        (step_of_b,) = _enclosing(step_ranges, b)
        (step_of_f,) = _enclosing(step_ranges, f)
        assert step_of_b is step_of_f, (f, b)
    assert len({b.payload for b in backward}) == len(backward)  # no forward range linked twice
    # `report --pairs`: one row per name, every backward range counted.
    lines = _report(tmp_path / "backward_pairs", "--pairs", env=child_env()).splitlines()
    assert lines[0].split()[0] == "Pairs"
    rows = {tuple(re.split(r"\s{2,}", line.strip())[i] for i in (0, 4, 5)) for line in lines[2:]}
    assert rows == {(str(steps), f"Forward:{n}", f"Backward:{n}") for n in names}, lines
    assert not rec.open_ranges


def _summary_rows(table: str) -> dict[str, int]:
    """Range name -> instances of the rows of a `report` table (trailing colons dropped:
    how TraceMe-style names end after grouping is not what this checks)."""
    rows = {}
    for line in table.splitlines():
        cells = line.split(None, 9)  # the last column, the name, may hold spaces
        if len(cells) == 10 and re.fullmatch(r"[\d.]+", cells[0]):
            rows[cells[9].rstrip(":")] = int(cells[2].replace(",", ""))
    return rows


def test_xla(_record, tmp_path, child_env):
    import tensorflow as tf

    if not tf.test.is_built_with_cuda():
        pytest.skip("XLA's ranges are TensorFlow's own NVTX calls, compiled into its CUDA builds only")
    steps = 3
    rec, out = _record("xla.py", "--steps", str(steps))
    assert "xla: loss" in out
    tsl = [r for r in rec.ranges if r.domain == "TSL"]
    passes = [r for r in tsl if re.match(r"XlaPass\W", r.message)]
    compiles = [r for r in tsl if re.match(r"XlaCompile\W", r.message)]  # not 2.16's XlaCompileBackend
    assert len(compiles) == 1 and len(passes) > 10, sorted({r.message for r in tsl})
    if version_tuple(tf.__version__) >= (2, 18):  # 2.16's pass names carry no metadata: all short
        assert max(len(r.message) for r in passes) > NAME_WIDTH  # the long names the table shortens
    # Our ranges, outside the jit function: the compile in the first call, one per step.
    (compile_range,) = rec.find(message="compile", domain="Loop")
    step_ranges = [r for r in rec.find(domain="Loop") if r.message.startswith("step ")]
    assert sorted(r.payload for r in step_ranges) == list(range(steps))
    assert all(_enclosing([compile_range], r) for r in compiles + passes)
    assert not any(_enclosing(step_ranges, r) for r in compiles + passes)  # compiled once
    table = _report(tmp_path / "xla", env=child_env())
    rows = _summary_rows(table)
    # one row of shortened pass names (2.18+: "XlaPass:NAME#metadata#"), or a row per short name (2.16)
    pass_rows = sum(n for name, n in rows.items() if name == "TSL:XlaPass" or name.startswith("TSL:XlaPass:"))
    assert rows.get("TSL:XlaCompile") == 1 and pass_rows == len(passes), table
    assert rows.get("Loop:compile") == 1 and all(rows.get(f"Loop:step {i}") == 1 for i in range(steps)), table
    assert max(len(name) for name in rows) <= NAME_WIDTH and not any("…" in name for name in rows), table
    assert not rec.open_ranges


def test_every_example_is_run_here():
    """A new example cannot go untested: each file of examples/ is recorded by a test above."""
    tree = ast.parse(Path(__file__).read_text())
    recorded = {
        node.args[0].value
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "_record"
        and node.args
        and isinstance(node.args[0], ast.Constant)
    }
    assert recorded == {p.name for p in EXAMPLES.glob("*.py")}
