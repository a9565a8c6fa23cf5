"""heatmap.png drawn by a process of its own, forked by ``nvtx-tf analyze`` before it imports
numpy and pyarrow: the child imports numpy and Pillow on the core the command's own
start-up leaves idle, waits for the step durations (sent as soon as
the inputs are mapped: the picture is drawn while the parent reduces and writes the tables),
renders the PNG with :func:`.heatmap.render_heatmap`, hands its bytes back and ends. The
parent never imports Pillow, and writes the file itself, with the tables.

Only from the command line and only for this process's own engines, the embedded one and
``--workers``' in-process cluster (:mod:`nvtx_plugins_tf.cli.analyze`; forked before Dask is
imported): a caller's process may hold threads and locks a fork would copy; ``--scheduler``'s
client draws the picture itself. Whatever goes wrong in the child (killed,
Pillow missing, an error drawing), the parent draws the picture itself, as without the child. The
child writes no file, dies with the parent (PR_SET_PDEATHSIG) and with the signals of the
parent's process group (their default actions, never a traceback), and is reaped by
:func:`stop`. This module imports nothing heavy: it is imported before the fork.
"""

from __future__ import annotations

import ctypes
import fcntl
import os
import pickle
import signal

__all__ = ["Painter", "start", "current", "stop", "MAX_CELLS"]

_PR_SET_PDEATHSIG = 1
_PIPE_BYTES = 1 << 20  #: each pipe's room (Linux's default most for a user)
#: the most step durations sent to the child: beyond, drawn by the parent, which holds them
#: already (not copied through a pipe)
MAX_CELLS = 4_000_000
_current: Painter | None = None


class Painter:
    """The child process: :meth:`paint` sends it one picture to draw, :meth:`wait` tells how
    it went, :meth:`close` kills and reaps it if need be."""

    def __init__(self, pid: int, jobs: int, results: int):
        self.pid = pid
        self._jobs = os.fdopen(jobs, "wb")
        self._results = os.fdopen(results, "rb")
        self.sent: tuple | None = None  #: the picture sent (durations, rank names, title)

    def paint(self, durations: list, rank_names: list[str], title: str) -> bool:
        """Sends the picture to draw; False when the child cannot be reached or the picture
        holds over :data:`MAX_CELLS` durations (the caller draws it)."""
        if sum(len(d) for d in durations) > MAX_CELLS:
            return False
        try:
            pickle.dump((durations, rank_names, title), self._jobs)
            self._jobs.flush()
        except (OSError, ValueError, pickle.PicklingError):
            return False
        self.sent = (durations, rank_names, title)
        return True

    def wait(self) -> bytes | None:
        """The PNG file's bytes the child drew; None when it could not (the caller draws it)."""
        if self.sent is None:
            return None
        try:
            answer = pickle.load(self._results)
        except (OSError, EOFError, pickle.UnpicklingError):
            answer = ("gone",)
        finally:
            self.close()
        return answer[1] if answer[0] == "drawn" else None

    def close(self) -> None:
        """Kills the child if it still runs, reaps it, closes the pipes (idempotent)."""
        global _current
        if self.pid:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            try:
                os.waitpid(self.pid, 0)
            except ChildProcessError:
                pass
            self.pid = 0
        for stream in (self._jobs, self._results):
            try:
                stream.close()
            except OSError:
                pass
        if _current is self:
            _current = None


def start() -> Painter | None:
    """Forks the painter (call before numpy, pyarrow and any thread); None when it cannot."""
    global _current
    if _current is not None:
        return _current
    try:
        jobs_read, jobs_write = os.pipe()
        results_read, results_write = os.pipe()
    except OSError:
        return None
    for fd in (jobs_write, results_write):  # (room for a picture's data: no wait while the child imports)
        try:
            fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, _PIPE_BYTES)
        except OSError:
            pass
    parent = os.getpid()
    try:
        pid = os.fork()
    except OSError:
        for fd in (jobs_read, jobs_write, results_read, results_write):
            os.close(fd)
        return None
    if pid == 0:  # the child: never returns
        code = 0
        try:
            os.close(jobs_write)
            os.close(results_read)
            _child(parent, jobs_read, results_write)
        except BaseException:  # noqa: BLE001 - nothing of the child reaches the user
            code = 1
        finally:
            os._exit(code)
    os.close(jobs_read)
    os.close(results_write)
    _current = Painter(pid, jobs_write, results_read)
    return _current


def current() -> Painter | None:
    """The painter started by :func:`start` and not yet closed, if any."""
    return _current


def stop() -> None:
    """Closes the current painter, if any."""
    if _current is not None:
        _current.close()


def _child(parent: int, jobs: int, results: int) -> None:
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGPIPE):
        signal.signal(sig, signal.SIG_DFL)
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent:  # (the parent ended before the line above)
        return
    with os.fdopen(jobs, "rb") as job_stream, os.fdopen(results, "wb") as answer_stream:
        from . import heatmap

        ready = heatmap.available()
        try:
            durations, rank_names, title = pickle.load(job_stream)
        except (EOFError, OSError, pickle.UnpicklingError):
            return  # (the parent ended, or had nothing to draw)
        answer: tuple = ("unavailable",)
        if ready:
            try:
                answer = ("drawn", heatmap.render_heatmap(durations, rank_names, title))
            except Exception as exc:  # noqa: BLE001 - the parent draws it itself
                answer = ("failed", repr(exc))
        pickle.dump(answer, answer_stream)
