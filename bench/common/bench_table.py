"""The benchmarks' one table printer: columns two spaces apart, numbers right-aligned.

``print_table`` prints rows already measured (each column as wide as its widest cell); ``TablePrinter``
prints rows as they are measured, in columns of fixed widths, so a long run shows its progress.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence


def format_row(cells: Sequence[Any], widths: Sequence[int], align: str = "", indent: str = "") -> str:
    """One line of a table: cell i padded to widths[i], left-aligned where align[i] is "<" (right-aligned
    where it is ">" or missing)."""
    parts = []
    for i, (cell, width) in enumerate(zip(cells, widths)):
        text = str(cell)
        parts.append(text.ljust(width) if align[i : i + 1] == "<" else text.rjust(width))
    return (indent + "  ".join(parts)).rstrip()


def print_table(rows: Sequence[Mapping[str, Any]], align: str = "", indent: str = "") -> None:
    """Prints rows (mappings with the same keys) under a header of their keys."""
    if not rows:
        return
    keys = list(rows[0])
    widths = [max(len(str(k)), *(len(str(r[k])) for r in rows)) for k in keys]
    print(format_row(keys, widths, align, indent))
    for r in rows:
        print(format_row([r[k] for k in keys], widths, align, indent))


class TablePrinter:
    """Prints a header now and each row when it is given, in fixed-width columns."""

    def __init__(self, columns: Sequence[tuple[str, int]], align: str = "", indent: str = "") -> None:
        self.names = [name for name, _ in columns]
        self.widths = [max(width, len(name)) for name, width in columns]
        self.align = align
        self.indent = indent
        print(format_row(self.names, self.widths, align, indent), flush=True)

    def row(self, *cells: Any) -> None:
        print(format_row(cells, self.widths, self.align, self.indent), flush=True)
