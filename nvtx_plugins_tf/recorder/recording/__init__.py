"""A recording and how it is read: the data model (:mod:`.model`), the streaming reader and
:func:`load` (:mod:`.reader`), the ctypes binding of the native decoder ``libnvtx_reader.so``
(:mod:`._decoder`), closed segments packed and unpacked (:mod:`.packed`), a writer of
synthetic segments for tests and benchmarks (:mod:`._synth`).

The first layer of the recorder's Python side: it imports no other package of it.
"""

from __future__ import annotations

from .model import DamageReport, ProcessInfo, Range, Recording
from .packed import PackResult, pack_recording, unpack_segment
from .reader import ROW_DTYPE, RecordingReader, iter_batches, load, segment_files

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
    "PackResult",
    "pack_recording",
    "unpack_segment",
]
