"""Reading an SQLite file in Nsight Systems' export schema (ours or a real ``nsys export``).

One place for what :mod:`..reports.summary`, :mod:`..reports.nsys_reports` and :mod:`..reports.pairs` read alike, with
the rules of nsys's own report scripts (``nsys stats -r nvtx_sum``, ``nvtx_pushpop_sum``
... in ``target-linux-x64/reports/``), so that the three agree with nsys and each other:

* **Message**: a row has ``text`` (a plain message) or ``textId`` (a registered string, in
  ``StringIds``); should it have both, the registered string wins, as in nsys's
  ``CASE WHEN sid.value IS NOT NULL THEN ... ELSE ne.text``: :data:`TEXT_SQL` over
  :data:`STRINGS_JOIN`.
* **Domain name**: the ``text`` (nsys reads no ``textId`` there) of the domain's first
  ``DomainCreate`` row (eventType 75, earliest ``start``) in the range's process (nsys:
  ``min(start) ... GROUP BY domainId, globalTid``, joined on the pid bits of
  ``globalTid``). A domain id with no creation row in that process has no name: the range
  is named by its message alone, as in nsys. (nsys groups the creations per thread: a
  domain created on two threads of one process makes its reports count each range twice,
  a slip we do not copy; the first creation in the process wins.)
* **Ids**: ``globalTid = (vm << 48) | (pid << 24) | tid``: :func:`pid_sql`, :func:`tid_sql`
  in SQL, :func:`split_gtid` in Python.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from ..recording.model import EVENT_DOMAIN_CREATE

__all__ = [
    "DomainNames",
    "NsysFile",
    "open_nsys_sqlite",
    "MISSING_STRINGS",
    "pid_sql",
    "tid_sql",
    "split_gtid",
    "TEXT_SQL",
    "STRINGS_JOIN",
]

_ID_MASK = 0xFFFFFF  # 24 bits of pid, 24 bits of tid in a globalTid

#: Why an export whose rows name registered strings but that has no table of them is refused.
MISSING_STRINGS = "no {table}, which NVTX_EVENTS' textId column refers to (an incomplete export?)"

#: A row's message, ``e`` being the NVTX_EVENTS row and ``s`` its :data:`STRINGS_JOIN` row.
TEXT_SQL = "coalesce(s.value, e.text)"
#: The join that :data:`TEXT_SQL` reads ``s`` from.
STRINGS_JOIN = "LEFT JOIN StringIds s ON e.textId = s.id"


def pid_sql(column: str) -> str:
    """SQL for the pid in the ``globalTid``-style column ``column``."""
    return f"(({column} >> 24) & {_ID_MASK})"


def tid_sql(column: str) -> str:
    """SQL for the tid in the ``globalTid``-style column ``column``."""
    return f"({column} & {_ID_MASK})"


def split_gtid(gtid: int | None) -> tuple[int, int]:
    """(pid, tid) of a ``globalTid`` (NULL: (0, 0))."""
    gtid = gtid or 0
    return (gtid >> 24) & _ID_MASK, gtid & _ID_MASK


class DomainNames(dict):
    """(domainId, pid) -> domain name, from :meth:`NsysFile.domain_names`."""

    def of(self, domain_id: int | None, pid: int) -> str | None:
        """The name of domain ``domain_id`` in process ``pid``; None for the default domain
        (0 or NULL) and for a domain with no creation row in that process."""
        return self.get((domain_id, pid)) if domain_id else None


@dataclass
class NsysFile:
    """An open nsys-schema file: ``con`` (read-only), the columns of ``NVTX_EVENTS``, and the
    SQL to read a message (``text``, ``join``: :data:`TEXT_SQL` and :data:`STRINGS_JOIN`, or
    ``e.text`` and nothing in a file without ``StringIds``/``textId``)."""

    path: Path
    con: sqlite3.Connection
    columns: frozenset[str]
    text: str
    join: str

    def has_table(self, name: str) -> bool:
        """Whether the file has the table ``name``."""
        found = self.con.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name=?", (name,))
        return found.fetchone() is not None

    def domain_names(self) -> DomainNames:
        """(domainId, pid) -> the domain's name: its first creation in that process."""
        names = DomainNames()
        rows = self.con.execute(
            f"SELECT domainId, {pid_sql('globalTid')}, text FROM NVTX_EVENTS "
            f"WHERE eventType = {EVENT_DOMAIN_CREATE} ORDER BY start, rowid"
        )
        for dom_id, pid, name in rows:
            names.setdefault((dom_id, pid or 0), name)
        return names


@contextmanager
def open_nsys_sqlite(path) -> Iterator[NsysFile]:
    """``path`` opened read-only as an nsys-schema file; ValueError naming ``path`` when it
    has no ``NVTX_EVENTS`` table, or rows naming registered strings (``textId``) but no
    ``StringIds`` table (sqlite3.Error when it is no SQLite database)."""
    path = Path(path)
    con = sqlite3.connect(path.resolve().as_uri() + "?mode=ro", uri=True)
    try:
        columns = frozenset(r[1] for r in con.execute("PRAGMA table_info(NVTX_EVENTS)"))
        if not columns:
            raise ValueError(f"{path}: no NVTX_EVENTS table (not an Nsight Systems export?)")
        has_strings = con.execute("SELECT 1 FROM sqlite_master WHERE name='StringIds'").fetchone() is not None
        if not has_strings and "textId" in columns:
            named = con.execute("SELECT 1 FROM NVTX_EVENTS WHERE textId IS NOT NULL LIMIT 1").fetchone()
            if named is not None:  # (else every such range would be named "")
                raise ValueError(f"{path}: {MISSING_STRINGS.format(table='StringIds table')}")
        joined = has_strings and "textId" in columns
        yield NsysFile(path, con, columns, TEXT_SQL if joined else "e.text", STRINGS_JOIN if joined else "")
    finally:
        con.close()


def is_sqlite(path) -> bool:
    """Whether ``path`` is an SQLite file (by its 16-byte header; False if it cannot be read)."""
    try:
        with open(path, "rb") as f:
            return f.read(16) == b"SQLite format 3\x00"
    except OSError:
        return False
