"""ctypes side of analyze's native mapper (cc_ops/reader/range_columns.h, rank_stats.h):
a recording's ranges decoded straight into compact columns, then every process's
:class:`~.mapper.RankResult` columns computed in one native pass, the GIL released (ctypes
releases it in every call). The numpy mapper (:mod:`.mapper`) is the reference: the same
inputs give the same values (tests/test_analyze_native.py). ``NVTX_TF_ANALYZE_NATIVE=0``
turns this path off (the numpy mapper then reads the recordings too);
``NVTX_TF_SQLITE_PAGES=0`` reads an SQLite export's ranges by SQLite's query, not from the
file's pages (cc_ops/reader/sqlite_pages.h).
"""

from __future__ import annotations

import ctypes
import os
import threading

import numpy as np

from ..recording._decoder import library
from . import sketch

__all__ = ["NativeRanges", "thread_ranges", "enabled", "sqlite_pages_enabled", "FIELDS", "NAME_STATS"]

#: the result fields (NvtxrRankField in cc_ops/reader/decode.h), in its order, and their dtypes
FIELDS = {
    "rows": np.int64,
    "count": np.int64,
    "sum": np.int64,
    "min": np.int64,
    "max": np.int64,
    "m2": np.float64,
    "q1": np.float64,
    "median": np.float64,
    "q3": np.float64,
    "sketch_row": np.int64,
    "sketch_key": np.int64,
    "sketch_count": np.int64,
    "step_row": np.int64,
    "step_start": np.int64,
    "step_end": np.int64,
    "work_rows": np.int64,
    "step_work": np.int64,
    "step_incl": np.int64,
}


#: the per-name statistics among them (left out of a read without them: ``name_stats`` False)
NAME_STATS = ("count", "sum", "min", "max", "m2", "q1", "median", "q3", "sketch_row", "sketch_key", "sketch_count")

_local = threading.local()


def thread_ranges() -> "NativeRanges":
    """This thread's :class:`NativeRanges`, empty: one per mapper thread, reused from input
    to input (a new one's columns would touch their pages anew: the kernel's page faults
    cost as much as a third of a recording's mapping). Its memory is that of the largest
    input yet, until the thread ends."""
    ranges = getattr(_local, "ranges", None)
    if ranges is None:
        ranges = _local.ranges = NativeRanges()
    ranges.clear()
    return ranges


def enabled() -> bool:
    """Whether analyze maps recordings natively (``NVTX_TF_ANALYZE_NATIVE``, default 1)."""
    return os.environ.get("NVTX_TF_ANALYZE_NATIVE", "1").strip() not in ("0", "false", "no", "off")


def sqlite_pages_enabled() -> bool:
    """Whether an SQLite export's range rows may be read straight from the file's pages
    (``NVTX_TF_SQLITE_PAGES``, default 1; 0: always by SQLite's query, the reference)."""
    return os.environ.get("NVTX_TF_SQLITE_PAGES", "1").strip() not in ("0", "false", "no", "off")


#: what a query given to :meth:`NativeRanges.add_sqlite` is (NvtxrSqliteQuery, decode.h)
_SQLITE_QUERY = {None: 0, "text": 1, "StringIds": 2}
_INT64_MIN = -(1 << 63)


