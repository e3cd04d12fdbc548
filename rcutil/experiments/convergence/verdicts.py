"""The convergence chapter's acceptance checks and its five claims, and the readings of
a stored :class:`~rcutil.experiments.convergence.Result` that decide them: the one-step
ratios of GD against the certified rate, the loss reached, the tightness of the
constants, the certificates through ``Z``, and the late rate of the sweep against its
prediction."""

from __future__ import annotations

import numpy as np

from ... import results
from ...checks import Check
from ...claims import Claim, check_verdict, failures, reconstruction
from . import Depth, Result, SweepPoint

#: Rounding allowance of ``max_t Phi_{t+1}/Phi_t <= 1 - mu alpha`` (float64).
RATE_SLACK = 1e-12
#: The late rate follows the slow mode: ``1 - rate`` within this factor of
#: ``1 - (1 - mu sigma_{Nn}(H_0)^2)^2`` ...
LATE_FACTOR = 1.5
#: ... at every ``beta`` from this one up (below, the slowest mode has not yet come to
#: dominate within the sweep's steps).
SLOW_MODE_BETA = 0.25
#: Where the certificate through ``Z`` holds, ``1 - rate`` is within this factor of
#: the slowest mode predicted from ``Z_0`` alone, ``1 - (1 - mu beta^2
#: sigma_{Nn}(Z_0)^2)^2``.
Z_FACTOR = 1.1


def rates(depth: Depth) -> np.ndarray:
    """``Phi_{t+1} / Phi_t`` up to the iterate that reaches the tolerance."""
    loss = np.array(depth.loss[: depth.steps_to_tolerance + 1])
    return loss[1:] / loss[:-1]


def max_rate(depth: Depth) -> float:
    """The largest one-step ratio up to the tolerance."""
    return float(rates(depth).max())


def final_over_initial(depth: Depth) -> float:
    """``Phi_T / Phi_0``, ``T`` the first iterate at the tolerance."""
    return depth.loss[depth.steps_to_tolerance] / depth.loss[0]


def rate_check_factor(depth: Depth) -> float:
    """``(1 - max rate) / (mu alpha)``: the rate check fails only for a claimed
    ``mu alpha`` larger than the certified one by more than this factor."""
    c = depth.certificate
    return (1.0 - max_rate(depth)) / (c.mu * c.alpha)


def worst_tightness(depth: Depth) -> float:
    """The largest measured value over its bound, at ``theta_0`` and the last
    iterate."""
    return max(v["ratio"] for point in depth.tightness.values() for v in point.values())


def least_squares_gap(depth: Depth) -> float:
    """The largest relative difference, up to the tolerance, between the loss of GD
    and that of least squares in ``W_U`` on the frozen features ``H_0``."""
    T = depth.steps_to_tolerance + 1
    loss = np.asarray(depth.loss[:T])
    return float(np.max(np.abs(np.asarray(depth.least_squares[:T]) / loss - 1.0)))


def block_distance(depth: Depth) -> float:
    """How far the block weights (all but ``W_U``) moved, at most, along GD."""
    d, u = np.asarray(depth.distance), np.asarray(depth.distance_U)
    return float(np.sqrt(np.maximum(d**2 - u**2, 0.0)).max())


def predicted_late_rate(p: SweepPoint) -> float:
    """``(1 - mu sigma_{Nn}(H_0)^2)^2``: the slowest mode of least squares in ``W_U``
    on the features ``H_0``, at the sweep's step ``mu``."""
    return (1.0 - p.mu * p.sigma_min_H**2) ** 2


def predicted_from_Z(p: SweepPoint) -> float:
    """``(1 - mu beta^2 sigma_{Nn}(Z_0)^2)^2``: the same slowest mode with ``H_0``
    replaced by ``beta Z_0``, its part from the attention-layer output."""
    return (1.0 - p.mu * (p.beta * p.sigma_min_Z) ** 2) ** 2


def s_Z(p: SweepPoint) -> float:
    """``beta sigma_{Nn}(Z_0) - ||FFN(Z_0)||_2`` of a point of the sweep (eq.
    ``conv-weyl``)."""
    return p.beta * p.sigma_min_Z - p.ffn


def certified_through_Z(result: Result) -> list[SweepPoint]:
    """The points of the sweep whose certificate through ``Z`` holds."""
    return [p for p in result.sweep if p.certified_Z]


def smallest_certified_beta(result: Result) -> float | None:
    """The smallest ``beta`` of the sweep certified through ``Z`` (``None`` if none)."""
    return min((p.beta for p in certified_through_Z(result)), default=None)


