"""What ``nvtx-tf analyze`` imports (issue 36, small jobs: start-up is most of 8 ranks' time):
no pandas (0.2-0.4 s a process: pyarrow's ``to_numpy``, ``pa.array``, ``pa.scalar`` and
``pq.read_table`` import it; nsys_inputs/batches.py and recorder/_arrays.py go around
them) and no TensorFlow, on recordings and on exports in nsys's schema (a parquetdir with
registered strings and domains, an SQLite file); and the tables are the same as before.
The command runs as a user runs it (``python -m nvtx_plugins_tf analyze``), its modules
listed when it ends."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import _child_env
from test_analyze_native import _write_process

from nvtx_plugins_tf.recorder._arrays import filled, is_valid, take_strings, to_numpy
from nvtx_plugins_tf.recorder.exports.parquet import export_parquetdir
from nvtx_plugins_tf.recorder.exports.sqlite import export_sqlite

# the command line (given its arguments: the process then ends as Python's do, see
# cli/_quick_exit.py), then the top-level packages it imported
_RUN = """
import sys
from nvtx_plugins_tf.cli import main
code = main(sys.argv[1:])
print("MODULES", code, " ".join(sorted({m.split(".")[0] for m in sys.modules})))
"""


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    folder = tmp_path_factory.mktemp("imports")
    rng = np.random.default_rng(3)
    rec = folder / "rank.nvtxrec"
    _write_process(rec, rng, 100, 1_700_000_000 * 10**9, {1: "train"}, 3000)
    export_parquetdir(rec, folder / "pq" / "rank_pqtdir")
    export_sqlite(rec, folder / "rank.sqlite")
    return folder


def _modules(args: list[str]) -> set[str]:
    command = [sys.executable, "-c", _RUN, "analyze", *args]
    proc = subprocess.run(command, env=_child_env(), capture_output=True, text=True)
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("MODULES ")]
    assert line and line[0].split()[1] == "0", proc.stdout[-2000:] + proc.stderr[-2000:]
    return set(line[0].split()[2:])


@pytest.mark.skipif(importlib.util.find_spec("pandas") is None, reason="pandas not installed: nothing to avoid")
@pytest.mark.parametrize("kind", ["recording", "parquetdir", "sqlite"])
def test_analyze_imports_neither_pandas_nor_tensorflow(inputs, tmp_path, kind):
    source = {"recording": "rank.nvtxrec", "parquetdir": "pq/rank_pqtdir", "sqlite": "rank.sqlite"}[kind]
    modules = _modules([str(inputs / source), "-o", str(tmp_path / "out")])
    assert "pyarrow" in modules and "nvtx_plugins_tf" in modules  # (the listing is the command's)
    assert not {"pandas", "tensorflow"} & modules
    assert pq.read_table(tmp_path / "out" / "rank_stats.parquet").num_rows > 0


def test_parquetdir_tables_equal_the_recordings(inputs, tmp_path):
    """The parquetdir read without pandas gives the recording's tables (its registered
    strings and domain names resolved as before)."""
    for name, source in (("rec", "rank.nvtxrec"), ("pqt", "pq/rank_pqtdir")):
        _modules([str(inputs / source), "-o", str(tmp_path / name)])
    for table in ("rank_stats", "all_stats", "pace", "stragglers"):
        a, b = (pq.read_table(tmp_path / n / f"{table}.parquet") for n in ("rec", "pqt"))
        # (the input's name; ClockOffsetNs: a recording's own clock, none for an export)
        names = [c for c in a.column_names if c not in ("File", "RankName", "ClockOffsetNs")]
        # (an input's names are numbered in its own order: the rows compared by name)
        keys = [(c, "ascending") for c in ("Step", "Domain", "Text") if c in names]
        a, b = (t.select(names).sort_by(keys) if keys else t.select(names) for t in (a, b))
        assert a.num_rows == b.num_rows and (a.num_rows or table == "stragglers"), table  # (one rank: none)
        for c in names:  # (the standard deviations summed in another order: float error)
            x, y = a.column(c).to_pylist(), b.column(c).to_pylist()
            assert x == y or np.allclose(x, y, rtol=1e-12, equal_nan=True), (table, c)


@pytest.mark.parametrize(
    "values",
    [
        pa.array(np.arange(10, dtype=np.int64)).slice(3, 5),
        pa.array(np.arange(7, dtype=np.uint32)),
        pa.array(np.arange(7, dtype=np.int8)).slice(1),
        pa.array(np.linspace(0, 1, 9)),
        pa.array([True, False, True, True, False, False, True, False, True, True]).slice(3, 6),
        pa.chunked_array([pa.array([1, 2]), pa.array([3])]),
        pa.array(np.zeros(0, dtype=np.int32)),
        pa.array([], pa.bool_()),
    ],
    ids=range(8),
)
def test_to_numpy_is_pyarrows(values):
    """recorder/_arrays.to_numpy: the values ``to_numpy`` gives (which imports pandas)."""
    ours, theirs = (
        to_numpy(values),
        values.to_numpy(**({} if isinstance(values, pa.ChunkedArray) else {"zero_copy_only": False})),
    )
    assert ours.dtype == theirs.dtype and ours.tolist() == theirs.tolist()


def test_to_numpy_refuses_nulls_and_strings():
    with pytest.raises(ValueError):
        to_numpy(pa.array([1, None]))
    with pytest.raises(TypeError):
        to_numpy(pa.array(["a"]))


# the console script's way (cli.main without arguments), with a teardown handler that says so
_CONSOLE = """
import atexit, sys
atexit.register(lambda: print("TEARDOWN", flush=True))
from nvtx_plugins_tf.cli import main
sys.exit(main())
"""


def test_analyze_ends_the_process_at_once_its_output_whole(inputs, tmp_path):
    """cli/_quick_exit.py: from the command line, ``analyze`` (embedded engine) ends the
    process once its outputs are written and its lines flushed, without Python's teardown
    (a tenth of a small job); its output, piped, is whole; another command tears down."""
    out = tmp_path / "out"
    command = [sys.executable, "-c", _CONSOLE, "analyze", str(inputs / "rank.nvtxrec"), "-o", str(out), "--csv"]
    proc = subprocess.run(command, env=_child_env(), capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("1 rank(s) in 1 input(s)") and lines[-1].startswith("wrote "), lines
    assert "TEARDOWN" not in proc.stdout
    assert sorted(p.name for p in out.iterdir()) == sorted(
        [f"{t}.{s}" for t in ("all_stats", "rank_stats", "pace", "stragglers") for s in ("parquet", "csv")]
        + ["heatmap.png"]
    )
    # an error ends as before (its exit code, its line), and so does another command
    proc = subprocess.run(
        [sys.executable, "-c", _CONSOLE, "analyze", str(tmp_path / "missing"), "-o", str(tmp_path / "o2")],
        env=_child_env(),
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 7 and "nvtx-tf: error:" in proc.stderr, (proc.returncode, proc.stderr)
    assert not (tmp_path / "o2").exists()
    proc = subprocess.run([sys.executable, "-c", _CONSOLE, "--help"], env=_child_env(), capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stdout.rstrip().endswith("TEARDOWN")


@pytest.mark.parametrize("stdout", ["closed pipe", "/dev/full"])
def test_analyze_ending_at_once_with_a_broken_stdout(inputs, tmp_path, stdout):
    """Hostile rows of the quick exit: its flush of a stdout that cannot be written. A closed
    pipe (``| head -0``): exit 0, the outputs whole, nothing on stderr; a full device: exit 1
    and one error line, never a traceback."""
    import os

    out = tmp_path / "out"
    command = [sys.executable, "-m", "nvtx_plugins_tf", "analyze", str(inputs / "rank.nvtxrec"), "-o", str(out)]
    if stdout == "closed pipe":
        read, write = os.pipe()
        os.close(read)
        try:
            proc = subprocess.run(command, env=_child_env(), stdout=write, stderr=subprocess.PIPE, text=True)
        finally:
            os.close(write)
        assert (proc.returncode, proc.stderr) == (0, "")
    else:
        if not os.path.exists("/dev/full"):
            pytest.skip("no /dev/full here")
        with open("/dev/full", "w") as full:
            proc = subprocess.run(command, env=_child_env(), stdout=full, stderr=subprocess.PIPE, text=True)
        lines = proc.stderr.splitlines()
        assert proc.returncode == 1 and len(lines) == 1 and lines[0].startswith("nvtx-tf: error:"), proc.stderr
    assert len(list(out.iterdir())) == 5  # (4 tables and heatmap.png: written before the summary is printed)


# the command line, then the number of threads numpy's OpenBLAS was set to start
_BLAS = """
import ctypes, glob, os, sys
from nvtx_plugins_tf.cli import main
code = main(sys.argv[1:])
import numpy
libs = glob.glob(os.path.join(os.path.dirname(numpy.__file__) + ".libs", "libscipy_openblas*.so"))
if not libs:
    print("BLAS none")
