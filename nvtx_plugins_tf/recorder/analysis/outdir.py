"""OUTDIR of ``analyze``: its outputs appear all at once or not at all.

Every output is written into a fresh hidden folder (inside OUTDIR when it exists, else next
to it), then moved in by renames on one filesystem, with SIGINT, SIGTERM and SIGHUP held
back meanwhile (:func:`nvtx_plugins_tf._signals.held`: handled once the outputs are in); the outputs of an
earlier run that this one does not write again (its ``heatmap.png`` when this run has no
steps) are removed at that moment too. An error, a full
disk or a signal before that point removes the hidden folder and leaves OUTDIR as it was
(not made at all when it did not exist, nor the parents made for it).
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

from ..._signals import held

__all__ = ["TABLES", "OUTPUTS", "OutdirError", "check_outdir", "staged"]

#: The tables ``analyze`` writes, each as .parquet and .csv.
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


def _fresh_folder(parent: Path, prefix: str) -> Path:
    while True:
        path = parent / f"{prefix}{os.urandom(4).hex()}.tmp"
        try:
            os.mkdir(path)  # (0777 less the umask: what OUTDIR gets when it is renamed into place)
            return path
        except FileExistsError:
            continue


class _Staging:
    def __init__(self, outdir: Path):
        self.outdir = outdir
        self.made: list[Path] = []  # OUTDIR's parents made for it, outermost first
        self.folder: Path | None = None
        self.done = False

    def open(self) -> Path:
        try:
            if self.outdir.is_dir():
                self.folder = _fresh_folder(self.outdir, ".nvtx-tf-analyze.")
            else:
                missing = []
                parent = self.outdir.parent
                while not os.path.lexists(parent):
                    missing.append(parent)
                    parent = parent.parent
                for path in reversed(missing):
                    os.mkdir(path)
                    self.made.append(path)
                self.folder = _fresh_folder(self.outdir.parent, f".{self.outdir.name}.")
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
                for stale in set(OUTPUTS) - set(names):
                    with contextlib.suppress(FileNotFoundError):
                        (self.outdir / stale).unlink()
                os.rmdir(self.folder)
            self.done = True

    def discard(self) -> None:
        with held():
            if self.folder is not None:
                shutil.rmtree(self.folder, ignore_errors=True)
            for path in reversed(self.made):
                with contextlib.suppress(OSError):
                    os.rmdir(path)


@contextlib.contextmanager
def staged(outdir) -> Iterator[tuple[Path, Callable[[list[str]], None]]]:
    """``(folder, commit)``: write the outputs into ``folder``, then ``commit(names)`` moves
    them into OUTDIR at once (and removes the other :data:`OUTPUTS` of an earlier run there).
    Leaving without a commit (an error, a signal) removes the folder and what was made for it.
    Raises :class:`OutdirError` when the folder cannot be made."""
    staging = _Staging(Path(outdir))
    try:
        yield staging.open(), staging.commit
    finally:
        if not staging.done:
            staging.discard()
