"""The timeline picture's layout: what goes where, decided apart from drawing it (see
:mod:`.render` for the rules a user reads). Lanes, rows, boxes, their colours and labels,
the steps and the window, as plain data a test can check (no overlap, every range placed,
labels only where they fit) without looking at pixels. Labels are measured with
matplotlib's Agg renderer in the font the picture uses, so matplotlib is needed here too.
"""

from __future__ import annotations

import functools
import re
import zlib
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from ..recording._decoder import FLAG_HAS_COLOR, FLAG_UNCLOSED, KIND_MARK, KIND_PUSH_POP

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


_charmap: set[int] | None = None


def drawable(text: str) -> str:
    """``text`` with every character the picture's font has no glyph for replaced by ``?``:
    matplotlib would draw an empty box and warn ("Glyph ... missing from font(s)") once per
    character (range names in CJK scripts, emoji)."""
    global _charmap  # (read once, as the measurer)
    if _charmap is None:
        _pyplot()
        from matplotlib import font_manager

        path = font_manager.findfont(font_manager.FontProperties())
        _charmap = set(font_manager.get_font(path).get_charmap())
    if all(ord(c) in _charmap or c in "\n\t" for c in text):
        return text
    return "".join(c if ord(c) in _charmap else "?" for c in text)


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
    :data:`MIN_LABEL_CHARS` characters with an ellipsis that does, else None (characters the
    font has no glyph for are ``?``: :func:`drawable`)."""
    name = drawable(name)
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
