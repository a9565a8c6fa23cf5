"""heatmap.png drawn by a process of its own (recorder/analysis/painter.py, issue 36's small
jobs): from the command line, ``analyze`` forks a child before importing numpy and pyarrow;
the child imports Pillow on the core the command's start-up leaves idle and renders the
picture while the parent reduces and writes the tables. The parent never imports Pillow;
the picture is byte for byte the one drawn in the parent; whatever happens to the child (killed,
Pillow missing) the outputs are those of a run without it; the child ends with the command.

Each run is the command line's own process (``main()`` without arguments, as ``nvtx-tf``
runs it), the script around it reporting the painter's pid and the parent's modules."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
from conftest import _child_env
from test_analyze_hostile import NO_PID, synth_rank

from nvtx_plugins_tf import cli

pytest.importorskip("PIL")

# the command line's own run, reporting the painter's pid and, as it ends, its modules
_RUN = """
import sys
{before}
from nvtx_plugins_tf.cli import _quick_exit, main
from nvtx_plugins_tf.recorder.analysis import painter
_start = painter.start
def start():
    child = _start()
    print("PAINTER", child.pid if child else None, flush=True)
    {after_start}
    return child
painter.start = start
_end = _quick_exit.end_if_asked
def end(code):
    print("MODULES", " ".join(sorted({{m.split(".")[0] for m in sys.modules}})), flush=True)
    _end(code)
_quick_exit.end_if_asked = end
sys.exit(main())
"""


def _run(args, before: str = "", after_start: str = "pass") -> tuple[subprocess.CompletedProcess, int | None, set]:
    script = _RUN.format(before=before, after_start=after_start)
    proc = subprocess.run(
        [sys.executable, "-c", script, "analyze", *map(str, args)],
        env=_child_env(), capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    lines = proc.stdout.splitlines()
    pid = next((ln.split()[1] for ln in lines if ln.startswith("PAINTER ")), "None")
    modules = next((set(ln.split()[1:]) for ln in lines if ln.startswith("MODULES ")), set())
    return proc, (None if pid == "None" else int(pid)), modules


def _gone(pid: int) -> bool:
    """Whether process ``pid`` has ended (gone, or a zombie not yet reaped by init)."""
    for _ in range(500):
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X"):
                    return True
        except (FileNotFoundError, ProcessLookupError):
            return True
        time.sleep(0.01)
    return False


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    folder = tmp_path_factory.mktemp("painter")
    for r in range(3):
        synth_rank(folder / f"rank{r}.nvtxrec", NO_PID + 300 + r, steps=40, slow=50_000 * (r == 1))
    return folder


@pytest.fixture(scope="module")
def in_thread(ranks, tmp_path_factory):
    """The outputs of ``main(argv)`` (a caller's process: no painter, the heatmap drawn in a
    thread of the command's own)."""
    out = tmp_path_factory.mktemp("thread") / "out"
    assert cli.main(["analyze", str(ranks), "-o", str(out)]) == 0
    return {p.name: p.read_bytes() for p in out.iterdir()}


def test_the_heatmap_is_drawn_by_a_child_and_pillow_never_imported_here(ranks, in_thread, tmp_path):
    proc, pid, modules = _run([ranks, "-o", tmp_path / "out"])
    assert proc.returncode == 0 and pid is not None, proc.stdout + proc.stderr
    assert not {"PIL", "matplotlib"} & modules and {"numpy", "pyarrow"} <= modules, sorted(modules)
    assert {p.name: p.read_bytes() for p in (tmp_path / "out").iterdir()} == in_thread  # (the PNG too)
    assert _gone(pid)


@pytest.mark.parametrize("when", ["before it starts", "once it has imported Pillow"])
def test_a_killed_painter_leaves_the_picture_to_the_parent(ranks, in_thread, tmp_path, when):
    """The child killed (SIGKILL): the parent draws the heatmap itself, the same bytes; exit
    0, nothing on stderr."""
    wait = "" if when == "before it starts" else "import time; time.sleep(1.5); "
    kill = f"{wait}import os, signal; os.kill(child.pid, signal.SIGKILL)"
    proc, pid, _ = _run([ranks, "-o", tmp_path / "out"], after_start=kill)
    assert (proc.returncode, proc.stderr) == (0, ""), proc.stdout + proc.stderr
    assert pid is not None and _gone(pid)
    assert {p.name: p.read_bytes() for p in (tmp_path / "out").iterdir()} == in_thread


def test_without_pillow_no_heatmap_as_before(ranks, in_thread, tmp_path):
    """Pillow missing (the 'plot' extra not installed): the child cannot draw, neither can
    the parent: the tables alone, as without a painter."""
    proc, pid, modules = _run([ranks, "-o", tmp_path / "out"], before="sys.modules['PIL'] = None")
    assert (proc.returncode, proc.stderr) == (0, ""), proc.stdout + proc.stderr
    written = {p.name: p.read_bytes() for p in (tmp_path / "out").iterdir()}
    assert written == {k: v for k, v in in_thread.items() if k != "heatmap.png"}
    assert pid is not None and _gone(pid)


@pytest.mark.parametrize("case", ["no input", "no ranges", "a step named nowhere"])
def test_the_painter_ends_with_a_command_that_fails(ranks, tmp_path, case):
    """An error before or after the picture is asked for: the command's line and exit code,
    no output, and the child gone."""
    empty = tmp_path / "empty.nvtxrec"
    empty.mkdir()
    args = {
        "no input": [tmp_path / "missing"],
        "no ranges": [empty],
        "a step named nowhere": [ranks, "--step", "nowhere"],
    }[case]
    proc, pid, _ = _run([*args, "-o", tmp_path / "out"])
    assert proc.returncode != 0 and proc.stderr.startswith("nvtx-tf: error:"), proc.stderr
    assert "Traceback" not in proc.stderr and not (tmp_path / "out").exists()
    assert pid is not None and _gone(pid)


def test_workers_fork_the_painter_before_dask_and_end_at_once(ranks, in_thread, tmp_path):
    """``--workers`` (its cluster's workers are threads of this process, closed before the
    reduce) forks the painter as the embedded engine does, before Dask is imported: the same
    outputs, Pillow never imported here, the child gone, and the process ended at once."""
    pytest.importorskip("distributed", reason="the 'dask' extra")
    after_start = 'assert "distributed" not in sys.modules'
    proc, pid, modules = _run([ranks, "-o", tmp_path / "out", "--workers", "2"], after_start=after_start)
    assert (proc.returncode, proc.stderr) == (0, ""), proc.stdout + proc.stderr
    assert pid is not None and "distributed" in modules and "PIL" not in modules, sorted(modules)
    assert {p.name: p.read_bytes() for p in (tmp_path / "out").iterdir()} == in_thread
    assert _gone(pid)


def test_a_picture_past_the_painters_size_is_drawn_here(ranks, in_thread, tmp_path):
    """More step durations than painter.MAX_CELLS (a huge run: not copied through a pipe):
    the parent draws the picture itself, the same bytes, and the child is gone."""
    before = "import nvtx_plugins_tf.recorder.analysis.painter as _p; _p.MAX_CELLS = 10"
    proc, pid, modules = _run([ranks, "-o", tmp_path / "out"], before=before)
    assert (proc.returncode, proc.stderr) == (0, ""), proc.stdout + proc.stderr
    assert "PIL" in modules and pid is not None and _gone(pid)
    assert {p.name: p.read_bytes() for p in (tmp_path / "out").iterdir()} == in_thread
