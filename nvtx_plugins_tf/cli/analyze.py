"""``analyze``: many ranks' recordings or exports (ours or nsys's) at once: per-range statistics
per rank and over all ranks, the steps of every rank on one clock, and the slowest rank. The
work is :func:`nvtx_plugins_tf.recorder.analysis.analyze`'s; here, flags and exit codes."""

from __future__ import annotations

from ._common import (
    EXIT_DASK_UNAVAILABLE,
    EXIT_INPUT_NOT_FOUND,
    EXIT_NO_EVENTS,
    EXIT_USAGE,
    CliError,
    warn,
)


def _workers(value: str) -> int:
    import argparse

    if not value.isdigit() or not 1 <= int(value) <= 256:
        raise argparse.ArgumentTypeError(f"{value!r}: a number of worker processes, 1 to 256")
    return int(value)


def cmd_analyze(args) -> int:
    from ..recorder.analysis import EngineUnavailable, InputError, analyze, terminal_progress
    from .record import _prepare_output_dir

    if args.workers is not None and args.scheduler:
        raise CliError("--workers starts a local cluster, --scheduler uses a running one: give one", EXIT_USAGE)
    if args.step is not None and not args.step.partition("@")[0].strip():
        raise CliError(f"--step {args.step!r}: give the step range's name, NAME or NAME@DOMAIN", EXIT_USAGE)
    from pathlib import Path

    _prepare_output_dir(Path(args.output))
    try:
        result = analyze(
            args.inputs,
            args.output,
            step=args.step,
            workers=args.workers,
            scheduler=args.scheduler,
            progress=terminal_progress(),
        )
    except InputError as exc:
        raise CliError(str(exc), EXIT_INPUT_NOT_FOUND) from exc
    except EngineUnavailable as exc:
        raise CliError(str(exc), EXIT_DASK_UNAVAILABLE) from exc
    for line in result.tables.left_out:
        warn(f"left out: {line}")
    if not result.tables.ranks or not any(r.events for r in result.tables.ranks):
        raise CliError("no NVTX ranges in the inputs: nothing to analyze", EXIT_NO_EVENTS)
    for line in result.summary:
        print(line)
    shown = [str(p) for p in result.written if p.suffix in (".parquet", ".png")]
    print(f"wrote {', '.join(shown)} (and the tables as .csv)")
    return 0


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "analyze",
        help="many ranks at once: statistics per rank and overall, the steps of every rank, the slowest rank",
        description=(
            "Analyze recordings (PREFIX.nvtxrec) and exports (SQLite or parquetdir, ours or Nsight Systems') of "
            "several ranks. Each input is one rank per process; a directory stands for every recording and export "
            "in it (DIR:n: the first n), a recording standing for its exports next to it (PREFIX.sqlite, "
            "PREFIX_pqtdir). Writes OUTDIR/all_stats, rank_stats (the nvtx_sum recipe's columns) and "
            "pace (the steps of every rank on one clock), each as .parquet and .csv, and prints a summary naming "
            "the slowest rank. Runs in this process by default; --workers N or --scheduler ADDRESS run one task "
            "per input on Dask (the 'dask' extra)."
        ),
    )
    p.add_argument("inputs", nargs="+", metavar="INPUT", help="recordings, exports, or directories of them")
    p.add_argument("-o", "--output", required=True, metavar="OUTDIR", help="the directory of the tables")
    p.add_argument(
        "--step",
        metavar="NAME[@DOMAIN]",
        help="the step ranges: message NAME or 'NAME N' (default: the Keras callback's 'batch N', else 'step N')",
    )
    p.add_argument("--workers", type=_workers, metavar="N", help="run on a local Dask cluster of N worker processes")
    p.add_argument("--scheduler", metavar="ADDRESS", help="run on a running Dask cluster (tcp://HOST:PORT)")
    p.set_defaults(func=cmd_analyze)
