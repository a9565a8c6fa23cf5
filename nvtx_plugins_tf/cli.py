"""``nvtx-tf`` / ``python -m nvtx_plugins_tf``: record NVTX ranges and report on them.

Subcommands are registered by ``register(subparsers)``-style functions listed in
:data:`REGISTRARS`; each sets ``func`` (``args -> int``) on its parser. This module must
not import TensorFlow.

Exit codes: see the ``EXIT_*`` constants. A failure prints one line
``nvtx-tf: error: ...`` on stderr, never a traceback.
"""

from __future__ import annotations

import argparse
import errno
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

PROG = "nvtx-tf"

EXIT_OK = 0
EXIT_FAILURE = 1            # unexpected internal error
EXIT_USAGE = 2              # bad command line (argparse)
EXIT_OUTPUT_NOT_WRITABLE = 3
EXIT_COMMAND_NOT_FOUND = 4
EXIT_NO_EVENTS = 5          # the recording holds no NVTX event
EXIT_DAMAGED = 6            # damaged segments/chunks; what was intact was exported
EXIT_INPUT_NOT_FOUND = 7    # report: path missing or unreadable
EXIT_RECORDER_UNAVAILABLE = 8  # libnvtx_recorder.so missing and cannot be built


class CliError(Exception):
    """Ends the command with ``nvtx-tf: error: <message>`` and ``code``."""

    def __init__(self, message: str, code: int):
        super().__init__(message)
        self.code = code


def error(message: str) -> None:
    print(f"{PROG}: error: {message}", file=sys.stderr, flush=True)


def warn(message: str) -> None:
    print(f"{PROG}: warning: {message}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- record
def _check_writable_dir(directory: Path) -> None:
    directory = directory if str(directory) else Path(".")
    if not directory.is_dir():
        raise CliError(f"output directory {directory} does not exist", EXIT_OUTPUT_NOT_WRITABLE)
    if not os.access(directory, os.W_OK | os.X_OK):
        raise CliError(f"output directory {directory} is not writable", EXIT_OUTPUT_NOT_WRITABLE)


def _resolve_command(command: list[str]) -> str:
    exe = command[0]
    if os.sep in exe:
        if not os.path.isfile(exe):
            raise CliError(f"command not found: {exe}", EXIT_COMMAND_NOT_FOUND)
        if not os.access(exe, os.X_OK):
            raise CliError(f"command not executable: {exe}", EXIT_COMMAND_NOT_FOUND)
        return exe
    found = shutil.which(exe)
    if found is None:
        raise CliError(f"command not found: {exe}", EXIT_COMMAND_NOT_FOUND)
    return found


def _run_forwarding_signals(command: list[str], env: dict) -> int:
    """Run ``command``; forward SIGINT/SIGTERM sent to us; return its exit status.

    Signals are blocked and taken with sigtimedwait so that we can tell a terminal's
    Ctrl-C (sent by the kernel to the whole foreground group, the child included) from
    a ``kill`` aimed at us alone: only the latter is forwarded.
    """
    try:
        proc = subprocess.Popen(command, env=env)
    except FileNotFoundError as exc:
        raise CliError(f"command not found: {command[0]}", EXIT_COMMAND_NOT_FOUND) from exc
    except PermissionError as exc:
        raise CliError(f"command not executable: {command[0]}", EXIT_COMMAND_NOT_FOUND) from exc
    except OSError as exc:
        raise CliError(f"cannot run {command[0]}: {exc.strerror}", EXIT_COMMAND_NOT_FOUND) from exc
    sigs = {signal.SIGINT, signal.SIGTERM, signal.SIGCHLD}

    def forward(signo, _frame):
        # Only reached when the kernel picked another thread of ours (one created before
        # the mask, e.g. by a BLAS pool): no si_code there, forward unconditionally.
        if proc.poll() is None:
            try:
                proc.send_signal(signo)
            except ProcessLookupError:
                pass

    old_handlers = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM)}
    old_mask = signal.pthread_sigmask(signal.SIG_BLOCK, sigs)
    try:
        while True:
            rc = proc.poll()
            if rc is not None:
                while signal.sigtimedwait(sigs, 0) is not None:  # drop what is pending
                    pass
                return rc
            info = signal.sigtimedwait(sigs, 0.2)
            if info is None or info.si_signo == signal.SIGCHLD:
                continue
            from_terminal = info.si_code == 0x80  # SI_KERNEL: tty-generated, child got it too
            if not from_terminal and proc.poll() is None:
                try:
                    proc.send_signal(info.si_signo)
                except ProcessLookupError:
                    pass
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)
        for signo, handler in old_handlers.items():
            signal.signal(signo, handler)


