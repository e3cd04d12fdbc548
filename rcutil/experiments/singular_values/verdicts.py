"""The singular-value chapter's acceptance checks and its claim, and the readings of the
sweep that decide them, from a stored
:class:`~rcutil.experiments.singular_values.Result`."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from ... import results
from ...checks import Check
from ...claims import STATED, Claim, check_verdict, failures, reconstruction
from ...model import attention
from . import COLLAPSED, STANDARD, Regime, Result

#: Relative float64 round-off allowed when a bound is compared with an SVD.
RTOL = 1e-10
#: The residual's least gain: sigma_min(Z) at beta = 1 over sigma_min(Z) at beta = 0.
GAIN = 100.0
#: Least factor by which the residual lowers the median condition number when collapsed.
KAPPA_DROP = 10.0
#: Each scaling typeset (a power, not a root: a figure's SVG text cannot place the
#: root's bar).
TAU = {STANDARD: r"$\tau = d_{QK}^{1/2}$", COLLAPSED: r"$\tau = d_{QK}$"}
#: The quantities and residual strengths of the checks, typeset.
TEX = {
    "smin": r"$\sigma_{\min}(Z)$",
    "kappa": r"$\kappa(Z)$",
    0.0: r"$\beta = 0$",
    1.0: r"$\beta = 1$",
}


def at_beta(result: Result, regime: Regime, field: str, beta: float) -> np.ndarray:
    """The values of ``field`` of ``regime`` over the draws at ``beta``."""
    return getattr(regime, field)[result.betas.index(beta)]


def weyl_onset(result: Result, regime: Regime) -> float:
    """The smallest beta from which the median of Weyl's lower bound stays positive
    (``nan`` if it is not positive at the last beta)."""
    positive = np.median(regime.weyl_lower, axis=1) > 0
    if not positive[-1]:
        return float("nan")
    off = np.flatnonzero(~positive)
    return result.betas[off[-1] + 1 if off.size else 0]


def gains(result: Result, regime: Regime) -> np.ndarray:
    """Per draw, sigma_min(Z) at beta = 1 over sigma_min(Z) at beta = 0."""
    return at_beta(result, regime, "sigma_min", 1.0) / at_beta(
        result, regime, "sigma_min", 0.0
    )


def kappa_medians(result: Result, regime: Regime) -> tuple[float, float]:
    """The median of kappa(Z) over the draws, at beta = 0 and at beta = 1."""
    return tuple(
        float(np.median(at_beta(result, regime, "kappa", b))) for b in (0.0, 1.0)
    )


def checks(result: Result) -> list[Check]:
    """The chapter's acceptance checks on the sweep."""
    smin, kappa, b0, b1 = TEX["smin"], TEX["kappa"], TEX[0.0], TEX[1.0]
    rows = []
    for r in result.regimes:
        weyl = float((r.weyl_lower / r.sigma_min).max())
        step = float(np.diff(r.sigma_min.mean(axis=1)).min())
        rows += [
            Check(f"{TAU[r.scaling]}: Weyl's lower bound over {smin}, largest", weyl, "<=", 1 + RTOL),
            Check(f"{TAU[r.scaling]}: mean {smin}, smallest step up in $\\beta$", step, ">", 0.0),
        ]  # fmt: skip
    collapsed = results.pick(result.regimes, scaling=COLLAPSED)
    gain = float(gains(result, collapsed).min())
    kappa0, kappa1 = kappa_medians(result, collapsed)
    onset = weyl_onset(result, collapsed)
    tau = TAU[COLLAPSED]
    return rows + [
        Check(f"{tau}: {smin} at {b1} over {b0}, smallest gain over the draws", gain, ">", GAIN),
        Check(f"{tau}: median {kappa} at {b0} over that at {b1}", kappa0 / kappa1, ">", KAPPA_DROP),
        Check(f"{tau}: $\\beta$ from which the median Weyl bound is positive", onset, "<", 1.0),
    ]  # fmt: skip


#: A matrix counts as singular when its smallest singular value is below this share of
#: its largest: float64 round-off of an exactly singular one.
RANK_TOL = 1e-12


@dataclass(frozen=True)
class Counterexample:
    """An ``X`` of full rank whose ``Z = Attn(X) + beta X`` may not be: the singular
    values of both, largest first."""

    what: str  #: the instance, typeset
    sigma_X: tuple[float, ...]
    sigma_Z: tuple[float, ...]

    @property
    def refutes(self) -> bool:
        """``X`` has full rank and ``Z`` has not, to float64 round-off."""
        full = self.sigma_X[-1] > RANK_TOL * self.sigma_X[0]
        return full and self.sigma_Z[-1] <= RANK_TOL * self.sigma_Z[0]


def _svals(M: torch.Tensor) -> tuple[float, ...]:
    return tuple(torch.linalg.svdvals(M.reshape(-1, M.shape[-1])).tolist())