else:
    get = getattr(ctypes.CDLL(libs[0]), "scipy_openblas_get_num_threads64_")
    print("BLAS", code, get())
"""


@pytest.mark.parametrize("user", [None, "2"])
def test_analyze_starts_no_blas_threads(inputs, tmp_path, user):
    """numpy's OpenBLAS starts a spinning thread per core at import, for BLAS calls analyze
    never makes (8 % of an 8-rank run's CPU): ``analyze`` sets ``OPENBLAS_NUM_THREADS=1``
    unless the user set it (then kept)."""
    env = _child_env()
    env.pop("OPENBLAS_NUM_THREADS", None)
    if user:
        env["OPENBLAS_NUM_THREADS"] = user
    command = [sys.executable, "-c", _BLAS, "analyze", str(inputs / "rank.nvtxrec"), "-o", str(tmp_path / "out")]
    proc = subprocess.run(command, env=env, capture_output=True, text=True)
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("BLAS ")]
    assert line, proc.stdout[-2000:] + proc.stderr[-2000:]
    if line[0] == "BLAS none":
        pytest.skip("numpy without its bundled OpenBLAS here")
    assert line[0].split()[1:] == ["0", user or "1"]


def test_analyze_gives_a_callers_process_its_collector_back(inputs, tmp_path):
    """``analyze`` runs without Python's cycle collector (start-up: 3-6 % of 8 ranks' CPU);
    a caller's process (``main(argv)``) has it back when the command returns, on success
    and on error alike."""
    run = """
