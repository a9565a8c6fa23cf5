"""Draw a recording as a PNG timeline with matplotlib (optional dependency).

:func:`layout` decides what goes where; :func:`render_timeline` only draws it:

* one lane per thread (grouped by process, labelled ``process pid / thread (tid)``);
* inside a lane, push/pop ranges on the row of their nesting depth, then start/end ranges
  on rows of their own, packed so that no two overlap (Train / epoch / batch stack up);
* colours by domain family (``Forward`` blues, ``Backward``/``Gradient`` oranges, ``Keras``
  greens, TensorFlow's ``TSL`` greys, others from a fixed palette), a legend of the domains
  shown, a range's own NVTX color where it set one;
* a label only inside a box wide enough for it, so labels never overlap;
* the window: by default the recording without its first step, the one where TensorFlow
  traces the functions (steps are the largest family of numbered ranges: ``batch 0``,
  ``batch 1``, ... or ``step 0``, ...); ``window="A:B"`` shows steps A to B (0-based,
  either side may be empty), ``window="all"`` everything.

At most ``max_ranges`` ranges are drawn (the longest ones) so big recordings stay quick.
"""

from __future__ import annotations

import re
import zlib
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ._decoder import FLAG_HAS_COLOR, FLAG_UNCLOSED, KIND_MARK, KIND_PUSH_POP
from ._output import atomic_output
from .exports import Sink, feed
from .reader import reading

__all__ = ["render_timeline", "TimelineSink", "layout", "Layout", "Box", "MatplotlibMissing", "FAMILIES"]

#: Domain name -> matplotlib colormap of its family.
FAMILIES = {"Forward": "Blues", "Backward": "Oranges", "Gradient": "Oranges", "Keras": "Greens", "TSL": "Greys"}
_OTHER = "tab20"
_STEP = re.compile(r"^(.*\S)\s+(\d+)$")
WIDTH_IN, DPI, CHAR_PX = 16.0, 110, 5.5  # figure width (inches), dots per inch, a label's px per character


class MatplotlibMissing(ImportError):
    """matplotlib is needed for PNG timelines."""


@dataclass(frozen=True)
class Box:
    lane: int
    row: int
    x0: float  # ms since the recording's origin
    x1: float
    family: str  # a FAMILIES key, or "" (the other palette)
    shade: float  # 0..1 within the family's colormap
    rgb: tuple | None  # the range's own NVTX color
    label: str | None  # drawn only where it fits
    mark: bool = False


@dataclass
class Layout:
    lanes: list[str]
    rows_per_lane: list[int]
    boxes: list[Box] = field(default_factory=list)
    window_ms: tuple[float, float] = (0.0, 1.0)
    domains: list[str] = field(default_factory=list)


def _pyplot():
    try:
        import matplotlib

        matplotlib.use("Agg", force=False)
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise MatplotlibMissing(
            "the PNG timeline needs matplotlib, which is not installed: pip install 'nvtx_plugins_tf[plot]'"
        ) from exc
    return plt


def _steps(names: list[str], starts, ends) -> list[tuple[float, float]]:
    """(start, end) of each step, in order: the largest family of numbered names."""
    families = Counter()
    for name in set(names):
        match = _STEP.match(name)
        if match:
            families[match.group(1)] += 1
    if not families:
        return []
    base, count = families.most_common(1)[0]
    if count < 2:
        return []
    return sorted((s, e) for name, s, e in zip(names, starts, ends) if (m := _STEP.match(name)) and m.group(1) == base)


def _window(window: str, steps: list[tuple[float, float]], lo: float, hi: float) -> tuple[float, float]:
    if window == "all" or not steps:
        return lo, hi
    first, _, last = window.partition(":")
    a = int(first) if first else 0
    b = int(last) if last else len(steps) - 1
    if not (0 <= a < len(steps)) or b < a:
        raise ValueError(f"window {window!r}: the recording has steps 0..{len(steps) - 1}")
    b = min(b, len(steps) - 1)
    return steps[a][0], max(steps[b][1], steps[a][0] + 1e-6)


