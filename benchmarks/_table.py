"""One way to print a benchmark table: header, rule, rows, columns padded to fit."""

from __future__ import annotations


def print_table(header: tuple, rows: list[tuple]) -> None:
    widths = [max(len(str(row[i])) for row in [header, *rows]) for i in range(len(header))]
    for row in [header, tuple("-" * w for w in widths), *rows]:
        print("  ".join(str(cell).ljust(w) for cell, w in zip(row, widths)).rstrip())
