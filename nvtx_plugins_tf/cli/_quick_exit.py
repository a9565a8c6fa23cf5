"""Ending the process at once when a command is done (``analyze``, ``compare``): Python's teardown of the
modules a command imported (numpy, pyarrow, matplotlib: 0.1-0.2 s of a core, more on a busy
machine) is a tenth of analyzing 8 ranks, and has nothing left to do once the outputs are
written and the streams flushed. Only from the command line itself (:func:`.main` without
``argv``: a caller's process, as the tests', ends as it will) and only for a command that
asked for it, having closed everything it opened (no Dask cluster: its shutdown is its own)."""

from __future__ import annotations

import os
import sys

_asked = False
_own_process = False


def own_process() -> bool:
    """Whether the command runs from the process's own command line (:func:`.main` without
    ``argv``): the process is the command's, as a fork or an exit of its own may assume."""
    return _own_process


def set_own_process(own: bool) -> None:
    """Said by :func:`.main` before the command runs."""
    global _own_process
    _own_process = own


def ask() -> None:
    """The command running asks the process to end as soon as :func:`.main` returns."""
    global _asked
    _asked = True


def end_if_asked(code: int) -> None:
    """``os._exit(code)`` after flushing stdout and stderr, if the command asked for it and
    runs from the process's own command line."""
    if not (_asked and _own_process):
        return
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # (a closed pipe: what could be written was)
            pass
    os._exit(code)
