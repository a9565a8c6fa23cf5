"""Running the recorded command: its own process group, the terminal, signals forwarded once."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess

from ._common import EXIT_COMMAND_NOT_FOUND, CliError, warn


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
            stopsig = _terminal_stop(proc.pid)
            if stopsig is not None:
                owned = _stop_with_command(proc.pid, stopsig, tty_fd, owned)
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


def _terminal_stop(pid: int) -> int | None:
    """The signal that stopped child ``pid`` from the terminal (SIGTSTP, SIGTTIN, SIGTTOU),
    or None: running, stopped otherwise, or ended (left for ``Popen.poll`` to reap).

    ``waitid`` asking for stops only fails with ECHILD on a child that has just ended
    (a zombie: the kernel finds nothing it may report), so that is "not stopped".
    """
    try:
        stop = os.waitid(os.P_PID, pid, os.WSTOPPED | os.WNOHANG)
    except ChildProcessError:
        return None
    if stop is not None and stop.si_code == os.CLD_STOPPED and stop.si_status in _TERMINAL_STOPS:
        return stop.si_status
    return None


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