import gc, sys
from nvtx_plugins_tf.cli import main
from nvtx_plugins_tf.recorder import analysis
compute, during = analysis.compute, []
def seen(*args, **kwargs):
    during.append(gc.isenabled())
    return compute(*args, **kwargs)
analysis.compute = seen
codes = [main(["analyze", sys.argv[1], "-o", sys.argv[2]]), main(["analyze", sys.argv[3], "-o", sys.argv[2] + "2"])]
print("GC", codes, during, gc.isenabled())
"""
    command = [sys.executable, "-c", run, str(inputs / "rank.nvtxrec"), str(tmp_path / "o"), str(tmp_path / "none")]
    proc = subprocess.run(command, env=_child_env(), capture_output=True, text=True)
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("GC ")]
    assert line == ["GC [0, 7] [False, False] True"], proc.stdout[-2000:] + proc.stderr[-2000:]


# the console script's way (main() reads sys.argv: the command's own process, the heatmap's
# painter forked), its modules listed when the command asks the process to end (_quick_exit)
_OWN = """
import sys
from nvtx_plugins_tf.cli import _quick_exit, main
end = _quick_exit.end_if_asked
def listed(code):
    print("MODULES", code, " ".join(sorted(sys.modules)), flush=True)
    end(code)
_quick_exit.end_if_asked = listed
sys.exit(main())
"""

#: never imported by analyze's own process, whatever the input: a module, and why it was
NOT_IMPORTED = {
    "http.server": "the viewer's HTTP server (the command line imports viewer.py for view's flags)",
    "email": "http.server's headers",
    "importlib.resources": "importlib.abc, the package's import hooks' base class",
    "subprocess": "the build script's (loaded to verify the reader library), record's child",
    "numpy.ma": "np.unique's check for a masked array (reduce.py's stragglers)",
    "hmac": "secrets' (analysis/outdir.py's hidden folder's name: os.urandom)",
    "pyarrow.compute": "nulls filled, casts, a dictionary's strings (nsys_inputs/batches.py, analysis/reduce.py)",
}


@pytest.mark.parametrize("kind", ["recording", "parquetdir", "sqlite"])
def test_analyze_imports_nothing_it_does_not_use(inputs, tmp_path, kind):
    """Start-up (issue 36, small jobs): ``nvtx-tf analyze`` run as a user runs it imports no
    module that no input kind needs (:data:`NOT_IMPORTED`), before the painter's fork (which
    would pay for them too) or after."""
    source = {"recording": "rank.nvtxrec", "parquetdir": "pq/rank_pqtdir", "sqlite": "rank.sqlite"}[kind]
    command = [sys.executable, "-c", _OWN, "analyze", str(inputs / source), "-o", str(tmp_path / "out")]
    proc = subprocess.run(command, env=_child_env(), capture_output=True, text=True)
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("MODULES ")]
    assert line and line[0].split()[1] == "0", proc.stdout[-2000:] + proc.stderr[-2000:]
    modules = set(line[0].split()[2:])
    # (the listing is the command's own process: it read the input and wrote the tables...)
    assert {"pyarrow.parquet", "nvtx_plugins_tf.recorder.analysis.reduce"} <= modules
    assert "matplotlib" not in modules  # (... and the painter drew the heatmap)
    imported = {name: why for name, why in NOT_IMPORTED.items() if name in modules}
    assert not imported, imported
    assert pq.read_table(tmp_path / "out" / "rank_stats.parquet").num_rows > 0


_INTEGERS = [
    pa.array([1, None, 3], pa.int32()),
    pa.array([7, None, 9, None], pa.int64()).slice(1),
    pa.array([None, None], pa.int64()),
    pa.array([5, 6, 7, None, 9, 10, 11, 12, None, 14], pa.uint64()).slice(3, 6),
    pa.array([1, 2], pa.int8()),
    pa.chunked_array([pa.array([1, None], pa.int32()), pa.array([3], pa.int32())]),
    pa.nulls(3, pa.int64()),
    pa.array([], pa.int32()),
    pa.array([2**63 + 5, None], pa.uint64()).slice(1),
]


@pytest.mark.parametrize("values", _INTEGERS, ids=range(len(_INTEGERS)))
def test_filled_and_is_valid_are_pyarrow_computes(values):
    """recorder/_arrays ``filled`` and ``is_valid``: pyarrow.compute's cast to int64 and
    fill_null, and its is_valid (analyze's readers use them: no pyarrow.compute import)."""
    import pyarrow.compute as pc

    theirs = pc.fill_null(values.cast(pa.int64()), pa.scalar(-7, pa.int64())).to_pylist()
    assert filled(values, -7).dtype == np.int64 and filled(values, -7).tolist() == theirs
    if isinstance(values, pa.Array):
        assert is_valid(values).tolist() == pc.is_valid(values).to_pylist()


def test_filled_refuses_what_the_cast_refuses():
    with pytest.raises(pa.ArrowInvalid, match="not in range"):
        filled(pa.array([2**63, None], pa.uint64()), 0)


@pytest.mark.parametrize(
    "dictionary,index",
    [
        (["a", "bcd", "", "\u00e9"], [3, 0, 0, 2, 1, 3]),
        (["x"], []),
        ([], []),
        (["r0", "r1"], [1] * 5),
        # one entry far wider than the rest, taken once among many (the byte-by-byte path) ...
        (["a", "b" * 5000, "cc"], [0, 2] * 3000 + [1]),
        # ... and a fixed width (the row-at-a-time path), with empty entries
        ([f"step {i}" for i in range(1000)] + [""], list(range(1000, -1, -1)) * 3),
    ],
    ids=range(6),
)
@pytest.mark.parametrize("nulls", [False, True])
def test_take_strings_is_the_dictionarys_cast(dictionary, index, nulls):
    """recorder/_arrays ``take_strings``: a dictionary array cast to strings (analyze's tables);
    with ``mask``, its rows null (every third one)."""
    mask = np.arange(len(index)) % 3 == 1 if nulls else None
    ours = take_strings(dictionary, np.asarray(index, dtype=np.int64), mask)
    ours.validate(full=True)
    theirs = pa.DictionaryArray.from_arrays(pa.array(index, pa.int32(), mask=mask), pa.array(dictionary, pa.string()))
    expected = [None if nulls and k % 3 == 1 else dictionary[i] for k, i in enumerate(index)]
    assert ours.equals(theirs.cast(pa.string())) and ours.to_pylist() == expected
