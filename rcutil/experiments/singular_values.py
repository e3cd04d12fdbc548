"""The singular-value chapter's beta sweep (``python -m rcutil singular-values``).

sigma_min(Z), kappa(Z) and Weyl's lower bound for ``Z = Attn(X) + beta X`` over many random
draws, in float64 on the CPU; the code lives in :mod:`rcutil.spectra`.
"""
from __future__ import annotations

from pathlib import Path

from ..spectra import JSON_NAME, SETTINGS, beta_sweep, plot_beta_sweep

__all__ = ["JSON_NAME", "SETTINGS", "run", "plot"]


def run(profile: str | None = None, *, device: str = "cpu", progress: bool = True) -> dict:
    """The beta sweep of figure ``fig-sv-beta`` (always on the CPU: the arrays are small)."""
    return beta_sweep(profile) | {"computed_on": "cpu"}


def plot(result: dict, out_dir) -> list[Path]:
    import matplotlib.pyplot as plt

    from ..plotting import save, setup

    setup(svg=False)
    fig = plot_beta_sweep(result)
    path = save(fig, Path(out_dir) / "sv_beta.svg")
    plt.close(fig)
    return [path]
