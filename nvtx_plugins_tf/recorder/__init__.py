"""NVTX recorder: record every NVTX range of a process tree, read and export it.

The recorder itself is a native NVTX injection library (``libnvtx_recorder.so``):
set ``NVTX_INJECTION64_PATH`` to :func:`library_path` and ``NVTX_TF_RECORD_DIR`` to a
directory before the first NVTX call of a process (see :func:`environment`), or run
``python -m nvtx_plugins_tf record -o PREFIX -- COMMAND``. This package reads the
recording (:func:`load` into the data model of :mod:`.recording`, or streamed by
:func:`iter_batches`), exports it (:func:`export_json`,
:func:`export_sqlite`), summarizes it (:func:`summarize`) and draws it
(:func:`render_timeline`).

This module is the public face; the work is done, data flowing one way, in
:mod:`.recording` (model, reader) -> :mod:`.exports` (one decode, many files) ->
:mod:`.nsys_inputs` (nsys's exports read) -> :mod:`.reports` (summary, nsys's reports) ->
:mod:`.timeline` (the PNG) and :mod:`.analysis`; :mod:`.merge`
makes one recording of several, :mod:`.outputs` writes what ``record`` writes
(docs/architecture.md).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from .._lazy import attach
from .._native_libs import INJECTION_ENV, RECORD_DIR_ENV  # the one owner of these names

# the public names, imported on first use (.._lazy), and where each lives
_HOMES = {
    **dict.fromkeys(("export_json", "export_sqlite"), ".exports"),
    **dict.fromkeys(
        (
            "ROW_DTYPE",
            "DamageReport",
            "PackResult",
            "ProcessInfo",
            "Range",
            "Recording",
            "RecordingReader",
            "iter_batches",
            "load",
            "pack_recording",
            "segment_files",
            "unpack_segment",
        ),
        ".recording",
    ),
    **dict.fromkeys(("Summary", "summarize"), ".reports"),
    "render_timeline": ".timeline",
}

if TYPE_CHECKING:
    from .exports import export_json, export_sqlite
    from .recording import (
        ROW_DTYPE,
        DamageReport,
        PackResult,
        ProcessInfo,
        Range,
        Recording,
        RecordingReader,
        iter_batches,
        load,
        pack_recording,
        segment_files,
        unpack_segment,
    )
    from .reports import Summary, summarize
    from .timeline import render_timeline


__getattr__, __dir__ = attach(__name__, _HOMES)

__all__ = [
    "ROW_DTYPE",
    "DamageReport",
    "ProcessInfo",
    "Range",
    "Recording",
    "RecordingReader",
    "iter_batches",
    "load",
    "segment_files",
    "pack_recording",
    "unpack_segment",
    "PackResult",
    "export_json",
    "export_sqlite",
    "summarize",
    "Summary",
    "render_timeline",
    "library_path",
    "environment",
    "INJECTION_ENV",
    "RECORD_DIR_ENV",
]


def library_path() -> Path:
    """Path of the NVTX injection library ``libnvtx_recorder.so`` (built if missing)."""
    from .._native_libs import native_library

    return Path(native_library("recorder"))


def environment(directory) -> dict[str, str]:
    """Environment variables that make NVTX calls of a process record into ``directory``."""
    return {INJECTION_ENV: str(library_path()), RECORD_DIR_ENV: os.path.abspath(os.fspath(directory))}
