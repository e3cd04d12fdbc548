"""The numerical checks of the Lipschitz chapter (``python -m rcutil lipschitz``).

For every Lipschitz constant of :mod:`rcutil.bounds` (attention with respect to W_Q, W_K and
W_V, the FFN, the output map), finite-difference ratios on random instances divided by the
bound; none may exceed 1.
"""
from __future__ import annotations

from pathlib import Path

from ..bounds import CHECK_SETTINGS as SETTINGS
from ..bounds import lipschitz_ratio_check
from ..profiles import settings_for
from ..threads import torch_threads

JSON_NAME = "lipschitz"


def run(profile: str | None = None, *, device: str = "cpu", progress: bool = True) -> dict:
    """Ratios measured / bound per constant (always on the CPU, float64: tiny matrices)."""
    s = settings_for(SETTINGS, profile)
    with torch_threads(1):
        ratios = lipschitz_ratio_check(s["n_instances"], s["seed"])
    return {"settings": s, "seed": s["seed"], "computed_on": "cpu",
            "max_ratio": {k: float(v.max()) for k, v in ratios.items()},
            "ratios": {k: v.tolist() for k, v in ratios.items()}}


def plot(result: dict, out_dir) -> list[Path]:
    import matplotlib.pyplot as plt
    import numpy as np

    from ..plotting import save, setup

    setup(svg=False)
    fig, ax = plt.subplots(layout="constrained")
    names = list(result["ratios"])
    ax.boxplot([np.asarray(result["ratios"][k]) for k in names], tick_labels=names)
    ax.axhline(1.0, color="k", lw=1, ls="--")
    ax.set(ylabel="measured Lipschitz ratio / bound", xlabel="constant")
    path = save(fig, Path(out_dir) / "lipschitz_ratios.svg")
    plt.close(fig)
    return [path]
