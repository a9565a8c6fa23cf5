"""Write an output file atomically through a private temporary file in its folder.

The temporary file is made by :func:`tempfile.mkstemp` in the output's own folder: an
unpredictable name, created with ``O_CREAT | O_EXCL`` and mode 0600, so a file or a
symbolic link planted in advance under any name is never followed or overwritten, and
``os.replace`` onto the output stays on one filesystem (atomic). The output keeps mode
0600: exports hold the recorded command lines.
"""

from __future__ import annotations

import contextlib
import os
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
