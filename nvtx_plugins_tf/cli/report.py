"""``report``: the range summary, nsys's other NVTX reports (``--type``), or the backward/forward
pairs of a recording or an SQLite file."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from .._paths import PACKED_SEGMENT_SUFFIX, RECORDING_SUFFIX, SEGMENT_SUFFIX, recording_path
from .._printable import printable
from ._common import (
    EXIT_DAMAGED,
    EXIT_INPUT_NOT_FOUND,
    EXIT_NO_EVENTS,
    EXIT_NO_RANGE_IDS,
    EXIT_OK,
    EXIT_USAGE,
    CliError,
    distinct_inputs,
    reason,
)

_STYLE_WORDS = {
    "pushpop_trace": "push/pop ranges",
    "pushpop_sum": "push/pop ranges",
    "startend_sum": "start/end ranges",
}


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, not {text!r}")
    return value


def _selected_domains(values) -> set[str] | None:
    """``--domain`` values (repeated, or comma lists) as a set of names; None without the flag."""
    if not values:
        return None
    names = {name.strip() for value in values for name in value.split(",")}
    if "" in names:
        raise CliError("--domain: empty domain name (use 'default' for NVTX's default domain)", EXIT_USAGE)
    return names


def _check_domains(domains: set[str] | None, known, path: Path) -> None:
    """One line naming ``--domain`` when a selected domain is not in the file."""
    from ..recorder.reports.names import DEFAULT_DOMAIN

    if domains is None:
        return
    known = {DEFAULT_DOMAIN} | {d for d in known if d}
    unknown = sorted(domains - known)
    if unknown:
        listing = ", ".join([DEFAULT_DOMAIN] + sorted(known - {DEFAULT_DOMAIN}))
        raise CliError(
            f"--domain: no domain {', '.join(map(repr, unknown))} in {path} (its domains: {listing})", EXIT_USAGE
        )


def _check_combinations(args) -> str:
    """The report type, after the flags that do not go together."""
    report_type = args.type or "sum"
    if args.pairs and (args.type or args.domain or args.top or args.by_process or args.keep_numbered):
        raise CliError(
            "--pairs cannot be combined with --type, --domain, --top, --by-process or --keep-numbered", EXIT_USAGE
        )
    if args.pairs and args.format != "table":
        raise CliError(f"--pairs prints a table only, not --format {args.format}", EXIT_USAGE)
    if report_type != "sum" and (args.by_process or args.keep_numbered):
        flag = "--by-process" if args.by_process else "--keep-numbered"
        raise CliError(f"{flag} applies to --type sum, not --type {report_type}", EXIT_USAGE)
    if report_type == "pushpop_trace" and args.top:
        raise CliError(
            "--top applies to summaries (--type sum, pushpop_sum, startend_sum), not pushpop_trace", EXIT_USAGE
        )
    return report_type


def _merged(values: list[str], tmp: Path) -> str:
    """Several recordings (hosts) merged as ``nvtx-tf merge`` does, into ``tmp``."""
    from ..recorder.merge import MergeError, merge
    from ..recorder.nsys_inputs.parquetdir import is_parquetdir
    from ..recorder.nsys_inputs.sqlite import is_sqlite

    paths = [recording_path(v) for v in values]
    for value, path in zip(values, paths):
        if (path.is_file() and is_sqlite(path)) or (path.is_dir() and is_parquetdir(path)):
            raise CliError(
                f"{value}: an export (SQLite or parquetdir); several paths are recordings to merge, "
                "report an export one at a time",
                EXIT_USAGE,
            )
    distinct_inputs(values, paths, "PATH")
    try:
        merge(paths, tmp / ("merged" + RECORDING_SUFFIX))
    except MergeError as exc:
        raise CliError(str(exc), EXIT_INPUT_NOT_FOUND) from exc
    return str(tmp / ("merged" + RECORDING_SUFFIX))


def _report_parquetdir(args, path: Path) -> int:
    """A parquetdir export: its tables copied into an SQLite file, reported as that file;
    messages name the directory."""
    import sqlite3
    import tempfile

    from ..recorder.nsys_inputs.parquetdir import parquetdir_to_sqlite

    with tempfile.TemporaryDirectory(prefix="nvtx-tf-report-") as tmp:
        copy = Path(tmp) / (path.name + ".sqlite")
        try:
            parquetdir_to_sqlite(path, copy)
        except (OSError, ValueError, sqlite3.Error) as exc:  # pyarrow's ArrowInvalid is a ValueError
            raise CliError(f"cannot read {path}: {reason(exc, path)}", EXIT_INPUT_NOT_FOUND) from exc
        try:
            return _report(args, str(copy))
        except CliError as exc:
            raise CliError(str(exc).replace(str(copy), str(path)), exc.code) from exc


def cmd_report(args) -> int:
    if len(args.path) > 1:  # recordings of several hosts: one timeline (nvtx-tf merge)
        import tempfile

        with tempfile.TemporaryDirectory(prefix="nvtx-tf-report-") as tmp:
            merged = _merged(args.path, Path(tmp))
            try:
                return _report(args, merged)
            except CliError as exc:  # named as the user gave them, not by the temporary folder
                text = str(exc).replace(merged + os.sep, "").replace(merged, f"{' + '.join(args.path)} (merged)")
                raise CliError(text, exc.code) from exc
    return _report(args, args.path[0])


def _report(args, value: str) -> int:
    from ..recorder.nsys_inputs.sqlite import is_sqlite
    from ..recorder.reports.summary import summarize

    report_type = _check_combinations(args)
    domains = _selected_domains(args.domain)
    if not value:
        raise CliError("PATH '': empty; give PREFIX, a PREFIX.nvtxrec folder or an SQLite file", EXIT_INPUT_NOT_FOUND)
    path = recording_path(value)
    if not path.exists():
        raise CliError(f"no such recording or SQLite file: {value}", EXIT_INPUT_NOT_FOUND)
    if not os.access(path, os.R_OK):
        raise CliError(f"cannot read {path}: permission denied", EXIT_INPUT_NOT_FOUND)
    if not path.is_dir() and not path.is_file():
        raise CliError(
            f"{value}: a device or special file, not a recording folder, a .nvtxseg segment or an SQLite file",
            EXIT_INPUT_NOT_FOUND,
        )
    from ..recorder.nsys_inputs.parquetdir import is_parquetdir

    if path.is_dir() and is_parquetdir(path):  # nsys's parquetdir export, or ours
        return _report_parquetdir(args, path)
    if args.pairs:
        return _report_pairs(path)
    if path.is_file() and is_sqlite(path):
        import sqlite3

        from ..recorder.reports.ranges import load_ranges, sqlite_domain_names

        try:
            if report_type != "sum":
                ranges = load_ranges(path)
            _check_domains(domains, sqlite_domain_names(path) if domains else (), path)
            if report_type == "sum":
                summary = summarize(path, by_process=args.by_process, group=not args.keep_numbered, domains=domains)
        except (sqlite3.Error, ValueError) as exc:
            raise CliError(f"cannot read {path}: {reason(exc, path)}", EXIT_INPUT_NOT_FOUND) from exc
        if report_type != "sum":
            return _print_nsys_report(ranges, report_type, domains, args, path)
        if not summary.rows and not summary.open_ranges:
            raise CliError(f"no NVTX ranges in {path}{_in_domains(domains)}", EXIT_NO_EVENTS)
        _print_summary(summary, args.format, args.top)
        return EXIT_OK
    if path.is_file() and not path.name.endswith((SEGMENT_SUFFIX, PACKED_SEGMENT_SUFFIX)):
        raise CliError(
            f"{path} is neither a recording directory, a .nvtxseg segment nor an SQLite file", EXIT_INPUT_NOT_FOUND
        )
    from ..recorder.recording.reader import RecordingReader
    from ..recorder.reports.ranges import load_ranges

    with RecordingReader(path) as reader:
        if report_type == "sum":
            summary = summarize(
                path, by_process=args.by_process, reader=reader, group=not args.keep_numbered, domains=domains
            )
        else:
            ranges = load_ranges(path, reader=reader)
        damage = reader.damage()
        known = reader.domain_names()
    if damage.events == 0:
        if damage.damaged:
            raise CliError(f"no intact NVTX events in {path}: {damage.describe()}", EXIT_DAMAGED)
        raise CliError(f"no NVTX events recorded in {path}", EXIT_NO_EVENTS)
    _check_domains(domains, known, path)
    if report_type != "sum":
        _print_nsys_report(ranges, report_type, domains, args, path)
    else:
        if domains is not None and not summary.rows and not summary.open_ranges:
            raise CliError(f"no NVTX ranges in {path}{_in_domains(domains)}", EXIT_NO_EVENTS)
        _print_summary(summary, args.format, args.top)
    if damage.damaged:
        raise CliError(
            f"damaged recording {path}: {damage.describe()}; summary of the intact events shown", EXIT_DAMAGED
        )
    return EXIT_OK


def _in_domains(domains) -> str:
    return f" in domain{'s' if len(domains) > 1 else ''} {', '.join(sorted(domains))}" if domains else ""


def _print_summary(summary, fmt: str, top: int | None = None) -> None:
    """The summary as ``report --format`` asks: the table, or CSV (which ends its own lines);
    ``top``: its first N rows (of each process with ``--by-process``)."""
    if top is not None:
        summary = summary.top(top)
    print(_csv_text(summary.to_csv()) if fmt == "csv" else summary.format(), end="" if fmt == "csv" else "\n")


def _csv_text(text: str) -> str:
    """CSV as it is for a file or a pipe; on a terminal, the control characters of its
    names escaped (the table's are always)."""
    import sys

    return printable(text, keep="\n") if sys.stdout.isatty() else text


def _print_nsys_report(ranges, report_type: str, domains, args, path: Path) -> int:
    """``--type pushpop_trace|pushpop_sum|startend_sum`` (:mod:`..recorder.reports.nsys_reports`)."""
    from ..recorder.reports.nsys_reports import pushpop_trace, range_summary

    if domains is not None:
        ranges = ranges.only_domains(domains)
    if report_type == "pushpop_trace":
        report = pushpop_trace(ranges)
    else:
        report = range_summary(ranges, report_type.split("_")[0])
    if not report.rows:
        raise CliError(f"no {_STYLE_WORDS[report_type]} in {path}{_in_domains(domains)}", EXIT_NO_EVENTS)
    if args.top is not None:
        report = report.top(args.top)
    print(
        _csv_text(report.to_csv()) if args.format == "csv" else report.format(),
        end="" if args.format == "csv" else "\n",
    )
    return EXIT_OK


def _report_pairs(path: Path) -> int:
    """``report --pairs``: backward ranges with the forward ranges they mirror."""
    from ..recorder.nsys_inputs.sqlite import is_sqlite
    from ..recorder.recording.reader import load
    from ..recorder.reports.pairs import NoRangeIds, format_pairs, pair_rows, sqlite_ranges

    if path.is_file() and is_sqlite(path):
        import sqlite3

        try:
            ranges = sqlite_ranges(path)
        except NoRangeIds as exc:
            raise CliError(str(exc), EXIT_NO_RANGE_IDS) from exc
        except (sqlite3.Error, ValueError) as exc:
            raise CliError(f"cannot read {path}: {reason(exc, path)}", EXIT_INPUT_NOT_FOUND) from exc
        print(format_pairs(pair_rows(ranges)))
        return EXIT_OK
    recording = load(path)
    print(format_pairs(pair_rows(recording.events)))
    if recording.damage.damaged:
        raise CliError(f"damaged recording {path}: {recording.damage.describe()}", EXIT_DAMAGED)
    return EXIT_OK


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "report",
        help="print the NVTX range summary (or nsys's other NVTX reports) of a recording or an SQLite export",
        description="Summary like `nsys stats --report nvtx_sum` of a recording directory "
        "(PREFIX.nvtxrec), a segment file, or an SQLite file (ours or `nsys export`); --type gives "
        "nsys's other NVTX reports, with nsys's columns.",
    )
    p.add_argument(
        "path",
        nargs="+",
        help="recording directory, .nvtxseg file or .sqlite file; several recordings (hosts) are merged first",
    )
    p.add_argument("--by-process", action="store_true", help="one group per process, with its command line")
    p.add_argument(
        "--keep-numbered",
        action="store_true",
        help="one row per name: no 'batch *' rows for numbered names, TraceMe metadata kept",
    )
    p.add_argument(
        "--type",
        choices=("sum", "pushpop_trace", "pushpop_sum", "startend_sum"),
        default=None,
        help="nsys's report: sum (nvtx_sum, the default), pushpop_trace (nvtx_pushpop_trace: every push/pop "
        "range with its child and exclusive time, level, parent, stack), pushpop_sum (nvtx_pushpop_sum), "
        "startend_sum (nvtx_startend_sum)",
    )
    p.add_argument(
        "--domain",
        action="append",
        metavar="NAME",
        help="only the ranges of this domain (repeat, or NAME,NAME; 'default' = NVTX's default domain)",
    )
    p.add_argument(
        "--top", type=_positive_int, metavar="N", help="the first N rows of a summary (most total time first)"
    )
    p.add_argument("--format", choices=("table", "csv"), default="table", help="table (names shortened) or CSV")
    p.add_argument(
        "--pairs",
        action="store_true",
        help="backward ranges paired with the forward ranges they mirror (their payload is its id), from a "
        "recording or an SQLite file (ours or `nsys export`: the forward row's rangeId)",
    )
    p.set_defaults(func=cmd_report)
