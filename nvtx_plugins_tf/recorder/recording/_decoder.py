"""ctypes binding of libnvtx_reader.so (cc_ops/reader/decode.h); its types: :mod:`._decoder_types`."""

from __future__ import annotations

import ctypes
import threading

import numpy as np

from ..._native_libs import native_library
from ..._paths import native_path
from ._decoder_types import (  # noqa: F401  (the binding's types, named here too)
    FLAG_HAS_CATEGORY,
    FLAG_HAS_COLOR,
    FLAG_REGISTERED,
    FLAG_UNCLOSED,
    FLAG_UNKNOWN_STRING,
    KIND_MARK,
    KIND_NAMES,
    KIND_PUSH_POP,
    KIND_START_END,
    PAYLOAD_DOUBLE,
    PAYLOAD_EXT,
    PAYLOAD_FLOAT,
    PAYLOAD_I32,
    PAYLOAD_I64,
    PAYLOAD_NONE,
    PAYLOAD_U32,
    PAYLOAD_U64,
    ROW_DTYPE,
    Category,
    Domain,
    SegmentInfo,
    Stats,
    TextTable,
    ThreadName,
)

ABI_VERSION = 17

_lib = None
_lock = threading.Lock()


def library() -> ctypes.CDLL:
    """The loaded reader library (built on first use if missing)."""
    global _lib
    with _lock:
        if _lib is None:
            lib = ctypes.CDLL(str(native_library("reader")))
            vp, u32, i64 = ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int64
            table, u64p = ctypes.POINTER(TextTable), ctypes.POINTER(ctypes.c_uint64)
            sigs = {
                "nvtxr_abi_version": (u32, []),
                "nvtxr_new": (vp, []),
                "nvtxr_free": (None, [vp]),
                "nvtxr_open_segment": (ctypes.c_int, [vp, ctypes.c_char_p, ctypes.c_char_p, u32]),
                "nvtxr_segment_info": (ctypes.c_int, [vp, ctypes.POINTER(SegmentInfo)]),
                "nvtxr_peek_segment": (ctypes.c_int, [ctypes.c_char_p, ctypes.POINTER(SegmentInfo)]),
                "nvtxr_read_segment_header": (
                    ctypes.c_int,
                    [ctypes.c_char_p, ctypes.POINTER(SegmentInfo), ctypes.c_char_p, u32],
                ),
                "nvtxr_rewrite_segment_header": (
                    ctypes.c_int,
                    [vp, ctypes.c_uint64, i64, i64, i64, i64, i64, ctypes.c_char_p, ctypes.c_char_p],
                ),
                "nvtxr_rewrite_chunk": (ctypes.c_int, [vp, ctypes.c_uint64, i64, i64, i64]),
                "nvtxr_next": (i64, [vp, vp, i64]),
                "nvtxr_close_segment": (None, [vp]),
                "nvtxr_finish": (None, [vp]),
                "nvtxr_stats": (None, [vp, ctypes.POINTER(Stats)]),
                "nvtxr_string_count": (u32, [vp]),
                "nvtxr_string": (ctypes.c_void_p, [vp, u32, ctypes.POINTER(u32)]),
                "nvtxr_strings": (u32, [vp, u32, u32, vp, ctypes.c_uint64, vp]),
                "nvtxr_domain_count": (u32, [vp]),
                "nvtxr_domain": (ctypes.c_int, [vp, u32, ctypes.POINTER(Domain)]),
                "nvtxr_category_count": (u32, [vp]),
                "nvtxr_category": (ctypes.c_int, [vp, u32, ctypes.POINTER(Category)]),
                "nvtxr_thread_name_count": (u32, [vp]),
                "nvtxr_thread_name": (ctypes.c_int, [vp, u32, ctypes.POINTER(ThreadName)]),
                # rows, count, origin_ns, names, domains, extras, extra_index, async_id, out,
                # capacity, written (cc_ops/reader/json_lines.h)
                "nvtxr_json_lines": (i64, [vp, i64, i64, table, table, table, vp, u64p, vp, ctypes.c_uint64, u64p]),
                # ABI 10: analyze's native mapper (nvtx_plugins_tf/recorder/analysis/_native.py)
                "nvtxr_ranges_new": (vp, []),
                "nvtxr_ranges_free": (None, [vp]),
                "nvtxr_ranges_clear": (None, [vp]),
                "nvtxr_ranges_reserve": (ctypes.c_int, [vp, i64]),
                "nvtxr_ranges_collect": (i64, [vp, vp, i64]),
                "nvtxr_ranges_bounds": (None, [vp, vp]),
                "nvtxr_ranges_name": (i64, [vp, vp, i64, i64]),
                "nvtxr_ranges_keys": (None, [vp, vp]),
                # (ABI 15: with_incl; ABI 16: with_name_stats)
                "nvtxr_rank_stats": (
                    i64,
                    [vp, vp, i64, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_double, vp, i64, i64],
                ),
                "nvtxr_rank_stats_header": (ctypes.c_int, [vp, i64, vp]),
                "nvtxr_rank_stats_size": (i64, [vp, i64, ctypes.c_int]),
                "nvtxr_rank_stats_copy": (ctypes.c_int, [vp, i64, ctypes.c_int, vp]),
                # ABI 11: an nsys export's rows as the native mapper's input
                "nvtxr_ranges_add_export": (i64, [vp, i64, vp, vp, vp, i64, vp, vp, vp, vp]),
                "nvtxr_ranges_pairs": (i64, [vp, vp]),
                # (ABI 13: the query's kind and whether its rows were read from the pages)
                "nvtxr_ranges_add_sqlite": (
                    i64,
                    [vp, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_int32, vp, vp, u32, vp, u32],
                ),
                "nvtxr_ranges_messages": (i64, [vp, vp, vp]),
                "nvtxr_ranges_sqlite_creates": (i64, [vp, vp, vp, vp]),
                # ABI 12: a packed segment read frame by frame (cc_ops/reader/packed_segment.h)
                "nvtxr_open_packed": (ctypes.c_int, [vp, ctypes.c_char_p, ctypes.c_uint64, ctypes.c_char_p, u32]),
                "nvtxr_unpack_damage": (i64, [vp, vp, i64]),
                # ABI 17: a live read (watch's), and its window of ranges (analysis/_native.py)
                "nvtxr_open_live": (ctypes.c_int, [vp, ctypes.c_char_p, ctypes.c_char_p, u32]),
                "nvtxr_resume": (ctypes.c_int, [vp, ctypes.c_char_p, u32]),
                "nvtxr_live_failed": (ctypes.c_int, [vp]),
                "nvtxr_ranges_live": (None, [vp]),
                "nvtxr_rank_stats_window": (i64, [vp, vp, i64, i64, vp]),
            }
            for name, (restype, argtypes) in sigs.items():
                fn = getattr(lib, name)
                fn.restype = restype
                fn.argtypes = argtypes
            if lib.nvtxr_abi_version() != ABI_VERSION:
                raise ImportError(
                    "nvtx_plugins_tf: libnvtx_reader.so is out of date; run: python -m nvtx_plugins_tf build"
                )
            _lib = lib
        return _lib


