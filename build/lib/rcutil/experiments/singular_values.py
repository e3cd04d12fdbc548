"""The singular-value chapter's beta sweep (``python -m rcutil singular-values``).

sigma_min(Z), kappa(Z) and Weyl's lower bound (eq. ``sv-weyl-min``) for
``Z = Attn(X) + beta X`` over many random draws, in float64 on the CPU, in two regimes:
``tau = sqrt(d_QK)`` at the settings' ``d_qk``, and the collapsed ``tau = d_QK`` at
``collapsed_d_qk``. The spectral tools are those of :mod:`rcutil.spectra`.
"""
from __future__ import annotations

from pathlib import Path

import torch

from ..claims import Claim, status
from ..spectra import (
    attention_from_product,
    random_attention_weights,
    random_inputs,
    residual_spectra,
    temperature,
    weyl_bounds,
)
from ..threads import torch_threads

#: Sizes per profile (see :mod:`rcutil.profiles`). ``instances``: random (X, weights) draws
#: per check in the chapter; ``sweep_instances``: draws of the beta sweep; ``betas``: its points.
SETTINGS = {
    "ci": {"N": 4, "n": 16, "d": 8, "d_qk": 8, "instances": 2000, "sweep_instances": 200,
           "betas": 41, "collapsed_d_qk": 4096, "seed": 0},
    "book": {"N": 4, "n": 16, "d": 8, "d_qk": 8, "instances": 20000, "sweep_instances": 1000,
             "betas": 81, "collapsed_d_qk": 4096, "seed": 0},
    "paper": {"N": 4, "n": 16, "d": 8, "d_qk": 8, "instances": 50000, "sweep_instances": 5000,
              "betas": 101, "collapsed_d_qk": 4096, "seed": 0},
}


def run(settings: dict, *, device: str = "cpu", progress: bool = True) -> dict:
    """The beta sweep of figure ``fig-sv-beta`` (always on the CPU: the arrays are small).

    Arrays in ``regimes`` have shape ``(betas, sweep_instances)``.
    """
    with torch_threads(1):  # many small operations (see rcutil.threads)
        return beta_sweep(settings) | {"computed_on": "cpu"}


def regimes(settings: dict) -> tuple[tuple[str, int, str], ...]:
    """``(name, d_QK, scaling)`` of the sweep's two regimes."""
    return (("tau=sqrt(d_qk)", settings["d_qk"], "tau=sqrt(d_qk)"),
            ("tau=d_qk, collapsed", settings["collapsed_d_qk"], "tau=d_qk"))


def regime_sweep(settings: dict, X: torch.Tensor, betas: torch.Tensor, d_qk: int, scaling: str) -> dict:
    """sigma_min(Z), kappa(Z) and Weyl's lower bound (eq. ``sv-weyl-min``) against beta, for
    ``Z = Attn(X) + beta X`` with fresh random weights of width ``d_QK``."""
    W_Q, W_K, W_V = random_attention_weights(X.shape[0], settings["d"], d_qk, seed=settings["seed"] + 1)
    A = attention_from_product(X, W_Q, W_K, W_V, temperature(scaling, d_qk))
    spec = residual_spectra(A, X, betas.tolist())
    lower = weyl_bounds(A, X, betas.view(-1, 1))["min_lower"]   # every beta at once
    return {"d_qk": d_qk, "sigma_min": spec["sigma_min"], "kappa": spec["kappa"], "weyl_lower": lower}


def beta_sweep(settings: dict) -> dict:
    """sigma_min(Z), kappa(Z) and Weyl's lower bound against beta, in both regimes."""
    betas = torch.linspace(0.0, 1.0, settings["betas"], dtype=torch.float64)
    X = random_inputs(settings["sweep_instances"], settings["N"], settings["n"], settings["d"],
                      seed=settings["seed"])
    out = {"settings": settings, "betas": betas.tolist(), "regimes": {}}
    for name, d_qk, scaling in regimes(settings):
        out["regimes"][name] = regime_sweep(settings, X, betas, d_qk, scaling)
    return out


def claims(result: dict) -> list[Claim]:
    """"The residual keeps Z well conditioned": in the collapsed regime the smallest
    sigma_min(Z) over all draws at beta = 1 exceeds 100 times the median at beta = 0."""
    import numpy as np

    collapsed = next(v for k, v in result["regimes"].items() if "collapsed" in k)
    betas = result["betas"]
    sigma_min = np.asarray(collapsed["sigma_min"])
    smin0 = float(np.median(sigma_min[betas.index(0.0)]))
    smin1 = float(np.min(sigma_min[betas.index(1.0)]))
    return [Claim(
        "lemma-residual", "Lemma: the residual keeps Z well conditioned",
        "Z = Attn(X) + X keeps full rank whenever X does, so sigma_min(Z) > 0, while the "
        "attention output alone can collapse",
        f"collapsed attention (tau = d_QK = {collapsed['d_qk']}): median sigma_min(Z) at beta = 0 "
        f"is {smin0:.2e}; the smallest over all draws at beta = 1 is {smin1:.3g}",
        status(smin1 > 0 and smin1 > 100 * smin0, deviation=True),
        "the exact statements are the book's: sigma_min(Z) >= (beta - ||P - U||) sigma_min(X) "
        "for W_V = I, eigenvalues 1 and 2 in the uniform case, and, for the Gaussian W_V of this "
        "sweep, sigma_min(Z) >= beta sigma_min(X centred) - ||P - U|| ||X|| ||W_V||")]


def plot_beta_sweep(result: dict, axes=None):
    """Bands over instances of sigma_min(Z) and kappa(Z) against beta (figure ``fig-sv-beta``)."""
    import matplotlib.pyplot as plt
    import numpy as np

    from .. import plotting

    if axes is None:
        fig, axes = plt.subplots(1, 2, figsize=(9.6, 3.8))
    else:
        fig = axes[0].figure
    betas = np.asarray(result["betas"])
    for color, (name, reg) in zip(plotting.colors(2), result["regimes"].items()):
        tau = r"$\tau = d_{QK}$" if name.startswith("tau=d_qk") else r"$\tau = d_{QK}^{1/2}$"
        label = f"{tau}, $d_{{QK}} = {reg['d_qk']}$"
        plotting.band(axes[0], betas, np.asarray(reg["sigma_min"]).T, color=color, label=label, log=True)
        lower = np.median(np.asarray(reg["weyl_lower"]), axis=1)
        axes[0].plot(betas, np.where(lower > 0, lower, np.nan), color=color, ls="--", lw=1.2)
        plotting.band(axes[1], betas, np.asarray(reg["kappa"]).T, color=color, label=label, log=True)
    axes[0].plot([], [], color="k", ls="--", lw=1.2, label="Weyl lower bound (median)")
    axes[0].set(yscale="log", xlabel=r"residual strength $\beta$", ylabel=r"$\sigma_{\min}(Z)$")
    axes[1].set(yscale="log", xlabel=r"residual strength $\beta$", ylabel=r"$\kappa(Z)$")
    axes[0].legend(loc="lower right")
    fig.tight_layout()
    return fig


def plot(result: dict, out_dir) -> list[Path]:
    import matplotlib.pyplot as plt

    from ..plotting import save, setup

    setup(svg=False)
    fig = plot_beta_sweep(result)
    path = save(fig, Path(out_dir) / "sv_beta.svg")
    plt.close(fig)
    return [path]
