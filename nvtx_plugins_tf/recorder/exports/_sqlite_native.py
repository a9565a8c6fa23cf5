"""The SQLite export's fast path: ``NVTX_EVENTS`` rows written by native code
(``nvtxr_sqlite_insert``, cc_ops/reader/sqlite_insert.h) instead of the sqlite3 module.

Python (numpy) still decides every value: :func:`event_rows` makes a batch into packed
rows (:data:`SQL_ROW_DTYPE`: the columns of :func:`.sqlite._statements` and which of them
are NULL), :class:`RowStore` keeps them, and :func:`start_order` sorts them as the Python
path's ``ORDER BY start, end DESC`` does (SQLite's sorter keeps rows with equal keys in
the order they were inserted: the staging table's order, which :func:`event_rows` keeps).
The native code binds them with one prepared statement in one transaction, and is a
reason the export holds the rows in memory (68 bytes a row) where the Python path spills
them to SQLite's temporary files.

libsqlite3 is loaded at run time (:data:`LIBSQLITE3`, the library Python's own sqlite3
module links). When it cannot be loaded, when the reader library lacks the functions, or
with ``NVTX_TF_SQLITE_NATIVE=0`` in the environment, or when the rows of a large recording
would take more than half the memory, :func:`unavailable` says why and the export takes the
Python path; both write the same file.
"""

from __future__ import annotations

import ctypes
import os
import sqlite3
from typing import NamedTuple

import numpy as np

from ..recording import _decoder
from ..recording._decoder import (
    FLAG_HAS_CATEGORY,
    FLAG_HAS_COLOR,
    FLAG_REGISTERED,
    FLAG_UNCLOSED,
    KIND_MARK,
    KIND_START_END,
    PAYLOAD_DOUBLE,
    PAYLOAD_EXT,
    PAYLOAD_FLOAT,
    PAYLOAD_I64,
    PAYLOAD_U64,
)
from ..recording.model import EVENT_TYPE_OF_KIND, payload_array
from .nsys_tables import global_tid

__all__ = ["NATIVE_ENV", "LIBSQLITE3", "SQL_ROW_DTYPE", "RowStore", "event_rows", "insert", "unavailable"]

#: ``0`` forces the Python path (e.g. to compare the two).
NATIVE_ENV = "NVTX_TF_SQLITE_NATIVE"
#: The SQLite library the native code opens with dlopen.
LIBSQLITE3 = "libsqlite3.so.0"

#: numpy mirror of ``NvtxrSqlRow`` (packed, 68 bytes).
SQL_ROW_DTYPE = np.dtype(
    [
        ("start", "<i8"),
        ("end", "<i8"),
        ("range_id", "<i8"),
        ("global_tid", "<i8"),
        ("end_global_tid", "<i8"),
        ("payload", "<i8"),
        ("text", "<u4"),
        ("category", "<u4"),
        ("color", "<u4"),
        ("domain_id", "<u4"),
        ("shape", "<u2"),
        ("event_type", "<u2"),
    ]
)
assert SQL_ROW_DTYPE.itemsize == 68
# NvtxrSqlRow.shape: which columns are not NULL; the payload type in the high byte.
END, RANGE_ID, END_TID, COLOR, CATEGORY, TEXT, TEXT_ID = (1 << i for i in range(7))
_EVENT_TYPES = np.zeros(max(EVENT_TYPE_OF_KIND) + 1, dtype=np.uint16)  # row kind -> eventType
_EVENT_TYPES[list(EVENT_TYPE_OF_KIND)] = list(EVENT_TYPE_OF_KIND.values())
_NO_END = np.iinfo(np.int64).max


class _Lib:
    """The reader library's two SQLite functions (None when it lacks them)."""

    functions = None

    @classmethod
    def get(cls):
        if cls.functions is None:
            lib = _decoder.library()
            try:
                available, insert = lib.nvtxr_sqlite_available, lib.nvtxr_sqlite_insert
            except AttributeError:
                cls.functions = ()
                return None
            vp, u32 = ctypes.c_void_p, ctypes.c_uint32
            available.restype, available.argtypes = ctypes.c_int, [ctypes.c_char_p, ctypes.c_char_p, u32]
            insert.restype = ctypes.c_int
            insert.argtypes = [ctypes.c_char_p, ctypes.c_char_p, vp, ctypes.c_int, vp, ctypes.c_int64]
            insert.argtypes += [vp, vp, ctypes.c_uint64, ctypes.c_char_p, u32]
            cls.functions = (available, insert)
        return cls.functions or None


#: Bytes the native path holds per row: the row, and its share of the sort's arrays.
ROW_BYTES = SQL_ROW_DTYPE.itemsize + 48


