"""Draw a recording as a PNG timeline with matplotlib (optional dependency).

:func:`layout` decides what goes where; :func:`render_timeline` only draws it:

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

import functools
import re
import sys
import tempfile
import zlib
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ._decoder import FLAG_HAS_COLOR, FLAG_UNCLOSED, KIND_MARK, KIND_PUSH_POP
from ._output import atomic_output
from .exports import Sink, feed
from .reader import reading

__all__ = [
    "render_timeline",
    "TimelineSink",
    "layout",
    "Layout",
    "Box",
    "MatplotlibMissing",
    "FAMILIES",
    "box_color",
    "label_width_px",
]

#: Domain name -> matplotlib colormap of its family.
FAMILIES = {"Forward": "Blues", "Backward": "Oranges", "Gradient": "Oranges", "Keras": "Greens", "TSL": "Greys"}
_OTHER = "tab10"
_STEP = re.compile(r"^(.*\S)\s+(\d+)$")
_PREFERRED_STEPS = ("batch", "step")
DPI = 110
AXES_WIDTH_PX = 1400.0  # the time axis; the figure grows around it for lane names and legend
ROW_PX, MAX_AXES_HEIGHT_PX = 22.0, 3000.0  # a row's height, unless the lanes need more than the maximum
BOX_HEIGHT = 0.9  # of a row
FONT_PT = 6.0  # labels
MIN_LABEL_CHARS, ELLIPSIS = 6, "\u2026"  # a shortened label keeps at least this many characters
LABEL_PAD_PX = 3.0  # a label's distance from its box's left edge, and at least as much on the right

#: The fields of a row the timeline keeps.
_FIELDS = ("start_ns", "end_ns", "pid", "tid", "message", "domain", "color", "depth", "flags", "kind")


class MatplotlibMissing(ImportError):
    """matplotlib is needed for PNG timelines."""


@dataclass(frozen=True)
class Box:
    """One range as drawn: lane and row, extent in ms (clipped to the window), colour, label."""

    lane: int
    row: int
    x0: float  # ms since the recording's origin
    x1: float
    family: str  # a FAMILIES key, or "" (another domain)
    shade: float  # 0..1 within the family's colormap, or the other palette's slot
    rgb: tuple | None  # the range's own NVTX color (other domains only)
    label: str | None  # drawn only where it fits: the name, or its first characters and "…"
    mark: bool = False
    name: str = ""  # the range's


@dataclass
class Layout:
    """What :func:`layout` decided; ``width_px`` and ``row_px`` are the axes' geometry the
    label rule assumed, and the drawing uses exactly those."""

    lanes: list[str]
    rows_per_lane: list[int]
    boxes: list[Box] = field(default_factory=list)
    window_ms: tuple[float, float] = (0.0, 1.0)
    domains: list[str] = field(default_factory=list)
    width_px: float = AXES_WIDTH_PX
    row_px: float = ROW_PX
    ranges_in_window: int = 0  # more than len(boxes) when the drawing left some out
    step_starts: list[float] = field(default_factory=list)  # inside the window: a line across all lanes

    @property
    def ms_per_px(self) -> float:
        return max(self.window_ms[1] - self.window_ms[0], 1e-9) / self.width_px


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


@functools.lru_cache(maxsize=1)
def _measurer():
    _pyplot()
    from matplotlib.backends.backend_agg import RendererAgg
    from matplotlib.font_manager import FontProperties

    return RendererAgg(10, 10, DPI), FontProperties(size=FONT_PT)


@functools.lru_cache(maxsize=65536)
def label_width_px(text: str) -> float:
    """Width in pixels of ``text`` as the timeline draws a label (Agg, its font and size)."""
    renderer, font = _measurer()
    width, _, _ = renderer.get_text_width_height_descent(text, font, ismath=False)
    return float(width)


def _label_height_px() -> float:
    renderer, font = _measurer()
    _, height, _ = renderer.get_text_width_height_descent("Ag", font, ismath=False)
    return float(height)


@functools.lru_cache(maxsize=None)
def _colormap(name: str):
    import matplotlib

    return matplotlib.colormaps[name]  # (a copy on each lookup: cached)


def _colors(boxes: list[Box]) -> np.ndarray:
    """RGBA of each box (n x 4): its family's colormap at its shade; for another domain its
    own NVTX color, else the other palette's colour of its domain."""
    out = np.ones((len(boxes), 4))
    by_map: dict[str, list[int]] = {}
    for i, b in enumerate(boxes):
        if b.family:
            by_map.setdefault(FAMILIES[b.family], []).append(i)
        elif b.rgb is not None:
            out[i, :3] = b.rgb
        else:
            by_map.setdefault(_OTHER, []).append(i)
    for name, idx in by_map.items():  # one colormap call per map: 20,000 scalar calls take long
        out[idx] = _colormap(name)(np.array([boxes[i].shade for i in idx]))
    return out


