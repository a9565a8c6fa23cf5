"""The ranges of an export in Nsight Systems' schema (an SQLite file or a parquetdir, ours or
``nsys export``'s) as column arrays, read with the rules of :mod:`.sqlite` (a row's
message: its registered string, else its ``text``; its domain's name: the domain's first
creation in the range's process), for :class:`~..reports.ranges.Ranges`.

Vectorised: the rows are read as columns (pyarrow for Parquet, one query for SQLite) and
named through pyarrow's dictionary encoding, never one Python object per range beyond what
the sqlite3 module hands back.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa

from ..._paths import arrow_file
from ..recording.model import EVENT_DOMAIN_CREATE, EVENT_PUSH_POP, EVENT_START_END, range_label
from .parquetdir import events_columns
from .sqlite import MISSING_STRINGS, open_nsys_sqlite, pid_sql

__all__ = ["RANGE_TYPES", "sqlite_columns", "parquetdir_columns", "unique_inverse"]

# nsys's NVTXT event types (ranges imported from NVTXT files), read like 59/60.
_EVENT_NVTXT_PUSH_POP, _EVENT_NVTXT_START_END = 70, 71
#: the event types read as ranges
RANGE_TYPES = (EVENT_PUSH_POP, EVENT_START_END, _EVENT_NVTXT_PUSH_POP, _EVENT_NVTXT_START_END)
_PUSH_POP_TYPES = (EVENT_PUSH_POP, _EVENT_NVTXT_PUSH_POP)
_NULL = np.iinfo(np.int64).min  # a NULL end
_MASK = 0xFFFFFF


def sqlite_columns(path: Path) -> dict:
    """The keyword arguments of :class:`~..reports.ranges.Ranges` for the SQLite export ``path``
    (row ids: NVTX_EVENTS' rowids)."""
    with open_nsys_sqlite(path) as db:
        (last,) = db.con.execute("SELECT max(max(start), coalesce(max(end), max(start))) FROM NVTX_EVENTS").fetchone()
        epoch = None
        if db.has_table("TARGET_INFO_SESSION_START_TIME"):
            row = db.con.execute("SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME").fetchone()
            epoch = row[0] if row else None
        creates = db.con.execute(
            f"SELECT domainId, {pid_sql('globalTid')}, text FROM NVTX_EVENTS "
            f"WHERE eventType = {EVENT_DOMAIN_CREATE} ORDER BY start, rowid"
        ).fetchall()
        rows = db.con.execute(
            f"SELECT e.rowid, e.start, coalesce(e.end, {_NULL}), e.eventType, coalesce(e.globalTid, 0), "
            f"{db.text}, coalesce(e.domainId, 0) FROM NVTX_EVENTS e {db.join} "
            f"WHERE e.eventType IN {RANGE_TYPES} ORDER BY e.rowid"
        ).fetchall()
    columns = list(zip(*rows)) if rows else [()] * 7
    ints = [np.array(columns[i], dtype=np.int64) for i in (0, 1, 2, 3, 4, 6)]
    row_id, start, end, etype, gtid, domain_id = ints
    message = pa.array(columns[5], type=pa.string())
    return _assemble(row_id, start, end, etype, gtid, message, domain_id, creates, int(last or 0), epoch)


def parquetdir_columns(directory: Path) -> dict:
    """The keyword arguments of :class:`~..reports.ranges.Ranges` for the parquetdir ``directory``
    (row ids: the row's place in ``NVTX_EVENTS.parquet``, from 1). ValueError naming the
    directory when it holds no NVTX_EVENTS.parquet."""
    import pyarrow.compute as pc  # (this module is the reference; analyze's own path imports no pc)
    import pyarrow.parquet as pq

    directory = Path(directory)
    events = directory / "NVTX_EVENTS.parquet"
    if not events.is_file():
        raise ValueError(f"{directory}: no NVTX_EVENTS.parquet (not a parquetdir export?)")
    wanted = ("start", "end", "eventType", "globalTid", "text", "textId", "domainId")
    present = events_columns(directory)
    # the messages as Parquet stores them, dictionary-encoded (no string per row)
    table = pq.read_table(arrow_file(events), columns=[c for c in wanted if c in present], read_dictionary=["text"])
    n = table.num_rows

    def column(name, default=None):
        return table.column(name) if name in present else pa.nulls(n, pa.int64() if default is None else default)

    start = column("start").to_numpy().astype(np.int64, copy=False)
    end_col = column("end")
    ends_known = pc.max(end_col).as_py()
    last = int(start.max()) if n else 0
    if ends_known is not None:
        last = max(last, int(ends_known))
    etype = column("eventType").to_numpy().astype(np.int64, copy=False)
    gtid = pc.fill_null(column("globalTid"), 0).to_numpy().astype(np.uint64).view(np.int64)
    domain_id = pc.fill_null(column("domainId"), 0).to_numpy().astype(np.uint64).view(np.int64)
    text = _dictionary(column("text", pa.string()))
    strings = directory / "StringIds.parquet"
    if "textId" in present and column("textId").null_count < n and not strings.is_file():
        raise ValueError(f"{directory}: {MISSING_STRINGS.format(table='StringIds.parquet')}")
    if "textId" in present and strings.is_file() and column("textId").null_count < n:
        # a registered string wins over ``text``: its index past the text dictionary's
        ids = pq.read_table(arrow_file(strings), columns=["id", "value"])
        found = pc.index_in(column("textId"), value_set=ids.column("id"))
        index = pc.if_else(pc.is_valid(found), pc.add(pc.cast(found, pa.int32()), len(text.dictionary)), text.indices)
        values = pa.concat_arrays([text.dictionary, ids.column("value").combine_chunks().cast(pa.string())])
        text = pa.DictionaryArray.from_arrays(index.combine_chunks() if isinstance(index, pa.ChunkedArray) else index,
                                              values)  # fmt: skip
    is_create = etype == EVENT_DOMAIN_CREATE
    order = np.flatnonzero(is_create)
    order = order[np.argsort(start[order], kind="stable")]
    pid = (gtid >> 24) & _MASK
    create_text = pc.take(text, pa.array(order)).to_pylist()
    creates = list(zip(domain_id[order].tolist(), pid[order].tolist(), create_text))
    keep = np.flatnonzero(np.isin(etype, RANGE_TYPES))
    end = pc.fill_null(end_col, _NULL).to_numpy().astype(np.int64, copy=False)
    epoch = None
    session = directory / "TARGET_INFO_SESSION_START_TIME.parquet"
    if session.is_file():
        values = pq.read_table(arrow_file(session), columns=["utcEpochNs"]).column(0).to_pylist()
        epoch = values[0] if values else None
    return _assemble(
        keep.astype(np.int64) + 1, start[keep], end[keep], etype[keep], gtid[keep],
        pc.take(text, pa.array(keep)), domain_id[keep], creates, last, epoch,
    )  # fmt: skip


def _dictionary(column) -> pa.DictionaryArray:
    """``column`` (string or dictionary, chunked or not) as one dictionary array."""
    import pyarrow.compute as pc

    if isinstance(column, pa.ChunkedArray):
        column = column.unify_dictionaries() if pa.types.is_dictionary(column.type) else column
        column = column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
    return column if pa.types.is_dictionary(column.type) else pc.dictionary_encode(column)


def unique_inverse(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(keys, return_inverse=True)``, without sorting when the keys are small
    non-negative integers (indexes): a table of which are present instead.

    >>> [a.tolist() for a in unique_inverse(np.array([5, 2, 5, 0]))]
    [[0, 2, 5], [2, 1, 2, 0]]
    """
    if len(keys) and 0 <= keys.min() and keys.max() < 4 * len(keys) + 1024:
        seen = np.zeros(int(keys.max()) + 1, dtype=bool)
        seen[keys] = True
        uniq = np.flatnonzero(seen)
        rank = np.cumsum(seen) - 1
        return uniq, rank[keys]
    uniq, inverse = np.unique(keys, return_inverse=True)
    return uniq, inverse.reshape(-1)


def _first_appearance(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(unique keys in order of first appearance, each element's index into them)."""
    uniq, inverse = unique_inverse(keys)
    first = np.full(len(uniq), len(keys), dtype=np.int64)
    first[inverse[::-1]] = np.arange(len(keys) - 1, -1, -1)  # (the last write, the first place, wins)
    order = np.argsort(first, kind="stable")
    rank = np.empty(len(order), dtype=np.int64)
    rank[order] = np.arange(len(order))
    return uniq[order], rank[inverse]


def _domains(domain_id: np.ndarray, pid: np.ndarray, names_of: dict, domain_index: dict) -> np.ndarray:
    """Each range's index into the domains: its (domainId, pid)'s name (0: the default domain,
    or a domain with no creation in that process)."""
    out = np.zeros(len(domain_id), dtype=np.int64)
    if len(names_of) <= 64:  # (a few domains and processes: a pass each, no sort)
        for (dom, p), name in names_of.items():
            if dom and name:
                out[(domain_id == dom) & (pid == p)] = domain_index[name]
        return out
    pairs, pair_of = unique_inverse(domain_id.astype(np.int64) * (_MASK + 1) + pid)  # (any order)
    named = [domain_index[names_of.get((int(k) // (_MASK + 1), int(k) % (_MASK + 1))) or ""] for k in pairs.tolist()]
    return np.array(named, dtype=np.int64)[pair_of] if len(pair_of) else out


def _assemble(row_id, start, end, etype, gtid, message, domain_id, creates, last, epoch) -> dict:
    """Ranges' keyword arguments from the range rows' columns (``end``: ``_NULL`` when open;
    ``message``: a pyarrow string or dictionary array) and the domain creations (domainId, pid, name) in
    the order they count (the first per (domainId, pid) names the domain)."""
    import pyarrow.compute as pc

    names_of: dict[tuple[int, int], str | None] = {}
    for dom, pid, name in creates:
        names_of.setdefault((dom, pid or 0), name)
    domains = [""] + sorted({n for n in names_of.values() if n})
    domain_index = {d: i for i, d in enumerate(domains)}
    pid = (gtid >> 24) & _MASK
    tid = gtid & _MASK
    domain = _domains(domain_id, pid, names_of, domain_index)
    encoded = _dictionary(message) if len(message) else pa.array([], pa.dictionary(pa.int32(), pa.string()))
    messages = encoded.dictionary.to_pylist() + [None]
    msg = pc.fill_null(encoded.indices, len(messages) - 1).to_numpy().astype(np.int64)
    labels, name = _first_appearance(domain * len(messages) + msg) if len(msg) else (np.zeros(0, np.int64), msg)
    names = [range_label(domains[int(k) // len(messages)], messages[int(k) % len(messages)]) for k in labels.tolist()]
    # labels equal as text (a message and the same message written through a registered string) are one name
    merged: dict[str, int] = {}
    remap = np.array([merged.setdefault(label, len(merged)) for label in names] or [0], dtype=np.int64)
    is_open = end == _NULL
    return dict(
        row_id=row_id,
        start=start,
        end=np.where(is_open, last, end),
        open=is_open,
        push_pop=np.isin(etype, _PUSH_POP_TYPES),
        pid=pid,
        tid=tid,
        name=remap[name] if len(name) else name,
        domain=domain,
        names=list(merged),
        domains=domains,
        last_ns=last,
        epoch_ns=epoch,
    )
