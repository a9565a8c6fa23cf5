"""``heatmap.png`` of ``analyze``: ranks (rows) × steps (columns), each cell the rank's step
duration over the median of that step across the ranks, on a log scale from half to twice
(a diverging map: white at the median, red slower, blue faster; clipped beyond). One pixel
or more per cell up to 1,024 ranks × 1,000 steps (larger runs are binned: the slowest cell of
each bin is drawn, so a straggler never averages away; the axes still count steps and ranks).
A step a rank does not have is grey, said in a legend. Needs matplotlib (the ``plot`` extra).
"""

from __future__ import annotations

import threading
import warnings
from pathlib import Path

import numpy as np

__all__ = ["ratio_matrix", "draw_heatmap", "render_heatmap", "figure", "MAX_CELLS", "MISSING_COLOR"]

MAX_CELLS = (1024, 1000)  #: ranks × steps drawn without binning
MISSING_COLOR = "0.45"  #: a step a rank does not have (a grey that is neither the map's white nor its ends)


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


def _import_matplotlib() -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.colors  # noqa: F401
    import matplotlib.pyplot  # noqa: F401
    import matplotlib.ticker  # noqa: F401


def preload() -> None:
    """Import matplotlib (0.3-0.5 s) in a thread of its own, e.g. while the mappers run (their
    native code leaves the GIL free): :func:`draw_heatmap` then starts at once."""
    threading.Thread(target=_import_matplotlib, name="nvtx-tf-heatmap-import", daemon=True).start()


def draw_heatmap(durations: list[list[int]], rank_names: list[str], output: Path, title: str) -> Path:
    """Draw the heatmap of ``durations`` (per rank, its steps' durations in ns) into ``output``."""
    Path(output).write_bytes(render_heatmap(durations, rank_names, title))
    return output


def render_heatmap(durations: list[list[int]], rank_names: list[str], title: str) -> bytes:
    """The PNG file of the heatmap of ``durations`` (per rank, its steps' durations in ns)."""
    import io

    import matplotlib.pyplot as plt

    fig = figure(durations, rank_names, title)
    png = io.BytesIO()
    try:
        fig.savefig(png, format="png")
    finally:
        plt.close(fig)
    return png.getvalue()


def figure(durations: list[list[int]], rank_names: list[str], title: str):
    """The heatmap of ``durations`` as a matplotlib Figure (close it with ``plt.close``)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.colors as colors
    import matplotlib.pyplot as plt

    full = ratio_matrix(durations)
    rows, cols = _bins(full.shape)
    m = _binned(full)
    ranks, steps = m.shape
    from matplotlib.patches import Patch
    from matplotlib.ticker import MaxNLocator

    fig, ax = plt.subplots(figsize=(min(16, 8 + steps / 60), min(12, 4 + ranks / 16)), dpi=100)
    cmap = matplotlib.colormaps["RdBu_r"].with_extremes(bad=MISSING_COLOR)
    # the axes in steps and ranks, whatever a cell stands for (binned: several)
    image = ax.imshow(
        np.clip(m, 0.5, 2.0), aspect="auto", interpolation="nearest", cmap=cmap,
        norm=colors.LogNorm(vmin=0.5, vmax=2.0), extent=(-0.5, steps * cols - 0.5, ranks * rows - 0.5, -0.5),
    )  # fmt: skip
    ax.set_xlabel("step" if cols == 1 else f"step (binned by {cols}: the slowest shown)")
    ax.set_ylabel("rank" if rows == 1 else f"rank (binned by {rows})")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    if ranks <= 40 and rows == 1:
        ax.set_yticks(range(ranks), labels=rank_names[:ranks], fontsize=7)
    if np.isnan(m).any():
        ax.legend(
            handles=[Patch(facecolor=MISSING_COLOR, label="no such step (the rank has fewer)")],
            loc="upper left", bbox_to_anchor=(0, -0.08), fontsize=8, frameon=False,
        )  # fmt: skip
    bar = fig.colorbar(image, ax=ax, shrink=0.8)
    bar.ax.minorticks_off()
    bar.set_ticks([0.5, 0.75, 1, 1.5, 2], labels=["≤0.5×", "0.75×", "1×", "1.5×", "≥2×"])
    bar.set_label("× the step's median over the ranks")
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    return fig
