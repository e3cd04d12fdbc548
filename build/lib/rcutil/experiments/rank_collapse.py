"""Rank collapse of the attention output as d_QK grows, and what the residual changes.

Chapter :ref:`rank-collapse`. Three parts, all in :func:`run`:

* ``scalings``: a sweep of ``d_QK`` over powers of two, for three score scalings
  (``tau = d_QK``, ``sqrt(d_QK)``, ``1``; :data:`rcutil.spectra.SCALINGS`), of ``sigma_min``
  and the effective rank of ``Attn(X)`` and of ``Attn(X) + beta X`` (eq. ``model-z``);
* ``training``: GD (eq. ``model-gd``) on the single-layer model started in the collapsed
  regime, with ``beta = 0`` and ``beta = 1`` at the same step;
* ``depth``: the depth form of rank collapse (Dong et al. 2021), the relative residual
  ``||X_l - 1 x_l^T||_F / ||X_l||_F`` (eq. ``rc-res``) of a stack of attention layers, with and
  without skip connections.

Keys of the result: ``collapse_scaling`` (the scaling under which the book shows the
collapse); ``scalings`` (scaling -> one row per ``d_QK`` with ``d_qk``, ``sigma_min_attn``,
``sigma_min_residual`` (beta = 1), ``effective_rank_attn``, ... as means over seeds);
``per_seed`` (the raw values behind the bands, and the bound of eq. ``rc-centred``);
``inputs`` (per seed: ``sigma_min`` of the input and of the centred input, ``||X||``,
``||W_V||``); ``training`` (beta -> loss history, keyed ``"0"`` and ``"1"``, the beta value
formatted with ``%g``); ``training_sigma_min`` (same keys);
``training_floor`` (the loss left by outputs that are constant over each sample's tokens);
``depth``; ``settings``; ``seeds``.
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch

from .. import plotting
from ..claims import Claim, status
from ..model import Transformer, attention, attention_weights, beta_key, squared_loss
from ..progress import steps as loop
from ..spectra import SCALINGS, nested_score_products, random_inputs, spectrum, temperature, uniform_deviation
from ..threads import torch_threads
from ..train import gradient_descent

#: The scaling under which the attention output collapses as d_QK grows (eq. ``rc-variance``).
COLLAPSE_SCALING = "tau=d_qk"
#: Residual strengths of the sweep; ``beta = 0`` is ``Attn(X)`` itself.
BETAS = (0.0, 0.5, 1.0)
#: Relative residuals below this are at the float64 floor (plotted there, not used in fits).
RES_FLOOR = 1e-16

# Sizes are the book's choice (the paper's are not public). N < d, so that the stacked
# (N n) x d attention output can lose rank (its uniform part has rank <= N), and n >= d.
SETTINGS = {
    "ci": {"N": 4, "n": 16, "d": 8, "seeds": 8, "max_log2_d_qk": 16, "seed": 0,
           "train_d_qk": 4096, "train_d_F": 32, "train_d_out": 2, "train_mu": 0.002,
           "train_steps": 300, "depth_layers": 12, "depth_n": 16, "depth_seeds": 16},
    "book": {"N": 4, "n": 16, "d": 8, "seeds": 16, "max_log2_d_qk": 18, "seed": 0,
             "train_d_qk": 4096, "train_d_F": 32, "train_d_out": 2, "train_mu": 0.002,
             "train_steps": 1000, "depth_layers": 16, "depth_n": 16, "depth_seeds": 64},
    "paper": {"N": 4, "n": 16, "d": 8, "seeds": 32, "max_log2_d_qk": 20, "seed": 0,
              "train_d_qk": 4096, "train_d_F": 32, "train_d_out": 2, "train_mu": 0.002,
              "train_steps": 2000, "depth_layers": 16, "depth_n": 32, "depth_seeds": 256},
}


# --------------------------------------------------------------------------- d_QK sweep
def centred_lower_bound(X: torch.Tensor, W_V: torch.Tensor, deviation: torch.Tensor, beta: float) -> torch.Tensor:
    """Eq. ``rc-centred``: ``sigma_min(Attn(X) + beta X) >= beta sigma_min(X~) - delta ||X||_2 ||W_V||_2``.

    ``X~`` is the stacked input with each sample's mean token removed, ``delta`` the largest
    distance ``||P_p - U||_2`` of an attention matrix from uniform attention (one value per
    ``d_QK``, shape ``(V,)``); valid for every ``W_V``. ``X`` has shape ``(1, N, n, d)``.
    """
    centred = X - X.mean(dim=-2, keepdim=True)
    return beta * spectrum(centred)["sigma_min"] - deviation * spectrum(X)["sigma_max"] \
        * torch.linalg.matrix_norm(W_V, ord=2)


def sweep(settings: dict, *, progress: bool = False) -> dict:
    """sigma_min and effective rank of ``Attn(X) + beta X`` over d_QK, seeds and scalings.

    Returns ``{"d_qk": [...], "per_seed": {scaling: {quantity: array (betas, seeds, d_qk)}},
    "inputs": {quantity: array (seeds,)}}``. The per-seed quantities are ``sigma_min``,
    ``effective_rank`` (per sample, averaged over samples), ``centred_lower`` (the bound of eq.
    ``rc-centred``) and, beta-independent and stored with a leading axis of 1, ``max_weight``
    (mean over rows of the largest attention weight) and ``deviation`` (``max_p ||P_p - U||_2``);
    ``inputs`` holds each seed's ``sigma_min(X)``, ``sigma_min(X~)`` of the centred input,
    ``||X||_2`` and ``||W_V||_2``.
    """
    d_qk = [2**k for k in range(settings["max_log2_d_qk"] + 1)]
    I = torch.eye(settings["d"], dtype=torch.float64)
    quantities = ("sigma_min", "effective_rank", "centred_lower", "max_weight", "deviation")
    per_seed = {name: {q: [] for q in quantities} for name in SCALINGS}
    inputs = {"sigma_min": [], "sigma_min_centred": [], "norm": [], "norm_W_V": []}
    seeds = [settings["seed"] + s for s in range(settings["seeds"])]
    for seed in loop(seeds, desc="d_QK sweep", unit="seed", progress=progress):
        X = random_inputs(1, settings["N"], settings["n"], settings["d"], seed=seed)          # (1, N, n, d)
        gen = torch.Generator().manual_seed(10_000 + seed)
        W_V = torch.randn(settings["d"], settings["d"], generator=gen, dtype=torch.float64) / math.sqrt(settings["d"])
        # W_Q W_K^T for every d_QK, (V, 1, d, d): X W_Q (X W_K)^T = X (W_Q W_K^T) X^T
        M = nested_score_products(settings["d"], d_qk, seed=20_000 + seed).unsqueeze(1)
        inputs["sigma_min"].append(spectrum(X)["sigma_min"][0])
        inputs["sigma_min_centred"].append(spectrum(X - X.mean(dim=-2, keepdim=True))["sigma_min"][0])
        inputs["norm"].append(spectrum(X)["sigma_max"][0])
        inputs["norm_W_V"].append(torch.linalg.matrix_norm(W_V, ord=2))
        for name in SCALINGS:
            tau = torch.tensor([temperature(name, v) for v in d_qk], dtype=torch.float64).view(-1, 1, 1, 1)
            A = attention(X, M, I, W_V, tau)                                     # (V, N, n, d)
            Z = torch.stack([A + b * X for b in BETAS])                           # (B, V, N, n, d)
            spec = spectrum(Z, per_sample=True)
            delta = uniform_deviation(X, M, I, tau)                               # (V,)
            found = per_seed[name]
            found["sigma_min"].append(spec["sigma_min"])
            found["effective_rank"].append(spec["effective_rank_per_sample"])
            found["centred_lower"].append(torch.stack([centred_lower_bound(X, W_V, delta, b) for b in BETAS]))
            P = attention_weights(X, M, I, tau)
            found["max_weight"].append(P.amax(dim=-1).mean(dim=(-2, -1)).unsqueeze(0))
            found["deviation"].append(delta.unsqueeze(0))
    out = {name: {q: torch.stack(v, dim=1).numpy() for q, v in qs.items()} for name, qs in per_seed.items()}
    return {"d_qk": d_qk, "per_seed": out, "inputs": {q: torch.stack(v).numpy() for q, v in inputs.items()}}


def rows(d_qk: list[int], per_seed: dict) -> list[dict]:
    """One row per d_QK of seed means (the ``scalings`` entry of the JSON)."""
    b = {beta_key(beta): i for i, beta in enumerate(BETAS)}
    sm, er, mw = per_seed["sigma_min"], per_seed["effective_rank"], per_seed["max_weight"]
    out = []
    for j, v in enumerate(d_qk):
        out.append({
            "d_qk": v,
            "sigma_min_attn": float(sm[b["0"], :, j].mean()),
            "sigma_min_residual": float(sm[b["1"], :, j].mean()),
            "effective_rank_attn": float(er[b["0"], :, j].mean()),
            "sigma_min": {k: float(sm[i, :, j].mean()) for k, i in b.items()},
            "effective_rank": {k: float(er[i, :, j].mean()) for k, i in b.items()},
            "centred_lower": {k: float(per_seed["centred_lower"][i, :, j].mean()) for k, i in b.items()},
            "mean_max_weight": float(mw[0, :, j].mean()),
        })
    return out


def acceptance(result: dict) -> dict:
    """The chapter's acceptance test under ``collapse_scaling``.

    ``ratio``: sigma_min(Attn X) / sigma_min(Attn X + X) at the largest d_QK (must be < 1e-3);
    ``last_decade``: the mean sigma_min(Attn X) at every d_QK in ``[max/10, max]``;
    ``falling``: whether they strictly decrease; ``centred_lower``: the smallest over seeds of
    the lower bound of eq. ``rc-centred`` on sigma_min(Attn X + X) at the largest d_QK (must be
    positive); ``bound_holds``: whether that bound holds for every seed, d_QK, beta and scaling.
    """
    table = result["scalings"][result["collapse_scaling"]]
    last = table[-1]
    decade = [r["sigma_min_attn"] for r in table if r["d_qk"] >= last["d_qk"] / 10]
    one = list(result["betas"]).index(1.0)
    lower = np.asarray(result["per_seed"][result["collapse_scaling"]]["centred_lower"])[one, :, -1]
    holds = all((np.asarray(ps["centred_lower"]) <= np.asarray(ps["sigma_min"]) * (1 + 1e-10)).all()
                for ps in result["per_seed"].values())
    return {
        "d_qk": last["d_qk"],
        "ratio": last["sigma_min_attn"] / last["sigma_min_residual"],
        "last_decade": decade,
        "falling": len(decade) >= 2 and all(b < a for a, b in zip(decade, decade[1:])),
        "centred_lower": float(lower.min()),
        "bound_holds": bool(holds),
    }


def claims(result: dict) -> list[Claim]:
    """"Without the residual the attention output collapses as d_QK grows, with it sigma_min
    stays positive": under ``collapse_scaling`` the ratio of :func:`acceptance` is below 1e-3
    and still falling, and the bound of eq. ``rc-centred`` holds and is positive."""
    acc = acceptance(result)
    return [Claim(
        "rank-collapse", "Rank collapse as d_QK → ∞",
        "without the residual the attention output collapses (sigma_min -> 0) as d_QK grows; "
        "with it, Z = Attn(X) + X keeps sigma_min(Z) > 0",
        f"under {result['collapse_scaling']}, at d_QK = {acc['d_qk']}: sigma_min(Attn X) / "
        f"sigma_min(Attn X + X) = {acc['ratio']:.1e}, still falling over the last decade: "
        f"{acc['falling']}; sigma_min(Attn X + X) >= {acc['centred_lower']:.2f} on every seed "
        f"(the book's bound for any W_V, which holds everywhere: {acc['bound_holds']})",
        status(acc["ratio"] < 1e-3 and acc["falling"] and acc["bound_holds"] and acc["centred_lower"] > 0),
        "the collapse needs scores that vanish (d_QK s^4 / tau^2 -> 0, e.g. tau = d_QK); with "
        "tau = sqrt(d_QK) it does not happen, which the chapter shows")]


# --------------------------------------------------------------------------- training
def training_problem(settings: dict):
    """Inputs ``X`` (N, n, d) and Gaussian targets ``Y`` (N, n, d_out) of the training runs."""
    gen = torch.Generator().manual_seed(30_000 + settings["seed"])
    X = torch.randn(settings["N"], settings["n"], settings["d"], generator=gen, dtype=torch.float64)
    Y = torch.randn(settings["N"], settings["n"], settings["train_d_out"], generator=gen, dtype=torch.float64)
    return X, Y


def per_sample_floor(Y) -> float:
    """``1/2 ||Y - 1 y_p^T||^2`` with ``y_p`` each sample's mean target: the smallest loss of any
    model whose outputs are equal across the tokens of a sample (the fully collapsed case)."""
    return float(squared_loss(Y.mean(dim=-2, keepdim=True).expand_as(Y), Y))


def train(settings: dict, *, progress: bool = False) -> dict:
    """GD from the same collapsed initialisation (``tau = d_QK``, large d_QK) with beta = 0 and 1."""
    X, Y = training_problem(settings)
    out = {}
    with torch_threads(1):  # many small operations (see rcutil.threads)
        for beta in (0.0, 1.0):
            model = Transformer(settings["d"], settings["train_d_qk"], settings["train_d_F"], settings["train_d_out"],
                                tau=temperature(COLLAPSE_SCALING, settings["train_d_qk"]), beta=beta,
                                seed=settings["seed"])
            out[beta_key(beta)] = gradient_descent(model, X, Y, mu=settings["train_mu"],
                                                   steps=settings["train_steps"], progress=progress,
                                                   desc=f"GD beta={beta:g}")
    return out


# --------------------------------------------------------------------------- depth
def relative_residual(X: torch.Tensor) -> torch.Tensor:
    """Eq. ``rc-res``: ``||X - 1 x^T||_F / ||X||_F`` with ``x`` the mean token (best rank-one fit
    of the form ``1 x^T``), per matrix of a batch ``(..., n, d)``."""
    R = X - X.mean(dim=-2, keepdim=True)
    return torch.linalg.matrix_norm(R) / torch.linalg.matrix_norm(X)


def depth_collapse(settings: dict) -> dict:
    """Relative residual after each of ``depth_layers`` attention layers, with and without skip.

    Every layer draws fresh Gaussian ``W_Q, W_K, W_V`` (std ``1/sqrt(d)``), ``d_QK = d`` and
    ``tau = sqrt(d_QK)``; both stacks see the same inputs and the same weights. Arrays have
    shape ``(seeds, layers + 1)``.
    """
    S, n, d, L = settings["depth_seeds"], settings["depth_n"], settings["d"], settings["depth_layers"]
    gen = torch.Generator().manual_seed(40_000 + settings["seed"])
    X0 = torch.randn(S, n, d, generator=gen, dtype=torch.float64)
    weights = [tuple(torch.randn(S, d, d, generator=gen, dtype=torch.float64) / math.sqrt(d)
                     for _ in range(3)) for _ in range(L)]
    out = {}
    for name, skip in (("attention", False), ("attention + skip", True)):
        X, res = X0, [relative_residual(X0)]
        for W_Q, W_K, W_V in weights:
            A = attention(X, W_Q, W_K, W_V, math.sqrt(d))
            X = A + X if skip else A
            res.append(relative_residual(X))
        out[name] = torch.stack(res, dim=1).numpy()
    return out


def cubic_exponents(res: np.ndarray, start: float = 0.9, floor: float = 1e-13) -> list[float]:
    """``log r_{l+1} / log r_l`` of the seed-mean of ``log r`` for the layers with ``r_l < start``
    and ``r_{l+1} > floor``: about 3 under Dong et al.'s cubic contraction, 1 for a geometric one."""
    logr = np.log(np.clip(res, RES_FLOOR, None)).mean(axis=0)
    return [float(b / a) for a, b in zip(logr[:-1], logr[1:])
            if a < math.log(start) and b > math.log(floor)]


