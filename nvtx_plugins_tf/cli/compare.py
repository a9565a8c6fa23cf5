"""``compare``: which ranges got slower between two sides' runs, with confidence, and a verdict
a CI can gate on (exit 16). The work is :mod:`nvtx_plugins_tf.recorder.compare`'s; here, flags
and exit codes.

Nothing is made before the inputs are read and compared (a bad input, no steps: OUTDIR
untouched); then every output appears in OUTDIR at once, or, on an error, a full disk or a
signal, none does (analyze's staging). Exit codes, first that applies: 16 a regression; 6 a
damaged or unreadable input (its intact events counted); 17 (``--fail-on inconclusive``) a
verdict inconclusive; 0.
"""

from __future__ import annotations

import argparse
import gc
import os
import re

from .._printable import printable
from . import _quick_exit
from ._common import (
    EXIT_DAMAGED,
    EXIT_INCONCLUSIVE,
    EXIT_REGRESSION,
    EXIT_STATS_UNAVAILABLE,
    EXIT_USAGE,
    CliError,
    error,
    warn,
)
from .analyze import _workers, analysis_errors, as_cli_error, check_engine_flags

#: what ``pip install`` adds for compare's statistics
COMPARE_EXTRA = "nvtx_plugins_tf[compare]"


def _threshold(value: str) -> float:
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(%?)\s*", value)
    x = (float(match[1]) / (100 if match[2] else 1)) if match else -1.0
    if not 0 < x < 1:
        raise argparse.ArgumentTypeError(f"{value!r}: a relative change, e.g. 2% or 0.02 (above 0, below 100%)")
    return x


def _alpha(value: str) -> float:
    try:
        x = float(value)
    except ValueError:
        x = -1.0
    if not 0 < x < 0.5:
        raise argparse.ArgumentTypeError(f"{value!r}: a false discovery rate above 0 and below 0.5, e.g. 0.01")
    return x


def _warmup(value: str) -> int | str:
    if value == "auto" or (value.isdigit() and int(value) <= 10**7):
        return value if value == "auto" else int(value)
    raise argparse.ArgumentTypeError(f"{value!r}: 'auto' (a change-point rule) or a number of steps to cut")


def _seed(value: str) -> int:
    if not value.isdigit() or int(value) >= 2**63:
        raise argparse.ArgumentTypeError(f"{value!r}: a seed is a whole number from 0 to 2**63 - 1")
    return int(value)


def _check_flags(args) -> None:
    """The usage errors (exit 2), before anything is read or made."""
    if args.output is not None and (not args.output or os.path.abspath(args.output) == "/"):
        raise CliError(f"-o {args.output!r}: OUTDIR must name a folder for the outputs, e.g. -o compare", EXIT_USAGE)
    check_engine_flags(args)


def cmd_compare(args) -> int:
    collecting = gc.isenabled()
    if args.workers is None and args.scheduler is None:
        gc.disable()  # (as analyze: the imports' many objects, no cycles to free)
    try:
        return _compare(args)
    finally:
        if collecting:
            gc.enable()


def _compare(args) -> int:
    from pathlib import Path

    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    _check_flags(args)
    if args.workers is None and args.scheduler is None:
        _quick_exit.ask()  # (as analyze: the embedded engine's threads are daemons; nothing else to close)
    try:
        import scipy.special  # noqa: F401
    except ImportError as exc:
        raise CliError(
            f"compare's statistics need scipy ({exc}): pip install '{COMPARE_EXTRA}'", EXIT_STATS_UNAVAILABLE
        ) from None
    from ..recorder.analysis import check_outdir, terminal_progress
    from ..recorder.compare import compare_runs, load_runs, summary_lines, write_outputs

    outdir = Path(args.output) if args.output is not None else None
    written = []
    try:
        if outdir is not None:
            check_outdir(outdir)
        loaded = load_runs(
            args.baseline, args.vs, step=args.step, workers=args.workers, scheduler=args.scheduler,
            progress=terminal_progress(),
        )  # fmt: skip
        for line in loaded.notes:
            warn(line)
        comparison = compare_runs(
            loaded.baseline, loaded.candidate, warmup=args.warmup, threshold=args.threshold, alpha=args.alpha,
            seed=args.seed,
        )  # fmt: skip
        if outdir is not None:
            written = write_outputs(comparison, outdir)
    except analysis_errors() as exc:
        raise as_cli_error(exc) from exc
    for line in summary_lines(comparison):
        print(printable(line))
    if written:
        print(printable(f"wrote {', '.join(str(p) for p in written)}"), flush=True)
    problems = [f"damaged recording {line}; compared with its intact events" for line in loaded.damaged]
    problems += [f"left out: {line}; the other inputs compared" for line in loaded.left_out]
    for message in problems:
        error(message)
    if comparison.regression():
        raise CliError(f"regression: {_slower(comparison)} beyond {args.threshold:.1%}", EXIT_REGRESSION)
    if problems:
        return EXIT_DAMAGED
    if args.fail_on == "inconclusive" and comparison.inconclusive():
        n = sum("inconclusive" in comparison.verdicts(i) for i in range(len(comparison.names)))
        raise CliError(f"inconclusive: {n} of the step and ranges (--fail-on inconclusive)", EXIT_INCONCLUSIVE)
    return 0


