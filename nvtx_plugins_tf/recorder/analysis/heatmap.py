"""``heatmap.png`` of ``analyze``: ranks (rows) × steps (columns), each cell the rank's step
duration over the median of that step across the ranks, on a log scale from half to twice
(a diverging map, ColorBrewer's RdBu: white at the median, red slower, blue faster; clipped
beyond). One pixel or more per cell up to 1,024 ranks × 1,000 steps (larger runs are binned:
the slowest cell of each bin is drawn, so a straggler never averages away; the axes still
count steps and ranks). A step a rank does not have is grey, said in a legend.

Drawn with Pillow (the ``plot`` extra; matplotlib requires it too): the picture is a raster
of cells with its axes, ticks, colour bar and labels. matplotlib drew it before, at 0.3 s of
import and 0.12 s of drawing, more than mapping three ranks (docs/benchmarks.md); Pillow
draws it in a few hundredths. :func:`plan` computes the picture's geometry and texts
(tested without pixels), :func:`render_heatmap` the PNG file's bytes.
"""

from __future__ import annotations

import functools
import importlib.util
import io
import math
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

__all__ = [
    "ratio_matrix",
    "colors",
    "available",
    "plan",
    "Plan",
    "draw_heatmap",
    "render_heatmap",
    "MAX_CELLS",
    "MISSING_COLOR",
    "COLORS",
]

MAX_CELLS = (1024, 1000)  #: ranks × steps drawn without binning
#: a step a rank does not have (a grey that is neither the map's white nor its ends)
MISSING_COLOR = (115, 115, 115)
#: the colour map from 0.5× (faster) to 2× (slower), evenly spaced in log(ratio): ColorBrewer's
#: 11-class RdBu, reversed (white at 1×), interpolated linearly between its classes
COLORS = (
    "#053061", "#2166ac", "#4393c3", "#92c5de", "#d1e5f0", "#f7f7f7",
    "#fddbc7", "#f4a582", "#d6604d", "#b2182b", "#67001f",
)  # fmt: skip
_LOW, _HIGH = 0.5, 2.0  #: the ratios at the map's ends (clipped beyond)
_BAR_TICKS = (0.5, 0.75, 1.0, 1.5, 2.0)
_DPI = 100  #: pixels per inch of the sizes below
_PT = _DPI / 72  #: pixels per typographic point


def ratio_matrix(durations: list[list[int]]) -> np.ndarray:
    """[rank, step] step duration over the step's median across ranks (NaN where a rank has
    no such step)."""
    steps = max((len(d) for d in durations), default=0)
    m = np.full((len(durations), steps), np.nan)
    for i, d in enumerate(durations):
        m[i, : len(d)] = d
    with np.errstate(invalid="ignore", divide="ignore"):
        median = np.nanmedian(m, axis=0) if steps else np.zeros(0)
        return m / median