def box_color(box: Box) -> tuple:
    """The RGBA colour ``box`` is drawn in (and its domain's legend entry, for a family)."""
    return tuple(float(c) for c in _colors([box])[0])


def _other_slot(domain: str) -> float:
    """The other palette's colour of ``domain`` (one per domain, so the legend holds)."""
    return ((zlib.crc32(domain.encode()) % 10) + 0.5) / 10


def _numbered(strings: list[str]) -> dict[int, str]:
    """String id -> family (``batch`` for ``batch 3``) of the numbered names."""
    return {i: m.group(1) for i, s in enumerate(strings) if (m := _STEP.match(s))}


def _steps(message: np.ndarray, starts: np.ndarray, ends: np.ndarray, strings: list[str]) -> list[tuple[float, float]]:
    """(start, end) of each step in time order, from the rows of numbered names (see the
    module docstring); ``[]`` when no family has two names."""
    numbered = _numbered(strings)
    families: dict[str, list[int]] = {}
    for sid, base in sorted(numbered.items(), key=lambda item: strings[item[0]]):
        families.setdefault(base, []).append(sid)
    best, best_key = None, None
    for base in sorted(families):
        ids = families[base]
        mask = np.isin(message, ids)
        if len(set(message[mask].tolist())) < 2:
            continue
        order = np.argsort(starts[mask], kind="stable")
        s, e = starts[mask][order], ends[mask][order]
        preferred = base.lower() in _PREFERRED_STEPS
        if not preferred and np.any(s[1:] < np.maximum.accumulate(e)[:-1]):
            continue  # ranges of one family that overlap each other are not steps
        key = (not preferred, -float(np.sum(e - s)), base)
        if best_key is None or key < best_key:
            best, best_key = list(zip(s.tolist(), e.tolist())), key
    return best or []


def _window(window: str, steps: list[tuple[float, float]], lo: float, hi: float) -> tuple[float, float]:
    if window == "all":
        return lo, hi
    first, colon, last = window.partition(":")
    try:
        a = int(first) if first else 0
        b = int(last) if last else None
    except ValueError:
        a = b = None
    if not colon or a is None or (last and b is None):
        raise ValueError(f"window {window!r}: expected 'A:B' (steps, either side may be empty) or 'all'")
    if not steps:
        return lo, hi
    b = len(steps) - 1 if b is None else b
    if not (0 <= a < len(steps)) or b < a:
        raise ValueError(f"window {window!r}: the recording has steps 0..{len(steps) - 1}")
    b = min(b, len(steps) - 1)
    return steps[a][0], max(steps[b][1], steps[a][0] + 1e-6)


def _label(name: str, room_px: float, label_px: Callable[[str], float]) -> str | None:
    """``name`` if it fits in ``room_px``, else its longest prefix of at least
    :data:`MIN_LABEL_CHARS` characters with an ellipsis that does, else None."""
    if label_px(name) <= room_px:
        return name
    if len(name) <= MIN_LABEL_CHARS or label_px(name[:MIN_LABEL_CHARS] + ELLIPSIS) > room_px:
        return None  # (most narrow boxes end here, on two widths cached per name)
    lo, hi = MIN_LABEL_CHARS, len(name) - 1  # the longest prefix that fits lies in lo..hi
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if label_px(name[:mid] + ELLIPSIS) <= room_px:
            lo = mid
        else:
            hi = mid - 1
    return name[:lo].rstrip() + ELLIPSIS  # ("Dense 3…", not "Dense 3 …")


