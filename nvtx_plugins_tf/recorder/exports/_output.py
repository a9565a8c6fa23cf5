"""Write an output file atomically through a private temporary file in its folder (and an
output directory, built beside it: :func:`replace_directory`).

The temporary file is made by :func:`tempfile.mkstemp` in the output's own folder: an
unpredictable name, created with ``O_CREAT | O_EXCL`` and mode 0600, so a file or a
symbolic link planted in advance under any name is never followed or overwritten, and
``os.replace`` onto the output stays on one filesystem (atomic). The output keeps mode
0600: exports hold the recorded command lines.

Signals: Python runs its signal handlers (Ctrl-C's KeyboardInterrupt, the CLI's SIGTERM and
SIGHUP) in the main thread, between two bytecodes, wherever it is. One landing between the
creation of a temporary file (or the start of the thread that creates one) and the moment
its cleanup owns it would leave the file behind. :func:`nvtx_plugins_tf._signals.held` holds
such signals over that window and delivers them as soon as it ends, when the cleanup is in
place.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import tempfile
from pathlib import Path

from ..._signals import held

__all__ = ["atomic_output", "public_name"]

# ".NAME.XXXXXXXX.tmp" (atomic_output), ".NAME.XXXXXXXX.events" (the Arrow export's spool),
# ".NAME.XXXXXXXX" and ".NAME.XXXXXXXX.old" (the parquetdir export's folders)
_TEMP_NAME = re.compile(r"\.(?P<name>.+)\.[A-Za-z0-9_]{8}(?:\.(?:tmp|events|old))?")


def public_name(path) -> Path:
    """The output a temporary file of this module stands for (``.run.json.k2x9_q1a.tmp`` ->
    ``run.json``), or ``path`` itself: errors name the output, never the hidden file.

    >>> str(public_name("out/.run.json.k2x9_q1a.tmp")), str(public_name("out/run.json"))
    ('out/run.json', 'out/run.json')
    """
    path = Path(path)
    match = _TEMP_NAME.fullmatch(path.name)
    return path.with_name(match["name"]) if match else path


@contextlib.contextmanager
def atomic_output(output):
    """Yields the temporary path to write; on success it replaces ``output``, on any
    error (a signal included, wherever it lands) it is removed and ``output`` is left as
    it was."""
    output = Path(output)
    tmp = None  # the temporary file, once made: the except clause removes it
    try:
        with held():  # (made and owned in one step)
            fd, name = tempfile.mkstemp(dir=output.parent, prefix=f".{output.name}.", suffix=".tmp")
            tmp = Path(name)
            os.close(fd)
        yield tmp
        with held():  # (renamed, and no longer ours to remove, in one step)
            os.replace(tmp, output)
            tmp = None
    except BaseException:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        raise


def replace_directory(tmp: Path, output: Path) -> None:
    """Put the directory ``tmp`` (built beside ``output``) in place of ``output``: an older
    export is moved aside, the new one renamed into place, the old one removed."""
    old = None
    with held():  # (no signal between the two renames: the output is there, old or new)
        if output.exists() or output.is_symlink():
            old = tmp.with_name(tmp.name + ".old")
            output.rename(old)
        tmp.rename(output)
    if old is not None:
        if old.is_dir() and not old.is_symlink():
            shutil.rmtree(old, ignore_errors=True)
        else:
            old.unlink()
