"""A claim of the paper beside the book's evidence, and the three verdicts a claim can get.

Each experiment module (:mod:`rcutil.experiments`) owns the claims its chapter tests, as a
function ``claims(result) -> list[Claim]`` with its thresholds; the chapter and the
reproduction report (:mod:`rcutil.report`) call that same function, so they cannot disagree.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

REPRODUCED = "reproduced"
DEVIATION = "reproduced with a stated deviation"
NOT_REPRODUCED = "not reproduced"
STATUSES = (REPRODUCED, DEVIATION, NOT_REPRODUCED)


@dataclass(frozen=True)
class Claim:
    """One row of the reproduction report."""

    key: str            #: stable identifier, e.g. ``"jena-ratio"``
    claim: str          #: short name
    paper: str          #: what the paper states
    book: str           #: the book's number or check
    status: str         #: one of :data:`STATUSES`
    reason: str         #: why that status
    chapter: str        #: label of the chapter with the evidence

    def __post_init__(self):
        if self.status not in STATUSES:
            raise ValueError(f"status must be one of {STATUSES}, got {self.status!r}")

    def to_dict(self) -> dict:
        return asdict(self)


def status(ok: bool, deviation: bool = False) -> str:
    """``NOT_REPRODUCED`` unless ``ok``; then ``DEVIATION`` or ``REPRODUCED``."""
    if not ok:
        return NOT_REPRODUCED
    return DEVIATION if deviation else REPRODUCED
