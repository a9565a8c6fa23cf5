"""What ``compare`` writes: the table (``compare.parquet`` and ``.csv``), ``compare.md`` (a
table to paste in a pull request, at most :data:`MD_LIMIT` characters), ``compare.png`` (a
forest plot: each row's ratio and interval; with Pillow), all into OUTDIR at once
(:func:`..analysis.outdir.staged`), and the summary printed on the terminal."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ..._printable import printable
from ..analysis.outdir import OutdirError, staged
from .verdict import FASTER, SLOWER, UNCOVERED, Comparison

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["COLUMNS", "MD_LIMIT", "OUTPUTS", "md_table", "summary_lines", "table", "write_outputs"]

#: the table's columns, in order
COLUMNS = (
    "Range", "Baseline", "Candidate", "Ratio", "CILow", "CIHigh", "PValue", "QValue", "Verdict",
    "ShareOfStepChange", "Level",
)  # fmt: skip
#: every file compare may write into OUTDIR
OUTPUTS = ("compare.parquet", "compare.csv", "compare.md", "compare.png")
MD_LIMIT = 65_536
_PLOTTED = 30  # ranges in the forest plot: the largest changes


def _rows(c: Comparison) -> list[int]:
    return [0, *c.order()]


def table(c: Comparison) -> pa.Table:
    """The pyarrow table: the step's row, the ranges' (largest change first), and
    :data:`~.verdict.UNCOVERED`'s (its share of the step's change only). Times in ns."""
    import pyarrow as pa

    e, rows = c.effects, _rows(c)

    def col(values, extra=None):
        return [None if not np.isfinite(values[i]) else float(values[i]) for i in rows] + [extra]

    return pa.table(
        {
            "Range": [c.names[i] for i in rows] + [UNCOVERED],
            "Baseline": pa.array(col(e.baseline), pa.float64()),
            "Candidate": pa.array(col(e.candidate), pa.float64()),
            "Ratio": pa.array(col(e.ratio), pa.float64()),
            "CILow": pa.array(col(e.low), pa.float64()),
            "CIHigh": pa.array(col(e.high), pa.float64()),
            "PValue": pa.array(col(e.p), pa.float64()),
            "QValue": pa.array(col(c.q), pa.float64()),
            "Verdict": [c.verdict[i] for i in rows] + [None],
            "ShareOfStepChange": pa.array(col(c.share, _finite(c.uncovered_share)), pa.float64()),
            "Level": [c.level] * (len(rows) + 1),
        }
    )


def _finite(x: float) -> float | None:
    return float(x) if np.isfinite(x) else None


def _ms(ns: float) -> str:
    return "-" if not np.isfinite(ns) else f"{ns / 1e6:.3f} ms"


def _effect(c: Comparison, i: int) -> str:
    e = c.effects
    if not np.isfinite(e.ratio[i]) or not np.isfinite(e.low[i]):
        return "x-"
    return f"x{e.ratio[i]:.3f} [{e.low[i]:.3f}, {e.high[i]:.3f}]"


def _q(q: float) -> str:
    return "-" if not np.isfinite(q) else f"{q:.2g}" if q > 0 else "<1e-300"


def _share(x: float) -> str:
    return f"{x:+.0%}" if np.isfinite(x) else "-"


def _where(c: Comparison) -> str:
    cuts = "; ".join(f"{side} {'/'.join(map(str, n))}" for side, n in c.warmup.items())
    return f"{c.level}; warm-up steps cut: {cuts}; {1 - c.alpha:.0%} intervals, threshold {c.threshold:.1%}"


def summary_lines(c: Comparison, limit: int = 20) -> list[str]:
    """The terminal's summary: the step, then the ranges found slower or faster (largest change
    first, at most ``limit``), then the counts of each verdict. Names escaped (:func:`printable`)."""
    changed = [i for i in c.order() if c.verdict[i] in (SLOWER, FASTER)]
    lines = [
        f"step: {_ms(c.effects.baseline[0])} -> {_ms(c.effects.candidate[0])} {_effect(c, 0)} {c.verdict[0]}",
        f"  ({_where(c)})",
    ]
    for i in changed[:limit]:
        lines.append(
            f"{c.verdict[i]:<8} {printable(c.names[i])}: {_ms(c.effects.baseline[i])} -> "
            f"{_ms(c.effects.candidate[i])} {_effect(c, i)} q={_q(c.q[i])} share {_share(c.share[i])}"
        )
    if len(changed) > limit:
        lines.append(f"... and {len(changed) - limit} more ranges changed (compare.csv)")
    e = c.effects
    for side, here, there in (("candidate", e.candidate, e.baseline), ("baseline", e.baseline, e.candidate)):
        only = [i for i in c.order() if here[i] > 0 and not there[i] > 0]
        for i in only[:limit]:
            lines.append(f"only in the {side}: {printable(c.names[i])}: {_ms(here[i])} a step (inconclusive)")
    counts = {v: c.verdict[1:].count(v) for v in dict.fromkeys(c.verdict[1:])}
    lines.append(f"ranges: {', '.join(f'{n} {v}' for v, n in counts.items()) or 'none'}")
    return lines


def _md_cell(text: str) -> str:
    return printable(text).replace("\\", "\\\\").replace("|", "\\|").replace("`", "\\`")


def md_table(c: Comparison, limit: int = MD_LIMIT) -> str:
    """compare.md: the verdict, then a row per range that is not equivalent (largest change
    first), then the equivalent ones, as many as fit in ``limit`` characters; the rest counted."""
    head = [
        f"**nvtx-tf compare**: step {c.verdict[0]}, {_effect(c, 0)}; {_where(c)}",
        "",
        "| Range | Baseline | Candidate | Ratio [CI] | q | Verdict | Share of step change |",
        "| --- | ---: | ---: | ---: | ---: | --- | ---: |",
    ]
    order = c.order()
    order = [i for i in order if c.verdict[i] != "equivalent"] + [i for i in order if c.verdict[i] == "equivalent"]
    rows = []
    for i in [0, *order]:
        q = _q(c.q[i])
        rows.append(
            f"| {_md_cell(c.names[i])} | {_ms(c.effects.baseline[i])} | {_ms(c.effects.candidate[i])} | "
            f"{_effect(c, i)} | {q} | {c.verdict[i]} | {_share(c.share[i])} |"
        )
    rows.append(f"| {UNCOVERED} | | | | | | {_share(c.uncovered_share)} |")
    text = "\n".join(head)
    for n, row in enumerate(rows):
        tail = f"\n\n{len(rows) - n} more rows in compare.csv\n"
        if len(text) + len(row) + 1 + len(tail) + 20 > limit:
            return text + tail
        text += "\n" + row
    return text + "\n"


def _forest(c: Comparison, output: Path) -> bool:
    """compare.png (:mod:`.forest`): the step and the :data:`_PLOTTED` largest changes, ratio and
    interval, the threshold's band shaded. False without Pillow."""
    from .forest import render_forest

    rows = [0, *c.order()[:_PLOTTED]]
    e = c.effects
    png = render_forest(
        [c.names[i] for i in rows], [e.ratio[i] for i in rows], [e.low[i] for i in rows], [e.high[i] for i in rows],
        [c.verdict[i] for i in rows], c.threshold,
        f"candidate / baseline, {1 - c.alpha:.0%} intervals ({c.level}); band: +-{c.threshold:.1%}",
    )  # fmt: skip
    if png is None:
        return False
    with open(output, "wb") as file:
        file.write(png)
    return True


def write_outputs(c: Comparison, outdir: str | os.PathLike) -> list[Path]:
    """compare.{parquet,csv,md,png} into ``outdir`` at once (an error, a full disk or a signal
    leaves it as it was); returns the files written. Raises :class:`OutdirError`."""
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    outdir = Path(outdir)
    t = table(c)
    with staged(outdir, OUTPUTS) as (folder, commit):
        names: list[str] = []
        try:
            for name, write in (("compare.parquet", pq.write_table), ("compare.csv", pacsv.write_csv)):
                names.append(name)
                with open(folder / name, "wb") as file:
                    write(t, file)
            names.append("compare.md")
            (folder / "compare.md").write_text(md_table(c), encoding="utf-8")
            names.append("compare.png")
            if not _forest(c, folder / "compare.png"):
                names.pop()
        except OSError as exc:
            raise OutdirError(f"cannot write {outdir / names[-1]}: {exc.strerror or exc}") from exc
        commit(names)
    return [outdir / name for name in names]
