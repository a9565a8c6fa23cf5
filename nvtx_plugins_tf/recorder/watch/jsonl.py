"""``watch --json``: one JSON object a line, in the contract of docs/watch.md (keys in this
order; ASCII only: a name's non-ASCII or undecodable characters as ``\\uXXXX`` escapes)::

    {"kind": "step", "rank": NAME, "step": N, "start_ns": E, "end_ns": E, "duration_ns": D, "ranges": {NAME: ns}}
    {"kind": "straggler", "rank": NAME, "range": NAME, "step": N, "excess_ns": X}
    {"kind": "stale", "rank": NAME}
"""

from __future__ import annotations

import json
from dataclasses import asdict

from .detect import Straggler
from .steps import StepRecord

__all__ = ["json_line", "stale_object", "step_object", "straggler_object"]


def step_object(record: StepRecord) -> dict:
    """The ``step`` object of ``record`` (its fields are the contract's, in its order)."""
    return {"kind": "step", **asdict(record)}


def straggler_object(named: Straggler) -> dict:
    """The ``straggler`` object of ``named``."""
    return {
        "kind": "straggler",
        "rank": named.rank,
        "range": named.range,
        "step": named.step,
        "excess_ns": named.excess_ns,
    }


def stale_object(rank: str) -> dict:
    """The ``stale`` object of ``rank``."""
    return {"kind": "stale", "rank": rank}


def json_line(obj: dict) -> str:
    """``obj`` as one line of JSON (no newline inside: every control character escaped).

    >>> json_line({"kind": "stale", "rank": "rank\\n2"})
    '{"kind": "stale", "rank": "rank\\\\n2"}'
    """
    return json.dumps(obj, ensure_ascii=True)
