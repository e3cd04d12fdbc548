"""The reproduction report: every public claim of the paper beside the book's own
evidence, and the one way the book shows a claim.

Each experiment owns the claims its chapter tests (``claims(result)``, see
:mod:`rcutil.experiments`); this module only gathers the stored results, joins the
lists and renders them, so the report, the introduction and the chapters cannot
disagree. :func:`render` is the one rendering of a list of claims, used by all three:
one card per claim (the verdict first, as a mark and a word; the claim; one line of
evidence; the setting in a few words; the paper's statement, the rule and the reason
folded), or one line per claim (``brief=True``, the introduction).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

from . import experiments
from .claims import (
    DEFINITIONS,
    INCONCLUSIVE,
    LEVEL,
    MARKS,
    NOT_REPRODUCED,
    REPRODUCED,
    SETTINGS,
    VERDICTS,
    Claim,
)

__all__ = [
    "REPRODUCED",
    "INCONCLUSIVE",
    "NOT_REPRODUCED",
    "VERDICTS",
    "SETTINGS",
    "DEFINITIONS",
    "Claim",
    "gather",
    "claims",
    "claims_of",
    "counts",
    "counts_table",
    "definitions",
    "family",
    "render",
    "show",
]

#: The class of a card per verdict (CSS in book/_static/rcutil.css).
CLASS = {
    REPRODUCED: "rc-reproduced",
    INCONCLUSIVE: "rc-inconclusive",
    NOT_REPRODUCED: "rc-not-reproduced",
}
#: The heading of a card's folded part.
FOLDED = "The paper, the rule and the reason"
#: A space at which a line never breaks.
NBSP = "\u00a0"


def gather(profile: str | None = None, *, progress: bool = False) -> dict[str, object]:
    """The result of every experiment for the profile (stored results are reused)."""
    return {
        e.name: experiments.cached(e.name, profile, progress=progress)
        for e in experiments.registry()
    }


def _claims_function(name: str):
    """The ``claims`` of experiment ``name`` (in its package's ``verdicts.py``)."""
    return experiments.verdicts(name).claims


def claims_of(name: str, result) -> list[Claim]:
    """The claims of experiment ``name`` on ``result``, each naming the experiment's
    chapter."""
    chapter = experiments.entry(name).chapter
    return [
        replace(c, chapter=c.chapter or chapter) for c in _claims_function(name)(result)
    ]


def claims(results: dict[str, object]) -> list[Claim]:
    """Every experiment's claims, in the order of the book."""
    return [
        c for e in experiments.registry() for c in claims_of(e.name, results[e.name])
    ]


def counts(rows: list[Claim]) -> dict[tuple[str, str], int]:
    """How many claims have each verdict in each kind of setting:
    ``{(verdict, setting kind): n}`` over :data:`VERDICTS` and :data:`SETTINGS`."""
    found = Counter((r.verdict, r.setting_kind) for r in rows)
    return {(v, k): found[v, k] for v in VERDICTS for k in SETTINGS}


def verdict_text(verdict: str) -> str:
    """The verdict as its mark and its word, e.g. ``✓ reproduced``."""
    return f"{MARKS[verdict]} {verdict}"


def counts_table(rows: list[Claim]) -> str:
    """The counts crossing verdict with setting, a MyST table with totals."""
    table = counts(rows)
    kinds = list(dict.fromkeys(k for _, k in table))
    lines = [
        "| verdict | " + " | ".join(kinds) + " | all |",
        "|---|" + "---:|" * (len(kinds) + 1),
    ]
    for v in VERDICTS:
        cells = [table[v, k] for k in kinds]
        # the mark stays with its word on a narrow screen
        lines.append(
            f"| **{verdict_text(v).replace(' ', NBSP, 1)}** | "
            + " | ".join(str(c) for c in cells)
            + f" | {sum(cells)} |"
        )
    totals = [sum(table[v, k] for v in VERDICTS) for k in kinds]
    lines.append(
        "| all | " + " | ".join(str(t) for t in totals) + f" | {sum(totals)} |"
    )
    return "\n".join(lines)


def definitions() -> str:
    """Every term of :data:`DEFINITIONS` as a MyST definition list, the verdicts with
    their marks."""
    out = []
    for term, text in DEFINITIONS.items():
        name = verdict_text(term) if term in MARKS else term
        out += [f"**{name}**", f": {text}", ""]
    return "\n".join(out).rstrip() + "\n"


def family(rows: list[Claim], level: float = LEVEL) -> str:
    """What the number of test-decided claims means for a single surprising row."""
    m = sum(r.decision is not None for r in rows)
    exact = len(rows) - m
    if m == 0:
        return (
            f"All {len(rows)} claims are decided by exact checks, which chance does "
            "not decide."
        )
    at_least = 1 - (1 - level) ** m
    are = "is" if m == 1 else "are"
    return (
        f"Of the {len(rows)} claims, {m} {are} decided by tests over seeds, each at "
        f"level {level:g} each way, and {exact} by exact checks. If none of the {m} "
        f"tested effects existed, the expected number of those rows that would still "
        f"read “reproduced” by chance is at most {level * m:.2g}, and so is that of "
        f"rows that would read “not reproduced”; at least one such row would appear "
        f"with probability up to {at_least:.2f}. A single surprising row among them is "
        "weak evidence on its own; its interval and its p-value say how surprising it "
        "is."
    )


def chapter_link(label: str) -> str:
    """A MyST cross-reference to a chapter, with its title as link text."""
    title = next((e.title for e in experiments.registry() if e.chapter == label), None)
    return f"{{ref}}`{title} <{label}>`" if title else f"{{ref}}`{label}`"


def _flat(text: str) -> str:
    return " ".join(text.split())


def _card(r: Claim, links: bool) -> str:
    where = f" · {chapter_link(r.chapter)}" if links and r.chapter else ""
    evidence = _flat(r.evidence)
    if r.takes:
        evidence += f". *It would take* {_flat(r.takes)}."
    folded = [f"**The paper.** {_flat(r.paper)}", f"**The book.** {_flat(r.book)}"]
    if r.rule:
        folded.append(f"**The rule.** {_flat(r.rule)}")
    if r.decision is not None:
        folded.append(f"**The test.** {r.decision.rule()}; {r.decision.reason()}.")
    folded.append(f"**The reason.** {_flat(r.reason)}")
    return "\n".join(
        [
            f"::::{{container}} rc-claim {CLASS[r.verdict]}",
            ":::{container} rc-verdict",
            f"**{verdict_text(r.verdict)}**",
            ":::",
            ":::{container} rc-what",
            f"**{_flat(r.claim)}**{where}",
            "",
            evidence,
            ":::",
            ":::{container} rc-setting",
            f"*Setting:* {_flat(r.setting_text)}",
            ":::",
            f":::{{dropdown}} {FOLDED}",
            "\n\n".join(folded),
            ":::",
            "::::",
        ]
    )


def _line(r: Claim, links: bool) -> str:
    where = f" · {chapter_link(r.chapter)}" if links and r.chapter else ""
    return "\n".join(
        [
            f":::{{container}} rc-line {CLASS[r.verdict]}",
            f"**{verdict_text(r.verdict)}** · {_flat(r.claim)} · "
            f"*{r.setting_kind}*{where}",
            ":::",
        ]
    )


def render(rows: list[Claim], *, brief: bool = False, links: bool = True) -> str:
    """The claims as MyST: one card per claim (verdict, claim, one line of evidence,
    setting, and the paper's statement, the rule and the reason folded), or one line
    per claim (``brief``: verdict, claim, kind of setting, chapter). ``links``: link
    each claim to its chapter."""
    if not rows:
        raise ValueError("no claims to render: pass the list of a chapter's claims")
    body = [_line(r, links) if brief else _card(r, links) for r in rows]
    kind = "rc-brief" if brief else "rc-cards"
    return "\n".join([f":::::{{container}} rc-claims {kind}", *body, ":::::"])


def show(rows: list[Claim], *, brief: bool = False, links: bool = True):
    """:func:`render` for a notebook cell (an IPython ``Markdown`` object)."""
    from IPython.display import Markdown

    return Markdown(render(rows, brief=brief, links=links))
