"""The Jena chapter's acceptance checks and its three claims, and the readings of a
stored :class:`~rcutil.experiments.jena.Result` that decide them: the loss above the
floor, the order along beta and the stall of beta = 0 (at each horizon and under each
step rule), the settling of the floor, the gap of the ratio, and the readings at the
float32 floor."""

from __future__ import annotations

import numpy as np

from ... import claims as rules
from ... import results
from ...checks import Check
from ...claims import Claim, Comparison, Trend, compare, decide, fmt, mean_se, trend
from ...rounding import eps
from . import RULES, Point, Reading, Result, ratio

#: The one number of the experiment the paper makes public: min_t sigma_min^2(Z_t) /
#: max_t ||Z_t|| at beta = 0 (its norm and precision are not stated).
PAPER_RATIO_BETA0 = 7.74e-14
#: The rule that decides the claims: the paper sweeps beta at one constant step.
PAPER_RULE = "common"
#: A smallest singular value of at most this many ``eps ||Z||_2`` is at its precision's
#: floor (eq. ``jena-floor``): every rank-deficient matrix measured came out below it.
FLOOR_UNITS = 2.0
#: "Much larger with the residual": ``rho(beta) >= RATIO_FACTOR rho(0)`` for every beta
#: > 0.
RATIO_FACTOR = 100.0
#: The floor has settled when Adam's last half lowered it by at most this share of the
#: smallest mean loss above the floor that a claim compares.
FLOOR_SETTLED = 0.25


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
    singular value is at its precision's floor."""
    return [r for r in point.readings if np.mean(r.c) <= FLOOR_UNITS]


def excess(
    result: Result, beta: float, rule: str = PAPER_RULE, t: int | None = None
) -> np.ndarray:
    """``Phi_t - Phi*`` per seed: the loss above the floor at iterate ``t`` (default
    T)."""
    t = result.settings.steps if t is None else t
    run_ = results.pick(result.runs, beta=beta, rule=rule)
    return run_.loss[:, t] - np.asarray(results.pick(result.points, beta=beta).floor)


