"""A claim of the paper beside the book's evidence: its verdict, its setting, and the
rules that decide a claim about runs.

Each experiment owns the claims its chapter tests (``claims(result) -> list[Claim]``);
the chapter, the introduction and the reproduction report (:mod:`rcutil.report`) show
that same list, so they cannot disagree.

A row has two separate fields. Its **verdict** comes from the rule alone:
:data:`REPRODUCED`, :data:`INCONCLUSIVE` or :data:`NOT_REPRODUCED`. Its **setting**
(:class:`Setting`) says how far the book's test is from the paper's: "as the paper
states it", or "the book's reconstruction" with the differences listed. Every term is
defined once, in :data:`DEFINITIONS`, which the report prints; the code below follows
those words for every row.

A claim about runs is decided over seeds by a rule that can fail both ways:

* :func:`comparison` tests one part, two arms (or two arms paired by seed), and
  :func:`ordered_trend` one ordered trend over levels, each by an exact permutation
  test (:func:`scipy.stats.permutation_test`) of exchangeability, one-sided in each
  direction, with the interval that inverts the same test and its attained coverage;
* :func:`decision` joins the parts of a claim: "reproduced" when every part holds at the
  level (an intersection-union test), "not reproduced" when a part goes the other way
  after Holm's correction over the parts, "inconclusive at this scale" otherwise, with
  the seeds per arm that would resolve the observed effect with 80 % power
  (:func:`seeds_needed`).

Under no effect, each wrong verdict has probability at most the level, for every
structure (``tests/test_claims.py`` simulates each).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from functools import cached_property

import numpy as np

# ------------------------------------------------------------------------ verdicts
REPRODUCED = "reproduced"
INCONCLUSIVE = "inconclusive at this scale"
NOT_REPRODUCED = "not reproduced"
#: The three verdicts, in the order of the report.
VERDICTS = (REPRODUCED, INCONCLUSIVE, NOT_REPRODUCED)
#: A verdict's mark, shown before its word (never colour alone).
MARKS = {REPRODUCED: "✓", INCONCLUSIVE: "?", NOT_REPRODUCED: "✗"}

# ------------------------------------------------------------------------ settings
AS_STATED = "as the paper states it"
RECONSTRUCTION = "the book's reconstruction"
#: The two kinds of setting, in the order of the report.
SETTINGS = (AS_STATED, RECONSTRUCTION)

#: Level of every test that decides a claim (one-sided, in each direction).
LEVEL = 0.05
#: Power at which :func:`seeds_needed` resolves an observed effect.
POWER = 0.8
#: Monte Carlo permutations when the exact enumeration has more than
#: :data:`EXACT_LIMIT` members; the p-value is then ``(b + 1) / (R + 1)``, still exact.
RESAMPLES = 9_999
EXACT_LIMIT = 20_000
#: :func:`seeds_needed` gives up above this many seeds per arm.
MOST_SEEDS = 10_000

# the designs of one part
TWO_ARMS = "two arms"
PAIRED = "two arms paired by seed"
TREND = "ordered trend"
PAIRED_TREND = "ordered trend paired by seed"
DESIGNS = (TWO_ARMS, PAIRED, TREND, PAIRED_TREND)
DIRECTIONS = ("less", "greater")


def _pct(x: float) -> str:
    return f"{100 * x:.4g} %"


#: Every term of the report, defined once; the report prints these, and the functions
#: of this module follow them for every row.
DEFINITIONS = {
    REPRODUCED: "the rule decides for the claim: every part of it holds in the claimed "
    f"direction, each by its one-sided test at level {LEVEL:g}, or, for a claim "
    "checked exactly, every check passes. Whatever the setting.",
    NOT_REPRODUCED: "the rule decides against the claim: at least one part goes the "
    f"other way, by its one-sided test at level {LEVEL:g}/k for a claim of k parts "
    "(Holm's correction over the parts), or an exact check fails. A claim that holds "
    "only in part (only for some β, only at some depths) is not reproduced as soon as "
    "one of its other parts is decided against it.",
    INCONCLUSIVE: "neither: no part is decided against the claim, and not every part "
    "for it (a claim that holds in some parts while the rest are unresolved is "
    "inconclusive), or the measure sits at a floor or ceiling where the compared runs "
    "cannot differ. The row says what would resolve it: for a claim decided by tests, "
    "the seeds per arm that would resolve the observed effect; for a claim checked "
    "exactly, what the check lacks (longer runs, another profile, a proof).",
    AS_STATED: "the book tests the claim in the words of the paper's statement.",
    RECONSTRUCTION: "the book tests the claim in a setting it had to choose, because "
    "the paper's is not public or not stated; the row lists the differences (constants "
    "derived here, a temperature, a scale, an optimizer, ...). A verdict holds for "
    "that setting.",
    "part": "one comparison a claim makes: two arms (with and without the residual, "
    "β = 1 against β = 0, ...) or one ordered trend; or, for a claim checked "
    "exactly, one check (an inequality on every step, a bound on every draw). A claim "
    "of several parts (“at every depth”, “every β > 0 above β = 0”) is decided by "
    "the rule above over all of them; a trend is one part. A check the run cannot "
    "make at its scale (the measure cannot show the effect) is a part not resolved.",
    "test": "an exact permutation test of exchangeability (scipy's "
    "permutation_test; every rearrangement of the seeds when there are at most "
    f"{EXACT_LIMIT:,}, else {RESAMPLES:,} random ones with p = (b + 1)/(R + 1)). "
    "No effect means that the compared seed values come from one distribution or, "
    "paired by seed (arms that share a seed's initial weights), that within each seed "
    "the arms are exchangeable. Its statistic is the difference of the arms' means "
    "(the slope, for a trend), but it is not a test of means: with equal means and "
    "different shapes (one arm skewed, the other narrow) it may decide for the arm "
    "whose bulk is lower, as a simulation in the book's tests shows; no test of a "
    "mean is valid at 5 seeds for every shape.",
    "trend": "one test of the ordered trend (“the larger β, the faster”): the "
    "permutation test of the least-squares slope of the value on the level's rank, "
    "with the levels permuted within each seed when they share a seed's weights. The "
    "steps between neighbouring levels are not tested one by one: a step against the "
    "trend within the noise does not contradict it.",
    "interval": f"the {_pct(1 - 2 * LEVEL)} interval that inverts the same test "
    f"(its two one-sided tests at {LEVEL:g}) under a shift model, in which the effect "
    "adds a constant to one arm (for a trend, a constant per level); it excludes the "
    "claimed boundary exactly when the test decides. Its attained coverage, shown "
    "with it, follows from the number of rearrangements: 90.48 % for 5 against 5 "
    "seeds, 93.75 % for 5 paired seeds.",
    "seeds it would take": f"for an inconclusive row decided by tests, the seeds per "
    f"arm (per level, for a trend) at which the rule would reach the verdict the "
    f"observed effects point to with power {POWER:g}, if the effects and spreads were "
    "as observed: a noncentral t power calculation for each part (the one-sided test "
    "at the level, or at level/k against the claim), the parts taken as independent, "
    "and at least the seeds with which the permutation test can reach the level at "
    "all.",
    "family": "the report decides several claims by tests, each at the level; with "
    "m such claims and no effect anywhere, the expected number of rows that read "
    "“reproduced” by chance is at most level × m, and so is that of rows that read "
    "“not reproduced” (a claim of several parts stays further below: “reproduced” "
    "needs every part, “not reproduced” a part at level/k); at least one such row "
    "appears with probability up to 1 − (1 − level)^m. A single surprising row is weak "
    "evidence on its own.",
}


# ------------------------------------------------------------------------ formatting
def num(x: float, digits: int = 3) -> str:
    """``x`` to ``digits`` significant digits, with a true minus sign and ``∞``."""
    if math.isnan(x):
        return "n/a"
    if math.isinf(x):
        return "∞" if x > 0 else "−∞"
    if x == 0 or 1e-3 <= abs(x) < 1e5:
        text = f"{x:.{digits}g}"
    else:
        text = f"{x:.{max(digits - 1, 1)}e}"
    return text.replace("-", "−")


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


# ------------------------------------------------------------------------ settings
@dataclass(frozen=True)
class Setting:
    """How the book's test of a claim differs from the paper's: no difference ("as the
    paper states it") or a few words per difference ("the book's reconstruction")."""

    differences: tuple[str, ...] = ()

    def __post_init__(self):
        if isinstance(self.differences, str):
            raise TypeError(
                "Setting.differences is a tuple of short phrases, not one string: "
                "write Setting((phrase,)) or reconstruction(phrase, ...)"
            )
        if any(not isinstance(d, str) or not d.strip() for d in self.differences):
            raise ValueError(
                f"every difference of a setting is a non-empty phrase, got "
                f"{self.differences!r}"
            )

    @property
    def kind(self) -> str:
        """:data:`AS_STATED` or :data:`RECONSTRUCTION`."""
        return RECONSTRUCTION if self.differences else AS_STATED

    def text(self) -> str:
        """The setting in a few words: its kind, then its differences."""
        if not self.differences:
            return AS_STATED
        return f"{RECONSTRUCTION}: " + "; ".join(self.differences)


def reconstruction(*differences: str) -> Setting:
    """The book's reconstruction, with its differences from the paper's setting."""
    if not differences:
        raise ValueError(
            "a reconstruction lists at least one difference from the paper's setting; "
            "a test in the paper's own terms is Setting() (as the paper states it)"
        )
    return Setting(tuple(differences))


#: The setting of a claim tested in the words of the paper.
STATED = Setting()


# ------------------------------------------------------------------------ one part
def _check_direction(direction: str) -> None:
    if direction not in DIRECTIONS:
        raise ValueError(f"direction must be 'less' or 'greater', got {direction!r}")


def _scores(m: int, weights: np.ndarray | None = None) -> np.ndarray:
    """Centred scores 0, 1, ..., m - 1 of ordered levels (weighted by the seeds per
    level when ``weights`` is given)."""
    c = np.arange(m, dtype=float)
    w = np.ones(m) if weights is None else np.asarray(weights, dtype=float)
    return c - (w * c).sum() / w.sum()


def group_size(design: str, n: Sequence[int]) -> int:
    """The number of equally likely rearrangements of the seeds under no effect: splits
    into the arms' sizes, sign changes of the paired differences, or the levels'
    rearrangements (within each seed when paired)."""
    n = [int(k) for k in n]
    if design == TWO_ARMS or design == TREND:
        total, out = 0, 1
        for k in n:
            total += k
            out *= math.comb(total, k)
        return out
    if design == PAIRED:
        return 2 ** n[0]
    if design == PAIRED_TREND:
        return math.factorial(len(n)) ** n[0]
    raise ValueError(f"design must be one of {DESIGNS}, got {design!r}")


def _statistic(design: str, sizes: Sequence[int]):
    """The test's statistic, vectorised over leading axes: the difference of means, the
    mean paired difference, or the least-squares slope on the level's score."""
    if design == TWO_ARMS:
        return lambda x, y, axis: x.mean(axis) - y.mean(axis)
    if design == PAIRED:
        return lambda x, axis: x.mean(axis)
    m = len(sizes)
    if design == TREND:
        c = _scores(m, np.asarray(sizes))
        scale = float((np.asarray(sizes) * c**2).sum())
        return lambda *xs, axis: sum(cj * x.sum(axis) for cj, x in zip(c, xs)) / scale
    c = _scores(m)
    scale = float((c**2).sum())
    return lambda *xs, axis: sum(cj * x.mean(axis) for cj, x in zip(c, xs)) / scale


def _listed_null(design, data, sizes, statistic) -> np.ndarray:
    """The statistic of every rearrangement, listed (for an arm of a single seed, which
    :func:`scipy.stats.permutation_test` refuses; there are few): shape
    ``(rearrangements, *batch, 2)``."""
    if design == PAIRED:
        (x,) = data  # (*batch, 2, n): the differences and their scores
        signs = np.array(list(itertools.product([1.0, -1.0], repeat=sizes[0])))
        signs = signs.reshape((len(signs),) + (1,) * (x.ndim - 1) + (sizes[0],))
        return statistic(x[None] * signs, axis=-1)
    if design == PAIRED_TREND:
        y = np.stack(data)  # (levels, *batch, 2, seeds)
        orders = list(itertools.permutations(range(len(sizes))))
        out = []
        for choice in itertools.product(orders, repeat=sizes[0]):
            z = np.stack([y[list(order), ..., i] for i, order in enumerate(choice)], -1)
            out.append(statistic(*z, axis=-1))
        return np.stack(out)
    pooled = np.concatenate(data, axis=-1)  # (*batch, 2, seeds)

    def splits(rest, j):
        if j == len(sizes) - 1:
            yield list(rest)
            return
        for pick in itertools.combinations(rest, sizes[j]):
            left = [i for i in rest if i not in pick]
            for tail in splits(left, j + 1):
                yield list(pick) + tail

    order = np.array(list(splits(list(range(pooled.shape[-1])), 0)))
    z = np.moveaxis(pooled[..., order], -2, 0)  # (rearrangements, *batch, 2, seeds)
    edges = np.cumsum(sizes)[:-1]
    return statistic(*np.split(z, edges, axis=-1), axis=-1)


def permutation_tests(
    design: str,
    samples: Sequence[np.ndarray],
    *,
    shift: float = 0.0,
    level: float = LEVEL,
    resamples: int = RESAMPLES,
    exact_limit: int = EXACT_LIMIT,
    seed: int = 0,
) -> dict[str, np.ndarray | int | bool]:
    """The permutation test of one part for a batch of data sets, and the interval
    that inverts it.

    ``samples``: the arms ``(a, b)`` (``TWO_ARMS``, ``PAIRED``: the estimate is
    ``a - b``) or the levels in order (``TREND``, ``PAIRED_TREND``: the estimate is the
    slope per level), each of shape ``(..., seeds)``; the leading axes index data sets.
    Returns ``estimate``, ``p_less`` and ``p_greater`` (one-sided, of the estimate
    against ``shift``), ``low`` and ``high`` (the ``1 - 2 level`` interval of the
    effect under a shift model), ``size`` (splits, or resamples + 1) and ``exact``.

    The p-values are :func:`scipy.stats.permutation_test`'s. The interval comes from
    the same null distribution: the values shifted by ``theta`` times the arms' scores
    give, for each rearrangement, a statistic affine in ``theta`` whose slope is at
    most the observed one, so each rearrangement counts towards a p-value from one
    critical ``theta`` on; the bounds are order statistics of those critical values.
    """
    from scipy import stats

    if design not in DESIGNS:
        raise ValueError(f"design must be one of {DESIGNS}, got {design!r}")
    xs = [np.asarray(s, dtype=float) for s in samples]
    if design in (TWO_ARMS, PAIRED) and len(xs) != 2:
        raise ValueError(f"{design}: two arms (a, b), got {len(xs)}")
    if design in (TREND, PAIRED_TREND) and len(xs) < 2:
        raise ValueError(f"{design}: at least two levels, got {len(xs)}")
    sizes = [x.shape[-1] for x in xs]
    if min(sizes) < 1:
        raise ValueError(f"{design}: every arm needs at least one seed, got {sizes}")
    if design in (PAIRED, PAIRED_TREND) and len(set(sizes)) != 1:
        raise ValueError(
            f"{design}: every arm has the same seeds, got {sizes} values: pair the "
            "arms by seed or compare them unpaired"
        )
    batch = np.broadcast_shapes(*(x.shape[:-1] for x in xs))
    xs = [np.broadcast_to(x, batch + x.shape[-1:]) for x in xs]
    finite = all(np.isfinite(x).all() for x in xs)
    if not finite:
        raise ValueError(f"{design}: the values must be finite")
    # the arms' scores: the effect theta moves arm a by theta (a level by its score)
    if design in (TWO_ARMS, PAIRED):
        score = [1.0, 0.0]
    else:
        score = list(_scores(len(xs), np.asarray(sizes) if design == TREND else None))
    shifted = [x - shift * s for x, s in zip(xs, score)]
    if design == PAIRED:  # the paired differences, with their sign flipped
        data = (np.stack([shifted[0] - shifted[1], np.ones_like(xs[0])], axis=-2),)
        kind = "samples"
    else:
        data = tuple(
            np.stack([x, np.full_like(x, s)], axis=-2) for x, s in zip(shifted, score)
        )
        kind = "independent" if design in (TWO_ARMS, TREND) else "samples"
    total = group_size(design, sizes)
    statistic = _statistic(design, sizes)
    t0 = np.asarray(statistic(*data, axis=-1))  # (*batch, 2)
    T0, S0 = t0[..., 0], t0[..., 1]
    # scipy's tolerance for ties of the statistic
    gamma = np.abs(np.finfo(float).eps * 100 * T0)
    if min(sizes) >= 2:
        exact = total <= exact_limit
        res = stats.permutation_test(
            data,
            statistic,
            permutation_type=kind,
            vectorized=True,
            n_resamples=np.inf if exact else resamples,
            alternative="greater",
            axis=-1,
            rng=np.random.default_rng(seed),
        )
        null = np.asarray(res.null_distribution)  # (rearrangements, *batch, 2)
        p_greater = np.asarray(res.pvalue)[..., 0]
    else:  # scipy's test needs two seeds per arm: the few rearrangements, listed
        exact = True
        null = _listed_null(design, data, sizes, statistic)
        p_greater = (null[..., 0] >= T0 - gamma).sum(axis=0) / total
    T, S = null[..., 0], null[..., 1]
    adj = 0 if exact else 1
    size = (total if exact else resamples) + adj
    e = T - T0  # (rearrangements, *batch)
    s = S0 - S  # >= 0: the observed split moves most with theta
    same = s <= 1e-9 * np.maximum(np.abs(S0), 1.0)
    s_safe = np.where(same, 1.0, s)
    # a rearrangement counts towards p_greater(theta) from theta = -e / s on, towards
    # p_less(theta) up to it; a tie within scipy's tolerance counts at theta = 0 on
    # both sides, as in scipy's p-values
    crit = np.where(np.abs(e) <= gamma, 0.0, -e / s_safe)
    lower_crit = np.where(same, np.inf, crit)
    upper_crit = np.where(same, -np.inf, crit)
    allowed = (
        math.floor(level * size + 1e-9) - adj
    )  # rearrangements a p <= level allows

    def bound(crit, fixed, sign):
        # the k-th smallest (sign=+1) or largest (sign=-1) critical value, k = allowed
        # - fixed + 1; -inf/+inf when no value of theta is rejected on that side
        k = allowed - fixed + 1
        ordered = np.sort(sign * crit, axis=0)
        idx = np.clip(k - 1, 0, ordered.shape[0] - 1)
        value = sign * np.take_along_axis(ordered, idx[None, ...], axis=0)[0]
        value = np.where(k <= 0, -sign * np.inf, value)
        return np.where(np.isfinite(value) | (k <= 0), value, sign * np.inf)

    fixed_low = (same & (e >= -gamma)).sum(axis=0)
    fixed_high = (same & (e <= gamma)).sum(axis=0)
    low = bound(lower_crit, fixed_low, 1) + shift
    high = bound(upper_crit, fixed_high, -1) + shift
    # the other side from the same null distribution, by scipy's rule
    p_less = ((T <= T0 + gamma).sum(axis=0) + adj) / size
    return dict(
        estimate=T0 + shift,
        p_less=p_less,
        p_greater=p_greater,
        low=low,
        high=high,
        size=size,
        exact=exact,
    )


def coverage(size: int, level: float = LEVEL) -> float:
    """Attained coverage of the interval of :func:`permutation_tests` for continuous
    data: each one-sided test rejects with probability ``floor(level size) / size``
    (fewer with ties, so the coverage is then at least this)."""
    return 1 - 2 * math.floor(level * size + 1e-9) / size


def _unit_se(design: str, values: Sequence[np.ndarray]) -> tuple[float, int]:
    """The standard error of the estimate times sqrt(seeds per arm), from the observed
    spread, and the number of arms (levels) of the design."""
    xs = [np.asarray(v, dtype=float) for v in values]
    if min(x.size for x in xs) < 2:
        return math.nan, len(xs)
    if design == PAIRED:
        return float(np.std(xs[0] - xs[1], ddof=1)), 2
    if design == PAIRED_TREND:
        c = _scores(len(xs))
        slopes = sum(cj * x for cj, x in zip(c, xs)) / (c**2).sum()
        return float(np.std(slopes, ddof=1)), len(xs)
    pooled = math.sqrt(
        sum(((x - x.mean()) ** 2).sum() for x in xs) / sum(x.size - 1 for x in xs)
    )
    if design == TWO_ARMS:
        return pooled * math.sqrt(2), 2
    c = _scores(len(xs))
    return pooled / math.sqrt((c**2).sum()), len(xs)


def _df(design: str, n: int, arms: int) -> int:
    return n - 1 if design in (PAIRED, PAIRED_TREND) else arms * (n - 1)


def power(part: Part, n: int, level: float, *, effect: float | None = None) -> float:
    """Power of the one-sided test of ``part``'s design at ``level`` with ``n`` seeds
    per arm, for the observed effect (or ``effect``) and spread: a noncentral t
    calculation; 0 when the permutation test cannot reach ``level`` with ``n``."""
    from scipy import stats

    total = group_size(part.design, [n] * len(part.n))
    if 1 / (total if total <= EXACT_LIMIT else RESAMPLES + 1) > level:
        return 0.0  # the permutation test cannot reach the level with n seeds
    delta = abs(part.estimate - part.shift) if effect is None else abs(effect)
    if part.unit_se == 0:
        return 1.0 if delta > 0 else 0.0
    if delta == 0 or math.isnan(part.unit_se):
        return 0.0
    df = _df(part.design, n, len(part.n))
    ncp = delta / (part.unit_se / math.sqrt(n))
    return float(stats.nct.sf(stats.t.ppf(1 - level, df), df, ncp))


@dataclass(frozen=True)
class Part:
    """One part of a claim and its test: the estimate (difference of means ``a - b``,
    mean paired difference, or slope per level), its interval, and the one-sided
    p-values for (``p``) and against (``p_against``) the claimed direction against
    ``shift``."""

    label: str  #: what is compared, e.g. ``"β = 1 − β = 0"``
    design: str  #: one of :data:`DESIGNS`
    direction: str  #: the claimed sign of ``estimate - shift``: "less" or "greater"
    values: tuple[tuple[float, ...], ...]  #: the seed values of each arm or level
    estimate: float
    low: float  #: the interval that inverts the test
    high: float
    coverage: float  #: attained coverage of ``[low, high]``
    p: float  #: one-sided p-value in the claimed direction
    p_against: float  #: one-sided p-value in the other direction
    shift: float = 0.0  #: the claimed boundary of the effect (0: no effect)
    level: float = LEVEL  #: the level of each one-sided test, and of the interval
    size: int = 0  #: the test's rearrangements (splits, or resamples + 1)
    exact: bool = True
    unit_se: float = math.nan  #: standard error times sqrt(seeds per arm)

    @property
    def n(self) -> tuple[int, ...]:
        """Seeds per arm (per level)."""
        return tuple(len(v) for v in self.values)

    @property
    def means(self) -> tuple[float, ...]:
        """The mean of each arm (level)."""
        return tuple(float(np.mean(v)) for v in self.values)

    @property
    def points_against(self) -> bool:
        """Whether the estimate lies on the other side of ``shift`` than claimed."""
        return (self.estimate - self.shift) * _sign(self.direction) < 0

    def holds(self, level: float) -> bool:
        return self.p <= level

    def against(self, level: float) -> bool:
        return self.p_against <= level

    def seeds(self) -> str:
        """``5 + 5 seeds``, ``5 paired seeds``, ``5 seeds per level``."""
        n = self.n
        if self.design == PAIRED:
            return f"{n[0]} paired seeds"
        if self.design == PAIRED_TREND:
            return f"{n[0]} seeds per level, paired"
        if len(set(n)) == 1:
            return f"{n[0]} seeds per {'arm' if self.design == TWO_ARMS else 'level'}"
        return " + ".join(str(k) for k in n) + " seeds"

    def line(self, digits: int = 3) -> str:
        """``label: −0.031 [−0.052, −0.012], p = 0.004``."""
        label = f"{self.label}: " if self.label else ""
        return (
            f"{label}{num(self.estimate, digits)} [{num(self.low, digits)}, "
            f"{num(self.high, digits)}], p = {self.p:.2g}"
        )


def _part(
    design: str,
    samples: Sequence[Sequence[float]],
    *,
    direction: str,
    label: str,
    shift: float,
    level: float,
    resamples: int,
    seed: int,
) -> Part:
    _check_direction(direction)
    values = tuple(tuple(float(v) for v in s) for s in samples)
    if not all(math.isfinite(v) for s in values for v in s):
        raise ValueError(f"{label or design}: the values must be finite, got {values}")
    out = permutation_tests(
        design,
        [np.asarray(v) for v in values],
        shift=shift,
        level=level,
        resamples=resamples,
        seed=seed,
    )
    p = {"less": float(out["p_less"]), "greater": float(out["p_greater"])}
    against = "greater" if direction == "less" else "less"
    return Part(
        label=label,
        design=design,
        direction=direction,
        values=values,
        estimate=float(out["estimate"]),
        low=float(out["low"]),
        high=float(out["high"]),
        coverage=coverage(int(out["size"]), level),
        p=p[direction],
        p_against=p[against],
        shift=float(shift),
        level=level,
        size=int(out["size"]),
        exact=bool(out["exact"]),
        unit_se=_unit_se(design, values)[0],
    )


def comparison(
    a: Sequence[float],
    b: Sequence[float],
    *,
    direction: str,
    paired: bool = False,
    shift: float = 0.0,
    label: str = "",
    level: float = LEVEL,
    resamples: int = RESAMPLES,
    seed: int = 0,
) -> Part:
    """One part: ``a`` against ``b`` over seeds, the claim being ``mean(a) - mean(b)``
    below (``direction="less"``) or above ``shift``. ``paired=True`` when the arms
    share each seed's initial weights or data order (``a[i]`` and ``b[i]`` are one
    seed): the test then flips the sign of the per-seed differences."""
    return _part(
        PAIRED if paired else TWO_ARMS,
        (a, b),
        direction=direction,
        label=label,
        shift=shift,
        level=level,
        resamples=resamples,
        seed=seed,
    )


def ordered_trend(
    levels: Sequence[float],
    values: Sequence[Sequence[float]],
    *,
    direction: str,
    paired: bool = False,
    label: str = "",
    level: float = LEVEL,
    resamples: int = RESAMPLES,
    seed: int = 0,
) -> Part:
    """One part: the claim "the value falls (``direction="less"``) or rises along the
    ordered ``levels``", ``values[j]`` the seed values at ``levels[j]``, tested as one
    ordered trend (the slope of the value on the level's rank). ``paired=True`` when
    the levels share each seed's weights (``values[j][i]`` is seed ``i``)."""
    if len(levels) != len(values) or len(levels) < 2:
        raise ValueError(
            f"a trend needs one list of values per level, at least two levels; got "
            f"{len(levels)} levels and {len(values)} lists"
        )
    if any(b <= a for a, b in zip(levels, levels[1:])):
        raise ValueError(f"the levels must increase, got {list(levels)}")
    return _part(
        PAIRED_TREND if paired else TREND,
        values,
        direction=direction,
        label=label,
        shift=0.0,
        level=level,
        resamples=resamples,
        seed=seed,
    )


# -------------------------------------------------------------------- a claim's parts
def verdicts(p: np.ndarray, p_against: np.ndarray, level: float = LEVEL) -> np.ndarray:
    """The verdict of claims of ``k`` parts from their one-sided p-values, vectorised
    over leading axes (``p``, ``p_against``: shape ``(..., k)``): 1 reproduced (every
    ``p <= level``), -1 not reproduced (Holm over the ``k`` parts rejects at least
    one "no reversal", i.e. the smallest ``p_against <= level / k``), 0 inconclusive."""
    p, p_against = np.asarray(p, dtype=float), np.asarray(p_against, dtype=float)
    k = p.shape[-1]
    if k < 1 or p_against.shape != p.shape:
        raise ValueError(
            f"one p-value each way per part, got shapes {p.shape} and {p_against.shape}"
        )
    holds = (p <= level).all(axis=-1)
    against = p_against.min(axis=-1) <= level / k
    return np.where(holds, 1, np.where(against, -1, 0))


def holm(p: Sequence[float], level: float = LEVEL) -> list[bool]:
    """Holm's step-down procedure: which of the hypotheses with p-values ``p`` are
    rejected at family-wise level ``level``."""
    order = np.argsort(p, kind="stable")
    k, out = len(p), [False] * len(p)
    for rank, i in enumerate(order):
        if p[i] > level / (k - rank):
            break
        out[i] = True
    return out


@dataclass(frozen=True)
class Decision:
    """A claim's parts and the rule over them (see :data:`DEFINITIONS`): its verdict,
    its one line of evidence, and, when inconclusive, the seeds it would take.

    ``measurable=False`` records that the measure sits at a floor or ceiling where the
    compared runs cannot differ: the verdict is then inconclusive whatever the tests
    say (which can only lower both error rates)."""

    parts: tuple[Part, ...]
    level: float = LEVEL
    measurable: bool = True
    why_not_measurable: str = ""

    def __post_init__(self):
        if not self.parts:
            raise ValueError("a decision needs at least one part")
        if not self.measurable and not self.why_not_measurable:
            raise ValueError(
                "a measure that cannot show the effect says why: pass "
                "why_not_measurable"
            )

    @property
    def k(self) -> int:
        return len(self.parts)

    @property
    def structure(self) -> tuple[tuple[str, tuple[int, ...]], ...]:
        """The design and the seeds per arm (level) of each part: what the null
        simulations of the rule must cover (``tests/test_claims.py``)."""
        return tuple((p.design, p.n) for p in self.parts)

    @cached_property
    def code(self) -> int:
        """1 reproduced, -1 not reproduced, 0 inconclusive (:func:`verdicts`)."""
        if not self.measurable:
            return 0
        return int(
            verdicts(
                [p.p for p in self.parts], [p.p_against for p in self.parts], self.level
            )
        )

    @property
    def verdict(self) -> str:
        return {1: REPRODUCED, 0: INCONCLUSIVE, -1: NOT_REPRODUCED}[self.code]

    @property
    def holding(self) -> tuple[Part, ...]:
        """The parts that hold in the claimed direction at the level."""
        return tuple(p for p in self.parts if p.holds(self.level))

    @property
    def reversed(self) -> tuple[Part, ...]:
        """The parts that go the other way, after Holm's correction over the parts."""
        out = holm([p.p_against for p in self.parts], self.level)
        return tuple(p for p, r in zip(self.parts, out) if r)

    def seeds_needed(self, power_: float = POWER) -> int | None:
        """See :func:`seeds_needed`."""
        return seeds_needed(self, power_)

    def line(self, digits: int = 3) -> str:
        """The one line of evidence: each part's estimate, interval and p, then the
        interval's attained coverage and the seeds."""
        parts = "; ".join(p.line(digits) for p in self.parts)
        covers = sorted({p.coverage for p in self.parts})
        cover = _pct(covers[0]) if len(covers) == 1 else f"at least {_pct(covers[0])}"
        seeds = sorted({p.seeds() for p in self.parts})
        return (
            f"{parts} ({cover} interval{'s' if self.k > 1 else ''}; {', '.join(seeds)})"
        )

    def rule(self) -> str:
        """The rule in words, for the folded part of the row, with what its seeds
        leave it unable to decide (:meth:`limits`)."""
        designs = sorted({p.design for p in self.parts})
        tests = ", ".join(designs)
        exact = sorted({p.size for p in self.parts if p.exact})
        drawn = sorted({p.size - 1 for p in self.parts if not p.exact})
        how = "; ".join(
            [f"exact over {', '.join(f'{s:,}' for s in exact)} rearrangements"]
            * bool(exact)
            + [f"{', '.join(f'{s:,}' for s in drawn)} random rearrangements"]
            * bool(drawn)
        )
        if self.k == 1:
            text = (
                f"permutation test ({tests}; {how}), one-sided each way at "
                f"{self.level:g}: for the claim when p ≤ {self.level:g}, against it "
                f"when the other way's p ≤ {self.level:g}, else inconclusive"
            )
        else:
            text = (
                f"{self.k} parts, each a permutation test ({tests}; {how}): "
                f"reproduced when every part holds at {self.level:g}; not reproduced "
                f"when one goes the other way at {self.level:g}/{self.k} (Holm); else "
                "inconclusive"
            )
        limits = self.limits()
        return f"{text}; {limits}" if limits else text

    def limits(self) -> str:
        """What the rule cannot decide with these seeds, in words ("" when it can
        reach both verdicts): a part whose smallest p-value (one over its
        rearrangements) is above the level can never hold, and when every part's is
        above level/k none can be decided against the claim."""
        level, k = self.level, self.k
        sized = [p for p in self.parts if p.size]
        for_ = [p for p in sized if 1 / p.size > level]
        against = len(sized) == k and all(1 / p.size > level / k for p in sized)
        at = f"{level:g}/{k}" if k > 1 else f"{level:g}"
        if for_ and against:
            fewest = min(sized, key=lambda p: p.size)
            above = f"{level:g} and {at}" if k > 1 else at
            return (
                f"with these seeds it can reach neither verdict (the smallest "
                f"p-value, 1/{fewest.size:,}, is above {above})"
            )
        if for_:
            return (
                f"with these seeds it cannot decide for the claim (the smallest "
                f"p-value, 1/{for_[0].size:,}, is above {level:g})"
            )
        if against:
            most = max(sized, key=lambda p: p.size)
            return (
                f"with these seeds it cannot decide against the claim (the smallest "
                f"p-value, 1/{most.size:,}, is above {at})"
            )
        return ""

    def reason(self) -> str:
        """Why the verdict, in words that follow :data:`DEFINITIONS`."""
        if not self.measurable:
            return f"the measure cannot show the effect: {self.why_not_measurable}"
        held, rev = self.holding, self.reversed
        names = lambda ps: ", ".join(p.label or "the comparison" for p in ps)  # noqa: E731
        if self.code == 1:
            return "every part holds" if self.k > 1 else "the test decides for it"
        if self.code == -1:
            if held:
                return (
                    f"holds only in part: {names(rev)} goes the other way, while "
                    f"{names(held)} holds"
                )
            return f"{names(rev)} goes the other way"
        if held:
            return (
                f"{names(held)} holds, the rest is not resolved; it would take "
                + self.it_would_take()
            )
        return "not resolved either way; it would take " + self.it_would_take()

    def it_would_take(self) -> str:
        """What it would take to resolve the observed effect (:func:`seeds_needed`),
        as a phrase after "it would take"."""
        if not self.measurable:
            return "more than seeds: " + self.why_not_measurable
        trend = any(p.design in (TREND, PAIRED_TREND) for p in self.parts)
        per = "per level" if trend else "per arm"
        n = self.seeds_needed()
        if n is None:
            return "more than seeds can give: the observed effect is zero"
        if n > MOST_SEEDS:
            return f"more than {MOST_SEEDS:,} seeds {per}"
        wrong = any(p.points_against for p in self.parts)
        toward = "against the claim" if wrong else "for the claim"
        return (
            f"about {n:,} seeds {per} to resolve the observed effect ({toward}) "
            f"with {POWER * 100:.0f} % power"
        )


def decision(
    parts: Part | Sequence[Part],
    *,
    level: float | None = None,
    measurable: bool = True,
    why_not_measurable: str = "",
) -> Decision:
    """The rule over a claim's parts (one part, or several that must all hold), at the
    level the parts were tested at."""
    parts = (parts,) if isinstance(parts, Part) else tuple(parts)
    levels = {p.level for p in parts}
    if level is None and len(levels) == 1:
        level = levels.pop()
    if levels - {level}:
        raise ValueError(
            f"the parts were tested at levels {sorted(levels)}, the decision is asked "
            f"at {level}: test every part at the decision's level"
        )
    return Decision(parts, level, measurable, why_not_measurable)


def seeds_needed(d: Decision, power_: float = POWER) -> int | None:
    """Seeds per arm at which the rule would reach the verdict the observed effects
    point to ("not reproduced" if any part's estimate lies on the wrong side of its
    boundary, else "reproduced") with probability ``power_``, for the observed effects
    and spreads (:func:`power`; the parts taken as independent). ``None`` when an
    observed effect needed for that verdict is zero or the spread cannot be estimated
    (one seed); ``MOST_SEEDS + 1`` when more than :data:`MOST_SEEDS` would be
    needed."""
    wrong = [p for p in d.parts if p.points_against]
    targets = wrong or list(d.parts)
    alpha = d.level / d.k if wrong else d.level
    if any(math.isnan(p.unit_se) for p in targets):
        return None
    if not wrong and any(p.estimate == p.shift for p in targets):
        return None

    def reached(n: int) -> bool:
        powers = [power(p, n, alpha) for p in targets]
        # against the claim one reversed part decides; for it, every part must hold
        return (max(powers) if wrong else float(np.prod(powers))) >= power_

    lo = hi = 2
    while not reached(hi):
        if hi > MOST_SEEDS:
            return MOST_SEEDS + 1
        lo, hi = hi, hi * 2
    while hi - lo > 1:  # power grows with n: bisect
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if reached(mid) else (mid, hi)
    # the doubling overshoots MOST_SEEDS (up to 16,384): beyond it, one answer
    return hi if hi <= MOST_SEEDS else MOST_SEEDS + 1


def _sign(direction: str) -> int:
    return -1 if direction == "less" else 1


def check_verdict(
    ok: bool | None | Mapping[str, bool | None] | Sequence[bool | None],
) -> str:
    """The verdict of a claim checked exactly (a theorem on its instances, a bound on
    every draw), part by part: not reproduced when a check fails, reproduced when every
    check passes, and inconclusive when none fails but some part cannot be checked at
    this scale (``None``: the measure cannot show it)."""
    if isinstance(ok, Mapping):
        ok = list(ok.values())
    if ok is None or isinstance(ok, (bool, np.bool_)):
        ok = [ok]
    ok = list(ok)
    if not ok:
        raise ValueError("a claim checked exactly needs at least one check")
    if any(x is not None and not bool(x) for x in ok):
        return NOT_REPRODUCED
    return INCONCLUSIVE if any(x is None for x in ok) else REPRODUCED


def failures(parts: Mapping[str, bool]) -> str:
    """The reason a claim checked part by part (the parts :func:`check_verdict` reads)
    fails: ``"fails: "`` and the names of the parts that do not hold, joined by
    ``"; "``; empty when every part holds, so that ``failures(parts) or reason`` gives
    the reason it holds only then."""
    failed = [name for name, ok in parts.items() if not ok]
    return "fails: " + "; ".join(failed) if failed else ""


# ------------------------------------------------------------------------ the row
@dataclass(frozen=True)
class Claim:
    """One row of the reproduction report.

    ``verdict`` comes from the rule alone (``decision.verdict`` when a test decided
    it, :func:`check_verdict` for an exact check); ``setting`` says how the book's test
    differs from the paper's. ``book`` is the book's number or check in one line;
    a test-decided row shows ``decision.line()`` as its evidence."""

    key: str  #: stable identifier, e.g. ``"jena-ratio"``
    claim: str  #: short name
    paper: str  #: what the paper states
    book: str  #: the book's number or check, with its uncertainty
    verdict: str  #: one of :data:`VERDICTS`
    reason: str  #: why that verdict
    rule: str = ""  #: the rule that decided the verdict, in words
    chapter: str = ""  #: label of the chapter with the evidence (the report fills it)
    #: how the test differs from the paper's: :data:`STATED` or :func:`reconstruction`
    setting: Setting | None = None
    decision: Decision | None = None  #: the test, when one decided the verdict
    #: what would resolve an inconclusive row checked exactly (a row decided by a test
    #: says it through its decision): "runs of about 4e5 steps", ...
    would_take: str = ""

    def __post_init__(self):
        if self.verdict not in VERDICTS:
            raise ValueError(f"verdict must be one of {VERDICTS}, got {self.verdict!r}")
        if self.decision is not None and self.decision.verdict != self.verdict:
            raise ValueError(
                f"{self.key}: the verdict {self.verdict!r} is not its rule's "
                f"{self.decision.verdict!r}: pass verdict=decision.verdict"
            )
        if self.setting is None:
            raise TypeError(
                f"{self.key}: a row says how its test differs from the paper's: pass "
                "setting=STATED or setting=reconstruction(...)"
            )
        if not isinstance(self.setting, Setting):
            raise TypeError(
                f"{self.key}: setting is a Setting (STATED or reconstruction(...)), "
                f"got {self.setting!r}"
            )
        if self.would_take and (self.verdict != INCONCLUSIVE or self.decision):
            raise ValueError(
                f"{self.key}: would_take says what would resolve an inconclusive row "
                "checked exactly; a decided row, or one decided by a test (its "
                "decision says it), passes none"
            )
        if (
            self.verdict == INCONCLUSIVE
            and self.decision is None
            and not self.would_take.strip()
        ):
            raise ValueError(
                f"{self.key}: an inconclusive row checked exactly says what would "
                "resolve it: pass would_take (longer runs, another profile, ...)"
            )

    @classmethod
    def tested(
        cls,
        key: str,
        claim: str,
        paper: str,
        book: str,
        decision: Decision,
        *,
        setting: Setting,
        reason_prefix: str = "",
    ) -> Claim:
        """The row of a claim decided by ``decision``: its verdict, reason (after
        ``reason_prefix``) and rule."""  # fmt: skip
        return cls(
            key, claim, paper, book, decision.verdict,
            reason_prefix + decision.reason(), rule=decision.rule(), setting=setting,
            decision=decision,
        )  # fmt: skip

    @property
    def mark(self) -> str:
        return MARKS[self.verdict]

    @property
    def evidence(self) -> str:
        """The one line of evidence: the test's, or the book's number."""
        return self.decision.line() if self.decision is not None else self.book

    @property
    def takes(self) -> str:
        """For an inconclusive row, what would resolve it (the seeds of its test, or
        :attr:`would_take`); empty for a decided row."""
        if self.verdict != INCONCLUSIVE:
            return ""
        if self.decision is not None:
            return self.decision.it_would_take()
        return self.would_take

    @property
    def setting_text(self) -> str:
        return self.setting.text()

    @property
    def setting_kind(self) -> str:
        return self.setting.kind

    def to_dict(self) -> dict:
        return asdict(self)


__all__ = [
    "REPRODUCED",
    "INCONCLUSIVE",
    "NOT_REPRODUCED",
    "VERDICTS",
    "MARKS",
    "AS_STATED",
    "RECONSTRUCTION",
    "SETTINGS",
    "STATED",
    "LEVEL",
    "POWER",
    "DEFINITIONS",
    "DESIGNS",
    "TWO_ARMS",
    "PAIRED",
    "TREND",
    "PAIRED_TREND",
    "Setting",
    "reconstruction",
    "Part",
    "comparison",
    "ordered_trend",
    "Decision",
    "decision",
    "verdicts",
    "holm",
    "seeds_needed",
    "power",
    "coverage",
    "group_size",
    "permutation_tests",
    "check_verdict",
    "failures",
    "Claim",
    "num",
    "mean_se",
    "fmt",
]
