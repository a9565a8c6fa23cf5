"""The exports ``record`` writes once the command has ended: PREFIX.json, PREFIX.sqlite,
PREFIX.png on request, and the summary on stdout."""

from __future__ import annotations

import errno
from pathlib import Path

from ._common import EXIT_OUTPUT_NOT_WRITABLE, CliError, warn


def write_exports(raw_dir: Path, prefix: Path, png: bool, png_window: str = "1:") -> tuple[int, object]:
    """Write PREFIX.json/.sqlite(/.png) and print the summary; returns (events, damage)."""
    from ..recorder.export_json import export_json
    from ..recorder.export_sqlite import export_sqlite
    from ..recorder.reader import RecordingReader
    from ..recorder.summary import summarize

    json_path = prefix.with_name(prefix.name + ".json")
    sqlite_path = prefix.with_name(prefix.name + ".sqlite")
    png_path = prefix.with_name(prefix.name + ".png")
    written = []
    try:
        with RecordingReader(raw_dir) as reader:
            damage = export_json(raw_dir, json_path, reader=reader)
        if damage.events == 0:
            # The new run has started and recorded nothing: exports of an older run
            # would no longer match PREFIX.nvtxrec.
            for stale in (json_path, sqlite_path, png_path):
                stale.unlink(missing_ok=True)
            return 0, damage
        written.append(json_path)
        with RecordingReader(raw_dir) as reader:
            export_sqlite(raw_dir, sqlite_path, reader=reader)
        written.append(sqlite_path)
        with RecordingReader(raw_dir) as reader:
            summary = summarize(raw_dir, reader=reader)
        if png:
            from ..recorder.timeline import MatplotlibMissing, render_timeline

            try:
                render_timeline(raw_dir, png_path, window=png_window)
                written.append(png_path)
            except MatplotlibMissing as exc:
                warn(f"--png: {exc}; no PNG written")
    except PermissionError as exc:
        raise CliError(f"cannot write {exc.filename or prefix}: permission denied", EXIT_OUTPUT_NOT_WRITABLE) from exc
    except OSError as exc:
        if exc.errno in (
            errno.EACCES,
            errno.EROFS,
            errno.ENOSPC,
            errno.ENOENT,
            errno.EDQUOT,
            errno.EISDIR,
            errno.ENOTDIR,
            errno.EEXIST,
        ):
            raise CliError(f"cannot write {exc.filename or prefix}: {exc.strerror}", EXIT_OUTPUT_NOT_WRITABLE) from exc
        raise
    print(f"\nNVTX range summary ({raw_dir}):")
    print(summary.format())
    print(f"\nwrote {', '.join(map(str, written))}")
    return damage.events, damage
