"""Draw a recording as a PNG timeline with matplotlib (optional dependency).

One lane per thread (grouped by process); push/pop ranges stacked by depth inside
the lane, start/end ranges in a band below it, marks as ticks. Colors come from the
range's NVTX color, else from a hash of its message. At most ``max_ranges`` ranges
are drawn (the longest ones) so big recordings stay quick.
"""

from __future__ import annotations

import zlib
from pathlib import Path

import numpy as np

from ._decoder import FLAG_HAS_COLOR, FLAG_UNCLOSED, KIND_MARK, KIND_PUSH_POP
from ._output import atomic_output
from .reader import reading

__all__ = ["render_timeline", "MatplotlibMissing"]


class MatplotlibMissing(ImportError):
    """matplotlib is needed for PNG timelines."""


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


def render_timeline(
    recording, output, *, max_ranges: int = 20000, width: float = 16.0, reader=None, max_labels: int = 300
) -> Path:
    """Draw ``recording`` into the PNG ``output`` (its folder is created); returns its path.

    Raises :class:`MatplotlibMissing` before reading anything when matplotlib is not
    installed. The file is written through a private temporary file and replaced
    atomically.
    """
    plt = _pyplot()
    from ._decoder import ROW_DTYPE

    kept = np.empty(0, dtype=ROW_DTYPE)
    last_ns = 0
    with reading(recording, reader) as reader:
        for rows in reader.batches():
            last_ns = max(last_ns, int(rows["start_ns"].max()), int(rows["end_ns"].max()))
            kept = np.concatenate([kept, rows])
            if len(kept) > 2 * max_ranges:  # streaming top-k by duration: memory stays bounded
                dur = np.where(kept["flags"] & FLAG_UNCLOSED, np.iinfo(np.int64).max, kept["end_ns"] - kept["start_ns"])
                kept = kept[np.argpartition(-dur, max_ranges)[:max_ranges]]
        strings = reader.strings()
        thread_names = reader.thread_names
        processes = dict(reader.processes)
        origin = reader.origin_ns
    rows = kept
    if len(rows) > max_ranges:
        dur = np.where(rows["flags"] & FLAG_UNCLOSED, np.iinfo(np.int64).max, rows["end_ns"] - rows["start_ns"])
        rows = rows[np.argpartition(-dur, max_ranges)[:max_ranges]]
    ends = np.where(rows["flags"] & FLAG_UNCLOSED, last_ns, rows["end_ns"])
    lanes = sorted(set(zip(rows["pid"].tolist(), rows["tid"].tolist())))
    max_depth: dict = {}
    for lane, depth, kind in zip(
        zip(rows["pid"].tolist(), rows["tid"].tolist()), rows["depth"].tolist(), rows["kind"].tolist()
    ):
        if kind == KIND_PUSH_POP:
            max_depth[lane] = max(max_depth.get(lane, 0), depth + 1)
    # Lane layout: push/pop levels, then one band for start/end ranges and marks.
    lane_y, y = {}, 0.0
    for lane in lanes:
        height = max_depth.get(lane, 0) + 1
        lane_y[lane] = (y, height)
        y += height + 0.5
    fig, ax = plt.subplots(figsize=(width, min(2 + 0.3 * max(y, 1), 60)))
    starts = (rows["start_ns"] - origin) / 1e6
    stops = (ends - origin) / 1e6
    ys, colors = [], []
    for pid, tid, msg, depth, kind, flags, color in zip(
        rows["pid"].tolist(),
        rows["tid"].tolist(),
        rows["message"].tolist(),
        rows["depth"].tolist(),
        rows["kind"].tolist(),
        rows["flags"].tolist(),
        rows["color"].tolist(),
    ):
        base, height = lane_y[(pid, tid)]
        ys.append(base + (depth if kind == KIND_PUSH_POP else height - 1))
        if flags & FLAG_HAS_COLOR:
            colors.append((((color >> 16) & 255) / 255, ((color >> 8) & 255) / 255, (color & 255) / 255))
        else:
            h = zlib.crc32(strings[msg].encode())
            colors.append(
                (0.3 + 0.6 * (h & 255) / 255, 0.3 + 0.6 * ((h >> 8) & 255) / 255, 0.3 + 0.6 * ((h >> 16) & 255) / 255)
            )
    ys = np.asarray(ys, dtype=float)
    kinds = rows["kind"]
    bars = kinds != KIND_MARK
    if bars.any():
        from matplotlib.collections import PolyCollection

        x0, x1, y0 = starts[bars], np.maximum(stops, starts + 1e-6)[bars], ys[bars]
        verts = np.stack(
            [
                np.column_stack([x0, y0]),
                np.column_stack([x1, y0]),
                np.column_stack([x1, y0 + 0.9]),
                np.column_stack([x0, y0 + 0.9]),
            ],
            axis=1,
        )
        ax.add_collection(
            PolyCollection(verts, facecolors=[c for c, b in zip(colors, bars) if b], edgecolors="black", linewidths=0.2)
        )
        ax.autoscale_view()
    marks = kinds == KIND_MARK
    if marks.any():
        ax.vlines(
            starts[marks], ys[marks], ys[marks] + 0.9, colors=[c for c, m in zip(colors, marks) if m], linewidth=0.8
        )
    order = np.argsort(-(stops - starts))[:max_labels]
    for i in order.tolist():
        text = strings[int(rows["message"][i])]
        if text and kinds[i] != KIND_MARK:
            ax.text(starts[i], ys[i] + 0.45, text, fontsize=6, va="center", clip_on=True)
    ax.set_yticks([lane_y[lane][0] + lane_y[lane][1] / 2 for lane in lanes])
    ax.set_yticklabels(
        [f"{processes[p].name if p in processes else ''} {p} / {thread_names.get((p, t), t)}" for p, t in lanes],
        fontsize=7,
    )
    ax.invert_yaxis()
    ax.set_xlabel("time since recording start (ms)")
    ax.set_title(f"NVTX timeline ({len(rows):,} longest ranges shown)" if len(kept) >= max_ranges else "NVTX timeline")
    fig.tight_layout()
    output = Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    try:
        with atomic_output(output) as tmp:
            fig.savefig(tmp, dpi=110, format="png")
    finally:
        plt.close(fig)
    return output
