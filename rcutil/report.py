"""The reproduction report: every public claim of the paper beside the book's own
number.

Each experiment module owns the claims its chapter tests (``claims(result)``, see
:mod:`rcutil.experiments`); this module only gathers the stored results and joins the
lists, so the report and the chapters cannot disagree.
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
    "markdown_table",
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
        for c in experiments.load(name).claims(result)
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


def markdown_table(rows: list[Claim], *, short: bool = False) -> str:
    """A MyST table of the rows; ``short`` keeps claim, status and chapter only."""

    def cell(text: str) -> str:
        return text.replace("|", "\\|").replace("\n", " ")

    if short:
        lines = ["| claim of the paper | status | evidence |", "|---|---|---|"]
        lines += [
            f"| {cell(r.claim)} | {r.status} | {chapter_link(r.chapter)} |"
            for r in rows
        ]
    else:
        lines = [
            "| claim | the paper | the book | status | rule and reason |",
            "|---|---|---|---|---|",
        ]
        lines += [
            f"| {cell(r.claim)} ({chapter_link(r.chapter)}) | {cell(r.paper)} | "
            f"{cell(r.book)} | **{r.status}** | "
            f"{cell(r.rule + ': ' if r.rule else '')}{cell(r.reason)} |"
            for r in rows
        ]
    return "\n".join(lines)
