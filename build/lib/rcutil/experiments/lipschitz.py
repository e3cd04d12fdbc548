"""The numerical checks of the Lipschitz chapter (``python -m rcutil lipschitz``).

For every Lipschitz constant of :mod:`rcutil.bounds` (attention with respect to W_Q, W_K and
W_V, the FFN, the output map), finite-difference ratios on random instances divided by the
bound; none may exceed 1.
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch

from .. import bounds
from ..claims import Claim, status
from ..linalg import sigma_max
from ..model import attention, ffn
from ..threads import torch_threads

#: Sizes of the chapter's random checks, per profile (see :mod:`rcutil.profiles`).
SETTINGS = {
    "ci": dict(n_instances=200, seed=0),
    "book": dict(n_instances=1000, seed=0),
    "paper": dict(n_instances=5000, seed=0),
}


def lipschitz_ratio_check(n_instances: int, seed: int = 0) -> dict[str, np.ndarray]:
    """Finite-difference Lipschitz ratios divided by their bound, for every constant of
    eqs. ``lip-attn``, ``lip-ffn`` and ``lip-out``, on random instances.

    Each instance draws sizes, inputs, weights and two points ``W, W'`` of the argument; the
    ratio ``||f(W) - f(W')||_F / (||W - W'||_F L)`` must never exceed 1. Pairs ``W' = W +
    h D`` with a tiny ``h`` probe the local slope, far pairs the global one.
    """
    if n_instances <= 0:
        raise ValueError(f"n_instances must be positive, got {n_instances!r}")
    g = torch.Generator().manual_seed(int(seed))
    out = {k: [] for k in ("W_Q", "W_K", "W_V", "W_1", "W_2", "Z", "W_U", "H")}

    def rn(*shape):
        return torch.randn(*shape, generator=g, dtype=torch.float64)

    def spec(M):
        return float(sigma_max(M))

    for i in range(n_instances):
        n, d, d_qk, d_F = (int(torch.randint(lo, hi, (1,), generator=g)) for lo, hi in
                           ((2, 6), (2, 8), (1, 4), (1, 8)))
        scale = float(10 ** (2 * torch.rand(1, generator=g) - 1))  # 0.1 .. 10
        tau = float(10 ** (torch.rand(1, generator=g) - 0.5))
        X = rn(n, d) * scale / math.sqrt(d)
        W = dict(W_Q=rn(d, d_qk), W_K=rn(d, d_qk), W_V=rn(d, d) / math.sqrt(d),
                 W_1=rn(d, d_F) / math.sqrt(d), W_2=rn(d_F, d) / math.sqrt(d_F), W_U=rn(d, 2))
        h = 1e-6 if i % 2 == 0 else 1.0

        def other(M, h=h):
            return M + h * rn(*M.shape)

        def attn(W=W, X=X, tau=tau, **kw):
            w = dict(W, **kw)
            return attention(X, w["W_Q"], w["W_K"], w["W_V"], tau)

        def ratio(f0, f1, a0, a1, L):
            return float((f1 - f0).norm() / ((a1 - a0).norm() * L))

        Q1, K1, V1 = other(W["W_Q"]), other(W["W_K"]), other(W["W_V"])
        out["W_Q"].append(ratio(attn(), attn(W_Q=Q1), W["W_Q"], Q1,
                                bounds.attention_lipschitz_WQ(spec(X), spec(W["W_K"]), spec(W["W_V"]), tau)))
        out["W_K"].append(ratio(attn(), attn(W_K=K1), W["W_K"], K1,
                                bounds.attention_lipschitz_WK(spec(X), spec(W["W_Q"]), spec(W["W_V"]), tau)))
        out["W_V"].append(ratio(attn(), attn(W_V=V1), W["W_V"], V1,
                                bounds.attention_lipschitz_WV(n, float(X.norm(dim=1).max()))))
        Z = X
        A1, B1, Z1 = other(W["W_1"]), other(W["W_2"]), other(Z)
        f = ffn(Z, W["W_1"], W["W_2"])
        out["W_1"].append(ratio(f, ffn(Z, A1, W["W_2"]), W["W_1"], A1,
                                bounds.ffn_lipschitz_W1(spec(Z), spec(W["W_2"]))))
        out["W_2"].append(ratio(f, ffn(Z, W["W_1"], B1), W["W_2"], B1,
                                bounds.ffn_lipschitz_W2(float(Z.norm()), spec(W["W_1"]), n * d_F)))
        out["Z"].append(ratio(f, ffn(Z1, W["W_1"], W["W_2"]), Z, Z1,
                              bounds.ffn_lipschitz_Z(spec(W["W_1"]), spec(W["W_2"]))))
        U1, H1 = other(W["W_U"]), other(X)
        out["W_U"].append(ratio(X @ W["W_U"], X @ U1, W["W_U"], U1, bounds.output_lipschitz_WU(spec(X))))
        out["H"].append(ratio(X @ W["W_U"], H1 @ W["W_U"], X, H1, bounds.output_lipschitz_H(spec(W["W_U"]))))
    return {k: np.array(v) for k, v in out.items()}


def run(settings: dict, *, device: str = "cpu", progress: bool = True) -> dict:
    """Ratios measured / bound per constant (always on the CPU, float64: tiny matrices)."""
    with torch_threads(1):
        ratios = lipschitz_ratio_check(settings["n_instances"], settings["seed"])
    return {"settings": settings, "seed": settings["seed"], "computed_on": "cpu",
            "max_ratio": {k: float(v.max()) for k, v in ratios.items()},
            "ratios": {k: v.tolist() for k, v in ratios.items()}}


def claims(result: dict) -> list[Claim]:
    """"The layers are Lipschitz": no measured ratio exceeds its bound."""
    worst = max(result["max_ratio"].values())
    return [Claim(
        "lemma-lipschitz", "Lemma: Lipschitz constants of the layers",
        "attention, FFN and output map are Lipschitz in their weights on a bounded region, with "
        "the softmax Jacobian bounded",
        f"softmax Jacobian norm <= 1/2 (proved by a sum of squares, checked in SymPy); over "
        f"{result['settings']['n_instances']} random instances the largest finite-difference "
        f"ratio over its bound is {worst:.4f} (must be <= 1)",
        status(worst <= 1.0, deviation=True),
        "the constants are the book's own derivation (the paper's are not public)")]


def plot(result: dict, out_dir) -> list[Path]:
    import matplotlib.pyplot as plt

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