# --------------------------------------------------------------------------- run
def run(settings: dict, *, device: str = "cpu", progress: bool = True) -> dict:
    """All three parts under the profile's settings; JSON-serialisable (see the module doc).

    The computations are small and always run on the CPU in float64, whatever ``device`` says
    (the result records ``"computed_on": "cpu"``).
    """
    with torch_threads(1):  # many small operations (see rcutil.threads)
        sw = sweep(settings, progress=progress)
        hist = train(settings, progress=progress)
        depth = depth_collapse(settings)
    return {
        "settings": settings,
        "computed_on": "cpu",
        "seeds": [settings["seed"] + s for s in range(settings["seeds"])],
        "betas": list(BETAS),
        "collapse_scaling": COLLAPSE_SCALING,
        "d_qk": sw["d_qk"],
        "scalings": {name: rows(sw["d_qk"], ps) for name, ps in sw["per_seed"].items()},
        "per_seed": {name: {q: v.tolist() for q, v in ps.items()} for name, ps in sw["per_seed"].items()},
        "inputs": {q: v.tolist() for q, v in sw["inputs"].items()},
        "training": {k: h.loss for k, h in hist.items()},
        "training_sigma_min": {k: h.sigma_min for k, h in hist.items()},
        "training_floor": per_sample_floor(training_problem(settings)[1]),
        "depth": {name: r.tolist() for name, r in depth.items()},
    }


