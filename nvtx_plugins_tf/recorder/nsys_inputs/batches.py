"""The rows of an export in Nsight Systems' schema (a parquetdir or an SQLite file, ours or
``nsys export``'s) streamed batch by batch into a consumer of columns -- analyze's native
mapper (:mod:`..analysis._native`) -- never the whole input in memory: a parquetdir's
``NVTX_EVENTS.parquet`` is read in record batches of the columns needed only, their Arrow
buffers handed over in place (no copy); an SQLite file read by the consumer natively
(``read_sqlite``: cc_ops/reader/sqlite_ranges.h) or, failing that, a query's rows at a time.

The rules are :mod:`.ranges`' (the reference, read whole into numpy): a range's
message is its registered string (``textId`` in ``StringIds``), else its ``text``; its
domain's name is the domain's first creation (eventType 75, by start) in the range's
process; a message NULL is the empty one (both give the same name). Messages are numbered
by their text, so a message written plainly and through a registered string is one: as
they first come, batch by batch; with no registered string (``textId`` NULL throughout, by
the file's statistics) all at once, by Arrow's dictionary unifier over the text column read
alone (:class:`_UnifiedTexts`: the same numbers, no Python dictionary of a long job's texts).

No pandas is imported (0.2 s: pyarrow's ``to_numpy``, ``pa.array``, ``pa.scalar`` and
``pq.read_table`` would), nor ``pyarrow.compute`` (25-35 ms): columns are viewed, and their
nulls filled, by :mod:`.._arrays`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa

from ..._paths import arrow_file
from .._arrays import filled, is_valid, to_numpy
from ..recording.model import EVENT_DOMAIN_CREATE
from .parquetdir import events_columns
from .ranges import RANGE_TYPES
from .sqlite import MISSING_STRINGS, NsysFile, open_nsys_sqlite, pid_sql

__all__ = ["ExportInfo", "feed_export", "range_query", "BATCH_ROWS"]

#: rows per batch (a few MB of columns)
BATCH_ROWS = 1 << 16
_MASK = 0xFFFFFF
_NULL = np.iinfo(np.int64).min  # (an SQLite end NULL, as read)

#: ``add(n, start, end, end_valid, end_offset, event_type, global_tid, domain_id, message)``:
#: addresses of ``n`` int64 values each (``end_valid``: ``end``'s validity bitmap from bit
#: ``end_offset``, 0: no NULL), ``message`` a contiguous int32 numpy array.
AddRows = Callable[[int, int, int, int, int, int, int, int, np.ndarray], int]


@dataclass
class ExportInfo:
    """What the batches leave besides the rows: ``messages`` (a message index's text),
    ``domain_names`` ((domainId, pid) -> the domain's name: its first creation in that
    process), ``epoch_ns`` (the session's start on the wall clock; None: unknown) and
    ``rows`` (the rows handed to ``add``)."""

    messages: list[str] = field(default_factory=list)
    domain_names: dict[tuple[int, int], str | None] = field(default_factory=dict)
    epoch_ns: int | None = None
    rows: int = 0


class _Messages(dict):
    """Message texts numbered as they first come (NULL: the empty message): text -> index
    (a lookup of a known text in C: ``map(messages.__getitem__, texts)``)."""

    def __init__(self, info: ExportInfo):
        super().__init__()
        self.values = info.messages
        self._last_dictionary: pa.Array | None = None
        self._last_lut = np.zeros(0, dtype=np.int32)
        self[None] = self[""]

    def __missing__(self, text: str | None) -> int:
        if text is None:
            return self[""]
        found = self[text] = len(self.values)
        self.values.append(text)
        return found

    def of(self, text: str | None) -> int:
        return self[text]

    def indexes(self, texts: list) -> list[int]:
        """``[self.of(t) for t in texts]``, the texts not met before numbered in a few C-level
        passes (a long job's dictionary has a text per step: 83,000 a rank)."""
        found = list(map(self.get, texts))  # (None: not met; a NULL text is met, as "")
        if None in found:
            fresh = list(dict.fromkeys(t for t, f in zip(texts, found) if f is None))
            self.update(zip(fresh, range(len(self.values), len(self.values) + len(fresh))))
            self.values += fresh
            found = list(map(self.__getitem__, texts))
        return found

    def lut(self, dictionary: pa.Array) -> np.ndarray:
        """Each entry's index of a batch's dictionary of texts, and the empty message's last."""
        last = self._last_dictionary
        if last is None or not (dictionary is last or dictionary.equals(last)):
            values = dictionary.to_pylist() + [None]
            self._last_lut = np.array(self.indexes(values), dtype=np.int32)
            self._last_dictionary = dictionary
        return self._last_lut


def _address(array: pa.Array) -> int:
    """The address of an int64/uint64 array's first value (its buffer, in place)."""
    return array.buffers()[1].address + array.offset * 8


def _int64(batch: pa.RecordBatch, name: str, present: set, keep: list) -> int:
    """Column ``name`` of ``batch`` as 8-byte integers, NULL as 0 (0 throughout when the
    export has no such column): its values in place when it holds 8-byte integers and no
    NULL, else a copy; its address (the values, which must outlive the call, appended to
    ``keep`` as a numpy array)."""
    column = batch.column(name) if name in present else None
    if column is None or not len(column):
        values = np.zeros(batch.num_rows, dtype=np.int64)
    elif column.type not in (pa.int64(), pa.uint64()):
        values = filled(column, 0)  # (cast as pyarrow casts)
    else:  # (8 bytes each, a uint64's bits as they are)
        values = np.frombuffer(column.buffers()[1], dtype=np.int64, count=len(column), offset=column.offset * 8)
        if column.null_count:
            values = np.where(is_valid(column), values, 0)
    keep.append(values)
    return values.ctypes.data


#: ``read(uri, query, ranges)``: the rows of ``query`` on the SQLite file ``uri`` read natively
#: into the consumer (its columns: start, end, eventType, globalTid, domainId, the message
#: text); ``ranges`` says which of the two range queries below it is (``"text"``: its message
#: ``e.text``; ``"StringIds"``: :data:`.sqlite.TEXT_SQL` over :data:`.sqlite.STRINGS_JOIN`), so
#: that the consumer may read the same rows from the file's pages (cc_ops/reader/sqlite_pages.h);
#: returns the messages by index and, when it read the pages, the domains' creations it met
#: there (eventType 75, rowid order: (start, rowid, domainId, globalTid, text as UTF-8 bytes),
#: NULL as None but domainId and globalTid, 0; else None); OSError when it cannot (nothing
#: then added).
ReadSqlite = Callable[[str, str, str], tuple[list[str], list[tuple] | None]]


def feed_export(
    path, add: AddRows, reserve: Callable[[int], None] | None = None, read_sqlite: ReadSqlite | None = None
) -> ExportInfo:
    """Stream the export ``path`` (a parquetdir or an SQLite file) into ``add``, in the
    order of its NVTX_EVENTS rows, after ``reserve(rows)`` (at least the rows to come: the
    consumer's room made once); an SQLite file through ``read_sqlite`` when given (and it
    can), else a query's rows at a time. ValueError naming it as :mod:`.ranges`
    raises."""
    path = Path(path)
    reserve = reserve or (lambda rows: None)
    if path.is_dir():
        return _feed_parquetdir(path, add, reserve)
    return _feed_sqlite(path, add, reserve, read_sqlite)


def _registered(directory: Path, messages: _Messages) -> tuple[np.ndarray, np.ndarray] | None:
    """StringIds.parquet as (ids ascending, their message indexes); None without the file."""
    import pyarrow.parquet as pq

    strings = directory / "StringIds.parquet"
    if not strings.is_file():
        return None
    with arrow_file(strings) as source:
        table = pq.ParquetFile(source).read(columns=["id", "value"])
    ids = filled(table.column("id"), _NULL)
    index = np.array(messages.indexes(table.column("value").to_pylist()), dtype=np.int32)
    # (a duplicate id: its first row, as pc.index_in finds it)
    ids, first = np.unique(ids, return_index=True)
    return ids, index[first]


def _batches(reader, columns: list[str]):
    """The file's rows as record batches of about :data:`BATCH_ROWS`: small row groups read
    together, their chunks combined (the text dictionaries unified). nsys's own exports write
    2,048 rows a group: batch by batch, 488 a 1M-range file, the Python of each batch was a
    third of the input's mapping."""
    meta = reader.metadata
    group, end = 0, meta.num_row_groups
    while group < end:
        rows, last = 0, group
        while last < end and (last == group or rows + meta.row_group(last).num_rows <= BATCH_ROWS):
            rows += meta.row_group(last).num_rows
            last += 1
        if last - group == 1:  # (a group of its own: streamed, however large)
            yield from reader.iter_batches(BATCH_ROWS, row_groups=[group], columns=columns, use_threads=False)
        else:
            yield from (
                reader.read_row_groups(range(group, last), columns=columns, use_threads=False)
                .combine_chunks()
                .to_batches()
            )
        group = last


def _all_null(reader, name: str) -> bool:
    """Whether every row group's statistics say that column ``name`` holds NULLs only (False
    when a group has no such count): nsys writes ``textId`` so when no string is registered."""
    meta = reader.metadata
    found = [i for i in range(meta.num_columns) if meta.schema.column(i).path == name]
    if len(found) != 1:
        return False
    for group in range(meta.num_row_groups):
        rows = meta.row_group(group)
        stats = rows.column(found[0]).statistics
        if stats is None or not stats.has_null_count or stats.null_count != rows.num_rows:
            return False
    return True


class _UnifiedTexts:
    """A parquetdir's text column numbered in one pass of Arrow's dictionary unifier (C++,
    the GIL released) instead of :meth:`_Messages.lut`'s dictionary of Python strings per
    batch (a long job's rank: 83,000 texts, 25 ms of GIL-held CPU): the text column alone
    is read in :func:`_batches`' batches, their dictionaries unified in order -- each new
    text numbered as it first comes, batch by batch, in dictionary order, as ``lut`` numbers
    them -- and each batch's rows are taken by their place in the file."""

    def __init__(self, chunks: pa.ChunkedArray, lut: np.ndarray):
        self.chunks, self.lut = chunks, lut

    @classmethod
    def read(cls, reader, messages: _Messages) -> _UnifiedTexts | None:
        """The numbering of ``reader``'s text column into ``messages`` (which holds only the
        empty message yet: its texts are appended to ``messages.values``, not to its lookup,
        so nothing may be numbered after); None (nothing numbered) when a batch's text is no
        dictionary of strings (or not of the first batch's type) or a dictionary holds a NULL:
        ``lut``'s path then."""
        if messages.values != [""]:
            return None
        chunks = [batch.column(0) for batch in _batches(reader, ["text"])]
        string = (pa.string(), pa.large_string())
        if any(not pa.types.is_dictionary(c.type) or c.type.value_type not in string or c.dictionary.null_count
               or c.type != chunks[0].type for c in chunks):  # fmt: skip
            return None
        if not chunks:
            return cls(pa.chunked_array([], pa.dictionary(pa.int32(), pa.string())), np.zeros(1, dtype=np.int32))
        unified = pa.chunked_array(chunks).unify_dictionaries()
        texts = unified.chunk(0).dictionary.to_pylist()
        lut = np.arange(1, len(texts) + 2, dtype=np.int32)  # (the last: a NULL text's, the empty message)
        lut[-1] = 0
        if "" in texts:
            k = texts.index("")
            lut[k], lut[k + 1 : -1] = 0, lut[k + 1 : -1] - 1
            del texts[k]
        messages.values += texts
        return cls(unified, lut)

    def message(self, offset: int, n: int) -> np.ndarray:
        """The message indexes of the file's rows ``offset`` to ``offset + n``."""
        part = self.chunks.slice(offset, n).chunks
        if len(part) != 1:
            part = [pa.concat_arrays(part)] if part else [pa.array([], self.chunks.type)]
        indices = part[0].indices
        return self.lut[filled(indices, len(self.lut) - 1) if indices.null_count else to_numpy(indices)]


def _feed_parquetdir(directory: Path, add: AddRows, reserve: Callable[[int], None]) -> ExportInfo:
    import pyarrow.parquet as pq

    info = ExportInfo()
    messages = _Messages(info)
    present = events_columns(directory)
    wanted = ("start", "end", "eventType", "globalTid", "domainId", "text", "textId")
    columns = [c for c in wanted if c in present]
    registered: tuple[np.ndarray, np.ndarray] | None | bool = False  # (False: not read yet)
    creates: list[tuple[int, int, int, int, str]] = []
    with arrow_file(directory / "NVTX_EVENTS.parquet") as source:
        reader = pq.ParquetFile(source, read_dictionary=["text"] if "text" in present else None)
        reserve(reader.metadata.num_rows)
        unified = None
        if "text" in present and ("textId" not in present or _all_null(reader, "textId")):
            unified = _UnifiedTexts.read(reader, messages)  # (no registered string to number after)
        if unified is not None:
            columns = [c for c in columns if c not in ("text", "textId")]
            present = present - {"textId"}
        for batch in _batches(reader, columns):
            n, keep = batch.num_rows, []
            etype = _int64(batch, "eventType", present, keep)
            event_type = keep[-1]  # (NULL as 0)
            start = _int64(batch, "start", present, keep)
            gtid = _int64(batch, "globalTid", present, keep)
            domain = _int64(batch, "domainId", present, keep)
            if "end" in present:
                end_col = batch.column("end")
                if end_col.type == pa.int64():  # (in place, its validity bitmap too)
                    keep.append(end_col)
                    end, valid = _address(end_col), end_col.buffers()[0]
                    end_valid, end_offset = (
                        (valid.address if valid is not None and end_col.null_count else 0),
                        end_col.offset,
                    )
                else:  # (another type: its values as int64, and its validity, copied)
                    values = filled(end_col, 0)
                    bits = np.packbits(is_valid(end_col), bitorder="little") if end_col.null_count else None
                    keep.extend([values, bits])
                    end, end_valid, end_offset = values.ctypes.data, 0 if bits is None else bits.ctypes.data, 0
            else:  # (every range open)
                zeros = np.zeros(n + 8, dtype=np.int64)
                keep.append(zeros)
                end, end_valid, end_offset = zeros.ctypes.data, zeros.ctypes.data, 0
            # each row's message: its text (a dictionary's index), or its registered string
            if unified is not None:
                message = unified.message(info.rows, n)
            elif "text" in present:
                text = batch.column("text")
                if not pa.types.is_dictionary(text.type):  # (read as a dictionary: a column of strings is)
                    import pyarrow.compute as pc

                    text = pc.dictionary_encode(text)
                lut = messages.lut(text.dictionary)
                indices = text.indices
                message = lut[filled(indices, len(lut) - 1) if indices.null_count else to_numpy(indices)]
            else:
                message = np.full(n, messages.of(""), dtype=np.int32)
            if "textId" in present and batch.column("textId").null_count < n:
                if registered is False:
                    registered = _registered(directory, messages)
                if registered is None:
                    raise ValueError(f"{directory}: {MISSING_STRINGS.format(table='StringIds.parquet')}")
                text_id = batch.column("textId")
                ids = filled(text_id, -1)
                known, index = registered
                if len(known):
                    at = np.minimum(np.searchsorted(known, ids), len(known) - 1)
                    found = known[at] == ids
                    if text_id.null_count:
                        found &= is_valid(text_id)
                    message = np.where(found, index[at], message)
            message = np.ascontiguousarray(message, dtype=np.int32)
            # the domains' creations (a few rows): their message names the domain
            is_create = event_type == EVENT_DOMAIN_CREATE
            if is_create.any():
                rows = np.flatnonzero(is_create)
                for r in rows.tolist():
                    dom = batch.column("domainId")[r].as_py() if "domainId" in present else 0
                    g = batch.column("globalTid")[r].as_py() if "globalTid" in present else 0
                    creates.append((batch.column("start")[r].as_py(), info.rows + r, dom or 0, ((g or 0) >> 24) & _MASK,
                                    messages.values[int(message[r])]))  # fmt: skip
            add(n, start, end, end_valid, end_offset, etype, gtid, domain, message)
            info.rows += n
    for _, _, dom, pid, name in sorted(creates, key=lambda c: (c[0], c[1])):
        info.domain_names.setdefault((dom, pid), name)
    session = directory / "TARGET_INFO_SESSION_START_TIME.parquet"
    if session.is_file():
        with arrow_file(session) as source:
            values = pq.ParquetFile(source).read(columns=["utcEpochNs"]).column(0).to_pylist()
        info.epoch_ns = values[0] if values else None
    return info


def _domain_names(db: NsysFile, info: ExportInfo, creates: list[tuple] | None) -> None:
    """``info.domain_names``: each (domainId, pid)'s first creation (eventType 75, by start,
    then rowid) and its text, from the rows ``read_sqlite`` met (``creates``) or, when None,
    by a query (a scan of the table)."""
    rows = None
    if creates is not None:
        try:  # (text as the sqlite3 module reads it: UTF-8, else its error from the query)
            rows = [(s, r, d, (g >> 24) & _MASK, t if t is None else t.decode()) for s, r, d, g, t in creates]
        except UnicodeDecodeError:
            rows = None
        else:  # (ORDER BY start, rowid: NULL first)
            rows = [(d, p, t) for _, _, d, p, t in sorted(rows, key=lambda c: (c[0] is not None, c[0] or 0, c[1]))]
    if rows is None:
        rows = db.con.execute(
            f"SELECT domainId, {pid_sql('globalTid')}, text FROM NVTX_EVENTS "
            f"WHERE eventType = {EVENT_DOMAIN_CREATE} ORDER BY start, rowid"
        )
    for dom, pid, name in rows:
        info.domain_names.setdefault((dom or 0, pid or 0), name)


def range_query(db: NsysFile) -> tuple[str, str]:
    """The query of the range rows of the nsys-schema file ``db`` that ``read_sqlite`` is
    given, and which of the two it is (:data:`ReadSqlite`)."""
    query = (
        f"SELECT e.start, e.end, e.eventType, coalesce(e.globalTid, 0), coalesce(e.domainId, 0), {db.text} "
        f"FROM NVTX_EVENTS e {db.join} WHERE e.eventType IN {RANGE_TYPES} ORDER BY e.rowid"
    )
    return query, ("StringIds" if db.join else "text")


def _feed_sqlite(
    path: Path, add: AddRows, reserve: Callable[[int], None], read_sqlite: ReadSqlite | None
) -> ExportInfo:
    info = ExportInfo()
    messages = _Messages(info)
    with open_nsys_sqlite(path) as db:
        if db.has_table("TARGET_INFO_SESSION_START_TIME"):
            row = db.con.execute("SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME").fetchone()
            info.epoch_ns = row[0] if row else None
        (last_rowid,) = db.con.execute("SELECT max(rowid) FROM NVTX_EVENTS").fetchone()
        reserve(last_rowid or 0)
        if read_sqlite is not None:
            try:
                info.messages[:], creates = read_sqlite(path.resolve().as_uri() + "?mode=ro", *range_query(db))
            except OSError:
                pass  # (no SQLite library to open, a damaged file: the sqlite3 module's reading and errors below)
            else:
                _domain_names(db, info, creates)
                return info
        _domain_names(db, info, None)
        cursor = db.con.execute(
            f"SELECT e.start, coalesce(e.end, {_NULL}), e.eventType, coalesce(e.globalTid, 0), "
            f"coalesce(e.domainId, 0), {db.text} FROM NVTX_EVENTS e {db.join} "
            f"WHERE e.eventType IN {RANGE_TYPES} ORDER BY e.rowid"
        )
        while True:
            rows = cursor.fetchmany(BATCH_ROWS)
            if not rows:
                break
            n = len(rows)
            start, end, etype, gtid, domain, text = zip(*rows)
            ints = [np.array(c, dtype=np.int64) for c in (start, end, etype, gtid, domain)]
            valid = np.packbits(ints[1] != _NULL, bitorder="little")
            message = np.fromiter(map(messages.__getitem__, text), dtype=np.int32, count=n)
            start_a, end_a, etype_a, gtid_a, domain_a = (a.ctypes.data for a in ints)
            add(n, start_a, end_a, valid.ctypes.data, 0, etype_a, gtid_a, domain_a, message)
            info.rows += n
    return info
