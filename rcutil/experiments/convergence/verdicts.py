"""The convergence chapter's acceptance checks and its five claims, and the readings of
a stored :class:`~rcutil.experiments.convergence.Result` that decide them: the one-step
ratios of GD against the certified rate, the loss reached, the tightness of the
constants, and the late rate of the sweep against its prediction."""

from __future__ import annotations

import numpy as np

from ... import results
from ...checks import Check
from ...claims import Claim, check_verdict, reconstruction
from . import Depth, Result, SweepPoint

#: Rounding allowance of ``max_t Phi_{t+1}/Phi_t <= 1 - mu alpha`` (float64).
RATE_SLACK = 1e-12
#: The late rate follows the slow mode: ``1 - rate`` within this factor of
#: ``1 - (1 - kappa(H_0)^-2)^2`` ...
LATE_FACTOR = 1.5
#: ... at every ``beta`` from this one up (below, the slowest mode has not yet come to
#: dominate within the sweep's steps).
SLOW_MODE_BETA = 0.25


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


def predicted_late_rate(p: SweepPoint) -> float:
    """``(1 - kappa(H_0)^-2)^2``: the slowest mode of least squares in ``W_U``."""
    return (1.0 - p.kappa_H**-2) ** 2


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
    beta0 = results.pick(result.sweep, beta=0.0)
    holds = all(x.holds for x in c)
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
        Check(r"$\max_t\Phi_{t+1}/\Phi_t - (1-\mu\alpha)$, largest over depths", rate, "<=", RATE_SLACK),
        Check(r"$\Phi_T/\Phi_0$ at $\mu = 1/C$, largest over depths", final, "<=", tol),
        Check(r"$\max_t\Vert\theta_t-\theta_0\Vert$ over the path bound, largest", distance, "<=", 1.0),
        Check("path bound over $r$, largest over depths", path, "<=", 1.0),
        Check(r"$\min_t\sigma_{Nn}(H_t)$ over $s_0-G_Hr$, smallest over depths", sigma, ">=", 1.0),
        Check(r"$\min_t\Vert\nabla\Phi_t\Vert^2/(2\Phi_t)$ over $\alpha$, smallest", pl, ">=", 1.0),
        Check("measured value over its bound ($G_H$, $K_H$, $C$), largest", tight, "<=", 1.0),
        Check(r"$\alpha/C$ over $\kappa(H_0)^{-2}$, largest over depths", kappa, "<=", 1.0),
        Check(f"late $1-$rate over its prediction, farthest from 1 for {b} (factor)", late, "<=", LATE_FACTOR),
        Check(r"late rate falls as $\beta$ grows, largest step", falls, "<", 0.0),
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


def slow_mode_shows(p: SweepPoint, steps: int) -> bool:
    """Whether a run of ``steps`` steps can show the slowest mode's rate: that mode
    decays by a factor e at least once within it, ``steps (1 - (1 - kappa^-2)^2) >=
    1``. Before that the late rate is that of faster modes still decaying."""
    return steps * (1.0 - predicted_late_rate(p)) >= 1.0


def steps_to_show(p: SweepPoint) -> float:
    """The steps a run needs to show the slowest mode at ``p`` (:func:`slow_mode_shows`)."""
    return 1.0 / (1.0 - predicted_late_rate(p))


def rate_parts(result: Result) -> dict[float, bool | None]:
    """Per ``beta`` of the sweep: the late ``1 - rate`` within :data:`LATE_FACTOR` of
    its prediction, or ``None`` where the run cannot show the slowest mode."""
    T = result.settings.sweep_steps
    return {
        p.beta: (
            max(late_factor(p), 1 / late_factor(p)) <= LATE_FACTOR
            if slow_mode_shows(p, T)
            else None
        )
        for p in result.sweep
    }


def claims(result: Result) -> list[Claim]:
    """The lemma (PL along GD), Theorem 1, the rate against ``kappa(H_0)``, Corollary 1
    and the multi-layer theorem, on the certifying instances, each an exact check."""
    one = results.pick(result.depths, layers=1)
    deep = [d for d in result.depths if d.layers > 1]
    s = result.settings
    tol, c1 = s.tol, one.certificate
    setting = reconstruction(
        "constants derived here",
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
    sweep = sorted(result.sweep, key=lambda p: p.beta)
    falls = all(b.late_rate < a.late_rate for a, b in zip(sweep, sweep[1:]))
    follows = rate_parts(result)
    shown = [p for p in sweep if follows[p.beta] is not None]
    hidden = [p for p in sweep if follows[p.beta] is None]
    off = [p.beta for p in sweep if follows[p.beta] is False]
    factor = max((max(late_factor(p), 1 / late_factor(p)) for p in shown), default=1.0)

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
    if off or not falls:
        rate_reason = "fails: " + "; ".join(
            (
                [
                    f"the late rate is off its prediction at $\\beta$ = {', '.join(map(str, off))}"
                ]
                if off
                else []
            )
            + (
                []
                if falls
                else ["the late rate does not fall at every step of $\\beta$"]
            )
        )
    elif hidden:
        longest = max(steps_to_show(p) for p in hidden)
        rate_reason = (
            f"follows its prediction at $\\beta$ = {betas(shown)}; at "
            f"$\\beta$ = {betas(hidden)} the {s.sweep_steps} steps cannot show the "
            f"slowest mode; it would take runs of about {longest:.1e} steps"
        )
    else:
        rate_reason = "follows its prediction at every $\\beta$ of the sweep"
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
            r"path bound $\le r$, $\sigma_{Nn}(H_t)\ge s_0-G_Hr$; no measured "
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
            f"{len(result.sweep)} values of $\\beta$, {s.sweep_steps} steps each; "
            f"where the run can show the slowest mode ($\\beta$ = {betas(shown)}) the "
            f"late $1-$rate is within a factor {factor:.2f} of "
            "$1-(1-\\kappa(H_0)^{-2})^2$",
            check_verdict([*follows.values(), falls]),
            rate_reason,
            rule=f"at every $\\beta$: the late $1-$rate within a factor "
            f"{LATE_FACTOR:g} of $1-(1-\\kappa(H_0)^{{-2}})^2$ where the run can show "
            "the slowest mode ($T(1-(1-\\kappa^{-2})^2) \\ge 1$; elsewhere that part "
            "is not resolved), and the late rate falls at every step of $\\beta$",
            setting=reconstruction(
                *setting.differences,
                "measured through the features $H$ that contain $Z$",
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
            rule=r"every $L > 1$: every step has $\Phi_{t+1}/\Phi_t\le1-\mu\alpha$, "
            f"and $\\Phi_T/\\Phi_0\\le$ {tol:g}",
            setting=reconstruction(
                *setting.differences,
                "constants evaluated numerically around $\\theta_0$",
                "the residual-stream maps start scaled by $1/L$",
            ),
        ),
    ]