def layout(
    rows: np.ndarray,
    strings: list[str],
    domain_names: list[str],
    lane_names: dict,
    origin: int,
    last_ns: int,
    window: str = "1:",
    width_px: float = WIDTH_IN * DPI * 0.8,
) -> Layout:
    """Where each range of ``rows`` goes (see the module docstring)."""
    ends = np.where(rows["flags"] & FLAG_UNCLOSED, last_ns, rows["end_ns"])
    starts_ms = (rows["start_ns"] - origin) / 1e6
    ends_ms = (ends - origin) / 1e6
    names = [strings[i] for i in rows["message"].tolist()]
    lo = float(starts_ms.min()) if len(rows) else 0.0
    hi = float(ends_ms.max()) if len(rows) else 1.0
    x_lo, x_hi = _window(window, _steps(names, starts_ms.tolist(), ends_ms.tolist()), lo, hi)
    keep = (ends_ms >= x_lo) & (starts_ms <= x_hi)
    ms_per_px = max(x_hi - x_lo, 1e-9) / width_px
    lanes = sorted(set(zip(rows["pid"][keep].tolist(), rows["tid"][keep].tolist())))
    lane_index = {lane: i for i, lane in enumerate(lanes)}
    push_rows = Counter()
    for (pid, tid), depth, kind in zip(
        zip(rows["pid"][keep].tolist(), rows["tid"][keep].tolist()),
        rows["depth"][keep].tolist(),
        rows["kind"][keep].tolist(),
    ):
        if kind == KIND_PUSH_POP:
            push_rows[(pid, tid)] = max(push_rows[(pid, tid)], depth + 1)
    band_ends: dict = {lane: [] for lane in lanes}  # per lane: end of the last box on each start/end row
    boxes, domains_shown = [], []
    order = np.argsort(starts_ms, kind="stable")
    for i in order.tolist():
        if not keep[i]:
            continue
        lane = (int(rows["pid"][i]), int(rows["tid"][i]))
        x0, x1 = max(float(starts_ms[i]), x_lo), min(float(ends_ms[i]), x_hi)
        kind = int(rows["kind"][i])
        if kind == KIND_PUSH_POP:
            row = int(rows["depth"][i])
        else:  # start/end ranges and marks: the first start/end row free at x0
            ends_of_rows = band_ends[lane]
            row = next((r for r, end in enumerate(ends_of_rows) if end <= x0), len(ends_of_rows))
            if row == len(ends_of_rows):
                ends_of_rows.append(x1)
            else:
                ends_of_rows[row] = x1
            row += push_rows[lane]
        domain = domain_names[int(rows["domain"][i])] if int(rows["domain"][i]) < len(domain_names) else ""
        if domain not in domains_shown:
            domains_shown.append(domain)
        flags, color = int(rows["flags"][i]), int(rows["color"][i])
        rgb = (
            (((color >> 16) & 255) / 255, ((color >> 8) & 255) / 255, (color & 255) / 255)
            if flags & FLAG_HAS_COLOR
            else None
        )
        shade = 0.35 + 0.5 * ((zlib.crc32(names[i].encode()) & 255) / 255)
        fits = (x1 - x0) / ms_per_px >= CHAR_PX * len(names[i]) + 4
        boxes.append(
            Box(
                lane_index[lane],
                row,
                x0,
                x1,
                domain if domain in FAMILIES else "",
                shade,
                rgb,
                names[i] if fits and kind != KIND_MARK else None,
                kind == KIND_MARK,
            )
        )
    rows_per_lane = [push_rows[lane] + len(band_ends[lane]) for lane in lanes]
    return Layout(
        [lane_names.get(lane, f"{lane[0]} / {lane[1]}") for lane in lanes],
        rows_per_lane,
        boxes,
        (x_lo, x_hi),
        domains_shown,
    )


def render_timeline(recording, output, *, max_ranges: int = 20000, window: str = "1:", reader=None) -> Path:
    """Draw ``recording`` into the PNG ``output`` (its folder is created); returns its path.

    Raises :class:`MatplotlibMissing` before reading anything when matplotlib is not
    installed. The file is written through a private temporary file and replaced atomically.
    """
    with reading(recording, reader) as reader:
        sink = TimelineSink(reader, output, max_ranges=max_ranges, window=window)
        feed(reader, [sink])
        return sink.finish()


