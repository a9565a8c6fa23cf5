"""The exports ``record`` writes once the command has ended (PREFIX.json and PREFIX.sqlite, or
the types of ``--export``; PREFIX.png on request) and the summary on stdout; ``merge`` and
``export`` write theirs through the same function."""

from __future__ import annotations

import errno
import os
from pathlib import Path

from ._common import EXIT_OUTPUT_NOT_WRITABLE, CliError, warn

_NOT_WRITABLE = (
    errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOSPC, errno.ENOENT, errno.EDQUOT, errno.EISDIR, errno.ENOTDIR,
    errno.EEXIST, errno.EFBIG, errno.ENAMETOOLONG,
)  # fmt: skip

# SQLITE_READONLY, SQLITE_IOERR, SQLITE_FULL, SQLITE_CANTOPEN (primary result codes)
_SQLITE_WRITE_ERRORS = (8, 10, 13, 14)


def damaged_line(recording, damage) -> str:
    """The line ``record``, ``merge`` and ``export`` print for a damaged recording (exit code
    EXIT_DAMAGED): its intact events were exported, or it has none and nothing was."""
    if damage.events == 0:
        return f"damaged recording {recording}: {damage.describe()}; no intact event in it: nothing exported"
    return f"damaged recording {recording}: {damage.describe()}; intact events were exported"


def write_exports(
    raw_dir: Path,
    prefix: Path,
    png: bool,
    png_window: str = "1:",
    *,
    types: tuple[str, ...] | None = None,
    targets: dict | None = None,
    summary: bool = True,
) -> tuple[int, object]:
    """Write the exports (PREFIX.json/.sqlite, or ``types``, or ``targets``: type -> path;
    PREFIX.png with ``png``) and print the summary (with ``summary``), then what was
    written; returns (events, damage).

    The work is :func:`nvtx_plugins_tf.recorder.outputs.write_outputs`'s (one decode feeds
    every writer); here its errors become one line and an exit code."""
    import sqlite3

    from .._export_types import DEFAULT_RECORD_TYPES
    from ..recorder.exports._output import public_name
    from ..recorder.outputs import output_paths, write_outputs

    sqlite_path = (targets or {}).get("sqlite", output_paths(prefix)["sqlite"])
    try:
        out = write_outputs(
            raw_dir,
            prefix,
            png=png,
            png_window=png_window,
            types=types or DEFAULT_RECORD_TYPES,
            targets=targets,
            summary=summary,
            remove_stale=targets is None,
        )
    except sqlite3.Error as exc:
        # The SQLite file is written along with the others: it can be the first to find the disk full.
        if getattr(exc, "sqlite_errorcode", 0) & 0xFF in _SQLITE_WRITE_ERRORS:
            raise CliError(f"cannot write {sqlite_path}: {exc}", EXIT_OUTPUT_NOT_WRITABLE) from exc
        raise
    except OSError as exc:
        if exc.errno in _NOT_WRITABLE:
            # (named as the output, never its hidden temporary file; pyarrow's errors name no file)
            outputs = list((targets or {}).values()) or [prefix]
            where = public_name(exc.filename) if exc.filename else (outputs[0] if len(outputs) == 1 else prefix.parent)
            raise CliError(f"cannot write {where}: {os.strerror(exc.errno)}", EXIT_OUTPUT_NOT_WRITABLE) from exc
        raise
    damage = out.damage
    if damage.events == 0:
        return 0, damage
    if out.png_error is not None:
        warn(f"--png: {out.png_error}; no PNG written")
    if out.summary is not None:
        print(f"\nNVTX range summary ({raw_dir}):")
        print(out.summary.format())
        print()
    print(f"wrote {', '.join(map(str, out.written))}")
    return damage.events, damage