# --------------------------------------------------------------------------- figures
def plot_sweep(result: dict):
    """sigma_min and effective rank of Attn(X) + beta X against d_QK, log-log, bands over seeds."""
    import matplotlib.pyplot as plt

    names = list(result["scalings"])
    fig, axes = plt.subplots(2, len(names), figsize=(10.5, 6.2), sharex=True, sharey="row")
    x = np.asarray(result["d_qk"])
    colors = plotting.colors(len(result["betas"]))
    for c, name in enumerate(names):
        ps = result["per_seed"][name]
        for i, (beta, color) in enumerate(zip(result["betas"], colors)):
            label = (r"Attn$(X)$" if beta == 0 else r"Attn$(X) + X$" if beta == 1
                     else rf"Attn$(X) + {beta:g}X$")
            plotting.band(axes[0, c], x, np.asarray(ps["sigma_min"])[i], color=color, label=label, log=True)
            plotting.band(axes[1, c], x, np.asarray(ps["effective_rank"])[i], color=color, label=label, log=True)
        tau = {"tau=d_qk": r"$\tau = d_{QK}$", "tau=sqrt(d_qk)": r"$\tau = d_{QK}^{1/2}$",
               "tau=1": r"$\tau = 1$"}.get(name, name)
        axes[0, c].set_title(tau)
        axes[1, c].set_xlabel(r"$d_{QK}$")
        for ax in axes[:, c]:
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
    axes[0, 0].set_ylabel(r"$\sigma_{\min}$ (stacked)")
    axes[1, 0].set_ylabel("effective rank per sample")
    axes[0, 0].legend(loc="lower left")
    fig.tight_layout()
    return fig


