"""The reproduction report: every public claim of the paper beside the book's own number.

Each experiment module owns the claims its chapter tests (``claims(result)``, see
:mod:`rcutil.experiments`); this module only gathers the stored results and joins the lists,
so the report and the chapters cannot disagree.
"""
from __future__ import annotations

from . import experiments
from .claims import DEVIATION, NOT_REPRODUCED, REPRODUCED, STATUSES, Claim

__all__ = ["REPRODUCED", "DEVIATION", "NOT_REPRODUCED", "STATUSES", "Claim", "gather", "claims",
           "markdown_table"]


def gather(profile: str | None = None, *, progress: bool = False) -> dict[str, dict]:
    """The result of every experiment for the profile (stored results are reused)."""
    return {e.name: experiments.cached(e.name, profile, progress=progress)
            for e in experiments.registry()}


def claims(results: dict[str, dict]) -> list[Claim]:
    """Every experiment's claims, in the order of the book."""
    return [c for e in experiments.registry()
            for c in experiments.load(e.name).claims(results[e.name])]


def chapter_link(label: str) -> str:
    """A MyST cross-reference to a chapter with its plain-text title as link text (the title
    itself may hold math, which a link cannot typeset)."""
    title = next((e.title for e in experiments.registry() if e.chapter == label), None)
    return f"{{ref}}`{title} <{label}>`" if title else f"{{ref}}`{label}`"


def markdown_table(rows: list[Claim], *, short: bool = False) -> str:
    """A MyST table of the rows; ``short`` keeps claim, status and chapter only."""
    def cell(text: str) -> str:
        return text.replace("|", "\\|").replace("\n", " ")

    if short:
        lines = ["| claim of the paper | status | evidence |", "|---|---|---|"]
        lines += [f"| {cell(r.claim)} | {r.status} | {chapter_link(r.chapter)} |" for r in rows]
    else:
        lines = ["| claim | the paper | the book | status | why |", "|---|---|---|---|---|"]
        lines += [f"| {cell(r.claim)} ({chapter_link(r.chapter)}) | {cell(r.paper)} | {cell(r.book)} | "
                  f"**{r.status}** | {cell(r.reason)} |" for r in rows]
    return "\n".join(lines)
