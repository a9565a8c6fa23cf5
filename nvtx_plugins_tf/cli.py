"""``nvtx-tf`` / ``python -m nvtx_plugins_tf``: record NVTX ranges and report on them.

Subcommands are registered by ``register(subparsers)``-style functions listed in
:data:`REGISTRARS`; each sets ``func`` (``args -> int``) on its parser. This module must
not import TensorFlow.

Exit codes: see the ``EXIT_*`` constants. A failure prints one line
``nvtx-tf: error: ...`` on stderr, never a traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

from ._native_libs import INJECTION_ENV, RECORD_DIR_ENV

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
def _output_prefix(value: str) -> Path:
    """PREFIX of ``-o``: a usage error (exit 2) when it names no file (``""``, ``/``, ``out/``)."""
    prefix = Path(value)
    name = prefix.name[: -len(".nvtxrec")] if prefix.name.endswith(".nvtxrec") else prefix.name
    if not value or value.endswith(("/", os.sep)) or name in ("", ".", ".."):
        raise CliError(f"-o {value!r}: PREFIX must name the output files, e.g. -o out/run", EXIT_USAGE)
    return prefix.with_name(name)


def _prepare_output_dir(directory: Path) -> None:
    """Create the output folder (with its parents) or say why it cannot be (exit 3)."""
    directory = directory if str(directory) else Path(".")
    existing = directory
    while not os.path.lexists(existing) and existing != existing.parent:
        existing = existing.parent
    if os.path.lexists(existing) and not existing.is_dir():
        what = "a file" if existing.is_file() else "not a directory"
        raise CliError(f"cannot create output directory {directory}: {existing} is {what}", EXIT_OUTPUT_NOT_WRITABLE)
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CliError(f"cannot create output directory {directory}: {exc.strerror}", EXIT_OUTPUT_NOT_WRITABLE) from exc
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


# Signals and the recorded command
# --------------------------------
# The command runs in a process group of its own. Nothing sent to `record` or to
# `record`'s process group then reaches it directly, and nothing sent to its group (a
# terminal's Ctrl-C / Ctrl-\, a hangup) reaches `record`: each signal `record` receives
# is forwarded exactly once, to the command's process group (the command and the
# processes it started, as a terminal or a shell's `kill %job` would). Telling the two
# apart from the signal itself is not possible: `kill PID` and `kill -- -PGID` (a
# shell's job kill, `timeout`, Slurm's proctrack/pgid) both arrive with SI_USER and the
# same sender, and forwarding the latter gave the command the signal twice.
#
# When `record` owns the terminal (foreground), the command's group is made the
# terminal's foreground group before it runs, so it reads the terminal and gets the
# keyboard's signals itself, as it would without `record`. A Ctrl-Z (or a background
# read) that stops the command stops `record` the same way; `fg`/`bg` continue both.
# The terminal is taken back when the command ends. The command is killed if `record`
# itself is killed (PR_SET_PDEATHSIG): it can no longer be reached through `record`'s
# group, and a recording nobody exports is of no use.
#
# What is still seen twice: a sender that signals every process one by one (`pkill`
# matching both command lines, Slurm with proctrack/cgroup) reaches the command
# directly and through `record`.
FORWARDED_SIGNALS = (signal.SIGHUP, signal.SIGINT, signal.SIGQUIT, signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2)
_TERMINAL_STOPS = (signal.SIGTSTP, signal.SIGTTIN, signal.SIGTTOU)
_PR_SET_PDEATHSIG = 1


def _terminal_fd() -> int | None:
    for fd in (0, 1, 2):
        try:
            if os.isatty(fd):
                os.tcgetpgrp(fd)
                return fd
        except OSError:
            continue
    return None


def _owns_terminal(fd: int | None) -> bool:
    try:
        return fd is not None and os.tcgetpgrp(fd) == os.getpgrp()
    except OSError:
        return False


def _give_terminal(fd: int, pgid: int) -> bool:
    """Make ``pgid`` the terminal's foreground group (SIGTTOU must be blocked)."""
    try:
        os.tcsetpgrp(fd, pgid)
        return True
    except OSError:
        return False


