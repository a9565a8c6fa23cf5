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

#: the table's columns, in order: the exclusive time's (the issue's names), then the inclusive's
COLUMNS = (
    "Range", "Baseline", "Candidate", "Ratio", "CILow", "CIHigh", "PValue", "QValue", "Verdict",
    "InclBaseline", "InclCandidate", "InclRatio", "InclCILow", "InclCIHigh", "InclPValue", "InclQValue",
    "InclVerdict", "Nested", "ShareOfStepChange", "Level",
)  # fmt: skip
#: every file compare may write into OUTDIR
OUTPUTS = ("compare.parquet", "compare.csv", "compare.md", "compare.png")
MD_LIMIT = 65_536
_PLOTTED = 30  # ranges in the forest plot: the largest changes


def _rows(c: Comparison) -> list[int]:
    return [0, *c.order()]


def table(c: Comparison) -> pa.Table:
    """The pyarrow table: the step's row, the ranges' (largest change first), and
    :data:`~.verdict.UNCOVERED`'s (its share of the step's change only). Times in ns; the
    ``Incl`` columns the inclusive time's (``Nested``: a range is nested in this one, else they
    repeat the exclusive time's)."""
    import pyarrow as pa

    e, n, rows = c.effects, c.inclusive or c.effects, _rows(c)
    nested = c.nested if c.nested is not None else np.zeros(len(c.names), dtype=bool)

    def col(values, extra=None):
        return pa.array(
            [None if not np.isfinite(values[i]) else float(values[i]) for i in rows] + [extra], pa.float64()
        )

    return pa.table(
        {
            "Range": [c.names[i] for i in rows] + [UNCOVERED],
            "Baseline": col(e.baseline),
            "Candidate": col(e.candidate),
            "Ratio": col(e.ratio),
            "CILow": col(e.low),
            "CIHigh": col(e.high),
            "PValue": col(e.p),
            "QValue": col(c.q),
            "Verdict": [c.verdict[i] for i in rows] + [None],
            "InclBaseline": col(n.baseline),
            "InclCandidate": col(n.candidate),
            "InclRatio": col(n.ratio),
            "InclCILow": col(n.low),
            "InclCIHigh": col(n.high),
            "InclPValue": col(n.p),
            "InclQValue": col(c.q if c.q_incl is None else c.q_incl),
            "InclVerdict": [c.verdicts(i)[1] for i in rows] + [None],
            "Nested": [bool(nested[i]) for i in rows] + [None],
            "ShareOfStepChange": col(c.share, _finite(c.uncovered_share)),
            "Level": [c.level] * (len(rows) + 1),
        }
    )


def _finite(x: float) -> float | None:
    return float(x) if np.isfinite(x) else None


def _ms(ns: float) -> str:
    return "-" if not np.isfinite(ns) else f"{ns / 1e6:.3f} ms"


def _effect(c: Comparison, i: int, inclusive: bool = False) -> str:
    e = c.inclusive if inclusive and c.inclusive is not None else c.effects
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


def _nested(c: Comparison, i: int) -> bool:
    return c.nested is not None and bool(c.nested[i])


def _inclusive_words(c: Comparison, i: int) -> str:
    """The summary's words on a row's inclusive time: "" where no range is nested in it."""
    if not _nested(c, i) or c.inclusive is None or c.q_incl is None:
        return ""
    n = c.inclusive
    return (
        f"; inclusive {c.verdicts(i)[1]}: {_ms(n.baseline[i])} -> {_ms(n.candidate[i])} {_effect(c, i, True)} "
        f"q={_q(c.q_incl[i])}"
    )


def summary_lines(c: Comparison, limit: int = 20) -> list[str]:
    """The terminal's summary: the step, then the ranges found slower or faster on their
    exclusive or inclusive time (largest change first, at most ``limit``; "exclusive" and
    "inclusive" said of a range with ranges nested in it), then the counts of each verdict.
    Names escaped (:func:`printable`)."""
    changed = [i for i in c.order() if {*c.verdicts(i)} & {SLOWER, FASTER}]
    lines = [
        f"step: {_ms(c.effects.baseline[0])} -> {_ms(c.effects.candidate[0])} {_effect(c, 0)} {c.verdict[0]}",
        f"  ({_where(c)})",
    ]
    for i in changed[:limit]:
        word = "exclusive " if _nested(c, i) else ""
        lines.append(
            f"{c.verdict[i]:<8} {printable(c.names[i])}: {word}{_ms(c.effects.baseline[i])} -> "
            f"{_ms(c.effects.candidate[i])} {_effect(c, i)} q={_q(c.q[i])} share {_share(c.share[i])}"
            f"{_inclusive_words(c, i)}"
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
    nested = (np.flatnonzero(c.nested[1:]) + 1).tolist() if c.nested is not None else []
    if nested:
        inclusive = [c.verdicts(i)[1] for i in nested]
        counts = {v: inclusive.count(v) for v in dict.fromkeys(inclusive)}
        said = ", ".join(f"{n} {v}" for v, n in counts.items())
        lines.append(f"inclusive time of the {len(nested)} with ranges inside: {said}")
    return lines


def _md_cell(text: str) -> str:
    return printable(text).replace("\\", "\\\\").replace("|", "\\|").replace("`", "\\`")


def md_table(c: Comparison, limit: int = MD_LIMIT) -> str:
    """compare.md: the verdict, then a row per range that is not equivalent on both measures
    (largest change first), then the equivalent ones, as many as fit in ``limit`` characters;
    the rest counted. Times are exclusive; the inclusive time's ratio and verdict follow where
    a range is nested in the row's ("=" where none is: the same as the exclusive)."""
    head = [
        f"**nvtx-tf compare**: step {c.verdict[0]}, {_effect(c, 0)}; {_where(c)}",
        "",
        "Exclusive time: a range's own, less the ranges nested in it; inclusive: with them (= where none is).",
        "",
        "| Range | Baseline | Candidate | Ratio [CI] | q | Verdict | Inclusive ratio [CI] | Inclusive verdict "
        "| Share of step change |",
        "| --- | ---: | ---: | ---: | ---: | --- | ---: | --- | ---: |",
    ]
    order = c.order()
    settled = [i for i in order if set(c.verdicts(i)) == {"equivalent"}]
    order = [i for i in order if set(c.verdicts(i)) != {"equivalent"}] + settled
    rows = []
    for i in [0, *order]:
        q = _q(c.q[i])
        inclusive = f"{_effect(c, i, True)} | {c.verdicts(i)[1]}" if _nested(c, i) else "= | ="
        rows.append(
            f"| {_md_cell(c.names[i])} | {_ms(c.effects.baseline[i])} | {_ms(c.effects.candidate[i])} | "
            f"{_effect(c, i)} | {q} | {c.verdict[i]} | {inclusive} | {_share(c.share[i])} |"
        )
    rows.append(f"| {UNCOVERED} | | | | | | | | {_share(c.uncovered_share)} |")
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
