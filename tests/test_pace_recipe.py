"""`nvtx-tf analyze`'s ``pace`` against Nsight Systems 2024.2.3's ``nvtx_pace`` recipe on the
same files (issue 36): our parquetdir exports of our recordings, and nsys's own parquetdir
exports of nsys's reports of the same workload.

The workload is tests/nsys/rank_steps.c (12 ``step`` push/pop ranges whose lengths differ from
step to step and rank to rank), run as 2 ranks one after the other (so their session starts
differ, and the recipe's shift between reports counts). Per input kind, ``nsys recipe
nvtx_pace --name step`` runs on the two reports (ours: docs/nsys.md's stand-in reports, each
with our ``RANK_pqtdir`` written after it; nsys's: its reports, from which the recipe exports
``RANK_pqtdir`` itself), then ``nvtx-tf analyze --step step`` on exactly those parquetdirs.

What the recipe computes (nsys_recipe/lib/pace.py, 2024.2.3): per report (one rank), the
NVTX rows whose message equals ``--name``, those with a start and an end, in the table's
order; ``duration = end - start``; ``delta = start - previous end`` (``shift(fill_value=0)``:
the first iteration's delta is its start, session-relative); ``start``/``end`` session-relative
plus the report's session start over the earliest report's. What is asserted, rank by rank and
iteration by iteration, **exactly** (integers of ns; the recipe's values, float64 where pandas
made them so, are checked to be whole numbers, which float64 holds exactly below 2**53 ns):

* ``Duration`` is the recipe's ``duration`` (and its running sum ``duration_accum``);
* ``Gap`` is the recipe's ``delta`` from the second iteration on; the first ``delta`` is the
  first step's start from its report's session start (our ``Gap`` there: 0, no step before it);
* ``StartEpochNs`` is the recipe's ``start`` plus the earliest session start (``utcEpochNs``),
  ``StartEpochNs + Duration`` its ``end`` likewise: one wall clock in both.

Where the two differ by definition (docs/distributed.md#pace-and-the-nvtx_pace-recipe): the recipe's
``--name`` matches the message exactly in any domain, ``--step`` also ``NAME N`` and
``NAME@DOMAIN``; a report is one rank to the recipe, a process one to ``analyze``.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import nsys_oracle as oracle
import pytest
from conftest import _child_env

pq = pytest.importorskip("pyarrow.parquet")

SOURCE = Path(__file__).resolve().parent / "nsys" / "rank_steps.c"
RANKS, STEPS, SLOW = 2, 12, 1


def _nvtx_tf(*args) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "nvtx_plugins_tf", *map(str, args)],
        env=_child_env(), capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.fixture(scope="module")
def nsys() -> Path:
    return oracle.nsys_or_skip(oracle.fetch_nsys.CURRENT)


@pytest.fixture(scope="module")
def workload(c_sample) -> Path:
    return c_sample(SOURCE)


def _command(workload: Path, rank: int) -> list:
    return [workload, rank, STEPS, SLOW]


@pytest.fixture(scope="module")
def ours(workload, tmp_path_factory) -> Path:
    """rankK.nsys-rep (empty stand-ins) and rankK_pqtdir (our export of our recording, after them)."""
    tmp = tmp_path_factory.mktemp("pace_ours")
    folder = tmp / "reports"
    folder.mkdir()
    for rank in range(RANKS):
        _nvtx_tf("record", "-o", tmp / f"rank{rank}", "--", *_command(workload, rank))
        (folder / f"rank{rank}.nsys-rep").touch()
        _nvtx_tf("export", "-t", "parquetdir", "-o", folder / f"rank{rank}_pqtdir", tmp / f"rank{rank}.nvtxrec")
    return folder


@pytest.fixture(scope="module")
def theirs(nsys, workload, tmp_path_factory) -> Path:
    """rankK.nsys-rep: nsys 2024.2.3's reports of the same workload (the recipe exports
    rankK_pqtdir from each)."""
    folder = tmp_path_factory.mktemp("pace_nsys")
    for rank in range(RANKS):
        oracle.run_nsys(nsys, _command(workload, rank), folder / f"rank{rank}")
    return folder


def _recipe_and_analyze(nsys: Path, folder: Path) -> tuple[dict, dict]:
    """(the recipe's pace_* tables and files, analyze's pace table), both on ``folder``'s parquetdirs."""
    reports = [folder / f"rank{rank}.nsys-rep" for rank in range(RANKS)]
    out = folder / "recipe"
    oracle.nsys_recipe(nsys, "nvtx_pace", "--name", "step", "--input", *reports, "--output", out)
    recipe = {p.stem: pq.read_table(p).to_pydict() for p in out.glob("*.parquet")}
    inputs = [folder / f"rank{rank}_pqtdir" for rank in range(RANKS)]
    assert all((p / "NVTX_EVENTS.parquet").is_file() for p in inputs)
    _nvtx_tf("analyze", *inputs, "--step", "step", "-o", folder / "analysis")
    return recipe, pq.read_table(folder / "analysis" / "pace.parquet").to_pydict()


def _ints(values: list) -> list[int]:
    """The recipe's values as ints, each checked to be a whole number of ns (float64 or int64)."""
    assert all(v is not None and float(v) == int(v) for v in values), values
    return [int(v) for v in values]


def _session_start(parquetdir: Path) -> int:
    (value,) = pq.read_table(parquetdir / "TARGET_INFO_SESSION_START_TIME.parquet").column("utcEpochNs").to_pylist()
    return int(value)


def _assert_pace_is_the_recipes(folder: Path, recipe: dict, pace: dict) -> None:
    assert recipe["files"]["File"] == [f"rank{rank}" for rank in range(RANKS)]  # the recipe's ranks: by file name
    sessions = [_session_start(folder / f"rank{rank}_pqtdir") for rank in range(RANKS)]
    assert len(set(sessions)) == RANKS  # (one after the other: the recipe's shift between reports counts)
    rows = list(zip(*(pace[c] for c in ("File", "Step", "Duration", "Gap", "StartEpochNs"))))
    for rank in range(RANKS):
        column = str(rank)
        mine = sorted((step, d, g, s) for f, step, d, g, s in rows if Path(f).name == f"rank{rank}_pqtdir")
        assert [m[0] for m in mine] == list(range(STEPS)), rank
        durations, gaps, starts = ([m[i] for m in mine] for i in (1, 2, 3))
        assert durations == _ints(recipe["pace_duration"][column]), rank
        assert len(set(durations)) > 1  # (steps of different lengths: an iteration off by one would show)
        total = 0
        assert [total := total + d for d in durations] == _ints(recipe["pace_duration_accum"][column])
        delta = _ints(recipe["pace_delta"][column])
        assert gaps[1:] == delta[1:], rank
        assert gaps[0] == 0 and delta[0] == starts[0] - sessions[rank], rank  # the one difference
        assert starts == [s + min(sessions) for s in _ints(recipe["pace_start"][column])], rank
        ends = [s + d for s, d in zip(starts, durations)]
        assert ends == [e + min(sessions) for e in _ints(recipe["pace_end"][column])], rank


def test_pace_is_nvtx_paces_on_our_parquetdirs(nsys, ours):
    _assert_pace_is_the_recipes(ours, *_recipe_and_analyze(nsys, ours))


def test_pace_is_nvtx_paces_on_nsys_own_parquetdirs(nsys, theirs):
    _assert_pace_is_the_recipes(theirs, *_recipe_and_analyze(nsys, theirs))
