"""How tight the certificate's constants are: the true values they bound, by power iteration.

:mod:`rcutil.certificate` bounds three suprema over the ball ``B_r`` (eqs. ``conv-GH`` and
``lip-smooth`` of the book). At a point ``theta`` of the ball the exact values are

* ``||DH(theta)||_2``: the operator norm of the Jacobian of ``theta -> H`` (the stacked
  features that enter ``W_U``, Frobenius norm), bounded by ``G_H``;
* ``sup ||D^2 H(theta)[v, v]||_F`` over unit ``v``, bounded by ``K_H``: its value along the
  top right singular vector of ``DH``, then increased by a higher-order power iteration
  started there (``v <- D^2 H[v, .]^T D^2 H[v, v]``, normalised);
* ``||Hess Phi(theta)||_2``: the largest eigenvalue of the Hessian of the loss in absolute
  value, bounded by ``C``.

Each comes from Jacobian-vector, vector-Jacobian and Hessian-vector products of
:mod:`torch.func` on the flat parameter vector, with power iteration from a seeded start: a
lower bound of the true value that converges to it, so a ratio above 1 would disprove a bound.
"""
from __future__ import annotations

import math

import torch

from .model import squared_loss


def flat_maps(model, X: torch.Tensor, Y: torch.Tensor):
    """``(theta, H_of, Phi_of)``: the model's parameters as one flat vector, and the maps
    ``theta -> vec(H)`` (features entering ``W_U``) and ``theta -> Phi`` on such vectors."""
    names = [k for k, _ in model.named_parameters()]
    shapes = [p.shape for _, p in model.named_parameters()]
    sizes = [p.numel() for _, p in model.named_parameters()]
    theta = torch.cat([p.detach().reshape(-1) for _, p in model.named_parameters()])

    def params(flat):
        return {k: t.view(s) for k, t, s in zip(names, flat.split(sizes), shapes)}

    def H_of(flat):
        return torch.func.functional_call(model, params(flat), (X,), {"return_all": True}).features.reshape(-1)

    def Phi_of(flat):
        return squared_loss(torch.func.functional_call(model, params(flat), (X,)), Y)

    return theta, H_of, Phi_of


def _start(theta: torch.Tensor, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(int(seed))
    v = torch.randn(theta.shape, generator=gen, dtype=torch.float64).to(theta)
    return v / torch.linalg.vector_norm(v)


def top_singular(f, theta: torch.Tensor, *, iterations: int, seed: int = 0) -> tuple[float, torch.Tensor]:
    """``(||Df(theta)||_2, v)``: power iteration on ``Df^T Df`` (one JVP and one VJP a step)."""
    _, vjp = torch.func.vjp(f, theta)
    v = _start(theta, seed)
    sigma = 0.0
    for _ in range(iterations):
        w = torch.func.jvp(f, (theta,), (v,))[1]
        sigma = float(torch.linalg.vector_norm(w))
        u = vjp(w)[0]
        v = u / torch.linalg.vector_norm(u)
    return sigma, v


def top_eigen(Phi, theta: torch.Tensor, *, iterations: int, seed: int = 0) -> tuple[float, torch.Tensor]:
    """``(lambda, v)``: the eigenvalue of largest absolute value of ``Hess Phi(theta)`` and its
    eigenvector, by power iteration on Hessian-vector products (forward over reverse mode)."""
    grad = torch.func.grad(Phi)
    v = _start(theta, seed)
    lam = 0.0
    for _ in range(iterations):
        w = torch.func.jvp(grad, (theta,), (v,))[1]
        lam = float(v @ w)
        v = w / torch.linalg.vector_norm(w)
    return lam, v


def second_derivative(f, theta: torch.Tensor):
    """``v -> D^2 f(theta)[v, v]``, the second derivative of ``t -> f(theta + t v)`` at 0 (nested JVPs)."""
    def along(v):
        def first(x):
            return torch.func.jvp(f, (x,), (v,))[1]
        return torch.func.jvp(first, (theta,), (v,))[1]
    return along


def top_second(f, theta: torch.Tensor, start: torch.Tensor, *, iterations: int) -> tuple[float, float]:
    """``(largest ||D^2 f(theta)[v, v]|| found, its value at v = start)`` over unit ``v``.

    Higher-order power iteration: ``v`` moves to the normalised gradient of
    ``||D^2 f[v, v]||^2 / 4``, that is ``D^2 f[v, .]^T D^2 f[v, v]`` (one VJP of the nested JVPs).
    """
    along = second_derivative(f, theta)
    v = start / torch.linalg.vector_norm(start)
    first = best = 0.0
    for i in range(iterations + 1):
        value, vjp = torch.func.vjp(along, v)
        norm = float(torch.linalg.vector_norm(value))
        first = norm if i == 0 else first
        best = max(best, norm)
        u = vjp(value)[0]
        v = u / torch.linalg.vector_norm(u)
    return best, first


def measure(model, X: torch.Tensor, Y: torch.Tensor, bounds: dict, *, iterations: int,
            seed: int = 0) -> dict[str, dict[str, float]]:
    """True value, bound and ratio of ``G_H``, ``K_H`` and ``C`` at the model's current parameters.

    ``bounds`` holds the certificate's ``G_H``, ``K_H`` and ``C`` (a ``Certificate.to_dict()``);
    the parameters must lie in the certificate's ball for the comparison to mean anything.
    """
    theta, H_of, Phi_of = flat_maps(model, X, Y)
    norm_DH, v = top_singular(H_of, theta, iterations=iterations, seed=seed)
    lam, _ = top_eigen(Phi_of, theta, iterations=iterations, seed=seed)
    second, along_top = top_second(H_of, theta, v, iterations=iterations)
    true = {"G_H": norm_DH, "K_H": second, "C": abs(lam)}
    out = {}
    for key, value in true.items():
        bound = float(bounds[key])
        out[key] = {"true": value, "bound": bound, "ratio": value / bound if bound > 0 else math.inf}
    out["K_H"]["along_top_direction"] = along_top
    out["C"]["eigenvalue"] = lam
    return out
