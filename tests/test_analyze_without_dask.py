"""``analyze --workers/--scheduler`` without the 'dask' extra (issue 45, row 1): exit 15 and
the line that says what to install (docs/cli.md, exit codes), not exit 1 with
``ModuleNotFoundError: No module named 'distributed'``. The extra is hidden from the command
by ``sys.modules[name] = None`` (an import of it then raises ModuleNotFoundError, as in an
environment without it), whether or not this one has it."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from conftest import _child_env
from test_analyze_native import _write_process

# the command line with Dask's packages made unimportable, as a user without the extra has it
_RUN = """
import sys
for name in ("dask", "distributed"):
    sys.modules[name] = None
from nvtx_plugins_tf.cli import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.fixture(scope="module")
def recording(tmp_path_factory):
    folder = tmp_path_factory.mktemp("nodask")
    rec = folder / "rank0.nvtxrec"
    _write_process(rec, np.random.default_rng(5), 100, 1_700_000_000 * 10**9, {1: "train"}, 500)
    return rec


@pytest.mark.parametrize("engine", [["--workers", "2"], ["--scheduler", "tcp://127.0.0.1:1"]])
def test_dask_engine_without_the_extra_is_exit_15_with_the_install_hint(recording, tmp_path, engine):
    out = tmp_path / "analysis"
    command = [sys.executable, "-c", _RUN, "analyze", str(recording), "-o", str(out), *engine]
    proc = subprocess.run(command, env=_child_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 15, (proc.returncode, proc.stderr)
    assert proc.stderr.strip().splitlines() == [
        "nvtx-tf: error: the Dask engine needs the 'dask' extra: pip install 'nvtx_plugins_tf[dask]'"
    ]
    assert "ModuleNotFoundError" not in proc.stderr and not out.exists()  # nothing made


def test_the_embedded_engine_needs_no_dask(recording, tmp_path):
    """The same command without --workers: the default engine runs, with Dask unimportable."""
    out = tmp_path / "analysis"
    command = [sys.executable, "-c", _RUN, "analyze", str(recording), "-o", str(out)]
    proc = subprocess.run(command, env=_child_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert (out / "rank_stats.parquet").exists()
