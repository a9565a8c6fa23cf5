"""compare.png: a forest plot of the step and the largest changes, each row its ratio candidate /
baseline (a dot) and interval (a line), the band of +-threshold shaded, slower rows red and
faster ones green. Drawn with Pillow (the ``plot`` extra) and the heatmap's fonts
(:mod:`..analysis.heatmap`): a few milliseconds, where matplotlib's import and first figure
took over a second of a 1M-range comparison."""

from __future__ import annotations

import io
import math

import numpy as np

from ..._printable import printable

__all__ = ["render_forest"]

_ROW = 18  #: pixels a row
_WIDTH = 900
_COLORS = {"slower": (214, 39, 40), "faster": (44, 160, 44)}
_GREY = (80, 80, 80)


def render_forest(
    names: list[str], ratio, low, high, verdicts: list[str], threshold: float, title: str
) -> bytes | None:
    """The PNG file's bytes (rows top to bottom in the order given); None without Pillow."""
    try:
        from PIL import Image, ImageDraw

        from ..analysis.heatmap import _Fonts
    except ImportError:
        return None
    fonts = _Fonts()
    labels = [printable(n)[:60] for n in names]
    label_font, tick_font = fonts(8), fonts(8)
    left = 20 + max([fonts.width(t, 8) for t in labels] + [40])
    right, top = _WIDTH - 30, 40
    bottom = top + _ROW * len(names)
    image = Image.new("RGB", (_WIDTH, bottom + 50), "white")
    draw = ImageDraw.Draw(image)
    values = np.array([v for v in (*low, *high, 1 - threshold, 1 + threshold) if np.isfinite(v)], dtype=float)
    lo, hi = float(values.min()), float(values.max())
    pad = max((hi - lo) * 0.05, 1e-3)
    lo, hi = lo - pad, hi + pad

    def x(value: float) -> int:
        return round(left + (value - lo) / (hi - lo) * (right - left))

    draw.rectangle((x(1 - threshold), top, x(1 + threshold), bottom), fill=(232, 232, 232))
    draw.line((x(1.0), top, x(1.0), bottom), fill=(150, 150, 150))
    for k, label in enumerate(labels):
        y = top + _ROW * k + _ROW // 2
        draw.text((left - 8, y), label, fill=(0, 0, 0), font=label_font, anchor="rm")
        if not all(np.isfinite(v) for v in (ratio[k], low[k], high[k])):
            continue
        color = _COLORS.get(verdicts[k], _GREY)
        draw.line((x(low[k]), y, x(high[k]), y), fill=color, width=2)
        draw.ellipse((x(ratio[k]) - 3, y - 3, x(ratio[k]) + 3, y + 3), fill=color)
    draw.rectangle((left, top, right, bottom), outline=(0, 0, 0))
    step = 10 ** math.floor(math.log10(max(hi - lo, 1e-9) / 2))
    for tick in np.arange(math.ceil(lo / step) * step, hi, step):
        draw.line((x(tick), bottom, x(tick), bottom + 4), fill=(0, 0, 0))
        draw.text((x(tick), bottom + 6), f"{tick:g}", fill=(0, 0, 0), font=tick_font, anchor="mt")
    draw.text((left, 12), printable(title), fill=(0, 0, 0), font=fonts(10))
    png = io.BytesIO()
    image.save(png, format="PNG")
    return png.getvalue()
