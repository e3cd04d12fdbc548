"""A claim of the paper beside the book's evidence, the four statuses a claim can get,
and the rules that decide a comparison of runs.

Each experiment module (:mod:`rcutil.experiments`) owns the claims its chapter tests, as
a function ``claims(result) -> list[Claim]`` with its thresholds; the chapter and the
reproduction report (:mod:`rcutil.report`) call that same function, so they cannot
disagree.

A claim that compares runs (with and without residuals, one depth against another,
across ``beta``) is decided over several seeds by a stated rule that can fail
(:func:`compare`, :func:`trend`): an exact one-sided permutation test of the difference
of the seed means at level :data:`LEVEL`, with the mean, its standard error and a
bootstrap interval of the difference shown beside the verdict. What the test cannot
resolve is *inconclusive at this scale*, never counted for or against the paper.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np

REPRODUCED = "reproduced"
DEVIATION = "reproduced with a stated deviation"
INCONCLUSIVE = "inconclusive at this scale"
NOT_REPRODUCED = "not reproduced"
STATUSES = (REPRODUCED, DEVIATION, INCONCLUSIVE, NOT_REPRODUCED)

#: What each status means; the report prints these beside its table.
DEFINITIONS = {
    REPRODUCED: "the book's rule decides for the claim, measured as the paper states "
    "it, in the paper's setting as far as that is public",
    DEVIATION: "the rule decides for the whole claim, in a setting that differs from "
    "the paper's in a way the row states (the book's own constants or model choices, "
    "a smaller scale, a reading the paper leaves open)",
    INCONCLUSIVE: "the rule cannot resolve the effect at the book's scale: the runs' "
    "intervals overlap, or the measure sits at a floor or ceiling where the "
    "compared runs cannot differ",
    NOT_REPRODUCED: "the rule decides against the claim: no effect where one is "
    "claimed, an effect in the other direction, or the claim holds only in part",
}

#: Level of every test that decides a claim (one-sided).
LEVEL = 0.05
#: Outcomes of a rule.
HOLDS, FAILS, UNRESOLVED = "holds", "fails", "unresolved"


@dataclass(frozen=True)
class Claim:
    """One row of the reproduction report."""

    key: str  #: stable identifier, e.g. ``"jena-ratio"``
    claim: str  #: short name
    paper: str  #: what the paper states
    book: str  #: the book's number or check, with its uncertainty
    status: str  #: one of :data:`STATUSES`
    reason: str  #: why that status
    rule: str = ""  #: the rule that decided the status, in words
    chapter: str = (
        ""  #: label of the chapter with the evidence (the report fills it in)
    )

    def __post_init__(self):
        if self.status not in STATUSES:
            raise ValueError(f"status must be one of {STATUSES}, got {self.status!r}")

    def to_dict(self) -> dict:
        return asdict(self)


def status(ok: bool, deviation: bool = False) -> str:
    """The status of a claim decided by one exact check: ``NOT_REPRODUCED`` unless
    ``ok``; then ``DEVIATION`` or ``REPRODUCED``."""
    if not ok:
        return NOT_REPRODUCED
    return DEVIATION if deviation else REPRODUCED


def decide(outcome: str, *, deviation: bool = False, floor: bool = False) -> str:
    """The status of a claim from the outcome of its rule: ``HOLDS`` gives
    ``REPRODUCED`` (or ``DEVIATION``), ``FAILS`` gives ``NOT_REPRODUCED``,
    ``UNRESOLVED`` gives ``INCONCLUSIVE``; ``floor=True`` (the measure cannot show the
    effect) gives ``INCONCLUSIVE`` whatever the outcome."""
    if outcome not in (HOLDS, FAILS, UNRESOLVED):
        raise ValueError(
            f"outcome must be one of {(HOLDS, FAILS, UNRESOLVED)}, got {outcome!r}"
        )
    if floor or outcome == UNRESOLVED:
        return INCONCLUSIVE
    return status(outcome == HOLDS, deviation)


# --------------------------------------------------------------------------- summaries
def mean_se(values: Sequence[float]) -> tuple[float, float]:
    """Mean and standard error (sample standard deviation over sqrt(n); nan for one
    value)."""
    x = np.asarray(values, dtype=float)
    if x.size == 0:
        raise ValueError("no values: a comparison needs at least one seed per arm")
    se = float(x.std(ddof=1) / math.sqrt(x.size)) if x.size > 1 else math.nan
    return float(x.mean()), se


def fmt(mean: float, se: float, digits: int = 3) -> str:
    """``mean ± se`` for tables and prose (``mean`` alone when there is one seed)."""
    if math.isnan(se):
        return f"{mean:.{digits}g}"
    return f"{mean:.{digits}g} ± {se:.2g}"


def bootstrap_ci(
    a: Sequence[float], b: Sequence[float], *, level: float = 0.95, seed: int = 0
) -> tuple[float, float]:
    """Percentile bootstrap interval of ``mean(a) - mean(b)`` (each arm resampled on its
    own, :func:`scipy.stats.bootstrap`, 9,999 resamples, fixed seed); ``(nan, nan)``
    when an arm has a single value."""
    from scipy import stats

    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if a.size < 2 or b.size < 2:
        return math.nan, math.nan
    if np.ptp(a) == 0 and np.ptp(b) == 0:
        d = float(a.mean() - b.mean())
        return d, d
    res = stats.bootstrap(
        (a, b),
        lambda x, y, axis: x.mean(axis) - y.mean(axis),
        confidence_level=level,
        n_resamples=9999,
        method="percentile",
        vectorized=True,
        rng=np.random.default_rng(seed),
    )
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


def permutation_p(
    a: Sequence[float], b: Sequence[float], *, alternative: str, seed: int = 0
) -> float:
    """p-value of the permutation test of ``mean(a) - mean(b)`` (:func:`scipy.stats.
    permutation_test`, independent samples): exact over every split when there are at
    most 100,000, else 99,999 seeded resamples. ``alternative`` is ``"less"`` (``a``
    below ``b``) or ``"greater"``."""
    from scipy import stats

    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    exact = math.comb(a.size + b.size, a.size) <= 100_000
    res = stats.permutation_test(
        (a, b),
        lambda x, y, axis: x.mean(axis) - y.mean(axis),
        permutation_type="independent",
        alternative=alternative,
        n_resamples=np.inf if exact else 99_999,
        vectorized=True,
        rng=np.random.default_rng(seed),
    )
    return float(res.pvalue)


@dataclass(frozen=True)
class Comparison:
    """The test of a claim ``a < b`` (``direction="less"``) or ``a > b`` over per-seed
    values.

    ``p`` is the one-sided permutation p-value in the claimed direction, ``p_reverse``
    in the other; the outcome is ``HOLDS`` when ``p <= level``, ``FAILS`` when
    ``p_reverse <= level``, else ``UNRESOLVED`` (with fewer than two seeds per arm
    nothing can be resolved)."""

    a: tuple[float, ...]
    b: tuple[float, ...]
    direction: str
    a_mean: float
    a_se: float
    b_mean: float
    b_se: float
    ci_low: float  #: bootstrap 95 % interval of mean(a) - mean(b)
    ci_high: float
    p: float
    p_reverse: float
    level: float

    @property
    def outcome(self) -> str:
        if self.p <= self.level:
            return HOLDS
        if self.p_reverse <= self.level:
            return FAILS
        return UNRESOLVED

    @property
    def difference(self) -> float:
        return self.a_mean - self.b_mean

    def text(self, a: str = "a", b: str = "b", digits: int = 3) -> str:
        """``a 0.0055 ± 0.0014 vs b 0.043 ± 0.0094, p = 0.004`` (mean ± s.e. over
        seeds)."""
        return (
            f"{a} {fmt(self.a_mean, self.a_se, digits)} vs {b} "
            f"{fmt(self.b_mean, self.b_se, digits)}, p = {self.p:.2g}"
        )


def compare(
    a: Sequence[float],
    b: Sequence[float],
    *,
    direction: str = "less",
    level: float = LEVEL,
) -> Comparison:
    """Test the claim ``mean(a) < mean(b)`` (``direction="less"``) or ``>``
    (``"greater"``) over per-seed values, see :class:`Comparison`."""
    if direction not in ("less", "greater"):
        raise ValueError(f"direction must be 'less' or 'greater', got {direction!r}")
    a, b = tuple(float(x) for x in a), tuple(float(x) for x in b)
    if not all(math.isfinite(x) for x in a + b):
        raise ValueError(f"a comparison needs finite values, got {a} and {b}")
    am, ase = mean_se(a)
    bm, bse = mean_se(b)
    reverse = "greater" if direction == "less" else "less"
    if len(a) < 2 or len(b) < 2:
        p = p_rev = 1.0
    else:
        p = permutation_p(a, b, alternative=direction)
        p_rev = permutation_p(a, b, alternative=reverse)
    low, high = bootstrap_ci(a, b)
    return Comparison(a, b, direction, am, ase, bm, bse, low, high, p, p_rev, level)


def rule_text(n_seeds: int, level: float = LEVEL) -> str:
    """The rule of :func:`compare` in words, for a claim's row."""
    return (
        f"one-sided exact permutation test of the difference of seed means, {n_seeds} "
        f"seeds per arm, level {level:g}; not resolved either way: inconclusive"
    )


