"""The PL + smoothness certificate of Theorem 1 and its L-layer form, chapter :ref:`convergence`.

For an instance (a :class:`~rcutil.model.Transformer` at ``theta_0``, inputs ``X``, targets
``Y``) and a radius ``r`` it computes, on the Euclidean ball ``B_r`` around ``theta_0``:

* ``s0 = sigma_{Nn}(H_0)`` and ``S0 = ||H_0||_2`` of the stacked ``(N n) x d`` features
  ``H_0`` that enter ``W_U`` (needs the width ``d >= N n``), eq. ``conv-s0``;
* ``G_H``, ``K_H``: bounds on the first and second derivatives of ``theta -> H`` on the ball,
  composed from the rules of :mod:`rcutil.bounds` (eq. ``conv-GH``);
* the PL constant ``alpha = (s0 - G_H r)^2`` (eq. ``conv-alpha``), the smoothness constant
  ``C`` (eq. ``lip-smooth``), the step ``mu = 1/C`` and the stay-in-the-ball condition
  ``2 sqrt(2 Phi_0 / alpha) + mu G sqrt(2 Phi_0) <= r`` (eq. ``conv-ball``).

All bounds are evaluated numerically from the actual weights at ``theta_0``; they are
rigorous for any depth (they do not need a closed form).
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np
import torch

from . import bounds
from .linalg import sigma_max, singular_values, stacked_rows
from .model import BLOCK_NAMES, check_input, squared_loss


@dataclass
class Certificate:
    """Every constant of Theorem 1 for one instance and one radius ``r``."""

    r: float
    s0: float          #: sigma_{Nn}(H_0)
    S0: float          #: ||H_0||_2
    phi0: float        #: Phi(theta_0)
    G_H: float         #: Lipschitz constant of theta -> H on B_r
    K_H: float         #: second-derivative bound of theta -> H on B_r
    H_max: float       #: sup of ||H||_2 on B_r
    R_U: float         #: ||W_U^0||_2 + r
    lam: float         #: s0 - G_H r, lower bound of sigma_{Nn}(H) on B_r
    alpha: float       #: PL constant lam^2
    G: float           #: Lipschitz constant of theta -> F on B_r
    K: float           #: second-derivative bound of theta -> F on B_r
    C: float           #: smoothness constant of Phi on B_r
    mu: float          #: step size used in the ball condition
    path_bound: float  #: 2 sqrt(2 Phi_0 / alpha) + mu G sqrt(2 Phi_0)
    holds: bool        #: lam > 0, mu <= 1/C and path_bound <= r
    kappa_inv_sq: float  #: (s0 / S0)^2, which alpha / C never exceeds

    @property
    def predicted_rate(self) -> float:
        """``1 - mu alpha``: the contraction factor of Theorem 1."""
        return 1.0 - self.mu * self.alpha

    def to_dict(self) -> dict:
        return dict(asdict(self), predicted_rate=self.predicted_rate)


def _trace(model, X: torch.Tensor) -> list[list[dict[str, float]]]:
    """Spectral norms at ``theta_0`` of every intermediate, per sample and block."""
    traces = []
    with torch.no_grad():
        for p in range(X.shape[0]):
            Xl, per_block = X[p], []
            for blk in model.blocks:
                W = {k: getattr(blk, k).detach() for k in BLOCK_NAMES}
                norms, Xl = bounds.block_norms0(Xl, W, beta=model.beta, tau=model.tau)
                per_block.append(norms)
            traces.append(per_block)
    return traces


def feature_bounds(model, X: torch.Tensor, r: float, trace=None) -> tuple[float, float, float]:
    """``(G_H, K_H, H_bound)`` for ``theta -> H`` on the ball of radius ``r`` (eq. ``conv-GH``).

    Per sample ``p`` a :class:`~rcutil.bounds.Jet` runs through the blocks; then
    ``G_H^2 = lambda_max(sum_p g_p g_p^T)``, ``K_H^2 = sum_p lambda_max(Hq_p)^2`` and
    ``H_bound^2 = sum_p value_p^2``. Value bounds are tightened around the norms at
    ``theta_0`` (``trace``, computed if not given).
    """
    if not (math.isfinite(r) and r >= 0):
        raise ValueError(f"r (the ball radius) must be finite and non-negative, got {r!r}")
    X = check_input(X, model.d)
    trace = _trace(model, X) if trace is None else trace
    L = model.n_layers
    n_params = len(BLOCK_NAMES) * L
    radii = []
    for blk in model.blocks:
        radii.append({k: float(sigma_max(getattr(blk, k))) + r
                      for k in BLOCK_NAMES})
    gram = np.zeros((n_params, n_params))
    K_sq = 0.0
    H_sq = 0.0
    n = X.shape[1]
    for p in range(X.shape[0]):
        x_norm = float(sigma_max(X[p]))
        jet = bounds.jet_const(x_norm, (n, model.d), n_params)
        for l in range(L):
            jet = bounds.jet_block(jet, radii[l], len(BLOCK_NAMES) * l, n_params, d=model.d,
                                   d_qk=model.d_qk, d_F=model.d_F, beta=model.beta, tau=model.tau,
                                   norms0=trace[p][l], r=r)
        gram += np.outer(jet.g, jet.g)
        K_sq += jet.second**2
        H_sq += jet.value**2
    G_H = float(math.sqrt(max(np.linalg.eigvalsh(gram)[-1], 0.0)))
    return G_H, math.sqrt(K_sq), math.sqrt(H_sq)


def certificate(model, X: torch.Tensor, Y: torch.Tensor, r: float, mu: float | None = None,
                *, trace=None) -> Certificate:
    """Evaluate Theorem 1's constants for radius ``r`` (and step ``mu``, default ``1/C``)."""
    X = check_input(X, model.d)
    if not isinstance(Y, torch.Tensor) or Y.shape != (X.shape[0], X.shape[1], model.d_out):
        raise ValueError(f"Y must be a tensor of shape {(X.shape[0], X.shape[1], model.d_out)} (N, n, d_out)")
    with torch.no_grad():
        out = model(X, return_all=True)
        H0 = stacked_rows(out.features)
        phi0 = float(squared_loss(out.output, Y))
    if H0.shape[0] > H0.shape[1]:
        raise ValueError(
            f"the PL bound needs width d >= N n so that H_0 can have full row rank: "
            f"N n = {H0.shape[0]} > d = {H0.shape[1]}; use fewer tokens/samples or a wider model")
    sv = singular_values(H0)
    s0, S0 = float(sv[-1]), float(sv[0])
    G_H, K_H, H_bound = feature_bounds(model, X, r, trace)
    H_max = min(S0 + G_H * r, H_bound)
    R_U = float(sigma_max(model.W_U)) + r
    lam = s0 - G_H * r
    alpha = lam**2 if lam > 0 else 0.0
    G = bounds.output_gradient_bound(H_max, G_H, R_U)
    K = bounds.output_second_bound(G_H, K_H, R_U)
    C = bounds.smoothness_constant(G, K, phi0, r)
    mu = 1.0 / C if mu is None else float(mu)
    path = (2.0 * math.sqrt(2.0 * phi0 / alpha) if alpha > 0 else math.inf) + mu * G * math.sqrt(2.0 * phi0)
    holds = bool(lam > 0 and mu <= 1.0 / C * (1 + 1e-12) and path <= r)
    return Certificate(r=r, s0=s0, S0=S0, phi0=phi0, G_H=G_H, K_H=K_H, H_max=H_max, R_U=R_U,
                       lam=lam, alpha=alpha, G=G, K=K, C=C, mu=mu, path_bound=path, holds=holds,
                       kappa_inv_sq=(s0 / S0) ** 2)