def peek_segment(path) -> SegmentInfo | None:
    """Header of a segment file (pid, ppid, start_ns, ...) without decoding it; None when
    the file cannot be read or is no segment (see ``nvtxr_peek_segment``)."""
    info = SegmentInfo()
    if library().nvtxr_peek_segment(native_path(path), ctypes.byref(info)) != 0:
        return None
    return info


class SegmentReadError(OSError):
    """A segment file that cannot be read at all (the message names it and says why)."""


def read_segment_header(path) -> SegmentInfo | None:
    """Header of the segment file ``path``, checked as the decoder checks it before reading
    the segment (``nvtxr_read_segment_header``); None when its header is damaged or it is no
    segment. Raises :class:`SegmentReadError` when the file cannot be read."""
    info = SegmentInfo()
    err = ctypes.create_string_buffer(512)
    rc = library().nvtxr_read_segment_header(native_path(path), ctypes.byref(info), err, len(err))
    if rc == -1:
        raise SegmentReadError(err.value.decode(errors="surrogateescape") or f"cannot read {path}")
    return info if rc == 0 else None


def _writable(buf, name: str) -> ctypes.Array:
    """A ctypes view of the writable buffer ``buf`` (no copy)."""
    try:
        view = memoryview(buf)
    except TypeError:
        raise TypeError(f"{name} must be a writable buffer such as a bytearray, not {type(buf).__name__}") from None
    if view.readonly:
        raise TypeError(f"{name} must be a writable buffer such as a bytearray, not read-only {type(buf).__name__}")
    view = view.cast("B")
    return (ctypes.c_char * len(view)).from_buffer(view)


