"""Plain-text tables for the chapters' printed outputs.

A printed line wider than the page's column is cut off in the book, and a row of numbers
glued into one long f-string is hard to read in the code. :func:`text_table` takes a
header and rows and aligns the columns: text to the left, numbers to the right, each
number in its column's format.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from numbers import Number


def _cell(value, spec: str) -> str:
    if isinstance(value, Number) and not isinstance(value, bool):
        return format(value, spec)
    return str(value)


def text_table(
    header: Sequence[str],
    rows: Iterable[Sequence],
    formats: Sequence[str] | None = None,
    *,
    gap: int = 2,
) -> str:
    """``rows`` under ``header`` as aligned plain text, one line per row.

    ``formats`` holds one format specification per column (``".2e"``, ``".3f"``,
    ``"d"``; ``""`` for ``str``), applied to numbers only; ``gap`` spaces separate the
    columns. A column is right-aligned when every entry in it is a number.
    """
    header = [str(h) for h in header]
    formats = list(formats) if formats is not None else [""] * len(header)
    if len(formats) != len(header):
        raise ValueError(
            f"formats has {len(formats)} entries for {len(header)} columns: give one "
            "per column"
        )
    rows = [list(r) for r in rows]
    for i, row in enumerate(rows):
        if len(row) != len(header):
            raise ValueError(
                f"row {i} has {len(row)} entries for {len(header)} columns: {row!r}"
            )
    cells = [[_cell(v, f) for v, f in zip(row, formats)] for row in rows]
    numeric = [
        bool(rows)
        and all(isinstance(r[j], Number) and not isinstance(r[j], bool) for r in rows)
        for j in range(len(header))
    ]
    widths = [
        max([len(header[j])] + [len(c[j]) for c in cells]) for j in range(len(header))
    ]

    def line(entries: Sequence[str]) -> str:
        parts = [
            e.rjust(w) if right else e.ljust(w)
            for e, w, right in zip(entries, widths, numeric)
        ]
        return (" " * gap).join(parts).rstrip()

    return "\n".join([line(header)] + [line(c) for c in cells])
