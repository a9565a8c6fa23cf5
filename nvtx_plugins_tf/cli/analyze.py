"""``analyze``: many ranks' recordings or exports (ours or nsys's) at once: per-range statistics
per rank and over all ranks, the steps of every rank on one clock, and the slowest rank. The
work is :mod:`nvtx_plugins_tf.recorder.analysis`'s; here, flags and exit codes.

Nothing is made before the inputs are read and found to hold ranges (a bad input, a bad
scheduler, no ranges: OUTDIR untouched, not even created); then every output appears in OUTDIR
at once, or, on an error, a full disk or a signal, none does. A damaged recording counts with
its intact events and ends the command with exit 6 after the outputs are written (as
``record``, ``export`` and ``report`` do), one line per damaged input.
"""

from __future__ import annotations

import gc
import os

from .._printable import printable
from . import _quick_exit
from ._common import (
    EXIT_DAMAGED,
    EXIT_DASK_UNAVAILABLE,
    EXIT_INPUT_NOT_FOUND,
    EXIT_NO_EVENTS,
    EXIT_OUTPUT_NOT_WRITABLE,
    EXIT_USAGE,
    CliError,
    error,
    warn,
)


def _workers(value: str) -> int:
    import argparse

    if not value.isdigit() or not 1 <= int(value) <= 256:
        raise argparse.ArgumentTypeError(f"{value!r}: a number of Dask workers, 1 to 256")
    return int(value)


def check_engine_flags(args) -> None:
    """The usage errors (exit 2) of ``--workers``, ``--scheduler`` and ``--step`` (analyze's and
    compare's), before anything is read or made."""
    from ..recorder.analysis import check_scheduler_address

    if args.workers is not None and args.scheduler is not None:
        raise CliError("--workers starts a local cluster, --scheduler uses a running one: give one", EXIT_USAGE)
    if args.step is not None and not args.step.partition("@")[0].strip():
        raise CliError(f"--step {args.step!r}: give the step range's name, NAME or NAME@DOMAIN", EXIT_USAGE)
    if args.scheduler is not None:
        try:
            check_scheduler_address(args.scheduler)
        except ValueError as exc:
            raise CliError(f"--scheduler {exc}", EXIT_USAGE) from None


def _check_flags(args) -> None:
    """The usage errors (exit 2), before anything is read or made."""
    if not args.output or os.path.abspath(args.output) == "/":
        raise CliError(f"-o {args.output!r}: OUTDIR must name a folder for the tables, e.g. -o analysis", EXIT_USAGE)
    check_engine_flags(args)


def analysis_errors() -> tuple[type, ...]:
    """The errors of the analysis that :func:`as_cli_error` words (imported when one is raised)."""
    from ..recorder.analysis import EngineUnavailable, InputError, NothingToAnalyze, OutdirError, StepNotFound

    return (InputError, EngineUnavailable, NothingToAnalyze, StepNotFound, OutdirError)


def as_cli_error(exc: Exception) -> CliError:
    """An error of the analysis (analyze's or compare's) as its one line and exit code: a bad
    input 7, no Dask 15, no ranges 5, no steps 2, OUTDIR not writable 3."""
    from ..recorder.analysis import EngineUnavailable, InputError, NothingToAnalyze, StepNotFound

    codes = (
        (InputError, EXIT_INPUT_NOT_FOUND), (EngineUnavailable, EXIT_DASK_UNAVAILABLE),
        (NothingToAnalyze, EXIT_NO_EVENTS), (StepNotFound, EXIT_USAGE),
    )  # fmt: skip
    code = next((c for kind, c in codes if isinstance(exc, kind)), EXIT_OUTPUT_NOT_WRITABLE)
    return CliError(str(exc), code)


def cmd_analyze(args) -> int:
    # this process's own engines: the embedded one, and --workers' cluster, whose workers are
    # threads of this process, closed beside the reduce (recorder/analysis/engines.py); not
    # --scheduler's client of a cluster that lives on
    in_process = args.scheduler is None
    collecting = gc.isenabled()
    if in_process:
        # Python's cycle collector, run again and again by the imports' many objects, costs
        # 3-6 % of an 8-rank run's CPU and finds nothing to free: a rank's results hold no
        # cycles. Back on when the command returns (a caller's process goes on); --scheduler's
        # client keeps it.
        gc.disable()
    try:
        return _analyze(args, in_process)
    finally:
        if collecting:
            gc.enable()


