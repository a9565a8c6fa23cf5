"""``merge``: recordings of several hosts into one timeline (PREFIX.nvtxrec, PREFIX.json,
PREFIX.sqlite), clocks aligned through each segment's realtime anchor
(:mod:`nvtx_plugins_tf.recorder.merge`)."""

from __future__ import annotations

import errno

from ._common import (
    EXIT_DAMAGED,
    EXIT_INPUT_NOT_FOUND,
    EXIT_NO_EVENTS,
    EXIT_OUTPUT_NOT_WRITABLE,
    EXIT_USAGE,
    CliError,
    distinct_inputs,
)


def cmd_merge(args) -> int:
    from .._paths import RECORDING_SUFFIX, recording_path
    from ..recorder.merge import MergeError, merge
    from .record import _output_prefix, _pack, _prepare_output_dir, _restamp_exports

    inputs = [recording_path(v) for v in args.recordings]
    labels = None
    if args.label:
        labels = [name.strip() for value in args.label for name in value.split(",")]
        if len(labels) != len(inputs) or "" in labels:
            raise CliError(f"--label: {len(inputs)} names needed (one per recording), got {len(labels)}", EXIT_USAGE)
        if len(set(labels)) != len(labels):
            raise CliError("--label: the names must differ", EXIT_USAGE)
    distinct_inputs(args.recordings, inputs)
    prefix = _output_prefix(args.output)
    raw_dir = prefix.with_name(prefix.name + RECORDING_SUFFIX)
    try:
        from ..recorder.merge import open_sources

        open_sources(inputs, labels)  # every input checked before the output is touched
    except MergeError as exc:
        raise CliError(str(exc), EXIT_INPUT_NOT_FOUND) from exc
    if raw_dir.resolve() in {p.resolve() for p in inputs}:
        raise CliError(f"-o {args.output}: {raw_dir} is one of the recordings to merge", EXIT_USAGE)
    _prepare_output_dir(prefix.parent)
    try:
        manifest = merge(inputs, raw_dir, labels)
    except MergeError as exc:
        raise CliError(str(exc), EXIT_INPUT_NOT_FOUND) from exc
    except OSError as exc:
        if exc.errno in (
            errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOSPC, errno.EDQUOT, errno.ENOTDIR, errno.EEXIST,
            errno.ENAMETOOLONG, errno.EISDIR, errno.EINVAL,
        ):  # fmt: skip
            raise CliError(f"cannot write {exc.filename or raw_dir}: {exc.strerror}", EXIT_OUTPUT_NOT_WRITABLE) from exc
        raise
    for src in manifest["sources"]:
        shift = src["shift_ns"]
        shift_text = f"{shift / 1e9:+.6f} s" if isinstance(shift, int) else "per process"
        print(f"{src['label']}: {src['path']} ({len(src['segments'])} segment(s), clock shift {shift_text})")
    from ._exports import damaged_line, write_exports

    events, damage = write_exports(raw_dir, prefix, False)
    _pack(raw_dir, live_check=False)  # (its segments are copies: no process writes them)
    _restamp_exports(raw_dir, prefix)
    if events == 0 and not damage.damaged:
        raise CliError(f"no NVTX events in the recordings merged into {raw_dir}", EXIT_NO_EVENTS)
    if damage.damaged:
        raise CliError(damaged_line(raw_dir, damage), EXIT_DAMAGED)
    return 0


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "merge",
        help="merge recordings of several hosts into one timeline",
        description=(
            "Merge recordings (one per host) into PREFIX.nvtxrec/ and write PREFIX.json and PREFIX.sqlite as "
            "record does. Each host's monotonic clock is aligned through the wall-clock time stored in every "
            "segment (accuracy across hosts: that of their clocks, NTP: about 1 ms on a LAN); recordings "
            "sharing one clock keep their exact order. Processes are labelled LABEL:name (LABEL: --label, else "
            "the host name the recorder stored when each recording is from one host and they differ, else the "
            "recording's name without .nvtxrec); a pid already taken by an earlier recording "
            "is renumbered from 4194304 up. PREFIX.nvtxrec/merge.json tells what was done."
        ),
    )
    p.add_argument("recordings", nargs="+", metavar="RECORDING", help="PREFIX.nvtxrec directories (or PREFIX)")
    p.add_argument("-o", "--output", required=True, metavar="PREFIX", help="output prefix")
    p.add_argument(
        "--label",
        action="append",
        metavar="NAMES",
        help="comma-separated labels, one per recording in order (default: their host names when they differ, "
        "else the recordings' names)",
    )
    p.set_defaults(func=cmd_merge)
