"""`nvtx-tf compare` (issue 46) on real recordings and through its command line.

* Criterion 6: the project's recorder, a sleep-based step loop of 4 ranks x 80 steps, 2 runs a
  side: 'compute' 10 % slower in the candidate -> exit 16, that range "slower", its ratio within
  [1.06, 1.14]; the same program as candidate -> exit 0, nothing slower or faster.
* Exclusive and inclusive time: 'compute' is nested in 'model' (with 'backward' and 2 ms of
  model's own): both times per range on the recorded runs; on recordings of known times
  (the recorder's format, written with chosen times), compute's slowdown is in model's inclusive
  time ("slower"), not its exclusive.
* The outputs: compare.parquet/.csv with the issue's columns, compare.md (at most 65,536
  characters at 1,000 ranges), compare.png; the same --seed, the same bytes.
* Flags: --fail-on inconclusive (exit 17), --threshold/--alpha/--warmup checked (exit 2),
  no scipy (exit 18 and the install hint).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from conftest import _child_env

pytest.importorskip("scipy")

from nvtx_plugins_tf import cli  # noqa: E402
from nvtx_plugins_tf.recorder.compare import outputs  # noqa: E402
from nvtx_plugins_tf.recorder.compare.synthetic import make_runs  # noqa: E402
from nvtx_plugins_tf.recorder.compare.verdict import compare_runs  # noqa: E402

RANKS, STEPS = 4, 80
WORKLOAD = """
import sys, time, nvtx
slow = float(sys.argv[1])
for i in range({steps}):
    with nvtx.annotate(f"step {{i}}", domain="train"):
        with nvtx.annotate("data", domain="train"):
            time.sleep(0.004)
        with nvtx.annotate("model", domain="train"):
            time.sleep(0.002)
            with nvtx.annotate("compute", domain="train"):
                time.sleep(0.006 * slow)
            with nvtx.annotate("backward", domain="train"):
                time.sleep(0.002)
        with nvtx.annotate("optimizer", domain="train"):
            time.sleep(0.002)
