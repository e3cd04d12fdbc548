"""The rank-collapse chapter's acceptance checks and its two claims, and the readings of
a stored :class:`~rcutil.experiments.rank_collapse.Result` that decide them: the
collapse under one scaling, the slope of eq. ``rc-variance``, the bound of eq.
``rc-centred`` over what it bounds, GD's last loss over its floor, and the decay of the
relative residual through depth."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ... import results
from ...checks import Check
from ...claims import (
    Claim,
    Decision,
    Part,
    check_verdict,
    comparison,
    decision,
    failures,
    fmt,
    mean_se,
    reconstruction,
)
from ...spectra import SCALINGS
from . import (
    BETAS,
    COLLAPSE_SCALING,
    TRAIN_BETAS,
    UNSCALED,
    USUAL_SCALING,
    Result,
    SweepPoint,
)

#: Relative residuals below this are drawn at it (eq. ``rc-res``).
RES_FLOOR = 1e-16
#: Collapse: at the largest d_QK the seed mean of sigma_min(Attn X) is below this
#: fraction of that of Attn X + X, and falls at each of (at least) DECADE_POINTS d_QK
#: of the last decade.
COLLAPSE_RATIO, DECADE_POINTS = 1e-3, 3
#: Eq. ``rc-centred`` holds up to this relative rounding.
ROUNDING = 1e-10

#: The scalings, and the quantities of the table and the claims, typeset.
TEX = {
    COLLAPSE_SCALING: r"$\tau = d_{QK}$",
    USUAL_SCALING: r"$\tau = \sqrt{d_{QK}}$",
    UNSCALED: r"$\tau = 1$",
    "attn": r"$\sigma_{\min}(\mathrm{Attn}(X))$",
    "resid": r"$\sigma_{\min}(\mathrm{Attn}(X) + X)$",
    "half": r"$\sigma_{\min}(\mathrm{Attn}(X) + X/2)$",
    "floor": r"$\Phi_T / \Phi_{\mathrm{floor}}$",
    "start": r"$\Phi_T / \Phi_0$",
    "centred": r"$\sigma_{\min}(\tilde X)$",
}


@dataclass(frozen=True)
class Collapse:
    """sigma_min(Attn X) against sigma_min(Attn X + X) under one scaling."""

    scaling: str
    d_qk: int  #: the largest
    attention: np.ndarray  #: sigma_min(Attn X) per seed at the largest d_QK
    residual: np.ndarray  #: sigma_min(Attn X + X) per seed at the largest d_QK
    decade: tuple[float, ...]  #: seed means of sigma_min(Attn X), d_QK >= largest / 10

    @property
    def ratio(self) -> float:
        return float(self.attention.mean() / self.residual.mean())

    @property
    def falling(self) -> bool:
        return all(b < a for a, b in zip(self.decade, self.decade[1:]))

    @property
    def collapses(self) -> bool:
        return (
            self.ratio < COLLAPSE_RATIO
            and self.falling
            and len(self.decade) >= DECADE_POINTS
        )


def point(result: Result, scaling: str, beta: float) -> SweepPoint:
    """The sweep at one scaling and beta."""
    return results.pick(result.sweep, scaling=scaling, beta=beta)


def collapse(result: Result, scaling: str) -> Collapse:
    """:class:`Collapse` of one scaling."""
    attn = point(result, scaling, 0.0).sigma_min
    last = [j for j, v in enumerate(result.d_qk) if v >= result.d_qk[-1] / 10]
    return Collapse(
        scaling,
        result.d_qk[-1],
        attn[:, -1],
        point(result, scaling, 1.0).sigma_min[:, -1],
        tuple(float(attn[:, j].mean()) for j in last),
    )


def slope(result: Result, start: int = 2**8) -> float:
    """Least-squares slope of log sigma_min(Attn X) (seed means) against log d_QK from
    ``d_QK >= start``, under tau = d_QK: -1/2 by eq. rc-variance."""
    keep = [j for j, v in enumerate(result.d_qk) if v >= start]
    mean = point(result, COLLAPSE_SCALING, 0.0).sigma_min.mean(axis=0)[keep]
    return float(np.polyfit(np.log(np.asarray(result.d_qk)[keep]), np.log(mean), 1)[0])


def bound_excess(result: Result) -> float:
    """Largest bound of eq. rc-centred over the sigma_min it bounds, over every seed,
    d_QK, beta and scaling (at most 1 where the bound holds)."""
    return max(float((p.centred_lower / p.sigma_min).max()) for p in result.sweep)


def final_over_floor(result: Result, beta: float) -> np.ndarray:
    """``Phi_T / Phi_floor`` per seed: GD's last loss over its floor
    (:func:`rcutil.experiments.rank_collapse.per_sample_floor`)."""
    run = results.pick(result.training, beta=beta)
    return run.loss[:, -1] / np.asarray(result.training_floor)


def gd_comparison(result: Result) -> Part:
    """ "With the residual GD ends lower above its floor": ``log10`` of
    :func:`final_over_floor` at beta = 1 against beta = 0, paired by seed (both arms of
    a seed start from the same weights and data; :func:`rcutil.claims.comparison`)."""
    return comparison(
        np.log10(final_over_floor(result, 1.0)),
        np.log10(final_over_floor(result, 0.0)),
        direction="less",
        paired=True,
        label=r"$\log_{10}\Phi_T/\Phi_{\mathrm{floor}}$, $\beta = 1$ minus $\beta = 0$",
    )


def gd_decision(result: Result) -> Decision:
    """The rule of the claim on GD: one paired comparison (:func:`gd_comparison`)."""
    return decision(gd_comparison(result))


def cubic_exponents(res: np.ndarray, start: float = 0.9, floor: float = 1e-13) -> list:
    """``log r_{l+1} / log r_l`` of the mean over draws of ``log r``, at the layers with
    ``r_l < start`` and ``r_{l+1} > floor``: about 3 for Dong et al.'s cubic
    contraction, 1 for a geometric one."""
    logr = np.log(np.clip(res, RES_FLOOR, None)).mean(axis=0)
    return [
        float(b / a)
        for a, b in zip(logr[:-1], logr[1:])
        if a < math.log(start) and b > math.log(floor)
    ]


def geometric_mean(res: np.ndarray) -> np.ndarray:
    """Per layer, the geometric mean over draws of the residual clipped at RES_FLOOR."""
    return np.exp(np.log(np.clip(res, RES_FLOOR, None)).mean(axis=0))


def checks(result: Result) -> list[Check]:
    """The chapter's acceptance table."""
    book, usual, hard = (collapse(result, k) for k in SCALINGS)
    at = {b: point(result, COLLAPSE_SCALING, b) for b in BETAS}
    usual0, hard0 = point(result, USUAL_SCALING, 0.0), point(result, UNSCALED, 0.0)
    flat = usual0.sigma_min.mean(axis=0)[np.asarray(result.d_qk) >= 2**6]
    rank = at[0.0].effective_rank.mean(axis=0)
    centred = np.asarray(result.inputs.sigma_min_centred)
    tight = {b: (at[b].centred_lower[:, -1] / (b * centred)).min() for b in (1.0, 0.5)}
    run = {r.beta: r for r in result.training}
    start = {b: run[b].loss[:, -1] / run[b].loss[:, 0] for b in TRAIN_BETAS}
    pure, skip = (geometric_mean(d.residual) for d in result.depth)
    exps = cubic_exponents(result.depth[0].residual)
    recorded = {r.loss.shape[1] for r in result.training} == {
        result.settings.train_steps + 1
    }
    weight = float(at[0.0].max_weight[:, -1].mean() * result.settings.n)
    keeps = float(at[1.0].sigma_min[:, -1].mean() / at[1.0].sigma_min[:, 0].mean())
    half = float(at[0.5].sigma_min[:, -1].mean() / book.attention.mean())
    input_ratio = float((centred / np.asarray(result.inputs.sigma_min)).min())
    separated = float(run[0.0].sigma_min.max() / run[1.0].sigma_min.min())
    lowest = float(at[1.0].centred_lower[:, -1].min())
    usual_bound = float(point(result, USUAL_SCALING, 1.0).centred_lower[:, -1].max())
    over = f"the bound over $\\beta$ times {TEX['centred']}"
    L = 6  # pure attention's residual reaches the floor by this layer
    tq, tu, t1 = TEX[COLLAPSE_SCALING], TEX[USUAL_SCALING], TEX[UNSCALED]
    attn, resid, ratio = TEX["attn"], TEX["resid"], TEX["floor"]
    end = "at the largest $d_{QK}$"
    return [
        Check("the sweep starts at $d_{QK} = 1$", result.d_qk[0], "==", 1),
        Check("the largest $d_{QK}$", result.d_qk[-1], ">=", 2**14),
        Check(f"{tq}: {attn} over {resid} {end}", book.ratio, "<", COLLAPSE_RATIO),
        Check("$d_{QK}$ in the last decade", len(book.decade), ">=", DECADE_POINTS),
        Check(f"{tq}: {attn} falls at each", book.falling, "==", True),
        Check(f"{tq}: slope of $\\log$ {attn} in $\\log d_{{QK}}$ from $2^8$", slope(result), ">", -0.8),
        Check("the same slope", slope(result), "<", -0.3),
        Check(f"{tq}: effective rank per sample {end}", float(rank[-1]), "<", 1.1),
        Check("the same, over its value at a 16 times smaller $d_{QK}$", float(rank[-1] / rank[-5]), "<", 1.0),
        Check(f"{tq}: largest attention weight times $n$ {end}", weight, "<", 1.1),
        Check(f"{tq}: {resid} {end} over $d_{{QK}} = 1$", keeps, ">", 0.5),
        Check(f"{tq}: {TEX['half']} over {attn} {end}", half, ">", 100.0),
        Check(f"{tu}: smallest over largest {attn} from $d_{{QK}} = 2^6$", float(flat.min() / flat.max()), ">", 0.3),
        Check(f"{t1}: largest attention weight {end}", float(hard0.max_weight[:, -1].mean()), ">", 0.95),
        Check(f"{attn} under {t1} over {tq}", float(hard.attention.mean() / book.attention.mean()), ">", 10.0),
        Check("bound {eq}`rc-centred` over what it bounds, largest anywhere", bound_excess(result), "<=", 1 + ROUNDING),
        *[Check(f"{tq}, $\\beta = {b:g}$: {over} {end}, smallest", float(v), ">", 0.9) for b, v in tight.items()],
        Check(f"{tq}, $\\beta = 1$: the bound {end}, smallest", lowest, ">", 0.0),
        Check(f"{TEX['centred']} / $\\sigma_{{\\min}}(X)$, smallest", input_ratio, ">", 0.8),
        Check(f"{tu}, $\\beta = 1$: the bound {end}, largest", usual_bound, "<", 0.0),
        Check("GD records every step", recorded, "==", True),
        Check(f"GD, $\\beta = 1$: {TEX['start']}, largest", float(start[1.0].max()), "<", 0.1),
        Check(f"GD, $\\beta = 0$: {TEX['start']}, smallest", float(start[0.0].min()), ">", 0.5),
        Check(r"GD: $\sigma_{\min}(Z_t)$, largest at $\beta = 0$ over smallest at $\beta = 1$", separated, "<", 1e-2),
        Check(f"GD, $\\beta = 0$: {ratio}, smallest", float(final_over_floor(result, 0.0).min()), ">", 0.75),
        Check(f"GD, $\\beta = 1$: {ratio}, largest", float(final_over_floor(result, 1.0).max()), "<", 0.2),
        Check("depth: layers of doubly exponential decay", len(exps), ">=", 2),
        Check(r"depth: $\log r_{l+1} / \log r_l$ there, smallest", min(exps, default=0.0), ">=", 2.0),
        Check(f"depth: $r_{{{L}}}$ without skips (geometric mean)", float(pure[L]), "<", 1e-12),
        Check(f"depth: $r_{{{len(skip) - 1}}}$ with skips (geometric mean)", float(skip[-1]), ">", 0.05),
        Check(r"depth: $r_{l+1} / r_l$ with skips, smallest", float((skip[1:] / skip[:-1]).min()), ">", 0.5),
    ]  # fmt: skip


