"""The C API's types of libnvtx_reader.so (cc_ops/reader/decode.h) as ctypes and numpy sees
them: the row (``NvtxrRow`` as :data:`ROW_DTYPE`), its kinds and flags, and the structs the
calls fill (:mod:`._decoder` binds the calls)."""

from __future__ import annotations

import ctypes

import numpy as np

KIND_PUSH_POP = 1
KIND_START_END = 2
KIND_MARK = 3
KIND_NAMES = {KIND_PUSH_POP: "push-pop", KIND_START_END: "start-end", KIND_MARK: "mark"}

FLAG_HAS_COLOR = 1 << 0
FLAG_HAS_CATEGORY = 1 << 1
FLAG_UNCLOSED = 1 << 2
FLAG_REGISTERED = 1 << 3
FLAG_UNKNOWN_STRING = 1 << 4

PAYLOAD_NONE, PAYLOAD_U64, PAYLOAD_I64, PAYLOAD_DOUBLE, PAYLOAD_U32, PAYLOAD_I32, PAYLOAD_FLOAT = range(7)
# Extended payloads (NVTX payload extension): the row's payload is the global index of
# their JSON text in the strings table (cc_ops/reader/payload_json.h).
PAYLOAD_EXT = 7

#: numpy mirror of ``NvtxrRow`` (80 bytes).
ROW_DTYPE = np.dtype(
    [
        ("start_ns", "<i8"),
        ("end_ns", "<i8"),
        ("pid", "<i8"),
        ("tid", "<i8"),
        ("end_tid", "<i8"),
        ("payload", "<u8"),
        ("range_id", "<u8"),
        ("message", "<u4"),
        ("domain", "<u4"),
        ("category", "<u4"),
        ("color", "<u4"),
        ("depth", "<i4"),
        ("flags", "<u2"),
        ("kind", "u1"),
        ("payload_type", "u1"),
    ]
)
assert ROW_DTYPE.itemsize == 80


class SegmentInfo(ctypes.Structure):
    _fields_ = [
        ("pid", ctypes.c_int64),
        ("ppid", ctypes.c_int64),
        ("start_ns", ctypes.c_uint64),
        ("start_realtime_ns", ctypes.c_uint64),
        ("chunk_size", ctypes.c_uint32),
        ("chunk_count", ctypes.c_uint32),
        ("process_name", ctypes.c_char * 64),
        ("cmdline", ctypes.c_char * 1024),
        ("host_name", ctypes.c_char * 256),
        # ABI 5:
        ("header_size", ctypes.c_uint32),
        ("reserved", ctypes.c_uint32),
        ("process_start_ns", ctypes.c_uint64),
        ("parent_pid", ctypes.c_int64),
        ("parent_process_start_ns", ctypes.c_uint64),
    ]


class Stats(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_uint64)
        for name in (
            "segments",
            "damaged_segments",
            "chunks",
            "damaged_chunks",
            "unpublished_chunks",
            "seq_gaps",
            "events",
            "records",
            "unmatched_pops",
            "unmatched_ends",
            "unclosed",
            "rows",
            "unreadable_segments",
            "truncated_segments",
            "missing_chunks",
            "dropped_events",
            "unknown_strings",
            "lost_events_min",
            "checksum_mismatches",
        )
    ]


class Domain(ctypes.Structure):
    _fields_ = [
        ("pid", ctypes.c_int64),
        ("create_ns", ctypes.c_uint64),
        ("local_id", ctypes.c_uint32),
        ("name", ctypes.c_int32),
    ]


class Category(ctypes.Structure):
    _fields_ = [
        ("domain", ctypes.c_uint32),
        ("category", ctypes.c_uint32),
        ("name", ctypes.c_uint32),
        ("reserved", ctypes.c_uint32),
    ]


class ThreadName(ctypes.Structure):
    _fields_ = [
        ("pid", ctypes.c_int64),
        ("tid", ctypes.c_int64),
        ("name", ctypes.c_uint32),
        ("override", ctypes.c_uint32),
    ]


class TextTable(ctypes.Structure):
    """``NvtxrTextTable`` (cc_ops/reader/json_lines.h): entry i is
    ``text[offsets[i]:offsets[i + 1]]``."""

    _fields_ = [("text", ctypes.c_void_p), ("offsets", ctypes.c_void_p), ("count", ctypes.c_uint64)]