def _child_setup(tty_fd: int | None, parent: int, mask: set):
    """preexec_fn of the command: own process group, the terminal if ``record`` had it,
    killed with ``record``, then the signal mask ``record`` had before blocking."""
    import ctypes

    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        prctl = None

    def setup():
        os.setpgid(0, 0)
        if tty_fd is not None:
            _give_terminal(tty_fd, os.getpgrp())  # SIGTTOU is blocked here (inherited mask)
        if prctl is not None:
            prctl(ctypes.c_int(_PR_SET_PDEATHSIG), *(ctypes.c_ulong(v) for v in (signal.SIGKILL, 0, 0, 0)))
            if os.getppid() != parent:  # record died before the prctl
                os._exit(128 + signal.SIGKILL)
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)

    return setup


def _run_forwarding_signals(command: list[str], env: dict, on_started=None) -> int:
    """Run ``command``; forward the signals we receive (see above); return its exit status.

    ``on_started()`` is called once the command runs (its exec succeeded).
    """
    waited = set(FORWARDED_SIGNALS) | {signal.SIGCHLD}

    def forward_late(signo, _frame):
        # Only reached when the kernel picked a thread of ours created without the mask
        # (none is expected): forward all the same.
        if proc is not None and proc.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signo)

    proc = None
    old_handlers = {s: signal.signal(s, forward_late) for s in FORWARDED_SIGNALS}
    # Blocked before the fork: a signal arriving before the loop waits; SIGTTOU lets the
    # command (in its preexec) and us move the terminal's foreground group.
    # SIGCONT is blocked only to see whether we were continued (it continues us anyway).
    old_mask = signal.pthread_sigmask(signal.SIG_BLOCK, waited | {signal.SIGTTOU, signal.SIGCONT})
    tty_fd = _terminal_fd()
    owned = _owns_terminal(tty_fd)
    try:
        try:
            proc = subprocess.Popen(
                command, env=env, preexec_fn=_child_setup(tty_fd if owned else None, os.getpid(), old_mask)
            )
        except FileNotFoundError as exc:
            raise CliError(f"command not found: {command[0]}", EXIT_COMMAND_NOT_FOUND) from exc
        except PermissionError as exc:
            raise CliError(f"command not executable: {command[0]}", EXIT_COMMAND_NOT_FOUND) from exc
        except OSError as exc:
            raise CliError(f"cannot run {command[0]}: {exc.strerror}", EXIT_COMMAND_NOT_FOUND) from exc
        if on_started is not None:
            on_started()
        while True:
            rc = proc.poll()
            if rc is not None:
                while signal.sigtimedwait(waited, 0) is not None:  # drop what is pending
                    pass
                return rc
            stop = os.waitid(os.P_PID, proc.pid, os.WSTOPPED | os.WNOHANG)
            if stop is not None and stop.si_code == os.CLD_STOPPED and stop.si_status in _TERMINAL_STOPS:
                owned = _stop_with_command(proc.pid, stop.si_status, tty_fd, owned)
                continue
            info = signal.sigtimedwait(waited, 1.0)
            if info is None or info.si_signo == signal.SIGCHLD:
                continue
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, info.si_signo)
    finally:
        if owned:  # also when the exec failed after the command's preexec took the terminal
            _give_terminal(tty_fd, os.getpgrp())
        signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)
        for signo, handler in old_handlers.items():
            signal.signal(signo, handler)


def _stop_with_command(pgid: int, stopsig: int, tty_fd: int | None, owned: bool) -> bool:
    """The command was stopped from the terminal (Ctrl-Z, a read or write in the
    background): stop ``record`` too, so that the shell sees the job stopped; once
    continued (``fg``/``bg``), give the terminal back to the command if it is ours again
    and continue the command. Returns whether the command's group owns the terminal."""
    if owned:
        _give_terminal(tty_fd, os.getpgrp())
    while signal.sigtimedwait({signal.SIGCONT}, 0) is not None:
        pass
    # Stops us here until SIGCONT. In an orphaned process group (no shell could continue
    # us) the kernel discards the signal instead and we go on at once.
    os.kill(os.getpid(), stopsig)
    stopped = signal.sigtimedwait({signal.SIGCONT}, 0) is not None
    if not stopped and stopsig != signal.SIGTSTP and not _owns_terminal(tty_fd):
        # The command waits for a terminal it cannot get and nobody can give it: leave it
        # stopped (continuing it would only stop it again); signals still reach it.
        warn(
            f"the command (process group {pgid}) is stopped by {signal.Signals(stopsig).name}: it needs the "
            "terminal, which no shell can give it here; it still gets the signals sent to record"
        )
        return False
    owned = _owns_terminal(tty_fd) and _give_terminal(tty_fd, pgid)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGCONT)
    return owned


