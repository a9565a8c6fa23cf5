"""The ranges of an export in Nsight Systems' schema (an SQLite file or a parquetdir, ours or
``nsys export``'s) as column arrays, read with the rules of :mod:`._nsys_sqlite` (a row's
message: its registered string, else its ``text``; its domain's name: the domain's first
creation in the range's process), for :class:`~.ranges.Ranges`.

Vectorised: the rows are read as columns (pyarrow for Parquet, one query for SQLite) and
named through pyarrow's dictionary encoding, never one Python object per range beyond what
the sqlite3 module hands back.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..recording.model import EVENT_DOMAIN_CREATE, EVENT_PUSH_POP, EVENT_START_END
from ._nsys_sqlite import open_nsys_sqlite, pid_sql
from .names import range_label

__all__ = ["RANGE_TYPES", "sqlite_columns", "parquetdir_columns"]

# nsys's NVTXT event types (ranges imported from NVTXT files), read like 59/60.
_EVENT_NVTXT_PUSH_POP, _EVENT_NVTXT_START_END = 70, 71
#: the event types read as ranges
RANGE_TYPES = (EVENT_PUSH_POP, EVENT_START_END, _EVENT_NVTXT_PUSH_POP, _EVENT_NVTXT_START_END)
_PUSH_POP_TYPES = (EVENT_PUSH_POP, _EVENT_NVTXT_PUSH_POP)
_NULL = np.iinfo(np.int64).min  # a NULL end
_MASK = 0xFFFFFF


def sqlite_columns(path: Path) -> dict:
    """The keyword arguments of :class:`~.ranges.Ranges` for the SQLite export ``path``
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
    """The keyword arguments of :class:`~.ranges.Ranges` for the parquetdir ``directory``
    (row ids: the row's place in ``NVTX_EVENTS.parquet``, from 1). ValueError naming the
    directory when it holds no NVTX_EVENTS.parquet."""
    import pyarrow.parquet as pq

    directory = Path(directory)
    events = directory / "NVTX_EVENTS.parquet"
    if not events.is_file():
        raise ValueError(f"{directory}: no NVTX_EVENTS.parquet (not a parquetdir export?)")
    wanted = ("start", "end", "eventType", "globalTid", "text", "textId", "domainId")
    present = set(pq.read_schema(events).names)
    table = pq.read_table(events, columns=[c for c in wanted if c in present])
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
    text = column("text", pa.string())
    strings = directory / "StringIds.parquet"
    if "textId" in present and strings.is_file():
        ids = pq.read_table(strings, columns=["id", "value"])
        found = pc.index_in(column("textId"), value_set=ids.column("id"))
        text = pc.coalesce(pc.take(ids.column("value"), found), text)
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
        values = pq.read_table(session, columns=["utcEpochNs"]).column(0).to_pylist()
        epoch = values[0] if values else None
    return _assemble(
        keep.astype(np.int64) + 1, start[keep], end[keep], etype[keep], gtid[keep],
        pc.take(text, pa.array(keep)), domain_id[keep], creates, last, epoch,
    )  # fmt: skip


def _first_appearance(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(unique keys in order of first appearance, each element's index into them)."""
    uniq, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
    order = np.argsort(first, kind="stable")
    rank = np.empty(len(order), dtype=np.int64)
    rank[order] = np.arange(len(order))
    return uniq[order], rank[inverse.reshape(-1)]


def _assemble(row_id, start, end, etype, gtid, message, domain_id, creates, last, epoch) -> dict:
    """Ranges' keyword arguments from the range rows' columns (``end``: ``_NULL`` when open;
    ``message``: a pyarrow string array) and the domain creations (domainId, pid, name) in
    the order they count (the first per (domainId, pid) names the domain)."""
    names_of: dict[tuple[int, int], str | None] = {}
    for dom, pid, name in creates:
        names_of.setdefault((dom, pid or 0), name)
    domains = [""] + sorted({n for n in names_of.values() if n})
    domain_index = {d: i for i, d in enumerate(domains)}
    pid = (gtid >> 24) & _MASK
    tid = gtid & _MASK
    # each range's domain: its (domainId, pid)'s name ('' for the default domain or no creation)
    pairs, pair_of = _first_appearance(domain_id.astype(np.int64) * (_MASK + 1) + pid)
    pair_domain = np.array(
        [domain_index[(names_of.get((int(k) // (_MASK + 1), int(k) % (_MASK + 1))) or "") if k // (_MASK + 1) else ""]
         for k in pairs.tolist()] or [0],
        dtype=np.int64,
    )  # fmt: skip
    domain = pair_domain[pair_of] if len(pair_of) else np.zeros(0, dtype=np.int64)
    encoded = pc.dictionary_encode(message) if len(message) else pa.array([], pa.dictionary(pa.int32(), pa.string()))
    if isinstance(encoded, pa.ChunkedArray):
        encoded = encoded.combine_chunks()
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
