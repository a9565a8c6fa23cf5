"""Text tables of the reports: right-aligned numbers, left-aligned names, nsys style."""

from __future__ import annotations

from ..._printable import printable


def format_table(header: tuple, rows: list[tuple], left: tuple = ()) -> str:
    """``header`` and ``rows`` (tuples of strings) as aligned text; columns named in
    ``left`` are left-aligned; the last column is never padded. Control characters in a
    cell (a recorded name's) are escaped (:func:`~nvtx_plugins_tf._printable.printable`)."""
    rows = [tuple(printable(cell) for cell in row) for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(header)]
    left_cols = {header.index(name) for name in left if name in header}

    def fmt(cells) -> str:
        out = []
        for i, cell in enumerate(cells):
            if i == len(cells) - 1:
                out.append(cell)
            else:
                out.append(cell.ljust(widths[i]) if i in left_cols else cell.rjust(widths[i]))
        return "  ".join(out).rstrip()

    return "\n".join([fmt(header), fmt(["-" * w for w in widths])] + [fmt(r) for r in rows])