def _png_window(value: str) -> str:
    """argparse type of --png-window: 'all' or A:B with non-negative integers."""
    import re

    if value == "all" or re.fullmatch(r"\d*:\d*", value):
        return value
    raise argparse.ArgumentTypeError(f"{value!r}: expected A:B (steps, 0-based) or 'all'")


def _exports(raw_dir: Path, prefix: Path, png: bool, png_window: str = "1:") -> tuple[int, object]:
    """Write PREFIX.json/.sqlite(/.png) and print the summary; returns (events, damage)."""
    from .recorder.export_json import export_json
    from .recorder.export_sqlite import export_sqlite
    from .recorder.reader import RecordingReader
    from .recorder.summary import summarize

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
            from .recorder.timeline import MatplotlibMissing, render_timeline

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


KERAS_LAYERS_ENV = "NVTX_TF_KERAS_LAYERS"
TF_OP_RANGES_ENV = "NVTX_TF_OP_RANGES"


def _segments(raw_dir: Path) -> dict[str, tuple[int, int]]:
    """Segment files of ``raw_dir``: name -> (device, inode)."""
    found = {}
    for seg in raw_dir.glob("*.nvtxseg"):
        with contextlib.suppress(OSError):
            st = seg.lstat()
            found[seg.name] = (st.st_dev, st.st_ino)
    return found


def _remove_segments(raw_dir: Path, old: dict[str, tuple[int, int]]) -> None:
    """Remove the segments listed in ``old`` that are still the same files (a new
    segment that took an old name is kept)."""
    for name, ident in old.items():
        path = raw_dir / name
        with contextlib.suppress(OSError):
            st = path.lstat()
            if (st.st_dev, st.st_ino) == ident:
                path.unlink()