def rank_counterexamples(beta: float = 0.5) -> list[Counterexample]:
    """Two instances of the model's attention (eq. ``model-attn``) on which ``X`` has
    full rank and ``Z`` loses it:

    * ``W_V = I``, ``0 < beta < 1``, two orthonormal tokens whose scores are
      ``((0, g), (g, 0))`` up to row shifts, ``g = log((1 + beta)/(1 - beta))``: the
      softmax gives ``P + beta I = (1 + beta)/2 11^T``, of rank one;
    * ``W_V = -I`` and ``beta = 1`` (the paper's ``Attn(X) + X``) with ``d >= N n``:
      each sample's ``Z_p = (I - P_p) X_p`` has ``(I - P_p) 1 = 0``, so ``Z`` has rank
      at most ``N (n - 1)`` while ``X`` has rank ``N n``."""
    f64 = torch.float64
    g = math.log((1 + beta) / (1 - beta))
    X = torch.eye(2, dtype=f64)[None]
    W_Q = torch.tensor([[1.0], [-1.0]], dtype=f64)
    W_K = torch.tensor([[0.0], [g]], dtype=f64)
    Z = attention(X, W_Q, W_K, torch.eye(2, dtype=f64), 1.0) + beta * X
    first = Counterexample(
        rf"$W_V = I$, $\beta = {beta:g}$, two tokens with scores "
        rf"$((0, g), (g, 0))$, $g = \log {(1 + beta) / (1 - beta):g}$",
        _svals(X),
        _svals(Z),
    )
    gen = torch.Generator().manual_seed(0)
    N, n, d = 2, 3, 6
    X = torch.randn(N, n, d, generator=gen, dtype=f64)
    W_Q, W_K = (torch.randn(d, 2, generator=gen, dtype=f64) for _ in range(2))
    Z = attention(X, W_Q, W_K, -torch.eye(d, dtype=f64), 1.0) + X
    second = Counterexample(
        rf"$W_V = -I$, $\beta = 1$, Gaussian $X$ and weights, $N = {N}$, $n = {n}$, "
        rf"$d = {d}$",
        _svals(X),
        _svals(Z),
    )
    return [first, second]


def claims(result: Result) -> list[Claim]:
    """ "The residual keeps Z of full rank": as the paper states it (refuted by
    :func:`rank_counterexamples`), and as the book proves it, with a condition, on
    the collapsed regime of the sweep: the residual (beta = 1) multiplies
    sigma_min(Z) by more than :data:`GAIN` on every draw, the median condition number
    falls by more than :data:`KAPPA_DROP`, and Weyl's lower bound holds on every
    draw."""
    found = rank_counterexamples()
    refuting = [c for c in found if c.refutes]
    stated = Claim(
        "lemma-residual",
        "Lemma: the residual keeps Z of full rank",
        r"$Z = \mathrm{Attn}(X) + X$ keeps full rank whenever $X$ does, so "
        r"$\sigma_{\min}(Z) > 0$",
        "; ".join(
            rf"{c.what}: $\sigma_{{\min}}(Z)/\sigma_{{\max}}(Z)$ = "
            rf"{c.sigma_Z[-1] / c.sigma_Z[0]:.1e} while $\sigma_{{\min}}(X)$ = "
            f"{c.sigma_X[-1]:.3g}"
            for c in found
        ),
        check_verdict([False if c.refutes else None for c in found]),
        (
            f"{len(refuting)} counterexample{'s' if len(refuting) > 1 else ''}: "
            "the statement is false as stated; the next card gives what the book "
            "proves in its place"
            if refuting
            else "no instance of the book refutes it, and no finite search proves a "
            "statement about every X"
        ),
        would_take=""
        if refuting
        else "a proof, or an instance that refutes it: no finite search settles a "
        "statement about every X",
        rule=f"one X of full rank whose Z is singular (smallest singular value below "
        f"{RANK_TOL:g} of the largest) refutes it; without one the claim is not "
        "resolved by instances",
        setting=STATED,
    )
    collapsed = results.pick(result.regimes, scaling=COLLAPSED)
    gain = gains(result, collapsed)
    kappa0, kappa1 = kappa_medians(result, collapsed)
    weyl = max(float((r.weyl_lower / r.sigma_min).max()) for r in result.regimes)
    draws = result.settings.sweep_instances
    parts = {
        "the gain in the collapse": bool(gain.min() > GAIN),
        "the fall of the condition number": bool(kappa0 > KAPPA_DROP * kappa1),
        "Weyl's bound": weyl <= 1 + RTOL,
    }
    bound = Claim(
        "residual-bound",
        "The residual keeps Z well conditioned, with a condition",
        r"the residual keeps $\sigma_{\min}(Z)$ away from zero where the attention "
        r"output alone collapses",
        rf"collapsed attention ($\tau = d_{{QK}} = {collapsed.d_qk}$), {draws:,} "
        rf"draws: the residual multiplies $\sigma_{{\min}}(Z)$ by at least "
        rf"{gain.min():,.0f} (median {np.median(gain):,.0f}); the median "
        rf"$\kappa(Z)$ falls from {kappa0:,.0f} to {kappa1:.3g}; Weyl's lower bound "
        rf"reaches at most {weyl:.3f} of $\sigma_{{\min}}(Z)$",
        check_verdict(parts),
        failures(parts)
        or (
            r"the book proves $\sigma_{\min}(Z) \ge \beta\,\sigma_{\min}(X) - "
            r"\|\mathrm{Attn}(X)\|_2$ (eq. {eq}`sv-weyl-min`) and, for $W_V = I$, "
            r"$\ge (\beta - \max_p\|P_p - U\|_2)\,\sigma_{\min}(X)$ "
            r"(eq. {eq}`sv-identity`): positive when the attention is near uniform or "
            r"the value weights are small, as in the collapse, where every check holds"
        ),
        rule=rf"on every draw, $\sigma_{{\min}}(Z)$ at $\beta = 1$ exceeds "
        rf"{GAIN:g} times its value at $\beta = 0$; the median $\kappa(Z)$ falls by "
        rf"more than a factor {KAPPA_DROP:g}; Weyl's lower bound never exceeds "
        r"$\sigma_{\min}(Z)$, on every draw, $\beta$ and regime",
        setting=reconstruction(
            r"the book's bound, which needs attention near uniform or $\|W_V\|$ small "
            r"against $\beta$",
            r"the collapse under $\tau = d_{QK}$",
            r"Gaussian draws at scale $1/\sqrt d$",
        ),
    )
    return [stated, bound]