class NativeRanges:
    """One input's ranges in native columns, then its per-process results."""

    def __init__(self):
        self.sqlite_pages = False
        self.sqlite_note = ""
        self._lib = library()
        self._ptr = self._lib.nvtxr_ranges_new()
        if not self._ptr:
            raise MemoryError("nvtxr_ranges_new failed")

    def close(self) -> None:
        if self._ptr:
            self._lib.nvtxr_ranges_free(self._ptr)
            self._ptr = None

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass

    def clear(self) -> None:
        """Empty for another input; the memory stays (its pages are not touched anew)."""
        self._lib.nvtxr_ranges_clear(self._ptr)

    def reserve(self, ranges: int) -> None:
        """Room for ``ranges`` ranges (the columns are then not copied as they grow)."""
        if self._lib.nvtxr_ranges_reserve(self._ptr, ranges) != 0:
            raise MemoryError("nvtxr_ranges_reserve failed")

    def collect(self, decoder, capacity: int) -> int:
        """Decode up to ``capacity`` rows of ``decoder`` (a recording._decoder.Decoder) into
        the columns; how many (0: the segment is done)."""
        n = self._lib.nvtxr_ranges_collect(self._ptr, decoder._ctx, capacity)
        if n < 0:
            raise MemoryError("nvtxr_ranges_collect failed")
        return n

    def add_export(
        self, n: int, start, end, end_valid, end_offset: int, event_type, global_tid, domain_id, message
    ) -> int:
        """Append ``n`` rows of an nsys export's NVTX_EVENTS (cc_ops/reader/decode.h,
        nvtxr_ranges_add_export): ``start``, ``end``, ``event_type``, ``global_tid``,
        ``domain_id`` addresses of int64 columns (Arrow's buffers: not copied), ``end_valid``
        the address of ``end``'s validity bitmap (0: no NULL) from bit ``end_offset``,
        ``message`` a contiguous int32 numpy array (each row's message index). The ranges
        added."""
        n = self._lib.nvtxr_ranges_add_export(
            self._ptr, n, start, end, end_valid or None, end_offset, event_type, global_tid, domain_id,
            message.ctypes.data,
        )  # fmt: skip
        if n < 0:
            raise MemoryError("nvtxr_ranges_add_export failed")
        return n

    def add_sqlite(
        self, library: str, uri: str, query: str, ranges: str | None = None
    ) -> tuple[list[str], list[tuple] | None]:
        """Append the rows of ``query`` on the SQLite file ``uri`` read natively
        (cc_ops/reader/sqlite_ranges.h; its columns: start, end, eventType, globalTid,
        domainId, the message text); the messages, by the index the ranges hold, and the
        domains' creations. OSError (SQLite's message) when the file cannot be read.
        ``ranges``: None (any query), or ``"text"`` / ``"StringIds"`` when ``query`` is
        nsys_inputs' range query (its message the row's text, or its registered string else
        its text): its rows are then read from the table's pages where they can be exactly
        (:func:`sqlite_pages_enabled`), and the domains' creations met on the way (eventType
        75, in rowid order: (start, rowid, domainId, globalTid, text), NULL as None but
        domainId and globalTid, 0) are the second value (else None). Afterwards
        ``sqlite_pages`` tells whether the pages were read, ``sqlite_note`` why not."""
        err, note = ctypes.create_string_buffer(512), ctypes.create_string_buffer(256)
        kind = _SQLITE_QUERY[ranges] if sqlite_pages_enabled() else 0
        pages = ctypes.c_int32(0)
        n = self._lib.nvtxr_ranges_add_sqlite(
            self._ptr, library.encode(), uri.encode(), query.encode(), kind, ctypes.byref(pages), note, 256, err, 512
        )
        self.sqlite_pages = bool(pages.value)
        self.sqlite_note = note.value.decode(errors="replace") if kind else "NVTX_TF_SQLITE_PAGES=0"
        if n < 0:
            self.clear()  # (none of its rows kept)
            raise OSError(err.value.decode(errors="replace") or "nvtxr_ranges_add_sqlite failed")
        messages = [t.decode(errors="replace") for t in self._texts(self._lib.nvtxr_ranges_messages)]
        count = self._lib.nvtxr_ranges_sqlite_creates(self._ptr, None, None, None)
        if count < 0:
            return messages, None
        values = np.zeros((count, 6), dtype=np.int64)
        self._lib.nvtxr_ranges_sqlite_creates(self._ptr, values.ctypes.data, None, None)
        texts = self._texts(lambda ptr, offsets, out: self._lib.nvtxr_ranges_sqlite_creates(ptr, None, offsets, out))
        creates = [
            (None if start_null else start, rowid, domain, gtid, None if text_null else text)
            for (start, start_null, rowid, domain, gtid, text_null), text in zip(values.tolist(), texts)
        ]
        return messages, creates

    def _texts(self, call) -> list[bytes]:
        """The texts ``call(ptr, offsets, out)`` writes (nvtxr_ranges_messages' way)."""
        count = call(self._ptr, None, None)
        offsets = np.zeros(count + 1, dtype=np.int64)
        call(self._ptr, offsets.ctypes.data, None)
        data = ctypes.create_string_buffer(int(offsets[-1]) + 1)
        call(self._ptr, offsets.ctypes.data, data)
        raw, at = data.raw, offsets.tolist()
        return [raw[at[i] : at[i + 1]] for i in range(count)]

    def pairs(self) -> np.ndarray:
        """The (domainId, pid) pairs of the export's ranges (n x 2), in the order they came:
        a range's domain index is its pair's row."""
        n = self._lib.nvtxr_ranges_pairs(self._ptr, None)
        out = np.zeros((n, 2), dtype=np.int64)
        if n:
            self._lib.nvtxr_ranges_pairs(self._ptr, out.ctypes.data)
        return out

    def bounds(self) -> tuple[int, int, int, int]:
        """(first start, last time over every row decoded, rows decoded, ranges)."""
        out = np.zeros(4, dtype=np.int64)
        self._lib.nvtxr_ranges_bounds(self._ptr, out.ctypes.data)
        lowest, highest, rows, ranges = (int(v) for v in out)
        return lowest, highest, rows, ranges

    def name(self, dom_map: np.ndarray, strings: int) -> np.ndarray:
        """Names the ranges (key = dom_map[domain] * (strings + 1) + message, as
        reports.ranges numbers them); the keys of the names, ascending."""
        dom_map = np.ascontiguousarray(dom_map, dtype=np.int64)
        n = self._lib.nvtxr_ranges_name(self._ptr, dom_map.ctypes.data, len(dom_map), strings)
        if n < 0:
            raise MemoryError("nvtxr_ranges_name failed")
        keys = np.empty(n, dtype=np.int64)
        self._lib.nvtxr_ranges_keys(self._ptr, keys.ctypes.data)
        return keys

    def rank_stats(
        self, is_step: np.ndarray | None, n_names: int, inclusive: bool = False, name_stats: bool = True
    ) -> list[dict]:
        """Every process's results (by pid ascending): dicts of ``pid``, ``events``,
        ``open_ranges`` and the :data:`FIELDS` (``step_work``, ``step_incl``: steps x work rows);
        ``is_step`` None: no step chosen; ``inclusive`` False: ``step_incl`` empty (0 x 0),
        not computed (compare's only: analyze does not use it); ``name_stats`` False: the
        per-name statistics (:data:`NAME_STATS`) neither computed nor in the dicts (watch's
        reads: ``rows``, the steps and their work only, the same values)."""
        flags = np.zeros(max(n_names, 1), dtype=np.uint8)
        if is_step is not None:
            flags[:n_names] = is_step[:n_names]
        bounds = sketch.bucket_bounds()
        n = self._lib.nvtxr_rank_stats(
            self._ptr, flags.ctypes.data, n_names, int(is_step is not None), int(inclusive), int(name_stats),
            sketch.LOG_GAMMA, bounds.ctypes.data, len(bounds), sketch.ZERO,
        )  # fmt: skip
        if n < 0:
            raise MemoryError("nvtxr_rank_stats failed")
        return self._results(n, inclusive, name_stats)

    def live(self) -> None:
        """Make these columns a live read's window (watch's): kept from one read to the next,
        each read's ranges added by :meth:`collect`, :meth:`rank_stats_window` dropping those
        no later step needs."""
        self._lib.nvtxr_ranges_live(self._ptr)

    def rank_stats_window(
        self, is_step: np.ndarray, n_names: int, longest_floor: int
    ) -> tuple[list[dict], tuple[int, int, int, int]]:
        """:meth:`rank_stats` of a live read's window (the steps and their work only; the
        longest step at least ``longest_floor``, that of the steps dropped before), then, for
        one process, only the ranges that end after the start of its last step kept: (the
        results, (steps dropped, the longest of them or ``longest_floor``, the latest start
        of one or None, the ranges kept)). Call :meth:`name` before, each read."""
        flags = np.zeros(max(n_names, 1), dtype=np.uint8)
        flags[:n_names] = is_step[:n_names]
        out = np.zeros(4, dtype=np.int64)
        n = self._lib.nvtxr_rank_stats_window(self._ptr, flags.ctypes.data, n_names, longest_floor, out.ctypes.data)
        if n < 0:
            raise MemoryError("nvtxr_rank_stats_window failed")
        dropped, longest, latest, kept = out.tolist()
        return self._results(n, False, False), (dropped, longest, None if latest == _INT64_MIN else latest, kept)

    def _results(self, n: int, inclusive: bool, name_stats: bool) -> list[dict]:
        """The results of the last :meth:`rank_stats` or :meth:`rank_stats_window`, as dicts."""
        left_out = (() if name_stats else NAME_STATS) + (() if inclusive else ("step_incl",))
        fields = [(i, name, dtype) for i, (name, dtype) in enumerate(FIELDS.items()) if name not in left_out]
        out = []
        header = np.zeros(3, dtype=np.int64)
        lib, ptr = self._lib, self._ptr
        for p in range(n):
            lib.nvtxr_rank_stats_header(ptr, p, header.ctypes.data)
            pid, events, open_ranges = header.tolist()
            result = {"pid": pid, "events": events, "open_ranges": open_ranges}
            for field, name, dtype in fields:
                values = np.empty(lib.nvtxr_rank_stats_size(ptr, p, field), dtype=dtype)
                if len(values):
                    lib.nvtxr_rank_stats_copy(ptr, p, field, values.ctypes.data)
                result[name] = values
            steps = len(result["step_start"])
            for name in ("step_work", "step_incl") if inclusive else ("step_work",):
                result[name] = result[name].reshape(steps, len(result["work_rows"]) if steps else 0)
            if not inclusive:
                result["step_incl"] = np.zeros((0, 0), dtype=np.int64)
            out.append(result)
        return out
