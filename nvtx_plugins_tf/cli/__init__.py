"""``nvtx-tf`` / ``python -m nvtx_plugins_tf``: record NVTX ranges and report on them.

One module per subcommand (``record``, ``report``, ``export``, ``analyze``, ``compare``, ``merge``,
``pack``, ``view``, ``watch``; ``doctor`` and ``build`` live in :mod:`nvtx_plugins_tf.doctor`), each with
``register(subparsers)`` listed in :data:`REGISTRARS`; each sets ``func`` (``args -> int``) on its
parser. This package must not import TensorFlow.

Exit codes: see the ``EXIT_*`` constants. A failure prints one line
``nvtx-tf: error: ...`` on stderr, never a traceback.
"""

from __future__ import annotations

import argparse
import signal
import sys

from . import _quick_exit, analyze, compare, export, merge, pack, record, report, view, watch
from ._common import (
    EXIT_COMMAND_NOT_FOUND,
    EXIT_DAMAGED,
    EXIT_DASK_UNAVAILABLE,
    EXIT_FAILURE,
    EXIT_INPUT_NOT_FOUND,
    EXIT_NO_EVENTS,
    EXIT_OK,
    EXIT_OUTPUT_BUSY,
    EXIT_OUTPUT_EXISTS,
    EXIT_OUTPUT_NOT_WRITABLE,
    EXIT_RECORDER_UNAVAILABLE,
    EXIT_USAGE,
    PROG,
    CliError,
    Terminated,
    command_ended,
    error,
    signal_words,
    terminate_by_exception,
    warn,
)

__all__ = [
    "EXIT_COMMAND_NOT_FOUND",
    "EXIT_DAMAGED",
    "EXIT_DASK_UNAVAILABLE",
    "EXIT_FAILURE",
    "EXIT_INPUT_NOT_FOUND",
    "EXIT_NO_EVENTS",
    "EXIT_OK",
    "EXIT_OUTPUT_BUSY",
    "EXIT_OUTPUT_EXISTS",
    "EXIT_OUTPUT_NOT_WRITABLE",
    "EXIT_RECORDER_UNAVAILABLE",
    "EXIT_USAGE",
    "CliError",
    "build_parser",
    "error",
    "main",
    "warn",
]


def _register_doctor_and_build(subparsers) -> None:
    from nvtx_plugins_tf import doctor

    doctor.register(subparsers)


#: Functions ``register(subparsers)``, each adding its subcommands, in the order of --help.
REGISTRARS = [
    record.register,
    report.register,
    export.register,
    analyze.register,
    compare.register,
    merge.register,
    pack.register,
    view.register,
    watch.register,
    _register_doctor_and_build,
]


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line with the way to the usage, exit code EXIT_USAGE
        raise CliError(f"{message} (see: {self.prog} --help)", EXIT_USAGE)


def build_parser() -> argparse.ArgumentParser:
    from nvtx_plugins_tf import __version__  # the package's one version (pyproject reads it too)

    parser = _Parser(prog=PROG, description="Record and report NVTX ranges (nvtx_plugins_tf).")
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    subparsers = parser.add_subparsers(dest="subcommand", metavar="COMMAND", parser_class=_Parser)
    subparsers.required = True
    for register in REGISTRARS:
        register(subparsers)
    return parser


def _printable_paths() -> None:
    """A file name that is no UTF-8 (held as surrogates) printed as ``\\udcff`` escapes,
    never a UnicodeEncodeError: stdout is strict under a UTF-8 locale (stderr already
    escapes)."""
    for stream in (sys.stdout, sys.stderr):
        if getattr(stream, "errors", None) == "strict" and hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")


def main(argv: list[str] | None = None) -> int:
    """Run the command line ``argv`` (default: this process's) and return its exit code; from
    the process's own command line, a command may end the process at once (:mod:`._quick_exit`)."""
    _quick_exit.set_own_process(argv is None)
    try:
        code = _main(argv)
    except (Terminated, KeyboardInterrupt) as exc:  # (the signal came as _main returned)
        code = _interrupted(exc)
    code = command_ended(code)  # (a signal from now on: _common's "ended")
    _quick_exit.end_if_asked(code)
    return code


def _interrupted(exc: BaseException) -> int:
    """The line and exit code of the signal that ended the command."""
    signo = exc.signo if isinstance(exc, Terminated) else signal.SIGINT
    error(f"{signal_words(signo)}; partial outputs removed")
    return 128 + signo


def _main(argv: list[str] | None) -> int:
    try:
        _printable_paths()
        terminate_by_exception(own_process=argv is None)
        parser = build_parser()
        args = parser.parse_args(argv)
        return int(args.func(args) or 0)
    except CliError as exc:
        error(str(exc))
        return exc.code
    except (Terminated, KeyboardInterrupt) as exc:
        return _interrupted(exc)
    except BrokenPipeError:
        return EXIT_OK
    except Exception as exc:  # noqa: BLE001 - one line, never a traceback
        error(f"{type(exc).__name__}: {exc}")
        return EXIT_FAILURE


if __name__ == "__main__":
    sys.exit(main())