def _analyze(args, in_process: bool) -> int:
    from pathlib import Path

    # numpy's OpenBLAS starts a thread per core at import and they spin a while, waiting for
    # work analyze never gives them (no BLAS call): 0.13 s of CPU, 8 % of an 8-rank run. A
    # value the user set is kept.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    if in_process and _quick_exit.own_process():
        # heatmap.png's process, forked now (before Dask, with --workers, is imported): it
        # imports numpy and Pillow on the core this one's imports leave idle
        # (recorder/analysis/painter.py)
        from ..recorder.analysis import painter

        painter.start()
    from ..recorder.analysis import check_outdir, compute, terminal_progress

    _check_flags(args)
    if in_process:
        # (the embedded engine's threads are daemons; --workers' cluster, in this process, is
        # closed by a daemon thread beside the reduce: nothing to wait for)
        _quick_exit.ask()
    outdir = Path(args.output)
    try:
        check_outdir(outdir)
        analysis = compute(
            args.inputs, step=args.step, workers=args.workers, scheduler=args.scheduler, progress=terminal_progress()
        )
        for line in analysis.notes:
            warn(line)
        for line in analysis.counted_once:
            warn(line)
        analysis.check()
        analysis.write(outdir, csv=args.csv)
    except analysis_errors() as exc:
        raise as_cli_error(exc) from exc
    for line in analysis.summary:
        print(printable(line))
    shown = [str(p) for p in analysis.written if p.suffix in (".parquet", ".png")]
    print(printable(f"wrote {', '.join(shown)}" + (" (and the tables as .csv)" if args.csv else "")), flush=True)
    # an input that counts only in part, or not at all: the outputs of the rest are written, exit 6
    problems = [f"damaged recording {line}; the tables count its intact events" for line in analysis.damaged]
    problems += [f"left out: {line}; the tables count the other inputs" for line in analysis.tables.left_out]
    for i, message in enumerate(problems):
        if i + 1 < len(problems):
            error(message)
        else:
            raise CliError(message, EXIT_DAMAGED)
    return 0


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "analyze",
        help="many ranks at once: statistics per rank and overall, the steps of every rank, the stragglers",
        description=(
            "Analyze recordings (PREFIX.nvtxrec) and exports (SQLite or parquetdir, ours or Nsight Systems') of "
            "several ranks. Each input is one rank per process; a directory stands for every recording and export "
            "in it (DIR:n: the first n), a recording standing for its exports next to it (PREFIX.sqlite, "
            "PREFIX_pqtdir); a rank given twice (two paths, a recording and its export) counts once. Writes into "
            "the folder OUTDIR: all_stats, rank_stats (the nvtx_sum recipe's columns), pace (the steps of every "
            "rank on one clock) and stragglers (per step, the rank the others waited for) as .parquet (and "
            ".csv with --csv), and heatmap.png (ranks x steps; with Pillow), all at once or none; prints a "
            "summary naming the slowest rank. Runs in this process by default; --workers N or --scheduler "
            "ADDRESS run one task per input on Dask (the 'dask' extra). A damaged recording counts with its "
            "intact events: exit 6."
        ),
    )
    p.add_argument("inputs", nargs="+", metavar="INPUT", help="recordings, exports, or directories of them")
    p.add_argument(
        "-o",
        "--output",
        required=True,
        metavar="OUTDIR",
        help="the folder of the tables and heatmap.png (created if needed; its other files are left alone)",
    )
    p.add_argument(
        "--step",
        metavar="NAME[@DOMAIN]",
        help="the step ranges: message NAME or 'NAME N' (default: the Keras callback's 'batch N', else 'step N')",
    )
    p.add_argument(
        "--csv",
        action="store_true",
        help="write the tables as .csv too, beside the .parquet files (as the nsys recipes' --csv)",
    )
    p.add_argument(
        "--workers", type=_workers, metavar="N", help="run on a local Dask cluster of N workers in this process"
    )
    p.add_argument(
        "--scheduler",
        metavar="ADDRESS",
        help="run on a running Dask cluster (tcp://HOST:PORT); waits a bounded time for its first worker",
    )
    p.set_defaults(func=cmd_analyze)
