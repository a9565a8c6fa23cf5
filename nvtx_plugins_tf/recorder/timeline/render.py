"""Draw a recording as a PNG timeline with matplotlib (optional dependency).

:func:`layout` (in :mod:`.layout`) decides what goes where; :func:`render_timeline` draws it:

* one lane per thread (grouped by process, labelled ``process pid / thread (tid)``);
* inside a lane, push/pop ranges on the row of their nesting depth, then start/end ranges
  on rows of their own, packed so that no two overlap (Train / epoch / batch stack up);
* colours by domain family (``Forward`` blues, ``Backward``/``Gradient`` oranges, ``Keras``
  greens, TensorFlow's ``TSL`` greys): a family's domain always takes its family's
  colours, whatever NVTX color its ranges set, so the legend holds; a range of another
  domain keeps its own NVTX color if it set one, else its domain's colour;
* a label only inside a box wide (and tall) enough for it, as measured in the font it is
  drawn with, so labels never overlap nor overrun their box: the range's name, or where
  only part of it fits, its first characters (six at least) and an ellipsis;
* the window: by default the recording without its first step, the one where TensorFlow
  traces the functions; ``window="A:B"`` shows steps A to B (0-based, either side may be
  empty), ``window="all"`` everything. Steps are the ranges of one family of numbered
  names: ``batch N`` or ``step N`` if there is one, else the family whose ranges do not
  overlap each other and cover the most time (ties: the first name in sorted order);
  a dashed line across all lanes where each step of the window begins.

At most ``max_ranges`` ranges of the window are drawn (the longest ones) so big recordings
stay quick; the title says so when ranges are left out.
"""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from ..exports._output import atomic_output
from ..exports.one_pass import Sink, feed
from ..recording._decoder import FLAG_UNCLOSED
from ..recording.reader import reading
from .layout import (
    BOX_HEIGHT,
    DPI,
    FAMILIES,
    FONT_PT,
    LABEL_PAD_PX,
    Box,
    Layout,
    _colors,
    _numbered,
    _other_slot,
    _pyplot,
    _steps,
    _window,
    box_color,
    drawable,
    layout,
)

__all__ = ["render_timeline", "TimelineSink"]


#: The fields of a row the timeline keeps.
_FIELDS = ("start_ns", "end_ns", "pid", "tid", "message", "domain", "color", "depth", "flags", "kind")


def render_timeline(recording, output, *, max_ranges: int = 20000, window: str = "1:", reader=None) -> Path:
    """Draw ``recording`` into the PNG ``output`` (its folder is created); returns its path.

    ``window``: steps "A:B" or "all" (see the module docstring); ``max_ranges``: at most
    this many ranges of the window are drawn, the longest. Raises :class:`MatplotlibMissing`
    before reading anything when matplotlib is not installed. The file is written through a
    private temporary file and replaced atomically.
    """
    with reading(recording, reader) as reader:
        sink = TimelineSink(reader, output, max_ranges=max_ranges, window=window)
        feed(reader, [sink])
        return sink.finish()


class _RowStore:
    """The rows seen (their :data:`_FIELDS`), in memory up to ``spill_rows``, beyond that in
    an anonymous temporary file: the window is known only at the end, and every range in it
    must still be there."""

    def __init__(self, spill_rows: int):
        self.spill_rows = spill_rows
        self.dtype = np.dtype([(name, _ROW_FIELDS[name]) for name in _FIELDS])
        self._memory: list[np.ndarray] = []
        self._in_memory = 0
        self._file = None

    def append(self, rows: np.ndarray) -> None:
        compact = np.empty(len(rows), dtype=self.dtype)
        for name in _FIELDS:
            compact[name] = rows[name]
        if self._file is None and self._in_memory + len(compact) <= self.spill_rows:
            self._memory.append(compact)
            self._in_memory += len(compact)
            return
        if self._file is None:
            self._file = tempfile.TemporaryFile(prefix="nvtx-timeline-")
            for block in self._memory:
                self._file.write(block.tobytes())
            self._memory, self._in_memory = [], 0
        self._file.write(compact.tobytes())

    def chunks(self, rows_per_chunk: int = 1 << 18) -> Iterator[np.ndarray]:
        if self._file is None:
            yield from self._memory
            return
        self._file.flush()
        self._file.seek(0)
        while data := self._file.read(rows_per_chunk * self.dtype.itemsize):
            yield np.frombuffer(data, dtype=self.dtype)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
        self._memory = []


def _row_fields() -> dict:
    from ..recording._decoder import ROW_DTYPE

    return {name: ROW_DTYPE.fields[name][0] for name in _FIELDS}


_ROW_FIELDS = _row_fields()