def floor_drift(result: Result, beta: float) -> np.ndarray:
    """How much Adam's last half lowered the floor, per seed: ``Phi_Adam(F/2) -
    Phi*``."""
    point = results.pick(result.points, beta=beta)
    return point.floor_run[:, point.floor_run.shape[1] // 2] - np.asarray(point.floor)


def floor_settling(result: Result) -> tuple[float, float]:
    """``(drift, smallest)``: the largest drop of the floor over Adam's last half, and
    the smallest mean loss above the floor that a claim compares (every beta, rule and
    horizon). The floor has settled when the first is at most :data:`FLOOR_SETTLED` of
    the second."""
    bs = betas(result)
    drift = max(float(floor_drift(result, b).max()) for b in bs)
    smallest = min(
        float(excess(result, b, rule, t).mean())
        for b in bs
        for rule in RULES
        for t in horizons(result)
    )
    return drift, smallest


def order(result: Result, rule: str = PAPER_RULE, t: int | None = None) -> Trend:
    """ "The larger beta, the faster": the loss above the floor falls along beta."""
    bs = betas(result)
    return trend(bs, [excess(result, b, rule, t) for b in bs], direction="less")


def stall(
    result: Result, rule: str = PAPER_RULE, t: int | None = None
) -> list[Comparison]:
    """ "beta = 0 stalls": its loss above the floor exceeds that of every beta > 0."""
    at0 = excess(result, 0.0, rule, t)
    return [
        compare(at0, excess(result, b, rule, t), direction="greater")
        for b in betas(result)
        if b > 0
    ]


def together(comparisons: list[Comparison]) -> str:
    """``HOLDS`` when every comparison holds, ``FAILS`` when one holds the other way."""
    outcomes = [c.outcome for c in comparisons]
    if rules.FAILS in outcomes:
        return rules.FAILS
    return rules.HOLDS if all(o == rules.HOLDS for o in outcomes) else rules.UNRESOLVED


def order_outcomes(result: Result, rule: str = PAPER_RULE) -> list[str]:
    """The outcome of :func:`order` at each of the :func:`horizons`."""
    return [order(result, rule, h).outcome for h in horizons(result)]


def stall_outcomes(result: Result, rule: str = PAPER_RULE) -> list[str]:
    """The outcome of :func:`stall`, all together, at each of the :func:`horizons`."""
    return [together(stall(result, rule, h)) for h in horizons(result)]


def horizons_agree(result: Result) -> bool:
    """Whether neither verdict (order, stall; common step) changes with the horizon."""
    return len(set(order_outcomes(result))) == len(set(stall_outcomes(result))) == 1


def ratio_gap(result: Result) -> list[Comparison]:
    """ "Much larger with the residual": ``log10 rho(beta) > log10 rho(0) + 2`` per beta
    > 0 (a factor :data:`RATIO_FACTOR`), over seeds."""
    rho0 = results.pick(result.points, beta=0.0).ratio
    shifted = np.log10(rho0) + np.log10(RATIO_FACTOR)
    return [
        compare(np.log10(p.ratio), shifted, direction="greater")
        for p in result.points
        if p.beta > 0
    ]


def at_floor(result: Result, rule: str = PAPER_RULE, t: int | None = None) -> bool:
    """Whether every beta's mean loss above the floor is within what Adam's last half
    still moved the floor: then the measure cannot tell the runs apart."""
    drift = max(float(floor_drift(result, b).max()) for b in betas(result))
    return max(float(excess(result, b, rule, t).mean()) for b in betas(result)) <= drift


def paper_norms(result: Result) -> tuple[float, float]:
    """The norms ``||Z||`` at which the paper's value is the float32 floor ``c^2
    eps_32^2 ||Z||`` (eq. ``jena-floor``), for ``c`` over the measured floor factors:
    (smallest, largest)."""
    c = np.concatenate([f.c for f in result.floor_factors])
    return (
        PAPER_RATIO_BETA0 / (c.max() * eps("float32")) ** 2,
        PAPER_RATIO_BETA0 / (c.min() * eps("float32")) ** 2,
    )


def checks(result: Result) -> list[Check]:
    """The chapter's acceptance: finite runs that lower the loss, the step rules as
    stated, a floor that has settled, the main ratio read again on the grid, and
    ``FLOOR_UNITS`` above every measured floor factor."""
    s, T = result.settings, result.settings.steps
    lam = np.concatenate([p.sharpness for p in result.points])
    step = {
        rule: np.concatenate([r.step_size for r in result.runs if r.rule == rule])
        for rule in RULES
    }
    drift, smallest = floor_settling(result)
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
    reread = float(np.abs(np.concatenate(main) - 1).max())
    c = float(max(f.c.max() for f in result.floor_factors))
    seeds = 5 if s.profile == "book" else 3
    return [
        Check("seeds per compared arm", len(s.seeds), ">=", seeds),
        Check("every loss finite", finite, "==", True),
        Check("largest $\\Phi_T / \\Phi_0$ over all runs", fall, "<", 1.0),
        Check("common step times $\\max \\lambda_{\\max}$, largest error", common, "<=", 1e-12),
        Check("own steps times their $\\lambda_{\\max}$, largest error", own, "<=", 1e-12),
        Check("floor: Adam's last-half drop over the smallest mean excess", drift / smallest, "<=", FLOOR_SETTLED),
        Check("float64 stacked spectral reading over the main ratio on the same grid", reread, "<=", 1e-9),
        Check("largest float32 floor factor $c$ of a rank-deficient matrix", c, "<=", FLOOR_UNITS),
    ]  # fmt: skip


def _per_beta(values: dict[float, list[float]]) -> str:
    return "; ".join(f"{b:g}: {fmt(*mean_se(v))}" for b, v in values.items())


def _ps(comparisons) -> str:
    return ", ".join(f"{c.p:.2g}" for c in comparisons)


def _reason(outcome: str, unlike: list[str], floored: bool, why: dict[str, str]) -> str:
    """Why a claim got its status: at the floor, held only under some readings (the
    ones it does not hold under: ``unlike``), or ``why[outcome]``."""
    if floored:
        return "every $\\beta$ is within the floor's own uncertainty"
    if outcome == rules.HOLDS and unlike:
        return "holds at $T$ under the common step, not " + " nor ".join(unlike)
    return why[outcome]


def _unlike(at_horizons: list[str], own: str) -> list[str]:
    """The readings under which a verdict differs from the one at T, common step."""
    return ["at every horizon"] * (len(set(at_horizons)) > 1) + [
        "at each model's own step"
    ] * (own != at_horizons[-1])


def claims(result: Result) -> list[Claim]:
    """The three claims of experiment 1, each decided over seeds under the common step
    at the horizon T. A verdict that is not the same at T/4, T/2 and T, or not the same
    at each model's own step, is a deviation (horizon and step are the book's
    choices)."""
    bs, T, S = betas(result), result.settings.steps, len(result.settings.seeds)
    floored = at_floor(result)
    tr, st = order(result), together(stall(result))
    order_at, stall_at = order_outcomes(result), stall_outcomes(result)
    order_own, stall_own = order(result, "own").outcome, together(stall(result, "own"))
    order_unlike = _unlike(order_at, order_own)
    stall_unlike = _unlike(stall_at, stall_own)
    ex = {b: excess(result, b) for b in bs}
    measured = f"loss above the floor $\\Phi_T - \\Phi^*$ at $T = {T}$, common step"
    horizon_text = "; at $T/4$, $T/2$, $T$: "
    order_row = Claim(
        "jena-order",
        "Jena: larger $\\beta$ converges faster",
        "the larger $\\beta$, the faster GD converges",
        f"{measured}, per $\\beta$: {_per_beta(ex)}; p of each step up in $\\beta$: "
        f"{_ps(tr.steps)}; of $\\beta = 1$ against 0: {tr.ends.p:.2g}"
        f"{horizon_text}{', '.join(order_at)}; own step at $T$: {order_own}",
        decide(tr.outcome, deviation=bool(order_unlike), floor=floored),
        _reason(
            tr.outcome,
            order_unlike,
            floored,
            {
                rules.HOLDS: "every step up in $\\beta$ lowers the loss above the "
                "floor",
                rules.FAILS: "a step up in $\\beta$, or $\\beta = 1$ against 0, goes "
                "the other way",
                rules.UNRESOLVED: f"$\\beta = 1$ against 0: {tr.ends.outcome}; "
                f"neighbouring $\\beta$ are not told apart by {S} seeds",
            },
        ),
        rule="trend of $\\Phi_T - \\Phi^*$ along $\\beta$, every neighbouring pair "
        "by a " + rules.rule_text(S),
    )
    stall_row = Claim(
        "jena-stall",
        "Jena: $\\beta = 0$ stalls",
        "without the residual GD is very slow or stalls",
        f"{measured}: $\\beta = 0$ {fmt(*mean_se(ex[0.0]))}, $\\beta > 0$ "
        f"{_per_beta({b: ex[b] for b in bs if b > 0})}; p: {_ps(stall(result))}"
        f"{horizon_text}{', '.join(stall_at)}; own step at $T$: {stall_own}",
        decide(st, deviation=bool(stall_unlike), floor=floored),
        _reason(
            st,
            stall_unlike,
            floored,
            {
                rules.HOLDS: "$\\beta = 0$ ends farthest from its floor",
                rules.FAILS: "a $\\beta > 0$ ends farther from its floor than "
                "$\\beta = 0$",
                rules.UNRESOLVED: f"$\\beta = 0$ is not told apart from every "
                f"$\\beta > 0$ by {S} seeds",
            },
        ),
        rule="$\\beta = 0$ against every $\\beta > 0$, each by a " + rules.rule_text(S),
    )
    gap = ratio_gap(result)
    low, high = paper_norms(result)
    ratio_row = Claim(
        "jena-ratio",
        "Jena: $\\min_t \\sigma_{\\min}^2(Z_t) / \\max_t \\Vert Z_t \\Vert$",
        f"${PAPER_RATIO_BETA0 / 1e-14:.3g} \\times 10^{{-14}}$ without the residual, "
        "much larger with it",
        f"$\\rho$ (float64, stacked, spectral norm) per $\\beta$: "
        f"{_per_beta({p.beta: p.ratio for p in result.points})}; p of a factor of "
        f"{RATIO_FACTOR:g} for each $\\beta > 0$: {_ps(gap)}",
        decide(together(gap), deviation=True),
        "the gap is decided over seeds; the value differs (the book's data settings, "
        "float64) and the paper's value is consistent with the float32 rounding floor "
        f"of any $Z$ with a norm from {low:.3g} to {high:.3g}",
        rule=f"$\\log_{{10}} \\rho(\\beta)$ against $\\log_{{10}} \\rho(0) + "
        f"{np.log10(RATIO_FACTOR):g}$, each $\\beta > 0$ by a " + rules.rule_text(S),
    )
    return [order_row, stall_row, ratio_row]