def plot_training(result: dict):
    """Loss (relative to its start) and sigma_min(Z_t) along GD, beta = 0 against beta = 1."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(9.6, 3.6))
    for color, (key, loss) in zip(plotting.colors(2), result["training"].items()):
        loss = np.asarray(loss)
        label = rf"$\beta = {key}$"
        axes[0].plot(loss / loss[0], color=color, label=label)
        axes[1].plot(result["training_sigma_min"][key], color=color, label=label)
    axes[0].set(yscale="log", xlabel="GD step $t$", ylabel=r"$\Phi(\theta_t) / \Phi(\theta_0)$")
    axes[1].set(yscale="log", xlabel="GD step $t$", ylabel=r"$\sigma_{\min}(Z_t)$")
    axes[0].legend()
    fig.tight_layout()
    return fig


def plot_depth(result: dict):
    """Relative residual against depth (left) and -log10 of it, log scale (right)."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(9.6, 3.6))
    for color, (name, res) in zip(plotting.colors(2), result["depth"].items()):
        res = np.clip(np.asarray(res), RES_FLOOR, None)
        layers = np.arange(res.shape[1])
        plotting.band(axes[0], layers, res, color=color, label=name, log=True)
        plotting.band(axes[1], layers, -np.log10(res), color=color, label=name, log=True)
    logr0 = -np.log10(np.clip(np.asarray(result["depth"]["attention"]), RES_FLOOR, None)).mean(axis=0)
    start = int(np.argmax(logr0 > -np.log10(0.5)))
    layers = np.arange(start, len(logr0))
    ref = logr0[start] * 3.0 ** (layers - start)
    keep = ref <= 16
    axes[1].plot(layers[keep], ref[keep], color="k", ls=":", lw=1.2, label=r"$\propto 3^{l}$")
    axes[0].axhline(RES_FLOOR, color="0.5", lw=0.8)
    axes[0].set(yscale="log", xlabel="layer $l$", ylabel=r"$\|X_l - 1 x_l^\top\|_F / \|X_l\|_F$")
    axes[1].set(yscale="log", xlabel="layer $l$", ylabel=r"$-\log_{10}$ of the relative residual")
    axes[0].legend(loc="lower left")
    axes[1].legend(loc="upper left")
    fig.tight_layout()
    return fig


def plot(result: dict, out_dir) -> list[Path]:
    """The chapter's three figures, saved as SVG under ``out_dir``."""
    out_dir = Path(out_dir)
    plotting.setup(svg=False)
    return [plotting.save(plot_sweep(result), out_dir / "rank_collapse_sweep.svg"),
            plotting.save(plot_training(result), out_dir / "rank_collapse_training.svg"),
            plotting.save(plot_depth(result), out_dir / "rank_collapse_depth.svg")]
