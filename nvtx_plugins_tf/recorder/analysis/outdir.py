"""OUTDIR of ``analyze``: its outputs appear all at once or not at all.

Every output is written into a fresh hidden folder (inside OUTDIR when it exists, else next
to it), then moved in by renames on one filesystem, with SIGINT, SIGTERM and SIGHUP held
back meanwhile (:func:`nvtx_plugins_tf._signals.held`: handled once the outputs are in); the outputs of an
earlier run that this one does not write again (its ``heatmap.png`` when this run has no
steps) are removed at that moment too. An error, a full
disk or a signal before that point removes the hidden folder and leaves OUTDIR as it was
(not made at all when it did not exist, nor the parents made for it). The hidden folder is
locked (flock) while its run lives: one that a killed run left behind is removed by the next
run into the same OUTDIR that succeeds (:func:`remove_stale`).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from ..._signals import held

__all__ = ["TABLES", "OUTPUTS", "OutdirError", "check_outdir", "staged"]

#: The tables ``analyze`` writes, each as .parquet (and .csv, asked for).
TABLES = ("all_stats", "rank_stats", "pace", "stragglers")
#: Every file ``analyze`` may write into OUTDIR (the only ones it replaces or removes there).
OUTPUTS = (*(f"{table}.{suffix}" for table in TABLES for suffix in ("parquet", "csv")), "heatmap.png")


class OutdirError(OSError):
    """OUTDIR cannot be made or written (one line naming it and why)."""


def _nearest_existing(path: Path) -> Path:
    while not os.path.lexists(path) and path != path.parent:
        path = path.parent
    return path


def check_outdir(outdir: Path) -> None:
    """Raises :class:`OutdirError` when OUTDIR could not be made or written, without making
    anything (the work is done first; nothing is made for an input that cannot be read)."""
    from ..._native_libs import is_writable

    existing = _nearest_existing(outdir)
    if not existing.is_dir():
        what = "a file" if existing.is_file() else "not a directory"
        raise OutdirError(f"cannot create output directory {outdir}: {existing} is {what}")
    # (tried, not os.access: root passes os.access on /sys, /proc and read-only mounts)
    if not os.access(existing, os.W_OK | os.X_OK) or not is_writable(existing):
        raise OutdirError(f"output directory {outdir} is not writable; choose another -o OUTDIR")


_INSIDE = ".nvtx-tf-analyze."  # (the hidden folder's prefix in an OUTDIR that exists)
_STALE_AFTER_S = 10.0  # (a folder younger may be a run's that has not locked it yet)


def _fresh_folder(parent: Path, prefix: str) -> tuple[Path, int | None]:
    """(a new hidden folder in ``parent``, an fd of it that holds its lock: the run's for its
    life, however it ends, or None where the file system has no ``flock``)."""
    while True:
        path = parent / f"{prefix}{os.urandom(4).hex()}.tmp"
        try:
            os.mkdir(path)  # (0777 less the umask: what OUTDIR gets when it is renamed into place)
            break
        except FileExistsError:
            continue
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:  # (no flock here: such a folder is never taken for a dead run's)
        os.close(fd)
        return path, None
    return path, fd


def remove_stale(outdir: Path) -> None:
    """Remove the hidden folders that runs into ``outdir`` killed before their end (SIGKILL,
    a power cut) left inside it or beside it: those of this module's naming that no process
    holds the lock of, whatever host or PID namespace made them (flock, not pids), and older
    than a few seconds. A live run's folder, or one whose lock cannot be tried, stays."""
    places = [(outdir, _INSIDE), (outdir.parent, f".{outdir.name}.")]
    for parent, prefix in places:
        try:
            names = [n for n in os.listdir(parent) if n.startswith(prefix) and n.endswith(".tmp")]
        except OSError:
            continue
        for name in names:
            if len(name) != len(prefix) + 12 or not all(c in "0123456789abcdef" for c in name[len(prefix) : -4]):
                continue
            path = parent / name
            try:
                fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
            except OSError:
                continue
            try:
                if time.time() - os.fstat(fd).st_mtime < _STALE_AFTER_S:
                    continue
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # (held: no run can be using it)
                shutil.rmtree(path, ignore_errors=True)
            except OSError:  # (a live run's lock, or no flock here)
                continue
            finally:
                os.close(fd)


class _Staging:
    def __init__(self, outdir: Path, outputs: tuple[str, ...] = OUTPUTS):
        self.outdir = outdir
        self.outputs = outputs
        self.made: list[Path] = []  # OUTDIR's parents made for it, outermost first
        self.folder: Path | None = None
        self.lock: int | None = None  # (an fd of the folder holding its lock)
        self.done = False

    def open(self) -> Path:
        try:
            if self.outdir.is_dir():
                self.folder, self.lock = _fresh_folder(self.outdir, _INSIDE)
            else:
                missing = []
                parent = self.outdir.parent
                while not os.path.lexists(parent):
                    missing.append(parent)
                    parent = parent.parent
                for path in reversed(missing):
                    os.mkdir(path)
                    self.made.append(path)
                self.folder, self.lock = _fresh_folder(self.outdir.parent, f".{self.outdir.name}.")
        except OSError as exc:
            raise OutdirError(f"cannot create output directory {self.outdir}: {exc.strerror}") from exc
        return self.folder

    def commit(self, names: list[str]) -> None:
        assert self.folder is not None
        with held():
            if not os.path.lexists(self.outdir):
                os.rename(self.folder, self.outdir)
            else:
                for name in names:
                    os.replace(self.folder / name, self.outdir / name)
                for stale in set(self.outputs) - set(names):
                    with contextlib.suppress(FileNotFoundError):
                        (self.outdir / stale).unlink()
                os.rmdir(self.folder)
            self.done = True
        remove_stale(self.outdir)  # (after a run that succeeded: OUTDIR is as it was after one that fails)

    def discard(self) -> None:
        with held():
            if self.folder is not None:
                shutil.rmtree(self.folder, ignore_errors=True)
            for path in reversed(self.made):
                with contextlib.suppress(OSError):
                    os.rmdir(path)

    def unlock(self) -> None:
        if self.lock is not None:
            os.close(self.lock)
            self.lock = None


@contextlib.contextmanager
def staged(outdir, outputs: tuple[str, ...] = OUTPUTS) -> Iterator[tuple[Path, Callable[[list[str]], None]]]:
    """``(folder, commit)``: write the outputs into ``folder``, then ``commit(names)`` moves
    them into OUTDIR at once (and removes the other ``outputs`` of an earlier run there:
    analyze's :data:`OUTPUTS` by default; compare names its own).
    Leaving without a commit (an error, a signal) removes the folder and what was made for it.
    Raises :class:`OutdirError` when the folder cannot be made."""
    staging = _Staging(Path(outdir), outputs)
    try:
        yield staging.open(), staging.commit
    finally:
        if not staging.done:
            staging.discard()
        staging.unlock()