def _bins(shape: tuple[int, int]) -> tuple[int, int]:
    """(ranks, steps) a drawn cell stands for: 1 up to :data:`MAX_CELLS`, else enough for it."""
    return tuple(-(-n // most) if n > most else 1 for n, most in zip(shape, MAX_CELLS))


def _binned(m: np.ndarray) -> np.ndarray:
    rows, cols = _bins(m.shape)
    if rows == cols == 1:
        return m
    pad = np.full((-(-m.shape[0] // rows) * rows, -(-m.shape[1] // cols) * cols), np.nan)
    pad[: m.shape[0], : m.shape[1]] = m
    blocks = pad.reshape(pad.shape[0] // rows, rows, pad.shape[1] // cols, cols)
    with np.errstate(invalid="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # (a bin of missing cells only: NaN, drawn as missing)
        return np.nanmax(np.nanmax(blocks, axis=3), axis=1)


def available() -> bool:
    """Whether the heatmap can be drawn here: Pillow, with FreeType for its texts (its
    modules then imported)."""
    try:
        from PIL import Image, ImageDraw, ImageFont, features  # noqa: F401
    except ImportError:
        return False
    return bool(features.check("freetype2"))


def colors(m: np.ndarray) -> np.ndarray:
    """The cells' colours (``m.shape + (3,)``, uint8) of ratios ``m``: :data:`COLORS` in
    log(ratio), clipped to 0.5×-2×; NaN: :data:`MISSING_COLOR`."""
    stops = np.array([[int(c[i : i + 2], 16) for i in (1, 3, 5)] for c in COLORS], dtype=np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        t = (np.log(np.clip(m, _LOW, _HIGH)) - math.log(_LOW)) / (math.log(_HIGH) - math.log(_LOW))
    where = np.nan_to_num(t, nan=0.0) * (len(COLORS) - 1)
    low = np.minimum(where.astype(np.int64), len(COLORS) - 2)
    frac = (where - low)[..., None]
    out = np.rint(stops[low] * (1 - frac) + stops[low + 1] * frac).astype(np.uint8)
    out[np.isnan(m)] = MISSING_COLOR
    return out


def _nice_step(span: float, most: int) -> int:
    """The smallest integer tick step of 1, 2, 2.5 or 5 × 10^k (2.5 from 10 on) that puts at
    most ``most`` intervals in ``span``."""
    k = 0
    while True:
        for f in (1, 2, 2.5, 5):
            step = f * 10**k
            if step == int(step) and span / step <= most:
                return int(step)
        k += 1


def _ticks(count: int, length_px: int, spacing_px: int) -> list[int]:
    """Integer ticks over 0..count-1 (cells centred on integers), about ``spacing_px`` apart."""
    step = _nice_step(max(count - 1, 1), max(1, length_px // spacing_px))
    return list(range(0, count, step))


@dataclass
class Plan:
    """The picture's geometry (pixels) and texts: :func:`plan` makes it, :func:`render_heatmap`
    draws it. ``plot``: the cells' box (left, top, right, bottom: right and bottom
    excluded); ``x_extent``/``y_extent``: the steps and ranks at its edges (a cell centred
    on its number: -0.5 to count - 0.5, in steps and ranks also when binned); ``x_ticks`` /
    ``y_ticks``: (value, label); ``legend``: the missing cells' text, or None; ``*_at``:
    where the texts around the cells go (the title's bottom centre, the x label's top
    centre, the legend's top left; the vertical labels' left edge)."""

    size: tuple[int, int]
    plot: tuple[int, int, int, int]
    bar: tuple[int, int, int, int]
    cells: np.ndarray  #: [row, column] ratios drawn (binned)
    title: str
    x_label: str
    y_label: str
    bar_label: str
    x_extent: tuple[float, float]
    y_extent: tuple[float, float]
    x_ticks: list[tuple[float, str]] = field(default_factory=list)
    y_ticks: list[tuple[float, str]] = field(default_factory=list)
    bar_ticks: list[tuple[float, str]] = field(default_factory=list)
    legend: str | None = None
    title_at: tuple[int, int] = (0, 0)
    x_label_at: tuple[int, int] = (0, 0)
    legend_at: tuple[int, int] = (0, 0)
    y_label_x: int = 0
    bar_label_x: int = 0
    y_points: float = 9  #: the y ticks' size (the ranks' names: smaller)
    fancy: bool = True  #: ≤, ≥ and × in the texts (else <=, >= and x: the font has no such glyphs)

    def x_pixel(self, value: float) -> float:
        """The x of step ``value`` in the picture."""
        (left, _, right, _), (lo, hi) = self.plot, self.x_extent
        return left + (value - lo) / (hi - lo) * (right - left)

    def y_pixel(self, value: float) -> float:
        """The y of rank ``value`` in the picture (rank 0 at the top)."""
        (_, top, _, bottom), (lo, hi) = self.plot, self.y_extent
        return top + (value - lo) / (hi - lo) * (bottom - top)


def _font_file() -> str | None:
    """DejaVu Sans (matplotlib's own copy, else the system's); None: Pillow's default font."""
    spec = importlib.util.find_spec("matplotlib")  # (found, not imported)
    places = [Path(p) / "mpl-data" / "fonts" / "ttf" for p in (spec.submodule_search_locations or [])] if spec else []
    places.append(Path("/usr/share/fonts/truetype/dejavu"))
    return next((str(p / "DejaVuSans.ttf") for p in places if (p / "DejaVuSans.ttf").is_file()), None)


class _Fonts:
    """The texts' fonts by point size, and how wide a text is."""

    def __init__(self):
        from PIL import ImageFont

        file = _font_file()
        self._load = functools.partial(ImageFont.truetype, file) if file else ImageFont.load_default
        self._made: dict[int, object] = {}
        self.fancy = file is not None

    def __call__(self, points: float):
        px = max(6, round(points * _PT))
        if px not in self._made:
            self._made[px] = self._load(px)
        return self._made[px]

    def width(self, text: str, points: float) -> int:
        return math.ceil(self(points).getlength(text))

    def height(self, points: float) -> int:
        ascent, descent = self(points).getmetrics()
        return ascent + descent


_TICK = 4  #: a tick mark's length
_PAD = 4  #: between a tick and its label, a label and the next
_BAR_WIDTH = 18
_SIZES = {"title": 10, "label": 10, "tick": 9, "rank": 7, "legend": 8}


def plan(durations: list[list[int]], rank_names: list[str], title: str, fonts: _Fonts | None = None) -> Plan:
    """The picture of ``durations`` (per rank, its steps' durations in ns): its geometry and
    texts (needs Pillow for the texts' widths)."""
    fonts = fonts or _Fonts()
    full = ratio_matrix(durations)
    rows, cols = _bins(full.shape)
    m = _binned(full)
    ranks, steps = m.shape
    width = round(_DPI * min(16, 8 + steps / 60))
    height = round(_DPI * min(12, 4 + ranks / 16))
    times = "×" if fonts.fancy else "x"
    le, ge = ("≤", "≥") if fonts.fancy else ("<=", ">=")
    bar_labels = [f"{le}0.5{times}", f"0.75{times}", f"1{times}", f"1.5{times}", f"{ge}2{times}"]
    legend = "no such step (the rank has fewer)" if np.isnan(m).any() else None
    if ranks <= 40 and rows == 1:
        y_texts = [(float(i), name) for i, name in enumerate(rank_names[:ranks])]
        y_size = _SIZES["rank"]
    else:
        y_texts = []  # (numbers: once the plot's height is known)
        y_size = _SIZES["tick"]
    # the margins, from the texts around the cells
    label_h, tick_h = fonts.height(_SIZES["label"]), fonts.height(_SIZES["tick"])
    widest_y = max([fonts.width(t, y_size) for _, t in y_texts] + [fonts.width(str(ranks * rows), y_size)])
    widest_bar = max(fonts.width(t, _SIZES["tick"]) for t in bar_labels)
    left = _PAD * 3 + label_h + _PAD + widest_y + _TICK
    right = _PAD * 4 + _BAR_WIDTH + _TICK + _PAD + widest_bar + _PAD + label_h + _PAD * 2
    top = _PAD * 3 + fonts.height(_SIZES["title"]) + _PAD * 2
    bottom = _TICK + _PAD + tick_h + _PAD + label_h + _PAD * 3
    if legend:
        bottom += fonts.height(_SIZES["legend"]) + _PAD * 2
    box = (left, top, width - right, height - bottom)
    x_extent = (-0.5, steps * cols - 0.5)
    y_extent = (-0.5, ranks * rows - 0.5)
    x_ticks = [(float(v), str(v)) for v in _ticks(steps * cols, box[2] - box[0], 100)]
    if not y_texts:
        y_texts = [(float(v), str(v)) for v in _ticks(ranks * rows, box[3] - box[1], 30)]
    bar_h = round((box[3] - box[1]) * 0.8)
    bar_top = box[1] + (box[3] - box[1] - bar_h) // 2
    bar = (box[2] + _PAD * 4, bar_top, box[2] + _PAD * 4 + _BAR_WIDTH, bar_top + bar_h)
    middle = (box[0] + box[2]) // 2
    x_label_y = box[3] + _TICK + _PAD + tick_h + _PAD
    return Plan(
        size=(width, height), plot=box, bar=bar, cells=m, title=title,
        x_label="step" if cols == 1 else f"step (binned by {cols}: the slowest shown)",
        y_label="rank" if rows == 1 else f"rank (binned by {rows})",
        bar_label=f"{times} the step's median over the ranks",
        x_extent=x_extent, y_extent=y_extent, x_ticks=x_ticks, y_ticks=y_texts,
        bar_ticks=list(zip(_BAR_TICKS, bar_labels)), legend=legend,
        title_at=(middle, box[1] - _PAD * 2), x_label_at=(middle, x_label_y),
        legend_at=(box[0], x_label_y + label_h + _PAD * 2), y_label_x=_PAD * 3,
        bar_label_x=bar[2] + _TICK + _PAD * 2 + widest_bar, y_points=y_size, fancy=fonts.fancy,
    )  # fmt: skip


def draw_heatmap(durations: list[list[int]], rank_names: list[str], output: Path, title: str) -> Path:
    """Draw the heatmap of ``durations`` (per rank, its steps' durations in ns) into ``output``."""
    Path(output).write_bytes(render_heatmap(durations, rank_names, title))
    return output


def render_heatmap(durations: list[list[int]], rank_names: list[str], title: str) -> bytes:
    """The PNG file of the heatmap of ``durations`` (per rank, its steps' durations in ns)."""
    from PIL import Image, ImageDraw

    fonts = _Fonts()
    p = plan(durations, rank_names, title, fonts)
    image = Image.new("RGB", p.size, "white")
    draw = ImageDraw.Draw(image)
    left, top, right, bottom = p.plot
    # the cells, each over its whole box (nearest: a cell's pixels all its colour)
    cells = Image.fromarray(colors(p.cells), "RGB").resize((right - left, bottom - top), Image.Resampling.NEAREST)
    image.paste(cells, (left, top))
    draw.rectangle((left - 1, top - 1, right, bottom), outline="black")
    black = (0, 0, 0)
    tick, label = fonts(_SIZES["tick"]), fonts(_SIZES["label"])
    for value, text in p.x_ticks:
        x = round(p.x_pixel(value))
        draw.line((x, bottom, x, bottom + _TICK), fill=black)
        draw.text((x, bottom + _TICK + _PAD), text, fill=black, font=tick, anchor="mt")
    y_font = fonts(p.y_points)
    for value, text in p.y_ticks:
        y = round(p.y_pixel(value))
        draw.line((left - 1 - _TICK, y, left - 1, y), fill=black)
        draw.text((left - 1 - _TICK - _PAD, y), text, fill=black, font=y_font, anchor="rm")
    draw.text(p.x_label_at, p.x_label, fill=black, font=label, anchor="mt")
    _vertical(image, p.y_label, label, (p.y_label_x, (top + bottom) // 2))
    draw.text(p.title_at, p.title, fill=black, font=fonts(_SIZES["title"]), anchor="md")
    if p.legend:
        x, y = p.legend_at
        size = fonts.height(_SIZES["legend"]) - 4
        draw.rectangle((x, y + 2, x + size * 2, y + 2 + size), fill=MISSING_COLOR)
        draw.text((x + size * 2 + _PAD * 2, y), p.legend, fill=black, font=fonts(_SIZES["legend"]))
    _colour_bar(image, draw, p, tick, label)
    png = io.BytesIO()
    image.save(png, format="PNG")
    return png.getvalue()


def _colour_bar(image, draw, p: Plan, tick, label) -> None:
    """The colour bar: 2× at its top, 0.5× at its bottom, even in log(ratio)."""
    from PIL import Image

    left, top, right, bottom = p.bar
    ratios = np.exp(np.linspace(math.log(_HIGH), math.log(_LOW), bottom - top))[:, None]
    gradient = Image.fromarray(colors(np.repeat(ratios, right - left, axis=1)), "RGB")
    image.paste(gradient, (left, top))
    draw.rectangle((left - 1, top - 1, right, bottom), outline="black")
    for value, text in p.bar_ticks:
        y = round(top + (math.log(_HIGH) - math.log(value)) / (math.log(_HIGH) - math.log(_LOW)) * (bottom - 1 - top))
        draw.line((right, y, right + _TICK, y), fill=(0, 0, 0))
        draw.text((right + _TICK + _PAD, y), text, fill=(0, 0, 0), font=tick, anchor="lm")
    _vertical(image, p.bar_label, label, (p.bar_label_x, (top + bottom) // 2))


def _vertical(image, text: str, font, at: tuple[int, int]) -> None:
    """``text`` written upwards, its left edge at ``at[0]``, centred on ``at[1]``."""
    from PIL import Image, ImageDraw

    ascent, descent = font.getmetrics()
    mask = Image.new("L", (max(1, math.ceil(font.getlength(text))), ascent + descent), 0)
    ImageDraw.Draw(mask).text((0, 0), text, fill=255, font=font)
    mask = mask.rotate(90, expand=True)
    image.paste((0, 0, 0), (at[0], at[1] - mask.size[1] // 2), mask)
