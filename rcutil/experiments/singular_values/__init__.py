"""The singular-value chapter's beta sweep (``python -m rcutil singular-values``).

sigma_min(Z), kappa(Z) and Weyl's lower bound (eq. ``sv-weyl-min``) for
``Z = Attn(X) + beta X`` over many random draws, in float64 on the CPU, in two regimes:
``tau = sqrt(d_QK)`` at the settings' ``d_qk``, and the collapsed ``tau = d_QK`` at
``collapsed_d_qk``. The spectral tools are those of :mod:`rcutil.spectra`; the checks
and the claim are in :mod:`rcutil.experiments.singular_values.verdicts`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import torch

from ... import profiles, results
from ...progress import steps
from ...spectra import (
    attention_from_product,
    random_attention_weights,
    random_inputs,
    residual_spectra,
    temperature,
    weyl_bounds,
)
from ...threads import torch_threads


@dataclass(frozen=True, kw_only=True)
class Settings(profiles.Settings):
    """Sizes of the chapter's random draws and of the beta sweep."""

    N: int  #: samples of a draw
    n: int  #: tokens per sample
    d: int  #: width of a token
    d_qk: int  #: width of queries and keys under tau = sqrt(d_QK)
    instances: int  #: random (X, weights) draws per check in the chapter
    sweep_instances: int  #: draws of the beta sweep
    betas: int  #: points of the beta sweep in [0, 1]
    collapsed_d_qk: int  #: width of queries and keys under tau = d_QK
    seed: int


CI = Settings(
    N=4, n=16, d=8, d_qk=8, collapsed_d_qk=4096,
    instances=2000, sweep_instances=200, betas=41, seed=0,
)  # fmt: skip
BOOK = replace(CI, instances=20000, sweep_instances=1000, betas=81)
PAPER = replace(CI, instances=50000, sweep_instances=5000, betas=101)
SETTINGS = {"ci": CI, "book": BOOK, "paper": PAPER}

#: The two scalings of the sweep: the usual one, and the one that collapses attention.
STANDARD, COLLAPSED = "tau=sqrt(d_qk)", "tau=d_qk"


@dataclass
class Regime:
    """One scaling of the sweep; arrays have shape ``(betas, draws)``."""

    scaling: str
    d_qk: int
    sigma_min: np.ndarray
    kappa: np.ndarray
    weyl_lower: np.ndarray  #: Weyl's lower bound on sigma_min(Z), eq. ``sv-weyl-min``


@dataclass
class Result(results.Result):
    """The sweep: its values of beta, and the two regimes (found by ``scaling``)."""

    settings: Settings
    betas: list[float]
    regimes: list[Regime]


def regime_sweep(
    settings: Settings, X: torch.Tensor, betas: torch.Tensor, d_qk: int, scaling: str
) -> Regime:
    """sigma_min(Z), kappa(Z) and Weyl's lower bound (eq. ``sv-weyl-min``) against beta,
    for ``Z = Attn(X) + beta X`` with fresh random weights of width ``d_QK``."""
    W_Q, W_K, W_V = random_attention_weights(
        X.shape[0], settings.d, d_qk, seed=settings.seed + 1
    )
    A = attention_from_product(X, W_Q, W_K, W_V, temperature(scaling, d_qk))
    spec = residual_spectra(A, X, betas.tolist())
    lower = weyl_bounds(A, X, betas.view(-1, 1))["min_lower"]  # every beta at once
    return Regime(
        scaling, d_qk, spec["sigma_min"].numpy(), spec["kappa"].numpy(), lower.numpy()
    )


def run(settings: Settings, *, device: str = "cpu", progress: bool = True) -> Result:
    """The beta sweep of figure ``fig-sv-beta``, both regimes (always on the CPU: the
    arrays are small)."""
    with torch_threads(1):  # many small operations (see rcutil.threads)
        s = settings
        betas = torch.linspace(0.0, 1.0, s.betas, dtype=torch.float64)
        X = random_inputs(s.sweep_instances, s.N, s.n, s.d, seed=s.seed)
        widths = {STANDARD: s.d_qk, COLLAPSED: s.collapsed_d_qk}
        regimes = [
            regime_sweep(settings, X, betas, widths[scaling], scaling)
            for scaling in steps(
                list(widths), desc="beta sweep", unit="regime", progress=progress
            )
        ]
    return Result(settings=settings, betas=betas.tolist(), regimes=regimes)
