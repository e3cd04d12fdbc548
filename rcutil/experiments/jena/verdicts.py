"""The Jena chapter's acceptance checks and its three claims, and the readings of a
stored :class:`~rcutil.experiments.jena.Result` that decide them: the loss above the
best-found loss (the main measure), the raw loss and the rate beside it, under each
step rule and at each horizon; the last-stage drift of the best-found loss, which
guards every comparison of the main measure; the gap of the ratio and the readings at
the float32 rounding level."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ... import claims as rules
from ... import results
from ...checks import Check
from ...claims import Claim, fmt, mean_se
from ...rounding import eps
from . import RULES, Point, Reading, Result, ratio

#: The one number of the experiment the paper makes public: min_t sigma_min^2(Z_t) /
#: max_t ||Z_t|| at beta = 0 (its norm and precision are not stated).
PAPER_RATIO_BETA0 = 7.74e-14
#: A smallest singular value of at most this many ``eps ||Z||_2`` is at its precision's
#: rounding level (eq. ``jena-floor``): every rank-deficient matrix measured came out
#: below it.
FLOOR_UNITS = 2.0
#: "Much larger with the residual": ``rho(beta) >= RATIO_FACTOR rho(0)`` for every beta
#: > 0.
RATIO_FACTOR = 100.0
#: A comparison of the loss above the best-found loss decides only when its effect is
#: at least this many times the largest last-stage drift of the best-found losses it
#: reads: below that, the best-found loss's own uncertainty could make it.
DRIFT_MARGIN = 5.0
#: The measures of speed: the loss above the best-found loss (the claims'), the raw
#: loss, and the mean rate per step toward the best-found loss.
MEASURES = ("excess", "raw", "rate")
#: A factor of the attention output is nearly singular when its smallest singular value
#: is at most this share of its largest (eq. ``jena-factors``).
NEAR_SINGULAR = 1e-3


def betas(result: Result) -> list[float]:
    """The residual strengths of the sweep, in increasing order."""
    return [p.beta for p in result.points]


def horizons(result: Result) -> list[int]:
    """The horizons at which the claims are read: T/4, T/2 and T."""
    T = result.settings.steps
    return [T // 4, T // 2, T]


def reading(point: Point, precision: str, layout: str, norm: str) -> Reading:
    """One of the eight readings of the ratio at a point."""
    return results.pick(point.readings, precision=precision, layout=layout, norm=norm)


def readings_at_floor(point: Point) -> list[Reading]:
    """The readings whose mean ``c`` is at most :data:`FLOOR_UNITS`: their smallest
    singular value is at its precision's rounding level."""
    return [r for r in point.readings if np.mean(r.c) <= FLOOR_UNITS]


def best_found(result: Result, beta: float) -> np.ndarray:
    """The best-found loss of every seed at ``beta``: the lowest loss of any run of
    the model, L-BFGS or GD."""
    return np.asarray(results.pick(result.points, beta=beta).floor)


def measure(
    result: Result,
    beta: float,
    rule: str = "common",
    t: int | None = None,
    kind: str = "excess",
) -> np.ndarray:
    """A measure of speed per seed after ``t`` iterates (default T) under ``rule``:
    ``excess``, the loss above the best-found loss ``Phi_t - Phi_hat`` (eq.
    ``jena-excess``); ``raw``, the loss ``Phi_t``; ``rate``, ``log((Phi_t -
    Phi_hat) / (Phi_0 - Phi_hat)) / t`` (eq. ``jena-rate``), the mean log-contraction
    per step toward the best-found loss."""
    if kind not in MEASURES:
        raise ValueError(f"kind must be one of {MEASURES}, got {kind!r}")
    t = result.settings.steps if t is None else t
    loss = results.pick(result.runs, beta=beta, rule=rule).loss
    if kind == "raw":
        return loss[:, t]
    above = loss[:, t] - best_found(result, beta)
    if kind == "excess":
        return above
    return np.log(above / (loss[:, 0] - best_found(result, beta))) / t


def excess(result: Result, beta: float, rule: str = "common", t=None) -> np.ndarray:
    """``Phi_t - Phi_hat`` per seed (eq. ``jena-excess``)."""
    return measure(result, beta, rule, t, "excess")


