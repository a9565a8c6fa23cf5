"""Write an output file atomically: into ``NAME.tmpPID``, renamed over ``NAME`` on success."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path


@contextlib.contextmanager
def atomic_output(output):
    """Yields the temporary path to write; on success it replaces ``output``, on any
    error it is removed and ``output`` is left as it was."""
    output = Path(output)
    tmp = output.with_name(output.name + f".tmp{os.getpid()}")
    if tmp.exists():
        tmp.unlink()
    try:
        yield tmp
        os.replace(tmp, output)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
