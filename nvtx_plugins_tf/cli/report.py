"""``report``: the range summary (or backward/forward pairs) of a recording or an SQLite file."""

from __future__ import annotations

import os
from pathlib import Path

from ._common import EXIT_DAMAGED, EXIT_INPUT_NOT_FOUND, EXIT_NO_EVENTS, EXIT_OK, EXIT_USAGE, CliError


def cmd_report(args) -> int:
    from ..recorder.summary import is_sqlite, summarize

    path = Path(args.path)
    if not path.exists() and path.with_name(path.name + ".nvtxrec").is_dir():
        path = path.with_name(path.name + ".nvtxrec")
    if not path.exists():
        raise CliError(f"no such recording or SQLite file: {args.path}", EXIT_INPUT_NOT_FOUND)
    if not os.access(path, os.R_OK):
        raise CliError(f"cannot read {path}: permission denied", EXIT_INPUT_NOT_FOUND)
    if args.pairs:
        return _report_pairs(path)
    if path.is_file() and is_sqlite(path):
        import sqlite3

        try:
            summary = summarize(path, by_process=args.by_process, group=not args.keep_numbered)
        except (sqlite3.Error, ValueError) as exc:
            raise CliError(f"cannot read {path}: {exc}", EXIT_INPUT_NOT_FOUND) from exc
        if not summary.rows and not summary.open_ranges:
            raise CliError(f"no NVTX ranges in {path}", EXIT_NO_EVENTS)
        _print_summary(summary, args.format)
        return EXIT_OK
    if path.is_file() and not path.name.endswith(".nvtxseg"):
        raise CliError(
            f"{path} is neither a recording directory, a .nvtxseg segment nor an SQLite file", EXIT_INPUT_NOT_FOUND
        )
    from ..recorder.reader import RecordingReader

    with RecordingReader(path) as reader:
        summary = summarize(path, by_process=args.by_process, reader=reader, group=not args.keep_numbered)
        damage = reader.damage()
    if damage.events == 0:
        if damage.damaged:
            raise CliError(f"no intact NVTX events in {path}: {damage.describe()}", EXIT_DAMAGED)
        raise CliError(f"no NVTX events recorded in {path}", EXIT_NO_EVENTS)
    _print_summary(summary, args.format)
    if damage.damaged:
        raise CliError(
            f"damaged recording {path}: {damage.describe()}; summary of the intact events shown", EXIT_DAMAGED
        )
    return EXIT_OK


def _print_summary(summary, fmt: str) -> None:
    """The summary as ``report --format`` asks: the table, or CSV (which ends its own lines)."""
    print(summary.to_csv() if fmt == "csv" else summary.format(), end="" if fmt == "csv" else "\n")


def _report_pairs(path: Path) -> int:
    """``report --pairs``: backward ranges with the forward ranges they mirror."""
    from ..recorder.pairs import format_pairs, pair_rows
    from ..recorder.reader import load
    from ..recorder.summary import is_sqlite

    if path.is_file() and is_sqlite(path):
        raise CliError(f"--pairs reads a recording folder (PREFIX.nvtxrec), not an SQLite file: {path}", EXIT_USAGE)
    recording = load(path)
    print(format_pairs(pair_rows(recording.ranges)))
    if recording.damage.damaged:
        raise CliError(f"damaged recording {path}: {recording.damage.describe()}", EXIT_DAMAGED)
    return EXIT_OK


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "report",
        help="print the NVTX range summary of a recording or an SQLite export",
        description="Summary like `nsys stats --report nvtx_sum` of a recording directory "
        "(PREFIX.nvtxrec), a segment file, or an SQLite file (ours or `nsys export`).",
    )
    p.add_argument("path", help="recording directory, .nvtxseg file or .sqlite file")
    p.add_argument("--by-process", action="store_true", help="one group per process, with its command line")
    p.add_argument(
        "--keep-numbered",
        action="store_true",
        help="one row per name: no 'batch *' rows for numbered names, TraceMe metadata kept",
    )
    p.add_argument("--format", choices=("table", "csv"), default="table", help="table (names shortened) or CSV")
    p.add_argument(
        "--pairs",
        action="store_true",
        help="backward ranges paired with the forward ranges they mirror (their payload is its id)",
    )
    p.set_defaults(func=cmd_report)