class TimelineSink(Sink):
    """:func:`render_timeline` batch by batch (see :mod:`.exports`): keeps the ``max_ranges``
    longest ranges; ``finish()`` lays them out, draws the PNG and returns its path. Raises
    :class:`MatplotlibMissing` when made without matplotlib."""

    def __init__(self, reader, output, *, max_ranges: int = 20000, window: str = "1:"):
        _pyplot()
        from ._decoder import ROW_DTYPE

        self.reader = reader
        self.output = Path(output)
        self.max_ranges = max_ranges
        self.window = window
        self._kept = np.empty(0, dtype=ROW_DTYPE)
        self._last_ns = 0

    def add(self, rows) -> None:
        max_ranges = self.max_ranges
        self._last_ns = max(self._last_ns, int(rows["start_ns"].max()), int(rows["end_ns"].max()))
        kept = np.concatenate([self._kept, rows])
        if len(kept) > 2 * max_ranges:  # streaming top-k by duration: memory stays bounded
            dur = np.where(kept["flags"] & FLAG_UNCLOSED, np.iinfo(np.int64).max, kept["end_ns"] - kept["start_ns"])
            kept = kept[np.argpartition(-dur, max_ranges)[:max_ranges]]
        self._kept = kept

    def _finish(self) -> Path:
        reader, kept = self.reader, self._kept
        thread_names, processes = reader.thread_names, dict(reader.processes)
        lane_names = {
            (p, t): f"{processes[p].name if p in processes else 'pid'} {p} / {thread_names.get((p, t), 'thread')} ({t})"
            for p, t in set(zip(kept["pid"].tolist(), kept["tid"].tolist()))
        }
        strings, domain_names = reader.strings(), reader.domain_names()
        plan = layout(kept, strings, domain_names, lane_names, reader.origin_ns, self._last_ns, self.window)
        return _draw(plan, self.output, self.window)


def _draw(plan: Layout, output, window: str) -> Path:
    """Draw ``plan`` into the PNG ``output``."""
    plt = _pyplot()
    from matplotlib.collections import PolyCollection
    from matplotlib.patches import Patch

    base, lane_top = [], 0.0
    for n in plan.rows_per_lane:
        base.append(lane_top)
        lane_top += n + 0.6
    fig, ax = plt.subplots(figsize=(WIDTH_IN, min(2.5 + 0.22 * max(lane_top, 1), 60)))
    cmaps = {name: plt.get_cmap(name) for name in set(FAMILIES.values()) | {_OTHER}}

    def color(box: Box):
        if box.rgb is not None:
            return box.rgb
        if box.family:
            return cmaps[FAMILIES[box.family]](box.shade)
        return cmaps[_OTHER](box.shade)

    bars = [b for b in plan.boxes if not b.mark]
    if bars:
        verts = [
            [
                (b.x0, base[b.lane] + b.row),
                (b.x1, base[b.lane] + b.row),
                (b.x1, base[b.lane] + b.row + 0.9),
                (b.x0, base[b.lane] + b.row + 0.9),
            ]
            for b in bars
        ]
        ax.add_collection(
            PolyCollection(verts, facecolors=[color(b) for b in bars], edgecolors="black", linewidths=0.2)
        )
    marks = [b for b in plan.boxes if b.mark]
    if marks:
        ax.vlines(
            [b.x0 for b in marks],
            [base[b.lane] + b.row for b in marks],
            [base[b.lane] + b.row + 0.9 for b in marks],
            colors=[color(b) for b in marks],
            linewidth=0.8,
        )
    for b in bars:
        if b.label:
            ax.text(
                b.x0 + (b.x1 - b.x0) * 0.01, base[b.lane] + b.row + 0.45, b.label, fontsize=6, va="center", clip_on=True
            )
    ax.set_xlim(*plan.window_ms)
    ax.set_ylim(lane_top, -0.2)
    ax.set_yticks([base[i] + n / 2 for i, n in enumerate(plan.rows_per_lane)])
    ax.set_yticklabels(plan.lanes, fontsize=7)
    ax.set_xlabel("time since recording start (ms)")
    legend = [
        Patch(color=cmaps[FAMILIES[d]](0.6) if d in FAMILIES else cmaps[_OTHER](0.5), label=d or "(default)")
        for d in plan.domains
    ]
    if legend:
        ax.legend(handles=legend, loc="upper right", fontsize=7, title="domain", title_fontsize=7)
    shown = "" if window == "all" else f", steps {window}"
    ax.set_title(f"NVTX timeline ({len(plan.boxes):,} ranges{shown})")
    fig.tight_layout()
    output = Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    try:
        with atomic_output(output) as tmp:
            fig.savefig(tmp, dpi=DPI, format="png")
    finally:
        plt.close(fig)
    return output