def certified_from_there_up(result: Result) -> bool:
    """Every ``beta`` of the sweep at or above the smallest certified one is certified
    through ``Z`` (and one is)."""
    low = smallest_certified_beta(result)
    return low is not None and all(p.certified_Z for p in result.sweep if p.beta >= low)


def z_factor(p: SweepPoint) -> float:
    """``(1 - late rate) / (1 - predicted_from_Z)`` (infinite at ``beta = 0``, where
    ``Z_0`` predicts no decay at all)."""
    gap = 1.0 - predicted_from_Z(p)
    return (1.0 - p.late_rate) / gap if gap > 0 else np.inf


def slow_mode(result: Result) -> list[SweepPoint]:
    """The points of the sweep from :data:`SLOW_MODE_BETA` up."""
    return [p for p in result.sweep if p.beta >= SLOW_MODE_BETA]


def late_factor(p: SweepPoint) -> float:
    """``(1 - late rate) / (1 - predicted late rate)``."""
    return (1.0 - p.late_rate) / (1.0 - predicted_late_rate(p))


def checks(result: Result) -> list[Check]:
    """The chapter's acceptance table: every assertion of the proof, at every depth (the
    worst depth's value shown), and the ``beta`` sweep."""
    D, tol = result.depths, result.settings.tol
    c = [d.certificate for d in D]
    z = [d.z_certificate for d in D]
    beta0 = results.pick(result.sweep, beta=0.0)
    holds = all(x.holds for x in c)
    z_holds = all(x.holds for x in z)
    weyl = max(
        [x.s_lower / x.s0 for x in z] + [s_Z(p) / p.sigma_min_H for p in result.sweep]
    )
    z_rate = max(y.mu * y.alpha / (x.mu * x.alpha) for x, y in zip(c, z))
    z_sigma = min(min(d.sigma_min_H) / y.lam for d, y in zip(D, z))
    upward = certified_from_there_up(result)
    ls_gap = least_squares_gap(results.pick(D, layers=1))
    z_late = max(
        (max(f, 1 / f) for f in map(z_factor, certified_through_Z(result))),
        default=np.inf,
    )
    rate = max(max_rate(d) - d.certificate.predicted_rate for d in D)
    final = max(final_over_initial(d) for d in D)
    distance = max(max(d.distance) / x.path_bound for d, x in zip(D, c))
    path = max(x.path_bound / x.r for x in c)
    sigma = min(min(d.sigma_min_H) / x.lam for d, x in zip(D, c))
    pl = min(min(d.local_pl) / x.alpha for d, x in zip(D, c))
    tight = max(worst_tightness(d) for d in D)
    kappa = max(x.alpha / x.C / x.kappa_inv_sq for x in c)
    late = max(max(f, 1 / f) for f in map(late_factor, slow_mode(result)))
    falls = float(np.diff([p.late_rate for p in result.sweep]).max())
    early = 10  # steps within which the loss halves at beta = 0
    b = f"$\\beta\\ge{SLOW_MODE_BETA:g}$"
    return [
        Check("the certificate holds at every depth", holds, "==", True),
        Check("the certificate through $Z$ holds at every depth", z_holds, "==", True),
        Check(r"$h_Z$ over $h_{\min}$, largest over depths and $\beta$", weyl, "<=", 1.0),
        Check(r"rate $\mu\alpha$ through $Z$ over through $H$, largest over depths", z_rate, "<=", 1.0),
        Check(r"$\min_t\sigma_{Nn}(H_t)$ over $h_Z-G_HR$ (through $Z$), smallest", z_sigma, ">=", 1.0),
        Check(r"$\max_t\Phi_{t+1}/\Phi_t - (1-\mu\alpha)$, largest over depths", rate, "<=", RATE_SLACK),
        Check(r"$\Phi_T/\Phi_0$ at $\mu = 1/C$, largest over depths", final, "<=", tol),
        Check(r"$\max_t\Vert\theta_t-\theta_0\Vert$ over the path bound, largest", distance, "<=", 1.0),
        Check("path bound over $R$, largest over depths", path, "<=", 1.0),
        Check(r"$\min_t\sigma_{Nn}(H_t)$ over $h_{\min}-G_HR$, smallest over depths", sigma, ">=", 1.0),
        Check(r"$\min_t\Vert\nabla\Phi_t\Vert^2/(2\Phi_t)$ over $\alpha$, smallest", pl, ">=", 1.0),
        Check(r"$L = 1$: loss against least squares on $H_0$, largest relative gap", ls_gap, "<=", 1e-3),
        Check("measured value over its bound ($G_H$, $K_H$, $C$), largest", tight, "<=", 1.0),
        Check(r"$\alpha/C$ over $\kappa(H_0)^{-2}$, largest over depths", kappa, "<=", 1.0),
        Check(f"late $1-$rate over its prediction, farthest from 1 for {b} (factor)", late, "<=", LATE_FACTOR),
        Check(r"late rate falls as $\beta$ grows, largest step", falls, "<", 0.0),
        Check(r"certified through $Z$: every $\beta$ from the smallest certified up", upward, "==", True),
        Check(r"late $1-$rate over its prediction from $Z_0$, where certified (factor)", z_late, "<=", Z_FACTOR),
        Check(r"$\beta = 0$: $\alpha/C$ of the best certificate", beta0.alpha_over_C, "<", 1e-6),
        Check(r"$\beta = 0$: the certificate holds", beta0.certified, "==", False),
        Check(f"$\\beta = 0$: $\\Phi_{{{early}}}/\\Phi_0$", beta0.loss[early], "<", 0.5),
        Check(r"$\beta = 0$: late rate", beta0.late_rate, ">", 0.999),
    ]  # fmt: skip


