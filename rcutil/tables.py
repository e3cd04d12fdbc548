"""The one table of the book: a header and rows, shown as a MyST table in a chapter and
as aligned plain text when printed.

:func:`table` formats each number by its column's format specification; a chapter shows
the result as the last expression of a cell (a MyST table: math and roles in its cells
are typeset) or prints it (aligned text that fits the page's column: text to the left,
numbers to the right). The acceptance table (:func:`rcutil.checks.table`) is a table
of this kind.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from numbers import Number


def _number(value) -> bool:
    return isinstance(value, Number) and not isinstance(value, bool)


def _cell(value, spec: str) -> str:
    return format(value, spec) if _number(value) else str(value)


@dataclass(frozen=True)
class Table:
    """A header, rows of values, and one format specification per column."""

    header: tuple[str, ...]
    rows: tuple[tuple, ...]
    formats: tuple[str, ...]

    def cells(self) -> list[list[str]]:
        """Every row as text, each number in its column's format."""
        return [[_cell(v, f) for v, f in zip(row, self.formats)] for row in self.rows]

    def markdown(self) -> str:
        """The table in MyST Markdown (a ``|`` inside a cell is escaped)."""

        def line(entries) -> str:
            return "| " + " | ".join(_escape(e) for e in entries) + " |"

        rule = "|" + "---|" * len(self.header)
        return "\n".join([line(self.header), rule] + [line(c) for c in self.cells()])

    def _repr_markdown_(self) -> str:
        return self.markdown()

    def text(self, gap: int = 2) -> str:
        """The table as aligned plain text, one line per row; a column is right-aligned
        when every entry in it is a number; ``gap`` spaces separate the columns."""
        cells = self.cells()
        width = len(self.header)
        numeric = [
            bool(self.rows) and all(_number(r[j]) for r in self.rows)
            for j in range(width)
        ]
        widths = [
            max([len(self.header[j])] + [len(c[j]) for c in cells])
            for j in range(width)
        ]

        def line(entries: Sequence[str]) -> str:
            parts = [
                e.rjust(w) if right else e.ljust(w)
                for e, w, right in zip(entries, widths, numeric)
            ]
            return (" " * gap).join(parts).rstrip()

        return "\n".join([line(self.header)] + [line(c) for c in cells])

    def __str__(self) -> str:
        return self.text()


def _escape(text: str) -> str:
    out, prev = [], ""
    for ch in str(text).replace("\n", " "):
        out.append("\\|" if ch == "|" and prev != "\\" else ch)
        prev = ch
    return "".join(out)


def table(
    header: Sequence[str],
    rows: Iterable[Sequence],
    formats: Sequence[str] | None = None,
) -> Table:
    """``rows`` under ``header``: a :class:`Table`, shown as MyST in a chapter and as
    aligned text by ``print``.

    ``formats`` holds one format specification per column (``".2e"``, ``".3f"``,
    ``","``; ``""`` for ``str``), applied to numbers only.
    """
    header = tuple(str(h) for h in header)
    formats = tuple(formats) if formats is not None else ("",) * len(header)
    if len(formats) != len(header):
        raise ValueError(
            f"formats has {len(formats)} entries for {len(header)} columns: give one "
            "per column"
        )
    rows = tuple(tuple(r) for r in rows)
    for i, row in enumerate(rows):
        if len(row) != len(header):
            raise ValueError(
                f"row {i} has {len(row)} entries for {len(header)} columns: {row!r}"
            )
    return Table(header, rows, formats)
