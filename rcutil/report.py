"""The reproduction report: every public claim of the paper beside the book's own
number.

Each experiment owns the claims its chapter tests (``claims(result)`` in its
``verdicts`` module, see :mod:`rcutil.experiments`); this module only gathers the stored
results and joins the lists, so the report and the chapters cannot disagree.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

from . import experiments
from .claims import (
    DEFINITIONS,
    DEVIATION,
    INCONCLUSIVE,
    NOT_REPRODUCED,
    REPRODUCED,
    STATUSES,
    Claim,
)
from .tables import Table
from .tables import table as _table

__all__ = [
    "REPRODUCED",
    "DEVIATION",
    "INCONCLUSIVE",
    "NOT_REPRODUCED",
    "STATUSES",
    "DEFINITIONS",
    "Claim",
    "gather",
    "claims",
    "counts",
    "table",
]


def gather(profile: str | None = None, *, progress: bool = False) -> dict[str, object]:
    """The result of every experiment for the profile (stored results are reused)."""
    return {
        e.name: experiments.cached(e.name, profile, progress=progress)
        for e in experiments.registry()
    }


def claims_of(name: str, result) -> list[Claim]:
    """The claims of experiment ``name`` on ``result``, each naming the experiment's
    chapter."""
    chapter = experiments.entry(name).chapter
    return [
        replace(c, chapter=c.chapter or chapter)
        for c in experiments.verdicts(name).claims(result)
    ]


def claims(results: dict[str, object]) -> list[Claim]:
    """Every experiment's claims, in the order of the book."""
    return [
        c for e in experiments.registry() for c in claims_of(e.name, results[e.name])
    ]


def counts(rows: list[Claim]) -> dict[str, int]:
    """How many claims have each status, in the order of :data:`STATUSES`."""
    found = Counter(r.status for r in rows)
    return {s: found[s] for s in STATUSES}


def chapter_link(label: str) -> str:
    """A MyST cross-reference to a chapter, with its title as link text."""
    title = next((e.title for e in experiments.registry() if e.chapter == label), None)
    return f"{{ref}}`{title} <{label}>`" if title else f"{{ref}}`{label}`"


def table(rows: list[Claim], *, short: bool = False) -> Table:
    """The rows as the book's table; ``short`` keeps claim, status and chapter only."""
    if short:
        return _table(
            ["claim of the paper", "status", "evidence"],
            [(r.claim, r.status, chapter_link(r.chapter)) for r in rows],
        )
    return _table(
        ["claim", "the paper", "the book", "status", "rule and reason"],
        [
            (
                f"{r.claim} ({chapter_link(r.chapter)})",
                r.paper,
                r.book,
                f"**{r.status}**",
                (f"{r.rule}: " if r.rule else "") + r.reason,
            )
            for r in rows
        ],
    )