def cmd_record(args) -> int:
    # Nothing heavy (numpy, the reader) is imported before the command ends: libraries
    # that start threads would create threads without our signal mask.
    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise CliError("record: no command given (usage: record -o PREFIX -- COMMAND [ARGS...])", EXIT_USAGE)
    prefix = _output_prefix(args.output)
    # Everything that can fail is checked before anything is created or removed.
    _resolve_command(command)
    try:
        from ._native_libs import native_library

        library = native_library("recorder")
    except ImportError as exc:
        raise CliError(str(exc).replace("nvtx_plugins_tf: ", ""), EXIT_RECORDER_UNAVAILABLE) from exc
    _prepare_output_dir(prefix.parent)
    raw_dir = prefix.with_name(prefix.name + ".nvtxrec")
    try:
        raw_dir.mkdir(mode=0o700, exist_ok=True)  # recordings hold command lines
    except OSError as exc:
        raise CliError(f"cannot create {raw_dir}: {exc.strerror}", EXIT_OUTPUT_NOT_WRITABLE) from exc
    if not raw_dir.is_dir():
        raise CliError(f"cannot create {raw_dir}: a file is in the way", EXIT_OUTPUT_NOT_WRITABLE)
    # The previous recording's segments go only once the new command runs.
    old_segments = _segments(raw_dir)
    env = dict(os.environ)
    env[INJECTION_ENV] = str(library)
    env[RECORD_DIR_ENV] = str(raw_dir.resolve())
    if args.keras_layers or args.tf_ops:
        site = str(Path(__file__).resolve().parent / "_site")
        env["PYTHONPATH"] = os.pathsep.join(p for p in (site, env.get("PYTHONPATH", "")) if p)
    if args.keras_layers:
        env[KERAS_LAYERS_ENV] = "1"
    if args.tf_ops:
        env[TF_OP_RANGES_ENV] = "1"
    sys.stdout.flush()
    status = _run_forwarding_signals(command, env, on_started=lambda: _remove_segments(raw_dir, old_segments))
    code = 128 - status if status < 0 else status
    events, damage = _exports(raw_dir, prefix, args.png or args.png_window is not None, args.png_window or "1:")
    if events == 0 and not damage.damaged:  # (all events dropped, e.g. a full disk, is damage)
        if code != 0:
            warn(f"no NVTX events recorded; {command[0]} exited with status {code}")
            return code
        raise CliError(
            f"no NVTX events recorded in {raw_dir} (does the command make NVTX calls? was {INJECTION_ENV} overridden?)",
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
    p.add_argument(
        "--png-window",
        metavar="STEPS",
        type=_png_window,
        default=None,
        help="steps drawn in PREFIX.png: A:B (0-based, either side may be empty) or 'all'; "
        "default 1: (without the first step, where TensorFlow traces); implies --png",
    )
    p.add_argument(
        "--keras-layers",
        action="store_true",
        help="annotate every layer of every Keras model (forward and backward ranges) in an unmodified Python script",
    )
    p.add_argument(
        "--tf-ops",
        action="store_true",
        help="switch on TensorFlow's own per-op NVTX ranges (domain TSL) in the command's Pythons",
    )
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
    if args.pairs:
        return _report_pairs(path)
    if path.is_file() and is_sqlite(path):
        import sqlite3

        try:
            summary = summarize(path, by_process=args.by_process, group=not args.keep_numbered)
        except (sqlite3.Error, ValueError) as exc:
            raise CliError(f"cannot read {path}: {exc}", EXIT_INPUT_NOT_FOUND) from exc
        if not summary.rows and not summary.open_ranges:
            raise CliError(f"no NVTX ranges in {path}", EXIT_NO_EVENTS)
        _print_summary(summary, args.format)
        return EXIT_OK
    if path.is_file() and not path.name.endswith(".nvtxseg"):
        raise CliError(
            f"{path} is neither a recording directory, a .nvtxseg segment nor an SQLite file", EXIT_INPUT_NOT_FOUND
        )
    from .recorder.reader import RecordingReader

    with RecordingReader(path) as reader:
        summary = summarize(path, by_process=args.by_process, reader=reader, group=not args.keep_numbered)
        damage = reader.damage()
    if damage.events == 0:
        if damage.damaged:
            raise CliError(f"no intact NVTX events in {path}: {damage.describe()}", EXIT_DAMAGED)
        raise CliError(f"no NVTX events recorded in {path}", EXIT_NO_EVENTS)
    _print_summary(summary, args.format)
    if damage.damaged:
        raise CliError(
            f"damaged recording {path}: {damage.describe()}; summary of the intact events shown", EXIT_DAMAGED
        )
    return EXIT_OK


def _print_summary(summary, fmt: str) -> None:
    """The summary as ``report --format`` asks: the table, or CSV (which ends its own lines)."""
    print(summary.to_csv() if fmt == "csv" else summary.format(), end="" if fmt == "csv" else "\n")


def _report_pairs(path: Path) -> int:
    """``report --pairs``: backward ranges with the forward ranges they mirror."""
    from .recorder.pairs import format_pairs, pair_rows
    from .recorder.reader import load
    from .recorder.summary import is_sqlite

    if path.is_file() and is_sqlite(path):
        raise CliError(f"--pairs reads a recording folder (PREFIX.nvtxrec), not an SQLite file: {path}", EXIT_USAGE)
    recording = load(path)
    print(format_pairs(pair_rows(recording.ranges)))
    if recording.damage.damaged:
        raise CliError(f"damaged recording {path}: {recording.damage.describe()}", EXIT_DAMAGED)
    return EXIT_OK


def _register_report(subparsers) -> None:
    p = subparsers.add_parser(
        "report",
        help="print the NVTX range summary of a recording or an SQLite export",
        description="Summary like `nsys stats --report nvtx_sum` of a recording directory "
        "(PREFIX.nvtxrec), a segment file, or an SQLite file (ours or `nsys export`).",
    )
    p.add_argument("path", help="recording directory, .nvtxseg file or .sqlite file")
    p.add_argument("--by-process", action="store_true", help="one group per process, with its command line")
    p.add_argument(
        "--keep-numbered",
        action="store_true",
        help="one row per name: no 'batch *' rows for numbered names, TraceMe metadata kept",
    )
    p.add_argument("--format", choices=("table", "csv"), default="table", help="table (names shortened) or CSV")
    p.add_argument(
        "--pairs",
        action="store_true",
        help="backward ranges paired with the forward ranges they mirror (their payload is its id)",
    )
    p.set_defaults(func=cmd_report)


# --------------------------------------------------------------------------- main
def _register_doctor_and_build(subparsers) -> None:
    from nvtx_plugins_tf import doctor

    doctor.register(subparsers)


#: Functions ``register(subparsers)``, each adding its subcommands, in the order of --help.
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
