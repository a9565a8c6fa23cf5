"""``pack``: the closed segments of recordings made without ``record`` (its environment set by
hand, ``nvtx_plugins_tf.recorder.environment()``, a launcher) packed as ``record`` packs its
own (:mod:`nvtx_plugins_tf.recorder.recording.packed`)."""

from __future__ import annotations

import errno

from ._common import EXIT_INPUT_NOT_FOUND, EXIT_OUTPUT_NOT_WRITABLE, CliError, warn

_NOT_WRITABLE = (errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOSPC, errno.EDQUOT)


def cmd_pack(args) -> int:
    from .._paths import RECORDING_SUFFIX, recording_path
    from ..recorder.recording.packed import pack_recording
    from ..recorder.recording.reader import is_segment, segment_files

    folders = []
    for value in args.recordings:
        if not value:
            raise CliError("RECORDING '': empty; give PREFIX or a PREFIX.nvtxrec folder", EXIT_INPUT_NOT_FOUND)
        path = recording_path(value)
        if not path.is_dir():
            what = "no such recording" if not path.exists() else f"not a {RECORDING_SUFFIX} recording folder"
            raise CliError(f"{value}: {what}", EXIT_INPUT_NOT_FOUND)
        try:
            files = segment_files(path)
            if not files:
                raise CliError(f"{value}: no segment files in it: not a recording", EXIT_INPUT_NOT_FOUND)
            if not any(is_segment(f) for f in files):
                raise CliError(
                    f"{value}: none of its {len(files)} segment file(s) has a recorder's segment header: "
                    "not a recording",
                    EXIT_INPUT_NOT_FOUND,
                )
        except PermissionError as exc:
            raise CliError(f"cannot read {path}: permission denied", EXIT_INPUT_NOT_FOUND) from exc
        folders.append(path)
    for path in folders:  # (every input checked first)
        try:
            result = pack_recording(path)
        except OSError as exc:
            if exc.errno in _NOT_WRITABLE:
                raise CliError(f"cannot pack {exc.filename or path}: {exc.strerror}", EXIT_OUTPUT_NOT_WRITABLE) from exc
            raise CliError(f"cannot pack {exc.filename or path}: {exc.strerror}", EXIT_INPUT_NOT_FOUND) from exc
        for line in result.left:
            warn(f"left raw: {line}")
        mib = 1 << 20
        print(
            f"{path}: {result.packed} segment(s) packed, "
            f"{result.raw_bytes / mib:.1f} MiB -> {result.packed_bytes / mib:.1f} MiB"
        )
    return 0


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "pack",
        help="pack the closed segments of recordings (record does it itself)",
        description=(
            "Pack each raw segment (PID-START.nvtxseg) of the recordings whose process has ended into "
            "PID-START.nvtxsegz: every chunk a Zstandard frame, about 0.5 byte per push/pop event and 3 per "
            "start/end event instead of 8 and 16. record packs its own recording after the exports; this is "
            "for recordings made with the recorder's environment set otherwise. Every command reads both "
            "forms. A segment still written (its writer holds its lock, whatever its PID namespace), or one "
            "written on another host whose writer may still run, is left raw (said on stderr, one line each)."
        ),
    )
    p.add_argument("recordings", nargs="+", metavar="RECORDING", help="PREFIX.nvtxrec directories (or PREFIX)")
    p.set_defaults(func=cmd_pack)
