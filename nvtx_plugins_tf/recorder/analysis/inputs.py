"""The inputs of ``analyze``: what each command-line INPUT stands for, as the recipes'
``--input``: a recording (``PREFIX.nvtxrec``) or an export (an SQLite file in nsys's schema,
ours or nsys's; a parquetdir holding ``NVTX_EVENTS.parquet``, ours or nsys's) is one input; any
other directory stands for every recording and export in it, in name order, ``DIR:n`` for
the first n of them. In a directory, the exports of a recording or report are the same rank
as it: ``PREFIX.sqlite`` and ``PREFIX_pqtdir`` next to ``PREFIX.nvtxrec`` (what ``record -o
DIR/PREFIX`` writes), ``PREFIX_pqtdir`` next to ``PREFIX.sqlite`` (nsys's two exports of
``PREFIX.nsys-rep``) are left out, the recording (else the SQLite file) standing for them."""

from __future__ import annotations

import contextlib
import os
import re
import sqlite3
from pathlib import Path

from ..._paths import PACKED_SEGMENT_SUFFIX, RECORDING_SUFFIX, SEGMENT_SUFFIX, recording_path
from ..nsys_inputs.parquetdir import is_parquetdir
from ..nsys_inputs.sqlite import is_sqlite

__all__ = ["InputError", "expand_inputs", "is_input"]


class InputError(ValueError):
    """An INPUT that names nothing to analyze (one line, naming it)."""


def is_input(path: Path) -> bool:
    """Whether ``path`` is itself one input (a recording or an export)."""
    if path.is_dir():
        return path.name.endswith(RECORDING_SUFFIX) or is_parquetdir(path)
    return path.is_file() and is_sqlite(path)


def _prefix(path: Path) -> tuple[str, int]:
    """(the prefix ``path`` is named after, its rank among a prefix's inputs: the recording
    first, then the SQLite export, then the parquetdir)."""
    if path.name.endswith(RECORDING_SUFFIX):
        return path.name[: -len(RECORDING_SUFFIX)], 0
    if path.is_dir():
        return (path.name[: -len("_pqtdir")], 2) if path.name.endswith("_pqtdir") else (path.name, 3)
    return (path.stem, 1) if path.suffix == ".sqlite" else (path.name, 3)


def _process_ids(path: Path) -> frozenset[int] | None:
    """The process ids of an input, read cheaply (a recording's segment names, an export's
    PROCESSES table), or None when they cannot be told."""
    try:
        if path.name.endswith(RECORDING_SUFFIX):
            names = [n for n in os.listdir(path) if n.endswith((SEGMENT_SUFFIX, PACKED_SEGMENT_SUFFIX))]
            return frozenset(int(n.partition("-")[0]) for n in names) or None
        if path.is_dir():
            import pyarrow.parquet as pq

            table = pq.read_table(path / "PROCESSES.parquet", columns=["pid"])
            return frozenset(table.column("pid").to_pylist()) or None
        with contextlib.closing(sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)) as db:
            return frozenset(pid for (pid,) in db.execute("SELECT pid FROM PROCESSES")) or None
    except (OSError, ValueError, KeyError, ImportError, sqlite3.Error):
        return None


def _one_per_rank(found: list[Path], notes: list[str]) -> list[Path]:
    """``found`` (a directory's inputs) without the exports of another of them (see above): an
    export named after a recording (or nsys's parquetdir after its SQLite file) is left out
    when both hold the same processes; one of other processes is another run's, kept, and said
    in ``notes``; where that cannot be told, it is kept (the same rank counts once all the
    same: :func:`.ranks.once_each`)."""
    first: dict[str, Path] = {}
    for path in found:
        prefix, order = _prefix(path)
        if order < 3 and (prefix not in first or order < _prefix(first[prefix])[1]):
            first[prefix] = path
    kept = []
    for path in found:
        prefix, order = _prefix(path)
        stands_for = first.get(prefix) if order < 3 else None
        if stands_for is None or stands_for == path:
            kept.append(path)
            continue
        ours, theirs = _process_ids(path), _process_ids(stands_for)
        if ours is not None and ours == theirs:
            continue  # (its export: the same rank)
        kept.append(path)
        if ours is not None and theirs is not None:
            notes.append(
                f"{path}: named after {stands_for.name} but of other processes (another run's export?): both counted"
            )
    return kept


def expand_inputs(values: list[str], notes: list[str] | None = None) -> list[Path]:
    """The inputs the command-line values stand for, each once (one file by two paths or a
    symlink: once), in order, as absolute paths (what a Dask worker started elsewhere reads).
    ``notes``: lines for the user (an export kept beside a recording it does not belong to)."""
    notes = [] if notes is None else notes
    out: list[Path] = []
    seen: set[Path] = set()
    for value in values:
        limit = None
        match = re.fullmatch(r"(.*):(\d+)", value)
        if match and not Path(value).exists() and Path(match.group(1)).is_dir():
            value, limit = match.group(1), int(match.group(2))
        if not value:
            raise InputError("INPUT '': empty; give a recording, an export or a directory of them")
        path = recording_path(value)
        if not path.exists():
            raise InputError(f"no such recording, export or directory: {value}")
        if is_input(path):
            found = [path]
        elif path.is_dir():
            found = _one_per_rank([p for p in sorted(path.iterdir()) if is_input(p)], notes)[:limit]
            if not found:
                raise InputError(f"{value}: no recording (.nvtxrec), SQLite or parquetdir export in it")
        else:
            raise InputError(f"{value}: not a recording, an SQLite file in Nsight Systems' schema or a parquetdir")
        for p in found:
            if p.resolve() not in seen:
                seen.add(p.resolve())
                out.append(Path(os.path.abspath(p)))
    return out