def _slower(comparison) -> str:
    names = [
        repr(comparison.names[i]) + ("" if comparison.verdict[i] == "slower" else " (inclusive time)")
        for i in [0, *comparison.order()]
        if "slower" in comparison.verdicts(i)
    ]
    shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
    return f"{shown} slower"


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "compare",
        help="which ranges got slower between two sides' runs, with confidence: exit 16 on a regression",
        description=(
            "Compare the runs BASELINE... with the runs CANDIDATE... (each run what analyze takes: a recording, an "
            "export, or a folder of a run's ranks). Per range: its exclusive time per step on every rank, the "
            "warm-up cut (--warmup), the ratio candidate / baseline with an interval resampled at the level the "
            "runs allow (runs with 3 or more a side; the ranks of two runs; blocks of steps within one run), "
            "the same for its inclusive time where ranges are nested in it, q-values across the ranges "
            "(Benjamini-Hochberg) and a verdict on each: slower, faster, equivalent (inside +-threshold) or "
            "inconclusive; the same for the step (the slowest rank's), and the step's change "
            "split into the ranges' and what no range covers. Prints the ranges that changed; with -o, writes "
            "compare.parquet/.csv, compare.md (a table for a pull request) and compare.png (a forest plot) at "
            "once. Exit 16 on a regression (exclusive or inclusive), 17 with --fail-on inconclusive. Needs the "
            "'compare' extra (scipy)."
        ),
    )
    p.add_argument("baseline", nargs="+", metavar="BASELINE", help="the baseline's runs")
    p.add_argument("--vs", nargs="+", required=True, metavar="CANDIDATE", help="the candidate's runs")
    p.add_argument("-o", "--output", metavar="OUTDIR", help="the folder of compare.{parquet,csv,md,png}")
    p.add_argument(
        "--step",
        metavar="NAME[@DOMAIN]",
        help="the step ranges: message NAME or 'NAME N' (default: the Keras callback's 'batch N', else 'step N')",
    )
    p.add_argument(
        "--threshold", type=_threshold, default=0.02, metavar="T",
        help="the smallest change that matters, e.g. 2%% (default) or 0.02",
    )  # fmt: skip
    p.add_argument("--alpha", type=_alpha, default=0.01, help="the false discovery rate (default 0.01)")
    p.add_argument(
        "--warmup", type=_warmup, default="auto", metavar="auto|N",
        help="the steps cut at each run's start: by a change-point rule (auto, default) or N",
    )  # fmt: skip
    p.add_argument(
        "--fail-on", choices=("regression", "inconclusive"), default="regression",
        help="inconclusive: exit 17 too when a verdict is inconclusive (default: regression, exit 16 only)",
    )  # fmt: skip
    p.add_argument(
        "--seed", type=_seed, default=0, help="the resampling's seed (default 0): the same seed, the same output"
    )
    p.add_argument(
        "--workers", type=_workers, metavar="N", help="run on a local Dask cluster of N workers in this process"
    )
    p.add_argument("--scheduler", metavar="ADDRESS", help="run on a running Dask cluster (tcp://HOST:PORT)")
    p.set_defaults(func=cmd_compare)
