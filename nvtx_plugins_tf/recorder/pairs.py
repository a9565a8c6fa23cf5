"""Backward ranges paired with the forward ranges they mirror (``report --pairs``).

The gradient of an annotated region opens its backward range with the forward range's NVTX
range id as payload (nvtx_plugins_tf/ops/gradients.py), so a recording tells which backward
range belongs to which forward range, also when several steps or replicas overlap.
"""

from __future__ import annotations

from dataclasses import dataclass

from ._table import format_table
from .summary import range_label


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
    closed start/end range of the same recording."""
    forward = {r.range_id: r for r in ranges if r.kind == "start-end" and r.range_id and r.end_ns is not None}
    return [
        (forward[r.payload], r)
        for r in ranges
        if r.kind == "start-end"
        and r.end_ns is not None
        and r.payload_type == "i64"
        and r.payload in forward
        and forward[r.payload] is not r
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