class TimelineSink(Sink):
    """:func:`render_timeline` batch by batch (see :mod:`..exports.one_pass`): keeps every range (beyond
    ``spill_rows`` in a temporary file); ``finish()`` finds the window, keeps its
    ``max_ranges`` longest ranges, lays them out, draws the PNG and returns its path.
    Raises :class:`MatplotlibMissing` when made without matplotlib, ``ValueError`` for a
    ``window`` that is not "A:B" or "all"."""

    def __init__(self, reader, output, *, max_ranges: int = 20000, window: str = "1:", spill_rows: int = 250_000):
        _pyplot()
        _window(window, [], 0.0, 1.0)  # its syntax, before anything is read
        if max_ranges < 1:
            raise ValueError(f"max_ranges must be at least 1, not {max_ranges!r}")
        self.reader = reader
        self.output = Path(output)
        self.max_ranges = max_ranges
        self.window = window
        self._store = _RowStore(spill_rows)
        self._last_ns = 0
        self._first_ns = None
        self.plan: Layout | None = None  # what finish() drew

    def add(self, rows) -> None:
        if not len(rows):
            return
        self._last_ns = max(self._last_ns, int(rows["start_ns"].max()), int(rows["end_ns"].max()))
        first = int(rows["start_ns"].min())
        self._first_ns = first if self._first_ns is None else min(self._first_ns, first)
        self._store.append(rows)

    def _chunks_ms(self) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        origin = self.reader.origin_ns
        for chunk in self._store.chunks():
            ends = np.where(chunk["flags"] & FLAG_UNCLOSED, self._last_ns, chunk["end_ns"])
            yield chunk, (chunk["start_ns"] - origin) / 1e6, (ends - origin) / 1e6

    def _window_ms(self, strings: list[str]) -> tuple[tuple[float, float], list[tuple[float, float]]]:
        """The window (ms) and the recording's steps, from the rows of numbered names."""
        origin = self.reader.origin_ns
        lo = (self._first_ns - origin) / 1e6 if self._first_ns is not None else 0.0
        hi = (self._last_ns - origin) / 1e6 if self._first_ns is not None else 1.0
        numbered = np.fromiter(_numbered(strings), dtype=np.int64)
        parts = [
            (c["message"][m], s[m], e[m])
            for c, s, e in self._chunks_ms()
            if (m := np.isin(c["message"], numbered)).any()
        ]
        steps = _steps(*(np.concatenate(p) for p in zip(*parts)), strings) if parts else []
        return _window(self.window, steps, lo, hi), steps

    def _in_window(self, x_lo: float, x_hi: float) -> tuple[np.ndarray, int]:
        """The ``max_ranges`` longest ranges of the window (all of them if fewer), and how many it holds."""
        cap, kept, total = self.max_ranges, [], 0
        pending = 0
        for chunk, starts, ends in self._chunks_ms():
            inside = chunk[(ends >= x_lo) & (starts <= x_hi)]
            total += len(inside)
            kept.append(inside)
            pending += len(inside)
            if pending > 2 * cap:  # streaming top-k by duration: memory stays bounded
                kept, pending = [self._longest(np.concatenate(kept), cap)], cap
        rows = np.concatenate(kept) if kept else np.empty(0, dtype=self._store.dtype)
        return (self._longest(rows, cap) if len(rows) > cap else rows), total

    @staticmethod
    def _longest(rows: np.ndarray, n: int) -> np.ndarray:
        dur = np.where(rows["flags"] & FLAG_UNCLOSED, np.iinfo(np.int64).max, rows["end_ns"] - rows["start_ns"])
        return rows[np.argpartition(-dur, n)[:n]]

    def _finish(self) -> Path:
        try:
            reader = self.reader
            strings, domain_names = reader.strings(), reader.domain_names()
            window_ms, steps = self._window_ms(strings)
            kept, total = self._in_window(*window_ms)
        finally:
            self._store.close()
        thread_names, processes = reader.thread_names, dict(reader.processes)
        lane_names = {
            (p, t): f"{processes[p].name if p in processes else 'pid'} {p} / {thread_names.get((p, t), 'thread')} ({t})"
            for p, t in set(zip(kept["pid"].tolist(), kept["tid"].tolist()))
        }
        plan = layout(
            kept, strings, domain_names, lane_names, reader.origin_ns, self._last_ns, window_ms=window_ms, steps=steps
        )
        plan.ranges_in_window = total
        self.plan = plan
        if total > len(plan.boxes):
            print(
                f"nvtx-tf: timeline: the window holds {total:,} ranges; drawing the {len(plan.boxes):,} longest"
                f" (max_ranges={self.max_ranges:,})",
                file=sys.stderr,
                flush=True,
            )
        return _draw(plan, self.output, self.window)

    def _abort(self) -> None:
        self._store.close()


def _plural(n: int, word: str) -> str:
    return f"{n:,} {word}" + ("" if n == 1 else "s")