def best_certificate(model, X: torch.Tensor, Y: torch.Tensor, *, n_radii: int = 120) -> Certificate:
    """Scan radii ``r`` on a log grid up to ``s0 / G_H`` and return the certificate with the
    fastest rate ``1 - mu alpha`` among those that hold (or the one closest to holding)."""
    if n_radii < 2:
        raise ValueError(f"n_radii must be at least 2, got {n_radii!r}")
    X = check_input(X, model.d)
    trace = _trace(model, X)
    first = certificate(model, X, Y, r=1e-12, trace=trace)
    r_max = first.s0 / max(first.G_H, 1e-300)
    best, fallback = None, None
    for r in np.geomspace(r_max * 1e-8, r_max, n_radii):
        c = certificate(model, X, Y, r=float(r), trace=trace)
        if c.holds and (best is None or c.mu * c.alpha > best.mu * best.alpha):
            best = c
        gap = c.path_bound / c.r
        if fallback is None or gap < fallback[0]:
            fallback = (gap, c)
    return best if best is not None else fallback[1]


def composed_ratio_check(model, X: torch.Tensor, Y: torch.Tensor, r: float, n_points: int,
                         seed: int = 0) -> dict[str, np.ndarray]:
    """At random points of ``B_r`` and random unit directions: ``||H'|| / G_H``,
    ``||H''|| / K_H`` and ``|delta^T Hess(Phi) delta| / C`` (exact derivatives, forward mode).
    Every ratio must be at most 1."""
    cert = certificate(model, X, Y, r=r)
    g = torch.Generator().manual_seed(int(seed))
    theta0 = {k: p.detach().clone() for k, p in model.named_parameters()}

    def unit():
        v = {k: torch.randn(p.shape, generator=g, dtype=p.dtype) for k, p in theta0.items()}
        nv = math.sqrt(sum(float((t**2).sum()) for t in v.values()))
        return {k: t / nv for k, t in v.items()}

    def H_of(params):
        return torch.func.functional_call(model, params, (X,), {"return_all": True}).features

    def Phi_of(params):
        return squared_loss(torch.func.functional_call(model, params, (X,)), Y)

    def derivs(f, x, v):
        def first(y):
            return torch.func.jvp(f, (y,), (v,))[1]
        return first(x), torch.func.jvp(first, (x,), (v,))[1]

    out = {"H_first": [], "H_second": [], "Phi_hessian": []}
    for _ in range(n_points):
        u, v = unit(), unit()
        frac = float(torch.rand(1, generator=g))
        point = {k: theta0[k] + r * frac * u[k] for k in theta0}
        d1, d2 = derivs(H_of, point, v)
        _, h = derivs(Phi_of, point, v)
        out["H_first"].append(float(d1.norm()) / cert.G_H)
        out["H_second"].append(float(d2.norm()) / cert.K_H)
        out["Phi_hessian"].append(abs(float(h)) / cert.C)
    return {k: np.array(v) for k, v in out.items()}