def rewrite_segment_header(
    header,
    shift_ns: int,
    *,
    pid: int,
    ppid: int,
    parent_pid: int,
    process_name: bytes,
    cmdline: bytes,
    parent_shift_ns: int | None = None,
) -> None:
    """Move a segment header onto another clock and process, in place (``header``: the
    first ``header_size`` bytes of the segment file, writable). ``start_ns`` and
    ``process_start_ns`` (unless 0) gain ``shift_ns``; ``parent_process_start_ns`` (unless
    0), a time of the parent's clock, gains ``parent_shift_ns`` (default: ``shift_ns``); the
    pids and names are replaced (the names cut to their fields). See
    ``nvtxr_rewrite_segment_header``. Raises ValueError when ``header`` is no segment header."""
    view = _writable(header, "header")
    parent_shift = shift_ns if parent_shift_ns is None else parent_shift_ns
    rc = library().nvtxr_rewrite_segment_header(
        view, len(view), shift_ns, parent_shift, pid, ppid, parent_pid, bytes(process_name), bytes(cmdline)
    )
    if rc != 0:
        raise ValueError("header does not hold a segment header")


#: nvtxr_open_packed's note when Zstandard (libzstd.so.1, libz.so.1) cannot be loaded here
UNPACK_UNAVAILABLE = 100

#: rewrite_chunk's results
CHUNK_DONE, CHUNK_UNPUBLISHED, CHUNK_DAMAGED = 0, 1, -2


def rewrite_chunk(chunk, shift_ns: int, old_pid: int, new_pid: int) -> int:
    """Move one chunk (writable bytes) onto another clock and process, in place: every
    timestamp gains ``shift_ns`` and the main thread ``old_pid`` becomes ``new_pid``, the
    records walked as the decoder walks them (``nvtxr_rewrite_chunk``). Returns
    :data:`CHUNK_DONE`, :data:`CHUNK_UNPUBLISHED` (left as it is) or :data:`CHUNK_DAMAGED`
    (rewritten up to the damage, the rest left as it is)."""
    view = _writable(chunk, "chunk")
    return library().nvtxr_rewrite_chunk(view, len(view), shift_ns, old_pid, new_pid)


