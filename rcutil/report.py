"""The reproduction report: every public claim of the paper beside the book's own number.

:func:`gather` collects the results of every experiment (stored by
:func:`rcutil.experiments.cached`, so the chapters' runs are reused); :func:`claims` turns them
into rows, each with the paper's statement, the book's number or check, a status computed from
those numbers, and the reason. Nothing in a row is typed by hand except the paper's words and
the one public number, 7.74e-14.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from . import experiments

REPRODUCED = "reproduced"
DEVIATION = "reproduced with a stated deviation"
NOT_REPRODUCED = "not reproduced"

#: the one number of the paper that is public (Jena, beta = 0): min_t sigma_min^2(Z_t) / max_t ||Z_t||
PAPER_JENA_RATIO = 7.74e-14

#: experiments the report reads, in the order of the book
NAMES = ("model", "lipschitz", "singular-values", "convergence", "rank-collapse", "jena", "sst2")


@dataclass
class Claim:
    key: str
    claim: str          #: short name
    paper: str          #: what the paper states
    book: str           #: the book's number or check
    status: str         #: REPRODUCED, DEVIATION or NOT_REPRODUCED
    reason: str         #: why that status
    chapter: str        #: label of the chapter with the evidence

    def to_dict(self) -> dict:
        return asdict(self)


def gather(profile: str | None = None, *, progress: bool = False) -> dict[str, dict]:
    """Results of every experiment for the profile (stored results are reused)."""
    return {name: experiments.cached(name, profile, progress=progress) for name in NAMES}


def _status(ok: bool, deviation: bool = False) -> str:
    if not ok:
        return NOT_REPRODUCED
    return DEVIATION if deviation else REPRODUCED


def model_claims(r: dict) -> list[Claim]:
    fd = max(r["finite_difference_rel_error"].values())
    diff = max(r["variant_max_abs_diff"].values())
    ok = all(r["gradcheck"].values()) and fd < 1e-6 and diff < 1e-12
    return [Claim(
        "model", "The model",
        "F(X) = (FFN(Attn(X) + X) + Attn(X) + X) W_U, softmax attention, Lipschitz FFN; "
        "residual-strength variant with beta in [0, 1]; loss 1/2 ||F - Y||^2, plain GD",
        f"gradients match finite differences to {fd:.1e} (relative) in every block; beta = 1 and "
        f"beta = 0 match the formulas written out to {diff:.1e}",
        _status(ok, deviation=True),
        "the equations are the paper's; activation (tanh), temperature (sqrt(d_QK)), "
        "initialisation and where beta enters a deep model are the book's choices",
        "model")]


def theory_claims(lip: dict, conv: dict, sv: dict) -> list[Claim]:
    cert = conv["certificate"]
    rows = []
    worst = max(lip["max_ratio"].values())
    rows.append(Claim(
        "lemma-lipschitz", "Lemma: Lipschitz constants of the layers",
        "attention, FFN and output map are Lipschitz in their weights on a bounded region, with "
        "the softmax Jacobian bounded",
        f"softmax Jacobian norm <= 1/2 (proved by a sum of squares, checked in SymPy); over "
        f"{lip['settings']['n_instances']} random instances the largest finite-difference ratio "
        f"over its bound is {worst:.4f} (must be <= 1)",
        _status(worst <= 1.0, deviation=True),
        "the constants are the book's own derivation (the paper's are not public)",
        "lipschitz"))
    pl_ok = conv["min_local_pl"] >= conv["alpha"]
    rows.append(Claim(
        "lemma-smoothness", "Lemma: smoothness and gradient lower bound",
        "grad Phi is C-Lipschitz on a region around the initialisation, and ||grad Phi||^2 >= "
        "2 alpha Phi there, with alpha from the smallest singular value of the attention output",
        f"on the certifying instance: C = {conv['C']:.3g} and alpha = {conv['alpha']:.3g} on a "
        f"ball of radius {cert['r']:.3g}; the smallest local PL ratio along GD is "
        f"{conv['min_local_pl']:.3g} (>= alpha: {pl_ok})",
        _status(pl_ok, deviation=True),
        "the lemmas and constants are the book's own derivation (the paper's are not public); "
        "each elementary rule is checked against finite differences in the Lipschitz chapter",
        "lipschitz"))
    regimes = sv["regimes"]
    collapsed = next(v for k, v in regimes.items() if "collapsed" in k)
    betas = sv["betas"]
    i0, i1 = betas.index(0.0), betas.index(1.0)
    smin0 = _median(collapsed["sigma_min"][i0])
    smin1 = min(collapsed["sigma_min"][i1])
    ok = smin1 > 0 and smin1 > 100 * smin0
    rows.append(Claim(
        "lemma-residual", "Lemma: the residual keeps Z well conditioned",
        "Z = Attn(X) + X keeps full rank whenever X does, so sigma_min(Z) > 0, while the "
        "attention output alone can collapse",
        f"collapsed attention (tau = d_QK = {collapsed['d_qk']}): median sigma_min(Z) at beta = 0 "
        f"is {smin0:.2e}; the smallest over all draws at beta = 1 is {smin1:.3g}",
        _status(ok, deviation=True),
        "the exact statement is the book's: sigma_min(Z) >= (beta - ||P - U||) sigma_min(X) "
        "for W_V = I, and eigenvalues 1 and 2 in the uniform case",
        "singular-values"))
    return rows


def convergence_claims(conv: dict) -> list[Claim]:
    rows = []
    ok = conv["max_measured_rate"] <= conv["predicted_rate"] + 1e-12
    rows.append(Claim(
        "theorem-1", "Theorem 1: linear convergence",
        "if mu <= min{1/C, 1/alpha} then Phi(theta_{t+1}) <= (1 - mu alpha) Phi(theta_t)",
        f"at the theorem's mu = {conv['mu']:.3g}: largest measured Phi_(t+1)/Phi_t = "
        f"{conv['max_measured_rate']:.6f} <= 1 - mu alpha = {conv['predicted_rate']:.6f}",
        _status(ok, deviation=True),
        "with the book's constants, on an instance that meets their conditions (width d >= N n, "
        "small targets: the certificate is local); the bound is loose",
        "convergence"))
    sweep = conv["beta_sweep"]
    err = max(abs(a - b) for a, b in zip(sweep["late_rate"], sweep["predicted_late_rate"]))
    rows.append(Claim(
        "rate-singular-values", "The rate follows sigma_min / sigma_max",
        "the convergence rate is governed by the smallest and largest singular values of the "
        "attention-layer output",
        f"across {len(sweep['beta'])} values of beta, the measured late rate differs from "
        f"(1 - kappa(H_0)^-2)^2 by at most {err:.3f}",
        _status(err < 0.05, deviation=True),
        "measured through kappa of the features H entering W_U (which contain Z); the bound "
        "itself gives alpha / C <= kappa(H_0)^-2",
        "convergence"))
    ok = conv["final_over_initial_loss"] <= 1e-10
    rows.append(Claim(
        "corollary-1", "Corollary 1: global minimum",
        "under the same conditions GD reaches a global minimum, Phi(theta*) = 0",
        f"GD at mu = {conv['corollary_step']:.3g} ({conv['corollary_step_source']}) reaches "
        f"Phi_T / Phi_0 = {conv['final_over_initial_loss']:.1e} in {conv['steps_to_tolerance']} steps",
        _status(ok),
        "the loss falls below 1e-10 of its start, as certified",
        "convergence"))
    multi = conv["multilayer"]
    oks, parts = [], []
    for L, m in sorted(multi.items(), key=lambda kv: int(kv[0])):
        ok_L = m["max_measured_rate"] <= m["predicted_rate"] + 1e-12 and m["final_over_initial_loss"] <= 1e-10
        oks.append(ok_L)
        parts.append(f"L = {L}: max rate {m['max_measured_rate']:.6f} <= {m['predicted_rate']:.6f}, "
                     f"Phi_T/Phi_0 = {m['final_over_initial_loss']:.1e}")
    rows.append(Claim(
        "multilayer", "Multi-layer theorem",
        "the same linear rate holds for an L-layer stack under suitable initialisation",
        "; ".join(parts),
        _status(all(oks), deviation=True),
        "constants evaluated numerically around theta_0 (closed forms explode with depth); the "
        "residual-stream maps start scaled by 1/L, the book's choice of initialisation",
        "convergence"))
    return rows


def rank_collapse_claims(rc: dict) -> list[Claim]:
    from .experiments.rank_collapse import acceptance

    acc = acceptance(rc)
    ok = acc["ratio"] < 1e-3 and acc["falling"]
    return [Claim(
        "rank-collapse", "Rank collapse as d_QK -> infinity",
        "without the residual the attention output collapses (sigma_min -> 0) as d_QK grows; "
        "with it, Z = Attn(X) + X keeps sigma_min(Z) > 0",
        f"under {rc['collapse_scaling']}, at d_QK = {acc['d_qk']}: sigma_min(Attn X) / "
        f"sigma_min(Attn X + X) = {acc['ratio']:.1e}, still falling over the last decade: {acc['falling']}",
        _status(ok),
        "the collapse needs scores that vanish (d_QK s^4 / tau^2 -> 0, e.g. tau = d_QK); with "
        "tau = sqrt(d_QK) it does not happen, which the chapter shows",
        "rank-collapse")]


def jena_claims(j: dict) -> list[Claim]:
    from .experiments.jena import claims as verdicts

    v = verdicts(j)
    rel = ", ".join(f"{b:g}: {x:.3f}" for b, x in zip(v["betas"], v["relative_loss"]))
    late = ", ".join(f"{b:g}: {x:.3f}" for b, x in zip(v["betas"], v["late_progress"]))
    ratios = {r["beta"]: r["ratio"] for r in j["runs"]}
    if v["faster_with_larger_beta"]:
        order_status, order_reason = REPRODUCED, "Phi_T / Phi_0 falls with every step up in beta"
    elif v["beta1_faster_than_beta0"]:
        order_status = DEVIATION
        order_reason = ("beta = 1 ends lower than beta = 0, but the order in between is not "
                        "monotone at this size")
    else:
        order_status, order_reason = NOT_REPRODUCED, "beta = 1 does not end lower than beta = 0 here"
    return [
        Claim("jena-order", "Jena: larger beta converges faster",
              "the larger beta, the faster GD converges",
              f"Phi_T / Phi_0 per beta: {rel}", order_status, order_reason, "jena"),
        Claim("jena-stall", "Jena: beta = 0 stalls",
              "without the residual GD is very slow or stalls",
              f"Phi_T / Phi_(T/2) per beta (higher = less late progress): {late}",
              _status(v["beta0_stalls"]),
              "beta = 0 makes the least progress in the second half of training" if v["beta0_stalls"]
              else "beta = 0 still makes progress late in training: every beta approaches a floor "
                   "(width d = 14 is far below N n, outside the theorem's regime)",
              "jena"),
        Claim("jena-ratio", "Jena: min_t sigma_min^2(Z_t) / max_t ||Z_t||",
              f"{PAPER_JENA_RATIO:.2e} without the residual, much larger with it",
              f"{ratios[0.0]:.2e} at beta = 0 and {ratios[1.0]:.2e} at beta = 1 (float64, spectral "
              f"norm); beta > 0 is at least {v['ratio_factor']:.1e} times larger",
              _status(v["ratio_much_smaller_at_0"], deviation=True),
              f"the qualitative gap is there; the value at beta = 0 differs from the paper's by "
              f"{abs(math.log10(ratios[0.0] / PAPER_JENA_RATIO)):.1f} orders of magnitude "
              "(different preprocessing, sizes and precision, none of them public)",
              "jena"),
    ]


def sst2_claims(s: dict) -> list[Claim]:
    runs = {(r["layers"], bool(r["residual"])): r for r in s["runs"]}
    depths = sorted({L for L, _ in runs})
    err = {(L, w): runs[(L, w)]["final_train_error"] for (L, w) in runs}
    rows = []
    lower = [err[(L, True)] < err[(L, False)] for L in depths]
    rows.append(Claim(
        "sst2-lower", "SST-2: residuals give lower training error at every depth",
        "with residuals the training error is lower at every depth L = 2, 6, 10",
        "; ".join(f"L = {L}: w {err[(L, True)]:.3f}, wo {err[(L, False)]:.3f}" for L in depths),
        _status(all(lower), deviation=True),
        "GPT-2 architecture trained from scratch (no pretrained weights here) at the book's "
        "width and subset" + ("" if all(lower) else
                              "; at " + ", ".join(f"L = {L}" for L, ok in zip(depths, lower) if not ok)
                              + " the model without residuals is not worse"),
        "sst2"))
    w = [err[(L, True)] for L in depths]
    falling = all(b <= a for a, b in zip(w, w[1:]))
    rows.append(Claim(
        "sst2-depth", "SST-2: with residuals the error keeps falling as L grows",
        "with residuals, deeper models reach a lower training error",
        "w: " + ", ".join(f"L = {L}: {e:.3f}" for L, e in zip(depths, w)),
        _status(falling, deviation=True),
        "same optimizer, schedule and steps at every depth" if falling else
        "at this scale and training budget the deeper residual models do not reach a lower error",
        "sst2"))
    wo = [err[(L, False)] for L in depths]
    barely = wo[-1] >= max(0.4, wo[0])
    rows.append(Claim(
        "sst2-noresidual", "SST-2: without residuals deeper models barely train",
        "without residuals the deeper models barely train",
        "wo: " + ", ".join(f"L = {L}: {e:.3f}" for L, e in zip(depths, wo)),
        _status(barely, deviation=True),
        "the deepest model without residuals stays near chance (error >= 0.4)" if barely else
        "the deepest model without residuals does train at this scale",
        "sst2"))
    return rows


def claims(results: dict[str, dict]) -> list[Claim]:
    """Every claim of the paper listed in the book's spec, with the book's evidence."""
    return (model_claims(results["model"])
            + theory_claims(results["lipschitz"], results["convergence"], results["singular-values"])
            + convergence_claims(results["convergence"])
            + rank_collapse_claims(results["rank-collapse"])
            + jena_claims(results["jena"])
            + sst2_claims(results["sst2"]))


def markdown_table(rows: list[Claim], *, short: bool = False) -> str:
    """A MyST table of the rows; ``short`` keeps claim, status and chapter only."""
    def cell(text: str) -> str:
        return text.replace("|", "\\|").replace("\n", " ")

    if short:
        lines = ["| claim of the paper | status | evidence |", "|---|---|---|"]
        lines += [f"| {cell(r.claim)} | {r.status} | {{ref}}`{r.chapter}` |" for r in rows]
    else:
        lines = ["| claim | the paper | the book | status | why |", "|---|---|---|---|---|"]
        lines += [f"| {cell(r.claim)} ({{ref}}`{r.chapter}`) | {cell(r.paper)} | {cell(r.book)} | "
                  f"**{r.status}** | {cell(r.reason)} |" for r in rows]
    return "\n".join(lines)


def _median(values) -> float:
    v = sorted(values)
    k = len(v)
    return v[k // 2] if k % 2 else 0.5 * (v[k // 2 - 1] + v[k // 2])