def layout(
    rows: np.ndarray,
    strings: list[str],
    domain_names: list[str],
    lane_names: dict,
    origin: int,
    last_ns: int,
    window: str = "1:",
    width_px: float = AXES_WIDTH_PX,
    *,
    window_ms: tuple[float, float] | None = None,
    steps: list[tuple[float, float]] | None = None,
    label_px: Callable[[str], float] | None = None,
) -> Layout:
    """Where each range of ``rows`` goes (see the module docstring).

    ``rows``: decoded rows (``ROW_DTYPE`` or a subset of its fields); ``strings`` and
    ``domain_names`` the reader's tables; ``lane_names`` (pid, tid) -> lane label;
    ``origin``/``last_ns``: the recording's time origin and its last timestamp (the end of
    ranges never closed). ``window``: steps "A:B" or "all"; ``window_ms`` a window already
    found (then ``window`` is not looked at) and ``steps`` the steps (ms) it was found
    among, for the lines between steps. ``width_px``: the time axis's width;
    ``label_px``: a label's width in pixels (by default measured as drawn).
    """
    label_px = label_width_px if label_px is None else label_px
    ends = np.where(rows["flags"] & FLAG_UNCLOSED, last_ns, rows["end_ns"])
    starts_ms = (rows["start_ns"] - origin) / 1e6
    ends_ms = (ends - origin) / 1e6
    if window_ms is None:
        lo = float(starts_ms.min()) if len(rows) else 0.0
        hi = float(ends_ms.max()) if len(rows) else 1.0
        steps = _steps(rows["message"], starts_ms, ends_ms, strings)
        window_ms = _window(window, steps, lo, hi)
    x_lo, x_hi = window_ms
    step_starts = [s for s, _ in steps or [] if x_lo < s < x_hi]
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
    placed, domains_shown = [], []
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
        name = strings[int(rows["message"][i])]
        if domain in FAMILIES:  # the family's colours, not the range's own: the legend holds
            family, rgb, shade = domain, None, 0.35 + 0.5 * ((zlib.crc32(name.encode()) & 255) / 255)
        else:
            own = flags & FLAG_HAS_COLOR
            rgb = (((color >> 16) & 255) / 255, ((color >> 8) & 255) / 255, (color & 255) / 255) if own else None
            family, shade = "", _other_slot(domain)
        placed.append((lane_index[lane], row, x0, x1, family, shade, rgb, name, kind == KIND_MARK))
    rows_per_lane = [push_rows[lane] + len(band_ends[lane]) for lane in lanes]
    lane_rows = sum(rows_per_lane) + 0.6 * len(lanes)
    row_px = min(ROW_PX, MAX_AXES_HEIGHT_PX / max(lane_rows, 1))
    tall_enough = _label_height_px() <= row_px * BOX_HEIGHT if placed else False

    boxes = [
        Box(
            lane,
            row,
            x0,
            x1,
            family,
            shade,
            rgb,
            _label(name, (x1 - x0) / ms_per_px - 2 * LABEL_PAD_PX, label_px) if tall_enough and not mark else None,
            mark,
            name,
        )
        for lane, row, x0, x1, family, shade, rgb, name, mark in placed
    ]
    return Layout(
        [lane_names.get(lane, f"{lane[0]} / {lane[1]}") for lane in lanes],
        rows_per_lane,
        boxes,
        (x_lo, x_hi),
        domains_shown,
        width_px,
        row_px,
        len(boxes),
        step_starts,
    )


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
    from ._decoder import ROW_DTYPE

    return {name: ROW_DTYPE.fields[name][0] for name in _FIELDS}


_ROW_FIELDS = _row_fields()


class TimelineSink(Sink):
    """:func:`render_timeline` batch by batch (see :mod:`.exports`): keeps every range (beyond
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


def _figure(plan: Layout, window: str):
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
            b.label,
            fontsize=FONT_PT,
            va="center",
            ha="left",
            color="white" if lum < 0.4 else "black",
            clip_on=True,
        )
    ax.set_xlim(*plan.window_ms)
    ax.set_ylim(lane_top, -0.2)
    ax.set_yticks([base[i] + n / 2 for i, n in enumerate(plan.rows_per_lane)])
    ax.set_yticklabels(plan.lanes, fontsize=7)
    ax.set_xlabel("time since recording start (ms)")
    legend = [
        Patch(
            color=box_color(
                Box(0, 0, 0, 0, d if d in FAMILIES else "", 0.6 if d in FAMILIES else _other_slot(d), None, None)
            ),
            label=d or "(default)",
        )
        for d in plan.domains
    ]
    if legend:
        ax.legend(
            handles=legend, loc="upper left", bbox_to_anchor=(1.005, 1.0), fontsize=7, title="domain", title_fontsize=7
        )
    shown = "" if window == "all" else f", steps {window}"
    drawn = len(plan.boxes)
    count = (
        f"{drawn:,} ranges"
        if plan.ranges_in_window <= drawn
        else f"{drawn:,} of {plan.ranges_in_window:,} ranges, the longest"
    )
    ax.set_title(f"NVTX timeline ({count}{shown})", fontsize=10)
    return fig, ax


def _draw(plan: Layout, output, window: str) -> Path:
    """Draw ``plan`` into the PNG ``output``."""
    plt = _pyplot()
    fig, _ = _figure(plan, window)
    output = Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    try:
        with atomic_output(output) as tmp:
            fig.savefig(tmp, dpi=DPI, format="png", bbox_inches="tight", pad_inches=0.15)
    finally:
        plt.close(fig)
    return output