""".format(steps=STEPS)


def nvtx_tf(*args) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "nvtx_plugins_tf", *map(str, args)],
        env=_child_env(), capture_output=True, text=True, timeout=600,
    )  # fmt: skip


def _record_run(folder: Path, slow: float) -> Path:
    """One run: RANKS processes recorded at once (rankK.nvtxrec in ``folder``)."""
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "nvtx_plugins_tf",
                "record",
                "-o",
                folder / f"rank{r}",
                "--",
                sys.executable,
                "-c",
                WORKLOAD,
                str(slow),
            ],
            env=_child_env(),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        for r in range(RANKS)
    ]
    for proc in procs:
        _, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err
    return folder


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, list[Path]]:
    root = tmp_path_factory.mktemp("runs")
    runs: dict[str, list[Path]] = {"base": [], "slow": [], "same": []}
    for k in range(2):  # (interleaved, as a user would: a change in the machine's load falls on every side)
        for side, slow in (("base", 1.0), ("same", 1.0), ("slow", 1.1)):
            runs[side].append(_record_run(root / f"{side}{k}", slow))
    return runs


def test_criterion_6_a_ten_percent_slower_range_is_exit_16(runs, tmp_path):
    proc = nvtx_tf("compare", *runs["base"], "--vs", *runs["slow"], "-o", tmp_path / "out")
    assert proc.returncode == 16, proc.stdout + proc.stderr
    assert "nvtx-tf: error: regression:" in proc.stderr and "compute@train" in proc.stderr
    rows = {r["Range"]: r for r in pq.read_table(tmp_path / "out" / "compare.parquet").to_pylist()}
    assert rows["compute@train"]["Verdict"] == "slower", rows
    assert 1.06 <= rows["compute@train"]["Ratio"] <= 1.14, rows["compute@train"]
    assert rows["compute@train"]["Level"] == "ranks of two runs"
    assert "slower   compute@train" in proc.stdout


def test_a_nested_range_has_both_times_on_recorded_runs(runs, tmp_path):
    """compute (6 ms, +10 %) inside model (2 ms of its own, backward's 2 ms), recorded: model
    is the one range with ranges nested in it, its inclusive time holds its children's, its
    exclusive time is not slower; the leaves' inclusive columns repeat their exclusive ones.
    (Whether model's inclusive time is found slower depends on the machine's load: the wake-up
    delays of its children's sleeps are in it, and on a machine at a load average of 70 on 2
    cores they outweighed compute's 0.6 ms; the next test holds that verdict on recordings of
    known times.)"""
    proc = nvtx_tf("compare", *runs["base"], "--vs", *runs["slow"], "-o", tmp_path / "out")
    assert proc.returncode == 16, proc.stdout + proc.stderr
    rows = {r["Range"]: r for r in pq.read_table(tmp_path / "out" / "compare.parquet").to_pylist()}
    model, compute = rows["model@train"], rows["compute@train"]
    assert [r for r in rows if rows[r]["Nested"]] == ["model@train"], rows
    assert model["Verdict"] != "slower", model
    assert model["InclBaseline"] > model["Baseline"] + 7e6  # (its children's 8 ms)
    assert (compute["InclRatio"], compute["InclVerdict"]) == (compute["Ratio"], compute["Verdict"])
    assert "| model@train |" in (tmp_path / "out" / "compare.md").read_text()


def _nested_rank(path: Path, pid: int, rng: np.random.Generator, slow: float) -> None:
    """A recording (the recorder's format, times chosen) of 80 steps: 'model' holds 1 ms of its
    own, 'compute' (6 ms x ``slow``) and 'backward' (2 ms); each time x lognormal noise of 2 %."""
    from nvtx_plugins_tf.recorder.recording._synth import SegmentWriter

    seg = SegmentWriter(pid=pid, start_ns=1000, start_realtime_ns=1_700_000_000 * 10**9, chunk_size=1 << 16)
    t = seg.thread(pid)
    t.string(1, "model").string(2, "compute").string(3, "backward")
    for i in range(80):
        t.string(10 + i, f"step {i}")

    def ns(ms: float) -> int:
        return int(ms * 1e6 * np.exp(rng.normal(0, 0.02)))

    now = 10_000
    for i in range(80):
        t.push(now, 10 + i).push(now + 1000, 1)
        now += 1000 + ns(1)
        for name, ms in ((2, 6 * slow), (3, 2)):  # (compute, backward)
            took = ns(ms)
            t.push(now, name).pop(now + took)
            now += took + 500
        t.pop(now).pop(now + 1000)
        now += 2000
    seg.write(path)


def test_a_nested_ranges_slowdown_is_in_its_parents_inclusive_time(tmp_path):
    """Recordings of known times, 2 runs x 4 ranks a side, compute 10 % slower: compute
    "slower"; model's inclusive time about +6.7 % "slower", its exclusive time not (about 1.0);
    exit 16, the summary and compare.md saying both."""
    rng = np.random.default_rng(46)
    runs = {}
    for side, slow in (("base", 1.0), ("slow", 1.1)):
        for k in range(2):
            for r in range(4):
                _nested_rank(tmp_path / f"{side}{k}" / f"rank{r}.nvtxrec", 4000 + len(runs) * 10 + r, rng, slow)
            runs[f"{side}{k}"] = tmp_path / f"{side}{k}"
    proc = nvtx_tf(
        "compare", runs["base0"], runs["base1"], "--vs", runs["slow0"], runs["slow1"], "-o", tmp_path / "out"
    )
    assert proc.returncode == 16, proc.stdout + proc.stderr
    rows = {r["Range"]: r for r in pq.read_table(tmp_path / "out" / "compare.parquet").to_pylist()}
    model, compute = rows["model"], rows["compute"]
    assert compute["Verdict"] == "slower" and 1.08 <= compute["Ratio"] <= 1.12, compute
    assert model["Nested"] and model["InclVerdict"] == "slower" and 1.05 <= model["InclRatio"] <= 1.08, model
    assert model["Verdict"] != "slower" and abs(model["Ratio"] - 1) < 0.02, model
    assert "inclusive slower" in proc.stdout
    assert "| model |" in (tmp_path / "out" / "compare.md").read_text()


def test_criterion_6_the_same_program_is_exit_0_and_flags_nothing(runs, tmp_path):
    proc = nvtx_tf("compare", *runs["base"], "--vs", *runs["same"], "-o", tmp_path / "out")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = pq.read_table(tmp_path / "out" / "compare.parquet").to_pylist()
    assert not [r for r in rows if {r["Verdict"], r["InclVerdict"]} & {"slower", "faster"}], rows
    assert {r["Range"] for r in rows} == {
        "(step)", "data@train", "model@train", "compute@train", "backward@train", "optimizer@train", "(uncovered)"
    }  # fmt: skip


def test_the_outputs_and_the_same_seed_the_same_bytes(runs, tmp_path):
    for out in ("a", "b"):
        proc = nvtx_tf("compare", *runs["base"], "--vs", *runs["slow"], "-o", tmp_path / out, "--seed", "7")
        assert proc.returncode == 16, proc.stderr
    a, b = tmp_path / "a", tmp_path / "b"
    assert sorted(p.name for p in a.iterdir()) == ["compare.csv", "compare.md", "compare.parquet", "compare.png"]
    for name in ("compare.csv", "compare.md"):
        assert (a / name).read_bytes() == (b / name).read_bytes()
    columns = pq.read_table(a / "compare.parquet").column_names
    assert columns == list(outputs.COLUMNS) and columns[:9] == [
        "Range", "Baseline", "Candidate", "Ratio", "CILow", "CIHigh", "PValue", "QValue", "Verdict"
    ]  # fmt: skip
    assert {"InclRatio", "InclCILow", "InclCIHigh", "InclQValue", "InclVerdict", "ShareOfStepChange"} <= set(columns)
    assert (a / "compare.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    table = pq.read_table(a / "compare.parquet").to_pylist()
    shares = sum(r["ShareOfStepChange"] for r in table if r["Range"] != "(step)")
    assert shares == pytest.approx(1.0, abs=1e-9)


def test_one_run_a_side_is_labelled_within_one_run(runs, tmp_path):
    proc = nvtx_tf("compare", runs["base"][0], "--vs", runs["slow"][0])
    assert proc.returncode == 16, proc.stderr
    assert "within one run" in proc.stdout


def test_fail_on_inconclusive_is_exit_17(tmp_path, capsys):
    # a threshold of 0.01 %: no interval fits inside it, and no change is beyond it with
    # confidence. Recordings of known times, the same on both sides (seeded): two recorded
    # runs of the same program can differ for real under a changing load (CI saw a
    # "regression" at alpha 1e-12 between two of them).
    rng = np.random.default_rng(17)
    for side in ("base", "same"):
        for r in range(4):
            _nested_rank(tmp_path / side / f"rank{r}.nvtxrec", 4100 + 10 * (side == "same") + r, rng, 1.0)
    code = cli.main(["compare", str(tmp_path / "base"), "--vs", str(tmp_path / "same"), "--threshold", "0.0001",
                     "--fail-on", "inconclusive", "--alpha", "1e-12", "-o", str(tmp_path / "out")])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 17, err
    assert err.startswith("nvtx-tf: error: inconclusive:")


def test_md_fits_a_pull_request_at_1000_ranges():
    rng = np.random.default_rng(0)
    kw = dict(runs=1, ranks=2, steps=60, n_ranges=1000, warmup=0, range_ns=1e4)
    c = compare_runs(make_runs(rng, **kw), make_runs(rng, effect={3: 1.5}, **kw), resamples=50)
    md = outputs.md_table(c)
    assert len(md) <= 65_536 and "more rows in compare.csv" in md
    assert md.splitlines()[6].startswith("| (step) |")


@pytest.mark.parametrize(
    "flag, text",
    [
        (["--threshold", "abc"], "--threshold: 'abc': a relative change"),
        (["--threshold", "150%"], "a relative change"),
        (["--alpha", "0.7"], "false discovery rate"),
        (["--warmup", "some"], "'auto' (a change-point rule)"),
        (["--seed", "-1"], "whole number"),
        (["--fail-on", "x"], "invalid choice"),
        (["--workers", "2", "--scheduler", "tcp://h:1"], "give one"),
    ],
)
def test_bad_flags_are_one_line_and_exit_2(flag, text, capsys, tmp_path):
    code = cli.main(["compare", str(tmp_path), "--vs", str(tmp_path), *flag])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and text in err, err


def test_without_scipy_the_install_hint_and_exit_18(runs, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "scipy", None)
    monkeypatch.setitem(sys.modules, "scipy.special", None)
    code = cli.main(["compare", str(runs["base"][0]), "--vs", str(runs["same"][0])])
    err = capsys.readouterr().err
    assert code == 18 and "pip install 'nvtx_plugins_tf[compare]'" in err, err


def test_a_run_of_sqlite_exports_is_a_run(runs, tmp_path):
    """nsys's schema (our SQLite exports, as `record` leaves them beside each recording) read
    as a run: the same ranks as the recordings, so nothing is slower or faster."""
    exports = tmp_path / "exports"
    exports.mkdir()
    for rank in sorted(runs["base"][0].glob("*.sqlite")):
        (exports / rank.name).symlink_to(rank)
    assert len(list(exports.iterdir())) == RANKS
    proc = nvtx_tf("compare", runs["base"][0], "--vs", exports, "-o", tmp_path / "out")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = pq.read_table(tmp_path / "out" / "compare.parquet").to_pylist()
    # (the same ranges' times: every ratio 1, exclusive and inclusive, nothing slower or faster;
    # "equivalent" where the steps' noise leaves the interval inside the threshold)
    assert not {r[v] for r in rows for v in ("Verdict", "InclVerdict")} & {"slower", "faster"}, rows
    assert all(r["Ratio"] == pytest.approx(1.0, abs=1e-9) for r in rows if r["Ratio"] is not None)
    assert all(r["InclRatio"] == pytest.approx(1.0, abs=1e-9) for r in rows if r["InclRatio"] is not None)
    assert all(r["CILow"] <= 1 <= r["CIHigh"] for r in rows if r["CILow"] is not None)
    assert next(r for r in rows if r["Range"] == "model@train")["Nested"]  # (the exports' nesting too)


def test_workers_give_the_embedded_engines_bytes(runs, tmp_path):
    pytest.importorskip("distributed", reason="the 'dask' extra")
    args = [*runs["base"], "--vs", *runs["slow"], "--seed", "3"]
    here = nvtx_tf("compare", *args, "-o", tmp_path / "here")
    there = nvtx_tf("compare", *args, "-o", tmp_path / "there", "--workers", "2")
    assert here.returncode == there.returncode == 16, there.stderr
    assert (tmp_path / "here" / "compare.csv").read_bytes() == (tmp_path / "there" / "compare.csv").read_bytes()


def test_a_range_on_one_side_only_is_named_in_the_summary():
    rng = np.random.default_rng(1)
    kw = dict(runs=1, ranks=2, steps=80, n_ranges=3, warmup=0)
    baseline, candidate = make_runs(rng, **kw), make_runs(rng, **kw)
    for run in candidate:  # (r02 renamed: gone from the candidate, a new range in its place)
        run.ranges = ["r00", "r01", "augment"]
    c = compare_runs(baseline, candidate, resamples=50)
    lines = outputs.summary_lines(c)
    assert any(line.startswith("only in the candidate: augment: ") for line in lines), lines
    assert any(line.startswith("only in the baseline: r02: ") for line in lines), lines
    assert c.verdict[c.names.index("augment")] == "inconclusive"