def memory_budget() -> int:
    """The memory the native path may hold its rows in: half the machine's."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 2
    except (ValueError, OSError):
        return 1 << 31


def unavailable(estimated_events: int = 0) -> str | None:
    """Why the native path cannot be used (None: it can) for a recording of about
    ``estimated_events`` events (a range is two: one row)."""
    if os.environ.get(NATIVE_ENV, "1").strip() == "0":
        return f"{NATIVE_ENV}=0"
    need = estimated_events // 2 * ROW_BYTES
    if need > memory_budget():  # the Python path's rows wait in SQLite's temporary files instead
        return f"its rows would take about {need >> 20} MiB of memory, more than half the machine's"
    try:
        functions = _Lib.get()
    except (ImportError, OSError) as exc:  # no reader library to be had: nor a decode, mostly
        return str(exc)
    if functions is None:
        return "the reader library has no nvtxr_sqlite_insert"
    err = ctypes.create_string_buffer(512)
    if not functions[0](LIBSQLITE3.encode(), err, len(err)):
        return err.value.decode(errors="replace") or f"cannot load {LIBSQLITE3}"
    return None


class RowFlags(NamedTuple):
    """What decides a batch row's NVTX_EVENTS columns (:func:`row_flags`)."""

    kind: np.ndarray
    ptype: np.ndarray
    closed: np.ndarray
    has_color: np.ndarray
    has_cat: np.ndarray
    has_msg: np.ndarray
    registered: np.ndarray
    cross: np.ndarray  #: a start/end range ended on another thread
    group: np.ndarray  #: one code per combination of the above (the rows inserted alike)


def row_flags(rows: np.ndarray) -> RowFlags:
    """The flags of each row of a batch (``ROW_DTYPE``) that decide its columns: one
    definition for the Python path's statement groups (:func:`.sqlite._statements`) and the
    native path's shapes, so that both insert the rows in the same order."""
    kind = rows["kind"].astype(np.int64)
    flags = rows["flags"].astype(np.int64)
    ptype = rows["payload_type"].astype(np.int64)
    closed = ((flags & FLAG_UNCLOSED) == 0) & (kind != KIND_MARK)
    has_color = (flags & FLAG_HAS_COLOR) != 0
    has_cat = (flags & FLAG_HAS_CATEGORY) != 0
    has_msg = rows["message"] != 0
    registered = ((flags & FLAG_REGISTERED) != 0) & has_msg
    cross = (kind == KIND_START_END) & closed & (rows["end_tid"] != rows["tid"])
    group = kind | closed << 3 | has_color << 4 | has_cat << 5 | has_msg << 6 | registered << 7
    group |= cross << 8 | ptype << 9
    return RowFlags(kind, ptype, closed, has_color, has_cat, has_msg, registered, cross, group)


def event_rows(rows: np.ndarray, domain_local: np.ndarray, origin: int, out: np.ndarray | None = None) -> np.ndarray:
    """The NVTX_EVENTS rows of a batch (``ROW_DTYPE``) as :data:`SQL_ROW_DTYPE` (into ``out``
    when given), the values of :func:`.sqlite._statements` in the order it inserts them
    (grouped by shape). A NULL column's field holds whatever (the shape says it is NULL)."""
    f = row_flags(rows)
    kind, ptype, group = f.kind, f.ptype, f.group  # (the Python path's statement groups, in its order)
    shape = f.closed * END | (kind == KIND_START_END) * RANGE_ID | f.cross * END_TID | f.has_color * COLOR
    shape |= f.has_cat * CATEGORY | f.registered * TEXT_ID | (f.has_msg & ~f.registered) * TEXT | ptype << 8
    if len(group) > 1 and (group[1:] < group[:-1]).any():
        order = np.argsort(group, kind="stable")
        rows, kind, ptype, shape = rows[order], kind[order], ptype[order], shape[order]
    out = np.empty(len(rows), dtype=SQL_ROW_DTYPE) if out is None else out
    pid = rows["pid"]
    out["start"] = rows["start_ns"] - origin
    out["end"] = rows["end_ns"] - origin
    out["range_id"] = rows["range_id"].view(np.int64)
    out["global_tid"] = global_tid(pid, rows["tid"])
    out["end_global_tid"] = global_tid(pid, rows["end_tid"])
    out["text"] = rows["message"]
    out["category"] = rows["category"]
    out["color"] = rows["color"]
    out["domain_id"] = domain_local[rows["domain"]]
    out["event_type"] = _EVENT_TYPES[kind]
    out["shape"] = shape
    payload = rows["payload"]
    out["payload"] = payload.view(np.int64)  # u64 and i64 payloads as they are (u64 wrapped, as in SQLite)
    for pt in np.unique(ptype).tolist():
        if pt in (0, PAYLOAD_U64, PAYLOAD_I64):
            continue
        has = ptype == pt
        if pt == PAYLOAD_EXT:  # the index of its JSON text
            values = payload[has].astype(np.int64)
        else:
            values = payload_array(pt, payload[has])
            if pt in (PAYLOAD_DOUBLE, PAYLOAD_FLOAT):
                values = values.astype(np.float64).view(np.int64)
            else:
                values = values.astype(np.int64)
        out["payload"][has] = values
    return out


