"""Write an output file atomically through a private temporary file in its folder (and an
output directory, built beside it: :func:`replace_directory`).

The temporary file is made by :func:`tempfile.mkstemp` in the output's own folder: an
unpredictable name, created with ``O_CREAT | O_EXCL`` and mode 0600, so a file or a
symbolic link planted in advance under any name is never followed or overwritten, and
``os.replace`` onto the output stays on one filesystem (atomic). The output keeps mode
0600: exports hold the recorded command lines.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path


@contextlib.contextmanager
def atomic_output(output):
    """Yields the temporary path to write; on success it replaces ``output``, on any
    error it is removed and ``output`` is left as it was."""
    output = Path(output)
    fd, name = tempfile.mkstemp(dir=output.parent, prefix=f".{output.name}.", suffix=".tmp")
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        os.replace(tmp, output)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def replace_directory(tmp: Path, output: Path) -> None:
    """Put the directory ``tmp`` (built beside ``output``) in place of ``output``: an older
    export is moved aside, the new one renamed into place, the old one removed."""
    old = None
    if output.exists() or output.is_symlink():
        old = tmp.with_name(tmp.name + ".old")
        output.rename(old)
    tmp.rename(output)
    if old is not None:
        if old.is_dir() and not old.is_symlink():
            shutil.rmtree(old, ignore_errors=True)
        else:
            old.unlink()
