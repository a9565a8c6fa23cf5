"""The native mapper's side of :func:`.mapper.map_input`: a recording decoded and mapped in
one native pass (:mod:`._native`, the GIL released), an export in nsys's schema streamed into
the same columns (nsys_inputs/batches.py); names, the chosen step and the clocks by the
numpy path's rules (:mod:`.mapper`, the reference: the same values, tests/test_analyze_native.py
and tests/test_analyze_exports.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..exports._sqlite_native import LIBSQLITE3
from ..exports.nsys_tables import session_start_utc
from ..nsys_inputs.batches import feed_export
from ..recording.model import range_label
from ..reports.ranges import _clock_shifts, merged_domains, session_times
from . import _native
from .rank_result import (
    RankResult,
    StepSpec,
    _check_readable,
    _choose_step,
    _damage,
    _release_arrow_memory,
    _stem,
)

__all__ = ["map_recording", "map_export", "recording_results"]


def map_recording(
    path: Path, step: StepSpec | None, inclusive: bool = False, name_stats: bool = True
) -> list[RankResult]:
    """map_input of a recording: decoded and mapped in one native pass (the GIL released),
    the names, the chosen step and the clocks by the same rules as the numpy path's
    (``inclusive``: with ``step_incl``; ``name_stats`` False: without the per-name statistics,
    :data:`._native.NAME_STATS`, left empty)."""
    from ..recording.reader import reading

    native = _native.thread_ranges()
    with reading(path) as reader:
        native.reserve(reader.total_bytes() // 32)  # (two 16-byte events a range)
        reader.collect(native)
        _check_readable(reader)
        lowest, highest, rows, _ = native.bounds()
        strings = reader.strings()
        _, shift, _ = session_times(reader, lowest, highest, rows)
        dom_map, dom_list = merged_domains(reader)
        keys = native.name(dom_map, len(strings))
        # (an unknown string: an empty message, as the summary has it)
        name_domain, name_message = _key_names(keys, dom_list, strings + [""], len(strings) + 1)
        chosen = _choose_step(None, name_domain, name_message, step)
        is_step = None if chosen is None else chosen.mask(name_domain, name_message).view(np.uint8)
        processes = native.rank_stats(is_step, len(keys), inclusive, name_stats)
        return recording_results(path, reader, shift, processes, name_domain, name_message, chosen, _damage(reader))


def recording_results(
    path: Path, reader, shift: int, processes: list[dict], name_domain, name_message, chosen, damage: str = ""
) -> list[RankResult]:
    """The native mapper's per-process results of the recording ``reader`` reads (its
    session's times ``ns - origin - shift``: :func:`..reports.ranges.session_times`) as
    :class:`RankResult` rows, the steps on one wall clock (the numpy path's rule)."""
    origin = reader.origin_ns
    epoch = session_start_utc(reader, origin + shift) if processes else None
    clock_shift = _clock_shifts(reader) if processes else {}
    return _rank_results(
        path,
        processes,
        name_domain,
        name_message,
        chosen,
        lambda pid: (epoch if epoch is not None else 0) + clock_shift.get(pid, 0) - origin - shift,
        aligned=epoch is not None,
        damage=damage,
        clock_offsets=epoch is not None,
    )


def _key_names(keys: np.ndarray, domains: list[str], messages: list[str], width: int) -> tuple[list[str], list[str]]:
    """The (domain, message) of each name key (domain index * ``width`` + message index, the
    native mapper's), as two lists."""
    keys = np.asarray(keys, dtype=np.int64)
    return [domains[d] for d in (keys // width).tolist()], [messages[m] for m in (keys % width).tolist()]


def _rank_results(
    path: Path,
    processes: list[dict],
    name_domain: list[str],
    name_message: list[str],
    chosen,
    base_of,
    *,
    aligned: bool,
    damage: str = "",
    clock_offsets: bool = False,
) -> list[RankResult]:
    """The native mapper's per-process results as :class:`RankResult` rows (recordings and
    exports alike): named after the input (``STEM`` or ``STEM:PID``), with the chosen step's
    times moved by ``base_of(pid)`` onto the wall clock (``clock_offsets``: from the process's
    monotonic clock, a recording's: ``base_of(pid)`` is its ``clock_offset``)."""
    stem = _stem(path)
    out = []
    for p in processes:
        pid = p["pid"]
        name = stem if len(processes) == 1 else f"{stem}:{pid}"
        result = RankResult(name, str(path), pid, p["events"], p["open_ranges"], damage=damage)
        rows = p["rows"].tolist()
        result.names = list(zip(map(name_domain.__getitem__, rows), map(name_message.__getitem__, rows)))
        for f in _native.NAME_STATS:
            if f in p:  # (not without them: the defaults, empty)
                setattr(result, f, p[f])
        if chosen is not None:
            base = base_of(pid)
            result.aligned = aligned
            result.clock_offset = base if clock_offsets else None
            result.step_name = str(chosen)
            result.step_row = p["step_row"]
            result.step_start, result.step_end = p["step_start"] + base, p["step_end"] + base
            result.work_rows, result.step_work, result.step_incl = p["work_rows"], p["step_work"], p["step_incl"]
        out.append(result)
    return out


def map_export(path: Path, step: StepSpec | None, inclusive: bool = False) -> list[RankResult] | None:
    """map_input of an export in nsys's schema: its rows streamed into the native mapper's
    columns (nsys_inputs/batches.py), named by the numpy path's rules (the domain of a
    (domainId, pid) pair: its first creation in that process; domains, and messages, of
    equal text are one). None when two names would have the same label (a message holding
    a domain's "domain:" prefix): the numpy path then maps the input (it merges such names).
    ``inclusive``: with ``step_incl``."""
    native = _native.thread_ranges()
    info = feed_export(
        path, native.add_export, native.reserve,
        lambda uri, query, ranges: native.add_sqlite(LIBSQLITE3, uri, query, ranges),
    )  # fmt: skip
    _release_arrow_memory()
    pairs = native.pairs()
    domains = [""] + sorted({n for n in info.domain_names.values() if n})
    domain_index = {d: i for i, d in enumerate(domains)}
    dom_map = np.array(
        [domain_index[info.domain_names.get((d, p)) or ""] if d else 0 for d, p in pairs.tolist()] or [0],
        dtype=np.int64,
    )
    keys = native.name(dom_map, len(info.messages))
    name_domain, name_message = _key_names(keys, domains, info.messages, len(info.messages) + 1)
    # (two labels alike need a message holding ":": "d:m" is also ("", "d:m") and ("d:x", ...)
    # is ("d", "x:..."); without one, no set of 83,000 labels a long job's rank is built)
    if ":" in "".join(name_message) and len(set(map(range_label, name_domain, name_message))) < len(keys):
        native.clear()
        return None
    chosen = _choose_step(None, name_domain, name_message, step)
    is_step = None if chosen is None else chosen.mask(name_domain, name_message).view(np.uint8)
    processes = native.rank_stats(is_step, len(keys), inclusive)
    base = info.epoch_ns if info.epoch_ns is not None else 0  # (an export: one clock)
    return _rank_results(
        path, processes, name_domain, name_message, chosen, lambda _pid: base, aligned=info.epoch_ns is not None
    )