@dataclass(frozen=True)
class Trend:
    """An ordered claim over levels ``x`` (e.g. "the larger beta, the lower y"): the
    comparisons of every pair of neighbouring levels, and their outcome together.

    ``HOLDS`` when every neighbouring comparison holds in the claimed direction;
    ``FAILS`` when one of them, or the comparison of the two ends, holds in the other
    direction; otherwise ``UNRESOLVED`` (a claim that holds between the ends but not
    step by step is not resolved at this scale)."""

    x: tuple[float, ...]
    steps: tuple[
        Comparison, ...
    ]  #: level i+1 against level i, in the claimed direction
    ends: Comparison  #: the last level against the first

    @property
    def outcome(self) -> str:
        if any(c.outcome == FAILS for c in self.steps) or self.ends.outcome == FAILS:
            return FAILS
        if all(c.outcome == HOLDS for c in self.steps):
            return HOLDS
        return UNRESOLVED


def trend(
    x: Sequence[float],
    values: Sequence[Sequence[float]],
    *,
    direction: str = "less",
    level: float = LEVEL,
) -> Trend:
    """Test "``values`` falls (``direction="less"``) or rises along ``x``":
    ``values[i]`` are the per-seed values at level ``x[i]``, ``x`` in increasing
    order."""
    if len(x) != len(values) or len(x) < 2:
        raise ValueError(
            f"a trend needs one list of values per level, at least two levels; got "
            f"{len(x)} levels and {len(values)} lists"
        )
    if any(b <= a for a, b in zip(x, x[1:])):
        raise ValueError(f"the levels must increase, got {list(x)}")
    steps = tuple(
        compare(values[i + 1], values[i], direction=direction, level=level)
        for i in range(len(x) - 1)
    )
    return Trend(
        tuple(float(v) for v in x),
        steps,
        compare(values[-1], values[0], direction=direction, level=level),
    )
