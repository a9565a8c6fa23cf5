"""``export``: a recording's files, written again or in other formats, without running
anything, with ``nsys export``'s flags: ``--type`` (one or several, comma-separated: one
decode writes them all), ``-o``, ``--force-overwrite``. The work is
:func:`nvtx_plugins_tf.recorder.outputs.write_outputs`'s."""

from __future__ import annotations

import os
from pathlib import Path

from ._common import (
    EXIT_DAMAGED,
    EXIT_INPUT_NOT_FOUND,
    EXIT_NO_EVENTS,
    EXIT_OUTPUT_EXISTS,
    EXIT_USAGE,
    CliError,
    export_types,
)


def _true_false(value: str) -> bool:
    """argparse type of --force-overwrite: nsys's 'true' or 'false'."""
    import argparse

    if value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise argparse.ArgumentTypeError(f"{value!r}: give true or false")


def _input(value: str) -> Path:
    from .._paths import RECORDING_SUFFIX, recording_path

    if not value:
        raise CliError("RECORDING '': empty; give PREFIX or a PREFIX.nvtxrec folder", EXIT_INPUT_NOT_FOUND)
    path = recording_path(value)
    if not path.exists():
        raise CliError(f"no such recording: {value}", EXIT_INPUT_NOT_FOUND)
    if not os.access(path, os.R_OK):
        raise CliError(f"cannot read {path}: permission denied", EXIT_INPUT_NOT_FOUND)
    if not path.is_dir() and not path.name.endswith((".nvtxseg", ".nvtxsegz")):
        what = f"not a {RECORDING_SUFFIX} recording folder or a .nvtxseg/.nvtxsegz segment"
        raise CliError(f"{value}: {what}", EXIT_INPUT_NOT_FOUND)
    return path


def targets_of(recording: Path, types: tuple[str, ...], output: str | None) -> tuple[Path, dict[str, Path]]:
    """(prefix, type -> path): ``-o`` as given when it names one type's file (it ends with
    that type's suffix: ``run.sqlite``, ``run_pqtdir``), else a prefix for every type;
    without ``-o``, the recording's own prefix (``run.nvtxrec`` -> ``run.sqlite`` ...)."""
    from .._export_types import TYPES, output_path
    from .._paths import recording_stem
    from .record import _output_prefix

    if output is None:
        base = recording if recording.is_dir() else recording.parent
        prefix = base.with_name(recording_stem(base))
    else:
        if len(types) == 1 and output.endswith(TYPES[types[0]].suffix) and len(output) > len(TYPES[types[0]].suffix):
            path = Path(output)
            return path.with_name(path.name[: -len(TYPES[types[0]].suffix)] or path.name), {types[0]: path}
        prefix = _output_prefix(output)
    return prefix, {t: output_path(prefix, t) for t in types}


def cmd_export(args) -> int:
    from ._exports import damaged_line, write_exports
    from .record import _prepare_output_dir

    recording = _input(args.recording)
    prefix, targets = targets_of(recording, args.type, args.output)
    if recording.resolve() in {p.resolve() for p in targets.values()}:
        raise CliError(f"-o {args.output}: that is the recording itself", EXIT_USAGE)
    existing = [p for p in targets.values() if os.path.lexists(p)]
    if existing and not args.force_overwrite:
        raise CliError(f"{existing[0]} exists; add --force-overwrite true to replace it", EXIT_OUTPUT_EXISTS)
    _prepare_output_dir(prefix.parent)
    events, damage = write_exports(recording, prefix, False, targets=targets, summary=False)
    if events == 0 and not damage.damaged:
        raise CliError(f"no NVTX events in {recording}: nothing exported", EXIT_NO_EVENTS)
    if damage.damaged:
        raise CliError(damaged_line(recording, damage), EXIT_DAMAGED)
    return 0


def register(subparsers) -> None:
    from .._export_types import TYPES

    p = subparsers.add_parser(
        "export",
        help="write a recording's exports again, or in other formats (as nsys export)",
        description=(
            "Write the exports of a recording (PREFIX.nvtxrec) without running anything again, as "
            "`nsys export` does for a report: "
            + "; ".join(f"{name}: PREFIX{t.suffix}" for name, t in TYPES.items())
            + ". Several types are written from one reading of the recording."
        ),
    )
    p.add_argument("recording", metavar="RECORDING", help="PREFIX.nvtxrec folder (or PREFIX)")
    p.add_argument(
        "-t",
        "--type",
        type=export_types,
        default=("sqlite",),
        metavar="TYPES",
        help=f"comma-separated: {', '.join(TYPES)} (default: sqlite, as nsys)",
    )
    p.add_argument(
        "-o",
        "--output",
        metavar="OUTPUT",
        help="the file for one type (e.g. run.sqlite, run_pqtdir), else a PREFIX each type's suffix is added to "
        "(default: the recording's PREFIX)",
    )
    p.add_argument(
        "-f",
        "--force-overwrite",
        type=_true_false,
        default=False,
        metavar="true|false",
        help="replace outputs that exist (default: false: they are an error, exit 14)",
    )
    p.set_defaults(func=cmd_export)