def floor_drift(result: Result, beta: float) -> np.ndarray:
    """How much the best-found loss fell over the last half of its L-BFGS run, per
    seed: ``Phi_L(K/2) - Phi_hat``, the last-stage drift."""
    point = results.pick(result.points, beta=beta)
    half = point.floor_run[:, point.floor_run.shape[1] // 2]
    return half - np.asarray(point.floor)


def drift_of(result: Result, compared: list[float]) -> float:
    """The largest last-stage drift of the best-found losses of the models of the
    residual strengths ``compared``."""
    return max(float(floor_drift(result, b).max()) for b in compared)


def order_part(
    result: Result, rule: str = "common", t=None, kind: str = "excess"
) -> rules.Part:
    """ "The larger beta, the faster": the measure falls along beta (one ordered
    trend, paired by seed: the models of one seed start from the same weights)."""
    bs = betas(result)
    return rules.ordered_trend(
        bs,
        [measure(result, b, rule, t, kind) for b in bs],
        direction="less",
        paired=True,
        label=f"{rule} step, slope per β level",
    )


def stall_parts(
    result: Result, rule: str = "common", t=None, kind: str = "excess"
) -> list[rules.Part]:
    """ "beta = 0 stalls": its measure exceeds that of every beta > 0 (paired by
    seed)."""
    at0 = measure(result, 0.0, rule, t, kind)
    return [
        rules.comparison(
            at0,
            measure(result, b, rule, t, kind),
            direction="greater",
            paired=True,
            label=f"{rule} step, β = 0 − β = {b:g}",
        )
        for b in betas(result)
        if b > 0
    ]


def _effect(part: rules.Part) -> float:
    """The change a part reads: the difference of the means, or for a trend the
    fitted change across the levels."""
    if part.design in (rules.TREND, rules.PAIRED_TREND):
        return abs(part.estimate) * (len(part.values) - 1)
    return abs(part.estimate)


def under_drift(
    result: Result, parts: list[rules.Part], compared: list[list[float]]
) -> list[str]:
    """The parts (by label) whose effect is less than :data:`DRIFT_MARGIN` times the
    largest last-stage drift of the best-found losses they read (``compared``: the
    betas of each part)."""
    return [
        f"{p.label} ({_effect(p):.3g} against {DRIFT_MARGIN:g} × "
        f"{drift_of(result, bs):.3g})"
        for p, bs in zip(parts, compared)
        if _effect(p) < DRIFT_MARGIN * drift_of(result, bs)
    ]


def compared(result: Result, key: str) -> list[list[float]]:
    """The betas each part of claim ``key`` reads, in the order of its parts: the
    whole sweep per rule (``jena-order``), or beta = 0 and one beta > 0 per rule
    (``jena-stall``)."""
    bs = betas(result)
    if key == "jena-order":
        return [bs] * len(RULES)
    return [[0.0, b] for _ in RULES for b in bs if b > 0]


def order_decision(result: Result, t=None, kind: str = "excess") -> rules.Decision:
    """ "The larger beta, the faster", under both step rules: one part per rule."""
    parts = [order_part(result, rule, t, kind) for rule in RULES]
    small = under_drift(result, parts, compared(result, "jena-order"))
    return _guarded(parts, small if kind != "raw" else [])


def stall_decision(result: Result, t=None, kind: str = "excess") -> rules.Decision:
    """ "beta = 0 stalls", under both step rules: one part per beta > 0 and rule."""
    parts = [p for rule in RULES for p in stall_parts(result, rule, t, kind)]
    small = under_drift(result, parts, compared(result, "jena-stall"))
    return _guarded(parts, small if kind != "raw" else [])


def speed_decision(
    result: Result, key: str, t=None, kind: str = "excess"
) -> rules.Decision:
    """The decision of claim ``key`` (``jena-order`` or ``jena-stall``)."""
    return {"jena-order": order_decision, "jena-stall": stall_decision}[key](
        result, t, kind
    )


def within_drift(result: Result, key: str) -> int:
    """How many parts of claim ``key`` (main measure, at T) have an effect below
    :data:`DRIFT_MARGIN` times the drift of the best-found losses they read."""
    parts = speed_decision(result, key).parts
    return len(under_drift(result, list(parts), compared(result, key)))


def _guarded(parts: list[rules.Part], small: list[str]) -> rules.Decision:
    return rules.decision(
        parts,
        measurable=not small,
        why_not_measurable="inconclusive because of the best-found loss: "
        + "; ".join(small)
        + " (effect against five times the last-stage drift)",
    )


def ratio_gap(result: Result) -> list[rules.Part]:
    """ "Much larger with the residual": ``log10 rho(beta) - log10 rho(0) > 2`` per
    beta > 0 (a factor :data:`RATIO_FACTOR`), paired by seed."""
    rho0 = np.log10(results.pick(result.points, beta=0.0).ratio)
    return [
        rules.comparison(
            np.log10(p.ratio),
            rho0,
            direction="greater",
            paired=True,
            shift=np.log10(RATIO_FACTOR),
            label=f"log10 ρ(β = {p.beta:g}) − log10 ρ(0)",
        )
        for p in result.points
        if p.beta > 0
    ]


def paper_norms(result: Result) -> tuple[float, float]:
    """The norms ``||Z||`` at which the paper's value is the float32 rounding level
    ``c^2 eps_32^2 ||Z||`` (eq. ``jena-floor``), for ``c`` over the measured floor
    factors: (smallest, largest)."""
    c = np.concatenate([f.c for f in result.floor_factors])
    return (
        PAPER_RATIO_BETA0 / (c.max() * eps("float32")) ** 2,
        PAPER_RATIO_BETA0 / (c.min() * eps("float32")) ** 2,
    )


def bracket(result: Result) -> tuple[Reading | None, Reading | None]:
    """The float64 readings at beta = 0 whose means lie nearest the paper's value
    from below and from above (``None`` where none does)."""
    point = results.pick(result.points, beta=0.0)
    f64 = [r for r in point.readings if r.precision == "float64"]
    below = [r for r in f64 if np.mean(r.ratio) <= PAPER_RATIO_BETA0]
    above = [r for r in f64 if np.mean(r.ratio) > PAPER_RATIO_BETA0]
    return (
        max(below, key=lambda r: np.mean(r.ratio), default=None),
        min(above, key=lambda r: np.mean(r.ratio), default=None),
    )


@dataclass(frozen=True)
class FactorReading:
    """What the factors of the smallest per-sample attention output at ``beta`` show
    (eq. ``jena-factors``), read at each seed's reading where it is smallest:
    ``relative``, per factor (``attention``, ``window``, ``values``) and seed, its
    smallest singular value over its largest; ``near``, the factors nearly singular
    (median at most :data:`NEAR_SINGULAR`); ``product_off``, the largest distance in
    decades, over every reading, of ``sigma_min(P_p X_p)`` from the product
    ``sigma_k(P_p) sigma_min(X_p)``; ``below_cap``, its median distance below the
    tighter cap; ``rank_one``, the median ``sigma_2 / sigma_1(P_p)``; ``values_low``,
    the smallest ``log10 sigma_min(W_V) / ||W_V||`` over the seeds."""

    relative: dict[str, np.ndarray]
    near: frozenset[str]
    product_off: float
    below_cap: float
    rank_one: float
    values_low: float

    @property
    def multiply(self) -> bool:
        """Both the attention and the window nearly singular, and ``sigma_min(P_p
        X_p)`` within a decade of the product of their smallest singular values."""
        return self.near == {"attention", "window"} and self.product_off <= 1.0

    @property
    def collapsed(self) -> bool:
        """The rows of the attention matrix nearly coincide (a rank-one collapse):
        the median ``sigma_2 / sigma_1(P_p)`` is below 0.1."""
        return self.rank_one < 0.1


def factor_reading(result: Result, beta: float = 0.0) -> FactorReading:
    """The :class:`FactorReading` of the models at ``beta`` (common step)."""
    f = results.pick(result.points, beta=beta).factors
    at = (np.arange(f.sigma_Z.shape[0]), f.sigma_Z.argmin(1))
    relative = {
        "attention": f.sigma_P[at] / f.norm_P[at],
        "window": f.sigma_X[at] / f.norm_X[at],
        "values": f.sigma_W_V[at] / f.norm_W_V[at],
    }
    near = frozenset(k for k, v in relative.items() if np.median(v) <= NEAR_SINGULAR)
    product = np.log10(f.sigma_P * f.sigma_X)
    cap = np.log10(np.minimum(f.sigma_P * f.norm_X, f.norm_P * f.sigma_X))
    return FactorReading(
        relative,
        near,
        float(np.abs(np.log10(f.sigma_PX) - product).max()),
        float(np.median(cap - np.log10(f.sigma_PX))),
        float(np.median(f.rank_one[at])),
        float(np.log10(relative["values"].min())),
    )


def checks(result: Result) -> list[Check]:
    """The chapter's acceptance: finite runs that lower the loss, the step rules as
    stated, a best-found loss that no GD run undercuts, the main ratio read again on
    the grid, and ``FLOOR_UNITS`` above every measured floor factor."""
    s, T = result.settings, result.settings.steps
    lam = np.concatenate([p.sharpness for p in result.points])
    step = {
        rule: np.concatenate([r.step_size for r in result.runs if r.rule == rule])
        for rule in RULES
    }
    g = np.asarray(result.grid)
    main = [
        np.array(reading(p, "float64", "stacked", "spectral").ratio)
        / ratio(r.sigma_min[:, g], r.sigma_max[:, g])
        for p, r in zip(result.points, [r for r in result.runs if r.rule == "common"])
    ]
    finite = all(np.isfinite(r.loss).all() for r in result.runs)
    fall = max(float((r.loss[:, T] / r.loss[:, 0]).max()) for r in result.runs)
    common = float(np.abs(step["common"] * lam.max() - s.mu_factor).max())
    own = float(np.abs(step["own"] * lam - s.mu_factor).max())
    gd_low = min(
        float((r.loss.min(1) - best_found(result, r.beta)).min()) for r in result.runs
    )
    lbfgs = max(
        float((p.floor_run[:, -1] - np.asarray(p.floor)).max()) for p in result.points
    )
    reread = float(np.abs(np.concatenate(main) - 1).max())
    c = float(max(f.c.max() for f in result.floor_factors))
    seeds = 5 if s.profile == "book" else 3
    return [
        Check("seeds per compared arm", len(s.seeds), ">=", seeds),
        Check("every loss finite", finite, "==", True),
        Check("largest $\\Phi_T / \\Phi_0$ over all runs", fall, "<", 1.0),
        Check("common step times $\\max \\lambda_{\\max}$, largest error", common, "<=", 1e-12),
        Check("own steps times their $\\lambda_{\\max}$, largest error", own, "<=", 1e-12),
        Check("best-found loss: L-BFGS's last loss above it, largest", lbfgs, "==", 0.0),
        Check("best-found loss: GD's lowest loss above it, smallest", gd_low, ">=", 0.0),
        Check("float64 stacked spectral reading over the main ratio on the same grid", reread, "<=", 1e-9),
        Check("largest float32 floor factor $c$ of a rank-deficient matrix", c, "<=", FLOOR_UNITS),
    ]  # fmt: skip


def _per_beta(values: dict[float, np.ndarray]) -> str:
    return "; ".join(f"{b:g}: {fmt(*mean_se(v))}" for b, v in values.items())


def setting(result: Result) -> rules.Setting:
    """How the book's test differs from the paper's, in a few words."""
    s = result.settings
    return rules.reconstruction(
        "the book's preprocessing and sizes",
        f"N = {s.n_windows} windows of n = {s.n} hourly tokens, d = 14",
        f"T = {s.steps:,} GD steps, common and own step, {len(s.seeds)} seeds",
        "loss above an L-BFGS best-found loss",
    )


def readings_text(result: Result, decide) -> str:
    """The verdict of a claim under each reading beside the main one: the raw loss
    and the rate at T, and the loss above the best-found loss at T/4 and T/2."""
    T = result.settings.steps
    out = [f"{k} at T: {decide(result, None, k).verdict}" for k in ("raw", "rate")]
    out += [
        f"excess at t = {h:,}: {decide(result, h).verdict}" for h in horizons(result)
    ]
    return "; ".join(x for x in out if not x.startswith(f"excess at t = {T:,}"))


def claims(result: Result) -> list[Claim]:
    """The three claims of experiment 1. "Faster" is read as the loss above the
    best-found loss after T steps, under both step rules (each a part of the claim, so
    that a claim that holds under one rule and goes the other way under the other is
    not reproduced, and one unresolved under either is inconclusive); a part whose
    effect is within five times the best-found loss's drift makes the claim
    inconclusive. The raw loss, the rate and the horizons T/4 and T/2 are shown."""
    bs, T = betas(result), result.settings.steps
    where = f"$\\Phi_T - \\hat\\Phi$ at $T = {T:,}$"
    per_rule = "; ".join(
        f"{rule} step: {_per_beta({b: excess(result, b, rule) for b in bs})}"
        for rule in RULES
    )
    tr = order_decision(result)
    order_row = Claim.tested(
        "jena-order",
        "Jena: larger $\\beta$ converges faster",
        "the larger $\\beta$, the faster GD converges",
        f"{where} per $\\beta$, {per_rule}; the other readings: "
        + readings_text(result, order_decision),
        tr,
        setting=setting(result),
    )
    st = stall_decision(result)
    stall_row = Claim.tested(
        "jena-stall",
        "Jena: $\\beta = 0$ stalls",
        "without the residual GD is very slow or stalls",
        f"{where} per $\\beta$, {per_rule}; the other readings: "
        + readings_text(result, stall_decision),
        st,
        setting=setting(result),
    )
    gap = rules.decision(ratio_gap(result))
    low, high = paper_norms(result)
    ratio_row = Claim(
        "jena-ratio",
        "Jena: $\\min_t \\sigma_{\\min}^2(Z_t) / \\max_t \\Vert Z_t \\Vert$",
        f"${PAPER_RATIO_BETA0 / 1e-14:.3g} \\times 10^{{-14}}$ without the residual, "
        "much larger with it",
        f"$\\rho$ (float64, stacked, spectral norm) per $\\beta$: "
        f"{_per_beta({p.beta: p.ratio for p in result.points})}",
        gap.verdict,
        gap.reason() + "; the paper's value itself is consistent with the float32 "
        f"rounding level of any $Z$ with a norm from {low:.3g} to {high:.3g}",
        rule=gap.rule(),
        setting=rules.reconstruction(
            "the book's preprocessing and sizes",
            "float64",
            f"a gap of a factor {RATIO_FACTOR:g} read as much larger",
        ),
        decision=gap,
    )
    return [order_row, stall_row, ratio_row]