def claims(result: Result) -> list[Claim]:
    """The paper's limit d_QK -> infinity (three exact checks: the collapse, the bound
    of eq. rc-centred everywhere, and its value positive on every seed), and what it
    does to GD (one paired comparison over the training seeds)."""
    book, usual = collapse(result, COLLAPSE_SCALING), collapse(result, USUAL_SCALING)
    lower = float(point(result, COLLAPSE_SCALING, 1.0).centred_lower[:, -1].min())
    holds = bound_excess(result) <= 1 + ROUNDING
    parts = {
        "the collapse": book.collapses,
        "the bound": holds,
        "a positive bound": lower > 0,
    }
    usual_text = (
        r"the usual $\tau = \sqrt{d_{QK}}$ collapses too"
        if usual.collapses
        else r"the usual $\tau = \sqrt{d_{QK}}$ does not collapse"
    )

    def reading(c: Collapse) -> str:
        trend = "falling" if c.falling else "not falling"
        return (
            f"{fmt(*mean_se(c.attention))} under {TEX[c.scaling]} ({c.ratio:.1e} "
            f"of {TEX['resid']}, {trend})"
        )

    spectral = Claim(
        "rank-collapse",
        r"Rank collapse as $d_{QK} \to \infty$",
        r"without the residual the attention output collapses as $d_{QK} \to \infty$, "
        rf"{TEX['attn']} $\to 0$, while the residual keeps $\sigma_{{\min}}(Z)$ away "
        "from zero",
        f"at $d_{{QK}} = 2^{{{round(math.log2(book.d_qk))}}}$, {TEX['attn']} is "
        f"{reading(book)}; {reading(usual)}; "
        f"mean ± s.e. over {book.attention.size} seeds; {TEX['resid']} $\\ge$ "
        f"{lower:.2f} on every seed by eq. {{eq}}`rc-centred`",
        check_verdict(parts),
        failures(parts)
        or (
            r"the limit needs scores whose variance $d_{QK} s^4 \|x\|^2 \|y\|^2 / "
            r"\tau^2$ (eq. {eq}`rc-variance`) vanishes: with $s = 1/\sqrt d$ that is "
            rf"the book's $\tau = d_{{QK}}$, and {usual_text}; with the residual "
            r"$\sigma_{\min}(Z) \ge \beta\,\sigma_{\min}(\tilde X) - \delta\,\|X\|_2"
            r"\|W_V\|_2$, positive where $\delta$, the distance from uniform "
            "attention, is small; the paper's statement for every X is false (the "
            "singular-values chapter's counterexample)"
        ),
        rule=f"collapse: at the largest $d_{{QK}}$ the seed mean of {TEX['attn']} is below "
        f"{COLLAPSE_RATIO:g} of that of {TEX['resid']} and falls at each $d_{{QK}}$ of "
        "the last decade; the residual: the bound {eq}`rc-centred` holds "
        "everywhere and is positive on every seed",
        setting=reconstruction(
            *(
                r"$\tau = d_{QK}$",
                r"weights at scale $1/\sqrt d$",
                r"with the residual, the book's bound {eq}`rc-centred` (attention near uniform)",
            ),
            usual_text,
        ),
    )
    s, n = result.settings, len(result.settings.train_seeds)
    gd = gd_decision(result)
    training = Claim(
        "rank-collapse-gd",
        "Gradient descent from the collapse",
        "in the collapse the problem is ill-conditioned: without the residual gradient "
        "descent stalls, with it the loss keeps falling",
        r"$\Phi_T / \Phi_{\mathrm{floor}}$ "
        rf"after $T = {s.train_steps}$ steps at "
        rf"$\mu = {s.train_mu:g}$, $d_{{QK}} = {s.train_d_qk}$: "
        + rf"$\beta = 1$: {fmt(*mean_se(final_over_floor(result, 1.0)))}, "
        + rf"$\beta = 0$: {fmt(*mean_se(final_over_floor(result, 0.0)))} "
        + f"(mean ± s.e., {n} seeds)",
        gd.verdict,
        gd.reason(),
        rule="paired by seed: both residual strengths of a seed start from the same "
        r"weights and data; $\Phi_{\mathrm{floor}}$ is the least loss of outputs that "
        "are constant over each sample's tokens",
        setting=reconstruction(
            r"the collapse under $\tau = d_{QK}$",
            r"activation $\tanh$",
            "the book's sizes and step",
        ),
        decision=gd,
    )
    return [spectral, training]