def _exports(raw_dir: Path, prefix: Path, png: bool) -> tuple[int, object]:
    """Write PREFIX.json/.sqlite(/.png) and print the summary; returns (events, damage)."""
    from .recorder.export_json import export_json
    from .recorder.export_sqlite import export_sqlite
    from .recorder.reader import RecordingReader
    from .recorder.summary import summarize

    json_path = prefix.with_name(prefix.name + ".json")
    sqlite_path = prefix.with_name(prefix.name + ".sqlite")
    try:
        with RecordingReader(raw_dir) as reader:
            damage = export_json(raw_dir, json_path, reader=reader)
        if damage.events == 0:
            json_path.unlink(missing_ok=True)
            return 0, damage
        with RecordingReader(raw_dir) as reader:
            export_sqlite(raw_dir, sqlite_path, reader=reader)
        with RecordingReader(raw_dir) as reader:
            summary = summarize(raw_dir, reader=reader)
        if png:
            from .recorder.timeline import MatplotlibMissing, render_timeline

            try:
                render_timeline(raw_dir, prefix.with_name(prefix.name + ".png"))
            except MatplotlibMissing as exc:
                warn(str(exc))
    except PermissionError as exc:
        raise CliError(f"cannot write {exc.filename or prefix}: permission denied", EXIT_OUTPUT_NOT_WRITABLE) from exc
    except OSError as exc:
        if exc.errno in (errno.EACCES, errno.EROFS, errno.ENOSPC, errno.ENOENT, errno.EDQUOT, errno.EISDIR,
                         errno.ENOTDIR, errno.EEXIST):
            raise CliError(f"cannot write {exc.filename or prefix}: {exc.strerror}", EXIT_OUTPUT_NOT_WRITABLE) from exc
        raise
    if damage.events:
        print(f"\nNVTX range summary ({raw_dir}):")
        print(summary.format() if summary.rows else "(no closed ranges)")
        print(f"\nwrote {json_path}, {sqlite_path}" + (f", {prefix.name}.png" if png else ""))
    return damage.events, damage


INJECTION_ENV = "NVTX_INJECTION64_PATH"
RECORD_DIR_ENV = "NVTX_TF_RECORD_DIR"


def cmd_record(args) -> int:
    # Nothing heavy (numpy, the reader) is imported before the command ends: libraries
    # that start threads would create threads without our signal mask.
    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise CliError("record: no command given (usage: record -o PREFIX -- COMMAND [ARGS...])", EXIT_USAGE)
    prefix = Path(args.output)
    if prefix.name.endswith(".nvtxrec"):
        prefix = prefix.with_name(prefix.name[: -len(".nvtxrec")])
    _check_writable_dir(prefix.parent)
    raw_dir = prefix.with_name(prefix.name + ".nvtxrec")
    try:
        raw_dir.mkdir(exist_ok=True)
        for old in raw_dir.glob("*.nvtxseg"):
            old.unlink()
    except OSError as exc:
        raise CliError(f"cannot create {raw_dir}: {exc.strerror}", EXIT_OUTPUT_NOT_WRITABLE) from exc
    _resolve_command(command)
    try:
        from ._native_libs import native_library

        library = native_library("recorder")
    except ImportError as exc:
        raise CliError(str(exc).replace("nvtx_plugins_tf: ", ""), EXIT_RECORDER_UNAVAILABLE) from exc
    env = dict(os.environ)
    env[INJECTION_ENV] = str(library)
    env[RECORD_DIR_ENV] = str(raw_dir.resolve())
    if args.keras_layers:
        site = str(Path(__file__).resolve().parent / "_site")
        env["PYTHONPATH"] = os.pathsep.join(p for p in (site, env.get("PYTHONPATH", "")) if p)
    sys.stdout.flush()
    status = _run_forwarding_signals(command, env)
    code = 128 - status if status < 0 else status
    events, damage = _exports(raw_dir, prefix, args.png)
    if events == 0:
        if code != 0:
            warn(f"no NVTX events recorded; {command[0]} exited with status {code}")
            return code
        raise CliError(
            f"no NVTX events recorded in {raw_dir} (does the command make NVTX calls? "
            f"was {INJECTION_ENV} overridden?)",
            EXIT_NO_EVENTS,
        )
    if damage.damaged:
        message = f"damaged recording {raw_dir}: {damage.describe()}; intact events were exported"
        if code != 0:
            warn(message)
            return code
        raise CliError(message, EXIT_DAMAGED)
    return code


