"""A chapter's acceptance checks: what must hold of a result for the chapter to stand,
as a table the reader sees (check, value, threshold, ok) and one assertion on it.

An experiment lists its checks in ``checks(result) -> list[Check]`` of its ``verdicts``
module, one row per line with its threshold; the chapter shows :func:`table` and calls
:func:`require`, which fails the chapter (and so the build and the tests) on the first
check that does not hold.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Sequence
from dataclasses import dataclass

from .tables import Table
from .tables import table as _table

_OPS = {
    "<=": operator.le,
    "<": operator.lt,
    ">=": operator.ge,
    ">": operator.gt,
    "==": operator.eq,
}


@dataclass(frozen=True)
class Check:
    """``value op threshold`` (``op`` one of ``<= < >= > ==``), or ``value`` within
    ``rtol`` (relative) and ``atol`` of ``threshold`` for ``op="close"``. ``what`` says
    what is checked, in words (math in ``$...$`` is typeset)."""

    what: str
    value: float | int | bool | str
    op: str
    threshold: float | int | bool | str
    rtol: float = 0.0
    atol: float = 0.0

    def __post_init__(self):
        if self.op not in (*_OPS, "close"):
            raise ValueError(f"op must be one of {(*_OPS, 'close')}, got {self.op!r}")

    @property
    def ok(self) -> bool:
        if self.op == "close":
            v, t = float(self.value), float(self.threshold)
            return math.isfinite(v) and abs(v - t) <= self.atol + self.rtol * abs(t)
        try:
            return bool(_OPS[self.op](self.value, self.threshold))
        except TypeError:
            return False

    def threshold_text(self) -> str:
        if self.op == "close":
            tol = " ± ".join(
                [_number(self.threshold)]
                + ([f"{self.rtol:.0e} rel."] if self.rtol else [])
                + ([f"{self.atol:.0e}"] if self.atol else [])
            )
            return f"≈ {tol}"
        if isinstance(self.threshold, bool) and self.op == "==":
            return _number(self.threshold)
        return (
            f"{self.op.replace('<=', '≤').replace('>=', '≥')} {_number(self.threshold)}"
        )


def _number(x) -> str:
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, str):
        return x
    if isinstance(x, int):
        return f"{x:,}"
    return f"{x:.4g}"


def table(checks: Sequence[Check]) -> Table:
    """The checks as the book's table: check, value, threshold, ok."""
    return _table(
        ["check", "value", "threshold", "ok"],
        [
            (c.what, _number(c.value), c.threshold_text(), "yes" if c.ok else "**no**")
            for c in checks
        ],
    )


def require(checks: Sequence[Check]) -> None:
    """Raise ``AssertionError`` listing every check that does not hold."""
    failed = [c for c in checks if not c.ok]
    if failed:
        raise AssertionError(
            "; ".join(
                f"{c.what}: {_number(c.value)} is not {c.threshold_text()}"
                for c in failed
            )
        )