def theorem_holds(depth: Depth) -> bool:
    """Every step up to the tolerance contracts by ``1 - mu alpha`` (Theorem 1)."""
    return max_rate(depth) <= depth.certificate.predicted_rate + RATE_SLACK


def minimum_reached(depth: Depth, tol: float) -> bool:
    """GD reached ``Phi_T <= tol Phi_0`` (Corollary 1)."""
    return final_over_initial(depth) <= tol


def claims(result: Result) -> list[Claim]:
    """The lemma (PL along GD), Theorem 1, the rate through ``Z_0``, Corollary 1 and
    the multi-layer theorem, on the certifying instances, each an exact check."""
    one = results.pick(result.depths, layers=1)
    deep = [d for d in result.depths if d.layers > 1]
    s = result.settings
    tol, c1 = s.tol, one.certificate
    setting = reconstruction(
        "constants derived here",
        r"$\alpha$ from singular values measured on the instance, not from the "
        "full-rank lemma (false as stated)",
        rf"the book's certified instance ($N = {s.N}$, $n = {s.n}$, $d = {s.d}$, "
        rf"$\tau = {s.tau:g}$, small targets)",
        r"activation $\tanh$",
    )
    path_ok = {
        d.layers: min(d.local_pl) >= d.certificate.alpha
        and max(d.distance) <= d.certificate.path_bound <= d.certificate.r
        and min(d.sigma_min_H) >= d.certificate.lam
        and worst_tightness(d) <= 1.0
        for d in result.depths
    }
    certified = certified_through_Z(result)
    low = smallest_certified_beta(result)
    z_factors = {p.beta: max(z_factor(p), 1 / z_factor(p)) for p in certified}
    rate_ok = {
        "certified through $Z$ from the smallest certified $\\beta$ up": (
            certified_from_there_up(result)
        ),
        "certified at $\\beta = 1$": results.pick(result.sweep, beta=1.0).certified_Z,
        **{
            f"late rate at $\\beta = {b:g}$": f <= Z_FACTOR
            for b, f in z_factors.items()
        },
    }

    def betas(ps) -> str:
        return ", ".join(f"{p.beta:g}" for p in ps)

    def layers_text(ds):
        return "; ".join(
            f"$L = {d.layers}$: max rate {max_rate(d):.6f} vs "
            f"{d.certificate.predicted_rate:.6f}, $\\Phi_T/\\Phi_0$ = "
            f"{final_over_initial(d):.1e}"
            for d in ds
        )

    deep_ok = [theorem_holds(d) and minimum_reached(d, tol) for d in deep]
    worst = max(worst_tightness(d) for d in result.depths)
    return [
        Claim(
            "lemma-smoothness",
            "Lemma: smoothness and gradient lower bound",
            r"$\nabla\Phi$ is $C$-Lipschitz near the initialisation and "
            r"$\Vert\nabla\Phi\Vert^2\ge2\alpha\Phi$ there",
            f"$L = 1$: smallest PL ratio along GD {min(one.local_pl):.3g} vs "
            f"$\\alpha$ = {c1.alpha:.3g}; largest measured / bound {worst:.3g} "
            f"over {len(result.depths)} depths",
            check_verdict(list(path_ok.values())),
            "the lemmas are proved with the book's constants; "
            + (
                "every inequality holds at every depth and iterate"
                if all(path_ok.values())
                else "fails at $L$ = "
                + ", ".join(str(k) for k, ok in path_ok.items() if not ok)
            ),
            rule=r"at every depth and iterate: PL ratio $\ge\alpha$, distance $\le$ "
            r"path bound $\le R$, $\sigma_{Nn}(H_t)\ge h_{\min}-G_HR$; no measured "
            "value above its bound",
            setting=setting,
        ),
        Claim(
            "theorem-1",
            "Theorem 1: linear convergence",
            r"if $\mu\le\min(1/C,1/\alpha)$ then "
            r"$\Phi(\theta_{t+1})\le(1-\mu\alpha)\Phi(\theta_t)$",
            f"$\\mu = 1/C$ = {c1.mu:.3g}: largest $\\Phi_{{t+1}}/\\Phi_t$ = "
            f"{max_rate(one):.6f} vs $1-\\mu\\alpha$ = {c1.predicted_rate:.6f}",
            check_verdict(theorem_holds(one)),
            "every step contracts at least at the certified rate"
            if theorem_holds(one)
            else "a step contracts less than the certified rate allows",
            rule=r"$L = 1$: every step up to the tolerance has "
            r"$\Phi_{t+1}/\Phi_t\le1-\mu\alpha$; the check misses an error in "
            rf"$\mu\alpha$ up to a factor {rate_check_factor(one):.2f}",
            setting=setting,
        ),
        Claim(
            "rate-singular-values",
            r"The rate follows $\sigma_{\min}/\sigma_{\max}$",
            "the rate is governed by the extreme singular values of the attention "
            "output",
            (
                f"certified through $Z_0$ for $\\beta$ = {betas(certified)} of "
                f"{len(result.sweep)} values; there the late $1-$rate at $\\mu = 1/C$ "
                f"is within a factor {max(z_factors.values()):.3f} of "
                "$1-(1-\\mu\\beta^2\\sigma_{Nn}^2(Z_0))^2$"
                if certified
                else f"no $\\beta$ of {len(result.sweep)} certified through $Z_0$"
            ),
            check_verdict(rate_ok),
            failures(rate_ok)
            or (
                f"for $\\beta\\ge{low:g}$ the certificate, built from "
                "$h_Z = \\beta\\sigma_{Nn}(Z_0) - \\Vert\\mathrm{FFN}(Z_0)\\Vert$, "
                "holds and the slowest mode of $\\beta Z_0$ sets the late rate"
            ),
            rule=r"the certificate through $Z$ holds at $\beta = 1$ and at every "
            r"$\beta$ of the sweep from the smallest certified one up, and at each "
            rf"certified $\beta$ the late $1-$rate is within a factor {Z_FACTOR:g} of "
            r"$1-(1-\mu\beta^2\sigma_{Nn}^2(Z_0))^2$",
            setting=reconstruction(
                *setting.differences,
                r"lazy regime: $W_U^0 = 0$, small targets",
                rf"wide: $d = {s.d}\ge Nn = {s.N * s.n}$",
                r"$W_2$ started at "
                f"{s.W_2_scale:g}"
                r" of its usual scale, so that $\Vert\mathrm{FFN}(Z_0)\Vert<"
                r"\beta\sigma_{Nn}(Z_0)$",
                (
                    f"certified for $\\beta\\ge{low:g}$ only"
                    if low is not None
                    else "certified for no $\\beta$"
                ),
            ),
        ),
        Claim(
            "corollary-1",
            "Corollary 1: global minimum",
            r"under the same conditions GD reaches a global minimum, "
            r"$\Phi(\theta^*)=0$",
            f"$\\mu = 1/C$: $\\Phi_T/\\Phi_0$ = {final_over_initial(one):.1e} in "
            f"{one.steps_to_tolerance} steps (bound: {one.bound_steps})",
            check_verdict(minimum_reached(one, tol)),
            "the instance of Theorem 1 reaches the tolerance"
            if minimum_reached(one, tol)
            else "GD stops above the tolerance",
            rule=f"$L = 1$: $\\Phi_T/\\Phi_0\\le$ {tol:g} at the theorem's step",
            setting=setting,
        ),
        Claim(
            "multilayer",
            "Multi-layer theorem",
            "the same linear rate holds for an $L$-layer stack under suitable "
            "initialisation",
            layers_text(deep) if deep else "no depth above 1 in this profile",
            check_verdict(deep_ok if deep else None),
            (
                "every depth contracts at its certified rate and reaches the tolerance"
                if deep and all(deep_ok)
                else "fails at $L$ = "
                + ", ".join(str(d.layers) for d, ok in zip(deep, deep_ok) if not ok)
                if deep
                else "not checked: the profile has one layer only"
            ),
            would_take="" if deep else "a profile with more than one layer",
            rule=r"every $L > 1$: every step has $\Phi_{t+1}/\Phi_t\le1-\mu\alpha$, "
            f"and $\\Phi_T/\\Phi_0\\le$ {tol:g}",
            setting=reconstruction(
                *setting.differences,
                "constants evaluated numerically around $\\theta_0$",
                "the residual-stream maps start scaled by $1/L$",
            ),
        ),
    ]