def _register_record(subparsers) -> None:
    p = subparsers.add_parser(
        "record",
        help="run a command with the NVTX recorder attached; write PREFIX.json, PREFIX.sqlite",
        description="Run COMMAND with the NVTX recorder attached (all its processes record into "
        "PREFIX.nvtxrec/, which is kept), then write PREFIX.json (Perfetto / chrome://tracing), "
        "PREFIX.sqlite (Nsight Systems schema) and print the range summary. Exits with the "
        "command's exit code (128+N if killed by signal N).",
    )
    p.add_argument("-o", "--output", required=True, metavar="PREFIX", help="output prefix")
    p.add_argument("--png", action="store_true", help="also draw PREFIX.png (needs matplotlib)")
    p.add_argument("--keep-raw", action="store_true", default=True,
                   help="keep the raw recording PREFIX.nvtxrec/ (always done; accepted for compatibility)")
    p.add_argument("--keras-layers", action="store_true",
                   help="annotate every layer of every Keras model (forward and backward ranges) "
                   "in an unmodified Python script")
    p.add_argument("command", nargs=argparse.REMAINDER, metavar="-- COMMAND [ARGS...]")
    p.set_defaults(func=cmd_record)


# --------------------------------------------------------------------------- report
def cmd_report(args) -> int:
    from .recorder.summary import is_sqlite, summarize

    path = Path(args.path)
    if not path.exists() and path.with_name(path.name + ".nvtxrec").is_dir():
        path = path.with_name(path.name + ".nvtxrec")
    if not path.exists():
        raise CliError(f"no such recording or SQLite file: {args.path}", EXIT_INPUT_NOT_FOUND)
    if not os.access(path, os.R_OK):
        raise CliError(f"cannot read {path}: permission denied", EXIT_INPUT_NOT_FOUND)
    if path.is_file() and is_sqlite(path):
        import sqlite3

        try:
            summary = summarize(path, by_process=args.by_process)
        except (sqlite3.Error, ValueError) as exc:
            raise CliError(f"cannot read {path}: {exc}", EXIT_INPUT_NOT_FOUND) from exc
        if not summary.rows:
            raise CliError(f"no NVTX ranges in {path}", EXIT_NO_EVENTS)
        print(summary.format())
        return EXIT_OK
    if path.is_file() and not path.name.endswith(".nvtxseg"):
        raise CliError(f"{path} is neither a recording directory, a .nvtxseg segment nor an SQLite file",
                       EXIT_INPUT_NOT_FOUND)
    from .recorder.reader import RecordingReader

    with RecordingReader(path) as reader:
        summary = summarize(path, by_process=args.by_process, reader=reader)
        damage = reader.damage()
    if damage.events == 0:
        if damage.damaged:
            raise CliError(f"no intact NVTX events in {path}: {damage.describe()}", EXIT_DAMAGED)
        raise CliError(f"no NVTX events recorded in {path}", EXIT_NO_EVENTS)
    print(summary.format() if summary.rows else "(no closed ranges)")
    if damage.damaged:
        raise CliError(f"damaged recording {path}: {damage.describe()}; summary of the intact events shown",
                       EXIT_DAMAGED)
    return EXIT_OK


def _register_report(subparsers) -> None:
    p = subparsers.add_parser(
        "report",
        help="print the NVTX range summary of a recording or an SQLite export",
        description="Summary like `nsys stats --report nvtx_sum` of a recording directory "
        "(PREFIX.nvtxrec), a segment file, or an SQLite file (ours or `nsys export`).",
    )
    p.add_argument("path", help="recording directory, .nvtxseg file or .sqlite file")
    p.add_argument("--by-process", action="store_true", help="one group per process")
    p.set_defaults(func=cmd_report)


# --------------------------------------------------------------------------- main
#: Functions ``register(subparsers)`` adding one subcommand each. Other modules append
#: theirs here (e.g. ``doctor``, ``build``).
def _register_doctor_and_build(subparsers) -> None:
    from nvtx_plugins_tf import doctor

    doctor.register(subparsers)


REGISTRARS = [_register_record, _register_report, _register_doctor_and_build]


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit code EXIT_USAGE
        self.print_usage(sys.stderr)
        raise CliError(message, EXIT_USAGE)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog=PROG, description="Record and report NVTX ranges (nvtx_plugins_tf).")
    subparsers = parser.add_subparsers(dest="subcommand", metavar="COMMAND", parser_class=_Parser)
    subparsers.required = True
    for register in REGISTRARS:
        register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
        return int(args.func(args) or 0)
    except CliError as exc:
        error(str(exc))
        return exc.code
    except KeyboardInterrupt:
        error("interrupted")
        return 128 + signal.SIGINT
    except BrokenPipeError:
        return EXIT_OK
    except Exception as exc:  # noqa: BLE001 - one line, never a traceback
        error(f"{type(exc).__name__}: {exc}")
        return EXIT_FAILURE


if __name__ == "__main__":
    sys.exit(main())