def _figure(plan: Layout, window: str, name: str = ""):
    """The figure of ``plan`` (matplotlib ``Figure``, ``Axes``); the axes are exactly
    ``plan.width_px`` wide and ``plan.row_px`` per row, as the label rule assumed."""
    plt = _pyplot()
    from matplotlib.collections import PolyCollection
    from matplotlib.patches import Patch

    base, lane_top = [], 0.0
    for n in plan.rows_per_lane:
        base.append(lane_top)
        lane_top += n + 0.6
    lane_top = max(lane_top, 1.0)
    axes_w, axes_h = plan.width_px / DPI, plan.row_px * (lane_top + 0.2) / DPI
    # The axes' size is fixed in inches; savefig(bbox_inches="tight") then grows the
    # picture around them (lane names on the left, the legend on the right) without
    # scaling them.
    fig = plt.figure(figsize=(axes_w + 1, axes_h + 1), dpi=DPI)
    ax = fig.add_axes((0.5 / (axes_w + 1), 0.5 / (axes_h + 1), axes_w / (axes_w + 1), axes_h / (axes_h + 1)))
    bars = [b for b in plan.boxes if not b.mark]
    if bars:
        verts = [
            [
                (b.x0, base[b.lane] + b.row),
                (b.x1, base[b.lane] + b.row),
                (b.x1, base[b.lane] + b.row + BOX_HEIGHT),
                (b.x0, base[b.lane] + b.row + BOX_HEIGHT),
            ]
            for b in bars
        ]
        # An outline only where a box is a few pixels wide: hairlines of narrow boxes would
        # turn a dense stretch black.
        wide = [(b.x1 - b.x0) / plan.ms_per_px >= 4 for b in bars]
        ax.add_collection(
            PolyCollection(
                verts,
                facecolors=_colors(bars),
                edgecolors=[(0.2, 0.2, 0.2, 1.0) if w else (0, 0, 0, 0) for w in wide],
                linewidths=[0.3 if w else 0.0 for w in wide],
            )
        )
    marks = [b for b in plan.boxes if b.mark]
    if marks:
        ax.vlines(
            [b.x0 for b in marks],
            [base[b.lane] + b.row for b in marks],
            [base[b.lane] + b.row + BOX_HEIGHT for b in marks],
            colors=_colors(marks),
            linewidth=0.8,
        )
    if plan.step_starts:  # where each step begins, across every lane
        ax.vlines(plan.step_starts, -0.2, lane_top, colors="0.25", linewidth=0.7, linestyles=(0, (3, 3)), zorder=3)
    pad_ms = LABEL_PAD_PX * plan.ms_per_px
    labelled = [b for b in bars if b.label]
    # white on dark boxes, black on light ones (relative luminance, sRGB weights)
    luminance = _colors(labelled)[:, :3] @ np.array([0.2126, 0.7152, 0.0722]) if labelled else []
    for b, lum in zip(labelled, luminance):
        ax.text(
            b.x0 + pad_ms,
            base[b.lane] + b.row + BOX_HEIGHT / 2,
            drawable(b.label),
            fontsize=FONT_PT,
            va="center",
            ha="left",
            color="white" if lum < 0.4 else "black",
            clip_on=True,
        )
    # A margin around the window, so that a mark (or a range) at its very edge shows.
    lo, hi = plan.window_ms
    margin = max((hi - lo) * 0.01, 1e-4)
    ax.set_xlim(lo - margin, hi + margin)
    ax.set_ylim(lane_top, -0.2)
    ax.set_yticks([base[i] + n / 2 for i, n in enumerate(plan.rows_per_lane)])
    ax.set_yticklabels([drawable(lane) for lane in plan.lanes], fontsize=7)
    ax.set_xlabel("time since recording start (ms)")
    legend = [
        Patch(
            color=box_color(
                Box(0, 0, 0, 0, d if d in FAMILIES else "", 0.6 if d in FAMILIES else _other_slot(d), None, None)
            ),
            label=drawable(d) or "(default)",
        )
        for d in plan.domains
    ]
    if legend:
        ax.legend(
            handles=legend, loc="upper left", bbox_to_anchor=(1.005, 1.0), fontsize=7, title="domain", title_fontsize=7
        )
    shown = "" if window == "all" else f", steps {window}"
    drawn = len(bars)
    count = (
        _plural(drawn, "range")
        if plan.ranges_in_window <= len(plan.boxes)
        else f"{drawn:,} of {plan.ranges_in_window:,} ranges, the longest"
    )
    if marks:
        count += f", {_plural(len(marks), 'mark')}"
    title = f"NVTX timeline of {drawable(name)}" if name else "NVTX timeline"
    ax.set_title(f"{title} ({count}{shown})", fontsize=10)
    return fig, ax


def _draw(plan: Layout, output, window: str) -> Path:
    """Draw ``plan`` into the PNG ``output``."""
    plt = _pyplot()
    output = Path(output)
    fig, _ = _figure(plan, window, output.stem)
    output.parent.mkdir(parents=True, exist_ok=True)
    try:
        with atomic_output(output) as tmp:
            fig.savefig(tmp, dpi=DPI, format="png", bbox_inches="tight", pad_inches=0.15)
    finally:
        plt.close(fig)
    return output