class Decoder:
    """One native decoder context: global tables plus the segment being read."""

    def __init__(self):
        self._lib = library()
        self._ctx = self._lib.nvtxr_new()
        if not self._ctx:
            raise MemoryError("nvtxr_new failed")
        self._strings: list[str] = []

    def close(self) -> None:
        if self._ctx:
            self._lib.nvtxr_free(self._ctx)
            self._ctx = None

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass

    def open_segment(self, path: str) -> tuple[int, str]:
        err = ctypes.create_string_buffer(512)
        rc = self._lib.nvtxr_open_segment(self._ctx, native_path(path), err, len(err))
        return rc, err.value.decode(errors="surrogateescape")

    def open_packed(self, path: str, cache_bytes: int) -> tuple[int, str, list[tuple[int, int, int]]]:
        """Open the packed segment ``path`` as the raw segment it holds, unpacked frame by frame
        as it is read, up to ``cache_bytes`` of it kept unpacked (``nvtxr_open_packed``): (rc,
        error, what did not unpack as (code, a, b), see :meth:`.packed.Unpacked.note`). rc -3:
        it cannot be read as a segment at all (nothing counted), or, with code
        :data:`UNPACK_UNAVAILABLE`, not here."""
        err = ctypes.create_string_buffer(512)
        rc = self._lib.nvtxr_open_packed(self._ctx, native_path(path), cache_bytes, err, len(err))
        n = self._lib.nvtxr_unpack_damage(self._ctx, None, 0)
        damage = np.zeros((n, 3), dtype=np.int64)
        if n:
            self._lib.nvtxr_unpack_damage(self._ctx, damage.ctypes.data, n)
        return rc, err.value.decode(errors="surrogateescape"), [tuple(d) for d in damage.tolist()]

    def open_live(self, path: str) -> tuple[int, str]:
        """Open the raw segment ``path`` for a live read (``nvtxr_open_live``): read it to its
        end, then :meth:`resume` and read what was written since, and so on (never
        :meth:`close_segment` nor :meth:`finish` between reads). (rc, error) as
        :meth:`open_segment`."""
        err = ctypes.create_string_buffer(512)
        rc = self._lib.nvtxr_open_live(self._ctx, native_path(path), err, len(err))
        return rc, err.value.decode(errors="surrogateescape")

    def resume(self) -> tuple[int, str]:
        """Take the live read up where it stopped (``nvtxr_resume``): (0, ""), or (-1, why)
        when it cannot be (damage, another segment in its place: read the segment whole)."""
        err = ctypes.create_string_buffer(512)
        rc = self._lib.nvtxr_resume(self._ctx, err, len(err))
        return rc, err.value.decode(errors="surrogateescape")

    def live_failed(self) -> bool:
        """The last live read met damage: its rows are not to be kept (read the segment whole)."""
        return bool(self._lib.nvtxr_live_failed(self._ctx))

    def segment_info(self) -> SegmentInfo | None:
        info = SegmentInfo()
        if self._lib.nvtxr_segment_info(self._ctx, ctypes.byref(info)) != 0:
            return None
        return info

    def next_rows(self, capacity: int) -> np.ndarray:
        rows = np.empty(capacity, dtype=ROW_DTYPE)
        n = self._lib.nvtxr_next(self._ctx, rows.ctypes.data, capacity)
        if n < 0:
            raise MemoryError("nvtxr_next failed")
        return rows[:n]

    def close_segment(self) -> None:
        self._lib.nvtxr_close_segment(self._ctx)

    def finish(self) -> None:
        """No more segments: next_rows() then hands out the ranges left open."""
        self._lib.nvtxr_finish(self._ctx)

    def stats(self) -> dict:
        s = Stats()
        self._lib.nvtxr_stats(self._ctx, ctypes.byref(s))
        return {name: getattr(s, name) for name, _ in Stats._fields_}

    def strings(self) -> list[str]:
        """All strings so far (index = global string id); fetched incrementally."""
        total = self._lib.nvtxr_string_count(self._ctx)
        while len(self._strings) < total:
            want = min(65536, total - len(self._strings))
            # (a buffer for the texts; one too small for the first string grows: the native
            # call copies as many whole strings as fit. Small first: a 4 MiB buffer zeroed at
            # every read of a live recording was most of a small read's cost, watch's)
            size = 1 << 16
            while True:
                buf = ctypes.create_string_buffer(size)
                lengths = np.empty(want, dtype=np.uint32)
                got = self._lib.nvtxr_strings(self._ctx, len(self._strings), want, buf, size, lengths.ctypes.data)
                if got:
                    break
                size *= 4
            self._strings += _decoded(buf, lengths[:got])
        return self._strings

    def string_count(self) -> int:
        """How many strings the tables hold (:meth:`strings`' length, without fetching them)."""
        return self._lib.nvtxr_string_count(self._ctx)

    def string(self, index: int) -> str:
        """String ``index`` alone (:meth:`strings` fetches and keeps them all); "" when out of range."""
        if index < len(self._strings):
            return self._strings[index]
        length = ctypes.c_uint32(0)
        ptr = self._lib.nvtxr_string(self._ctx, index, ctypes.byref(length))
        return ctypes.string_at(ptr, length.value).decode("utf-8", errors="replace") if ptr else ""

    def domains(self) -> list[Domain]:
        out = []
        for i in range(self._lib.nvtxr_domain_count(self._ctx)):
            d = Domain()
            self._lib.nvtxr_domain(self._ctx, i, ctypes.byref(d))
            out.append(d)
        return out

    def categories(self) -> list[Category]:
        out = []
        for i in range(self._lib.nvtxr_category_count(self._ctx)):
            c = Category()
            self._lib.nvtxr_category(self._ctx, i, ctypes.byref(c))
            out.append(c)
        return out

    def thread_names(self) -> list[ThreadName]:
        out = []
        for i in range(self._lib.nvtxr_thread_name_count(self._ctx)):
            t = ThreadName()
            self._lib.nvtxr_thread_name(self._ctx, i, ctypes.byref(t))
            out.append(t)
        return out


def _decoded(buf, lengths: np.ndarray) -> list[str]:
    """The strings packed in ``buf`` (``lengths[i]`` bytes each, one after another), each
    decoded as ``bytes.decode("utf-8", errors="replace")`` would: when no string holds a NUL
    (C strings: NVTX's), the whole run at once, a NUL put between strings (an ASCII byte: it
    ends an invalid sequence as the end of a string does), then split; else one by one."""
    ends = np.cumsum(lengths, dtype=np.int64)
    total = int(ends[-1]) if len(ends) else 0
    blob = np.frombuffer(buf, dtype=np.uint8, count=total)
    if len(lengths) > 1 and not (blob == 0).any():
        return np.insert(blob, ends[:-1], 0).tobytes().decode("utf-8", errors="replace").split("\0")
    raw, offset, out = buf.raw, 0, []
    for length in lengths.tolist():
        out.append(raw[offset : offset + length].decode("utf-8", errors="replace"))
        offset += length
    return out