def definition_rows(definitions: list[tuple], first_text: int) -> np.ndarray:
    """:func:`.nsys_tables.definition_events` rows (start, eventType, category, text,
    globalTid, domainId); the texts are strings ``first_text``, ``first_text + 1``, ..."""
    out = np.zeros(len(definitions), dtype=SQL_ROW_DTYPE)
    for i, (start, event_type, category, text, gtid, domain_id) in enumerate(definitions):
        shape = (CATEGORY if category is not None else 0) | (TEXT if text is not None else 0)
        out[i] = (start, 0, 0, gtid, 0, 0, first_text + i, category or 0, 0, domain_id, shape, event_type)
    return out


class RowStore:
    """The rows of the whole export, in blocks of ``1 << BLOCK_BITS`` rows (no copy of all
    of them when they grow, none to sort them: :meth:`start_order` gives an order), and
    their time bounds."""

    BLOCK_BITS = 18

    def __init__(self):
        self.blocks: list[np.ndarray] = []
        self.count = 0
        self.earliest: int | None = None  # the earliest start (None: no rows)
        self._latest: int | None = None  # the latest start or end

    def add(self, make, n: int) -> None:
        """Append the ``n`` rows ``make(out)`` writes into ``out`` (an array of ``n`` rows,
        or None: it then returns a new one)."""
        size = 1 << self.BLOCK_BITS
        at = self.count & (size - 1)
        if at + n <= size:  # straight into the block
            if n and at == 0:
                self.blocks.append(np.empty(size, dtype=SQL_ROW_DTYPE))
            rows = self.blocks[-1][at : at + n] if n else np.empty(0, dtype=SQL_ROW_DTYPE)
            make(rows)
            self.count += n
        else:
            rows = make(None)
            done = 0
            while done < n:
                at = self.count & (size - 1)
                if at == 0:
                    self.blocks.append(np.empty(size, dtype=SQL_ROW_DTYPE))
                part = min(size - at, n - done)
                self.blocks[-1][at : at + part] = rows[done : done + part]
                done += part
                self.count += part
        self._note(rows)

    def append(self, rows: np.ndarray) -> None:
        def copy(out):
            if out is None:
                return rows
            out[...] = rows
            return out

        self.add(copy, len(rows))

    def _note(self, rows: np.ndarray) -> None:
        if not len(rows):
            return
        start = rows["start"]
        low, high = int(start.min()), int(start.max())
        self.earliest = low if self.earliest is None else min(self.earliest, low)
        ends = rows["end"][(rows["shape"] & END) != 0]
        high = max(high, int(ends.max())) if len(ends) else high
        self._latest = high if self._latest is None else max(self._latest, high)

    @property
    def last(self) -> int:
        """The latest start or end, at least 0."""
        return max(self._latest or 0, 0)

    def _filled(self):
        size = 1 << self.BLOCK_BITS
        for i, block in enumerate(self.blocks):
            yield block[: min(size, self.count - i * size)]

    def column(self, name: str) -> np.ndarray:
        parts = [b[name] for b in self._filled()]
        return np.concatenate(parts) if parts else np.zeros(0, dtype=SQL_ROW_DTYPE[name])

    def shift(self, delta: int) -> None:
        """Add ``delta`` to every start and every non-NULL end."""
        for block in self._filled():
            block["start"] += delta
            block["end"] += np.where((block["shape"] & END) != 0, delta, 0)
        if self.earliest is not None:
            self.earliest += delta
            self._latest += delta

    def start_order(self) -> np.ndarray:
        """Row numbers by start, then end descending with NULL ends last; ties in row order."""
        start, shape = self.column("start"), self.column("shape")
        end_key = np.where((shape & END) != 0, -self.column("end"), _NO_END)
        return np.lexsort((end_key, start))


def insert(path, store: RowStore, order: np.ndarray, strings: list[str]) -> None:
    """Append the rows of ``store`` in ``order`` to NVTX_EVENTS of the SQLite file ``path``
    (closed by everyone else); ``strings`` are the texts the rows' string indexes name.
    Errors are raised as ``sqlite3.OperationalError`` with SQLite's error code."""
    _, native_insert = _Lib.get()
    encoded = [s.encode("utf-8", errors="surrogatepass") for s in strings]
    offsets = np.zeros(len(encoded) + 1, dtype=np.uint64)
    offsets[1:] = np.cumsum(np.fromiter(map(len, encoded), dtype=np.uint64, count=len(encoded)), dtype=np.uint64)
    blob = b"".join(encoded)
    blocks = (ctypes.c_void_p * max(len(store.blocks), 1))(*[b.ctypes.data for b in store.blocks])
    order = np.ascontiguousarray(order, dtype=np.int64)
    err = ctypes.create_string_buffer(1024)
    rc = native_insert(
        LIBSQLITE3.encode(),
        os.fsencode(path),
        ctypes.cast(blocks, ctypes.c_void_p),
        RowStore.BLOCK_BITS,
        order.ctypes.data,
        len(order),
        blob,
        offsets.ctypes.data,
        len(encoded),
        err,
        len(err),
    )
    if rc != 0:
        exc = sqlite3.OperationalError(err.value.decode(errors="replace") or f"SQLite error {rc}")
        exc.sqlite_errorcode = rc
        raise exc
