"""Backward ranges paired with the forward ranges they mirror (``report --pairs``).

The gradient of an annotated region opens its backward range with the forward range's NVTX
range id as payload (nvtx_plugins_tf/ops/gradients.py), so a recording tells which backward
range belongs to which forward range, also when several steps or replicas overlap.

An SQLite file in nsys's schema links them the same way (:func:`sqlite_ranges`): the
backward row's ``int64Value`` is the forward row's ``rangeId``, in our export (the
recorder's ids) and in ``nsys export`` of Nsight Systems 2022.4 (nsys's ids, which the
program received from nsys, so the payload is nsys's id too). A file whose start/end rows
have no ``rangeId`` cannot be paired: :class:`NoRangeIds`.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..nsys_inputs.sqlite import open_nsys_sqlite, pid_sql, tid_sql
from ..recording.model import EVENT_START_END, Range, range_label
from ._table import format_table

__all__ = ["PairRow", "NoRangeIds", "pair_ranges", "pair_rows", "format_pairs", "sqlite_ranges"]


class NoRangeIds(ValueError):
    """The SQLite file has start/end ranges but not their ids: no range can be paired."""


@dataclass(frozen=True)
class PairRow:
    forward: str
    backward: str
    pairs: int
    forward_avg_ns: float
    backward_avg_ns: float

    @property
    def ratio(self) -> float:
        return self.backward_avg_ns / self.forward_avg_ns if self.forward_avg_ns else float("nan")


def _label(r) -> str:
    return range_label(r.domain, r.message)


def pair_ranges(ranges) -> list[tuple]:
    """(forward, backward) for every closed backward range whose payload is the id of a
    closed start/end range of the same process (a gradient runs in its forward's process;
    range ids are only unique within one)."""
    forward = {(r.pid, r.range_id): r for r in ranges if r.kind == "start-end" and r.range_id and r.end_ns is not None}
    pairs = []
    for r in ranges:
        if r.kind == "start-end" and r.end_ns is not None and r.payload_type == "i64":
            f = forward.get((r.pid, r.payload))
            if f is not None and f is not r:
                pairs.append((f, r))
    return pairs


def sqlite_ranges(path) -> list[Range]:
    """The start/end ranges of an SQLite file in nsys's schema, with what :func:`pair_ranges`
    reads (names, times, pid, id, an ``int64Value`` payload). Raises :class:`NoRangeIds`
    when the file has start/end ranges and none has a ``rangeId``, ValueError when it is
    no nsys-schema file."""
    with open_nsys_sqlite(path) as db:
        if "rangeId" not in db.columns:
            raise NoRangeIds(f"{path}: NVTX_EVENTS has no rangeId column, so no backward range can be paired")
        payload = "e.int64Value" if "int64Value" in db.columns else "NULL"
        domains = db.domain_names()
        rows = db.con.execute(
            f"SELECT {db.text}, e.domainId, e.start, e.end, {pid_sql('e.globalTid')}, {tid_sql('e.globalTid')}, "
            f"e.rangeId, {payload} FROM NVTX_EVENTS e {db.join} WHERE e.eventType = {EVENT_START_END} ORDER BY e.rowid"
        ).fetchall()
    if rows and all(r[6] is None for r in rows):
        raise NoRangeIds(
            f"{path}: its start/end ranges have no rangeId (NULL in NVTX_EVENTS), so no backward range can be paired"
        )
    return [
        Range(
            message=text or "",
            domain=domains.of(dom_id, pid) or "",
            start_ns=start,
            end_ns=end,
            pid=pid,
            tid=tid,
            end_tid=tid,
            kind="start-end",
            payload=value,
            payload_type=None if value is None else "i64",
            range_id=range_id or 0,
        )
        for text, dom_id, start, end, pid, tid, range_id, value in rows
    ]


def pair_rows(ranges) -> list[PairRow]:
    """One row per (forward name, backward name), most pairs first."""
    groups: dict[tuple, list] = {}
    for f, b in pair_ranges(ranges):
        groups.setdefault((_label(f), _label(b)), []).append((f.end_ns - f.start_ns, b.end_ns - b.start_ns))
    rows = [
        PairRow(fw, bw, len(d), sum(x for x, _ in d) / len(d), sum(y for _, y in d) / len(d))
        for (fw, bw), d in groups.items()
    ]
    return sorted(rows, key=lambda r: (-r.pairs, r.forward))


def format_pairs(rows: list[PairRow]) -> str:
    if not rows:
        return "(no backward range linked to a forward range)"
    return format_table(
        ("Pairs", "Forward avg (ns)", "Backward avg (ns)", "Backward/forward", "Forward", "Backward"),
        [
            (
                f"{r.pairs:,}",
                f"{r.forward_avg_ns:,.1f}",
                f"{r.backward_avg_ns:,.1f}",
                f"{r.ratio:.2f}",
                r.forward,
                r.backward,
            )
            for r in rows
        ],
        left=("Forward", "Backward"),
    )
