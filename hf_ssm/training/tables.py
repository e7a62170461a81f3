"""The Markdown results tables of the training drivers (state tracking, time series, the adapter experiment):
one helper for the table itself and one for the accuracy-by-bucket cells. Each driver keeps its own columns."""

from __future__ import annotations


def markdown_table(header: list[str], rows: list[list]) -> str:
    """A Markdown table: the `header` cells, the separator, then one line per row (cells str()-ed; an empty cell
    is written "| |")."""
    lines = [_line(header), "|" + "---|" * len(header)] + [_line(row) for row in rows]
    return "\n".join(lines)


def _line(cells: list) -> str:
    return "|" + "".join(f" {cell} |" if str(cell) else " |" for cell in cells)


def accuracy_cells(buckets: list[dict]) -> list[str]:
    """The accuracy (%) of each bucket record, one decimal."""
    return [f"{100 * b['accuracy']:.1f}" for b in buckets]
