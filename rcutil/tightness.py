"""How tight the certificate's constants are: the values they bound, at a point.

:mod:`rcutil.certificate` bounds three suprema over the ball ``B_r`` (eqs. ``conv-GH``
and ``lip-smooth`` of the book). At a point ``theta`` of the ball the values they bound
are

* ``||DH(theta)||_2``: the operator norm of the Jacobian of ``theta -> H`` (the stacked
  features that enter ``W_U``, Frobenius norm), bounded by ``G_H``: the square root of
  the largest eigenvalue of ``DH^T DH``, by the Lanczos iteration
  (:mod:`rcutil.hessian`);
* ``||Hess Phi(theta)||_2``: the largest eigenvalue of the Hessian of the loss in
  absolute value, bounded by ``C``, by the Lanczos iteration on Hessian-vector products;
* ``sup ||D^2 H(theta)[v, v]||_F`` over unit ``v``, bounded by ``K_H``: a search over
  directions (:func:`top_second`) from several starts, the top direction of ``DH`` and
  seeded random ones, keeping the largest value found.

Each is a lower estimate of the value it measures: a Ritz value lies inside the
spectrum, and the search returns a value the second derivative does reach (a local
maximum over directions, not a certified global one). A ratio to the bound above 1
would disprove the bound; a small ratio is the bound's slack or the search's.
"""

from __future__ import annotations

import math

import torch

from . import hessian
from .model import squared_loss

#: Starts of the search for ``sup ||D^2 H[v, v]||``: the top direction of ``DH`` and
#: ``STARTS - 1`` seeded random directions.
STARTS = 4
#: Lanczos steps of one move of that search.
SEARCH_LANCZOS_STEPS = 3


def flat_maps(model, X: torch.Tensor, Y: torch.Tensor):
    """``(theta, H_of, Phi_of)``: the model's parameters as one flat vector, and the
    maps ``theta -> vec(H)`` (features entering ``W_U``) and ``theta -> Phi`` on such
    vectors."""
    names = [k for k, _ in model.named_parameters()]
    shapes = [p.shape for _, p in model.named_parameters()]
    sizes = [p.numel() for _, p in model.named_parameters()]
    theta = torch.cat([p.detach().reshape(-1) for _, p in model.named_parameters()])

    def params(flat):
        return {k: t.view(s) for k, t, s in zip(names, flat.split(sizes), shapes)}

    def H_of(flat):
        out = torch.func.functional_call(
            model, params(flat), (X,), {"return_all": True}
        )
        return out.features.reshape(-1)

    def Phi_of(flat):
        return squared_loss(torch.func.functional_call(model, params(flat), (X,)), Y)

    return theta, H_of, Phi_of


def jacobian_norm(
    f, theta: torch.Tensor, *, iterations: int, seed: int = 0
) -> tuple[float, torch.Tensor]:
    """``(||Df(theta)||_2, v)``, ``v`` the top right singular vector: Lanczos on
    ``Df^T Df`` from a seeded start (one JVP and one VJP a step)."""
    start = hessian.random_unit(theta.shape, seed, like=theta)
    lam, v = hessian.lanczos(hessian.gram(f, theta), start, iterations=iterations)
    return math.sqrt(max(float(lam), 0.0)), v


def hessian_norm(
    Phi, theta: torch.Tensor, *, iterations: int, seed: int = 0
) -> tuple[float, torch.Tensor]:
    """``(lambda, v)``: the eigenvalue of largest absolute value of ``Hess Phi(theta)``
    (sign kept) and its eigenvector, by Lanczos on Hessian-vector products from a seeded
    start."""
    start = hessian.random_unit(theta.shape, seed, like=theta)
    lam, v = hessian.lanczos(
        hessian.hvp(Phi, theta), start, iterations=iterations, which="magnitude"
    )
    return float(lam), v


def second_derivative(f, theta: torch.Tensor):
    """``v -> D^2 f(theta)[v, v]``, the second derivative of ``t -> f(theta + t v)``
    at 0 (nested JVPs)."""

    def along(v):
        def first(x):
            return torch.func.jvp(f, (x,), (v,))[1]

        return torch.func.jvp(first, (theta,), (v,))[1]

    return along


def top_second(
    f,
    theta: torch.Tensor,
    starts: torch.Tensor,
    *,
    steps: int,
    lanczos_steps: int = SEARCH_LANCZOS_STEPS,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(best, first)``: per start (a row of ``starts``), the largest
    ``||D^2 f(theta)[v, v]||`` over unit ``v`` that the search reaches, and the value at
    the start.

    Alternating maximisation of ``<u, D^2 f[v, v]>`` over unit ``u`` and ``v``, whose
    supremum is ``sup_v ||D^2 f[v, v]||``: ``u`` is the unit ``D^2 f[v, v]`` (the best
    ``u`` for ``v``); then ``v`` is the Ritz vector of largest ``|value|`` of the
    Hessian of ``theta -> <u, f(theta)>`` after ``lanczos_steps`` Lanczos steps started
    at ``v``. The Krylov space holds ``v``, so no move lowers the value. ``steps`` moves
    per start, every start at once.
    """
    along = torch.func.vmap(second_derivative(f, theta))
    V = starts / torch.linalg.vector_norm(starts, dim=-1, keepdim=True)
    best = first = None
    for step in range(steps + 1):
        D = along(V)
        norm = torch.linalg.vector_norm(D, dim=-1)
        first = norm if first is None else first
        best = norm if best is None else torch.maximum(best, norm)
        if step == steps:
            break
        U = D / torch.where(norm > 0, norm, 1).unsqueeze(-1)

        def op(W, U=U):
            def one(u, w):
                grad = torch.func.grad(lambda t: torch.dot(u, f(t)))
                return torch.func.jvp(grad, (theta,), (w,))[1]

            return torch.func.vmap(one)(U, W)

        _, V = hessian.lanczos(op, V, iterations=lanczos_steps, which="magnitude")
    return best, first


def measure(
    model,
    X: torch.Tensor,
    Y: torch.Tensor,
    bounds: dict,
    *,
    iterations: int,
    seed: int = 0,
    starts: int = STARTS,
) -> dict[str, dict[str, float]]:
    """Measured value, bound and ratio of ``G_H``, ``K_H`` and ``C`` at the model's
    current parameters; every measured value is a lower estimate (module doc).

    ``iterations`` Lanczos steps for ``||DH||`` and ``||Hess Phi||``; the search for
    ``K_H`` makes ``ceil(iterations / SEARCH_LANCZOS_STEPS)`` moves from each of
    ``starts`` starts (the top direction of ``DH`` and seeded random ones) and records,
    besides the best value (``true``), the value along the top direction of ``DH``
    (``along_top_direction``) and the best of every start (``per_start``). ``bounds``
    holds the certificate's ``G_H``, ``K_H`` and ``C`` (a ``Certificate.to_dict()``);
    the parameters must lie in the certificate's ball for the comparison to mean
    anything.
    """
    if isinstance(starts, bool) or not isinstance(starts, int) or starts < 1:
        raise ValueError(f"starts must be a positive integer, got {starts!r}")
    theta, H_of, Phi_of = flat_maps(model, X, Y)
    norm_DH, v = jacobian_norm(H_of, theta, iterations=iterations, seed=seed)
    lam, _ = hessian_norm(Phi_of, theta, iterations=iterations, seed=seed)
    random = hessian.random_unit((starts - 1, theta.numel()), seed + 1, like=theta)
    best, first = top_second(
        H_of,
        theta,
        torch.cat([v.unsqueeze(0), random]),
        steps=math.ceil(iterations / SEARCH_LANCZOS_STEPS),
    )
    true = {"G_H": norm_DH, "K_H": float(best.max()), "C": abs(lam)}
    out = {}
    for key, value in true.items():
        bound = float(bounds[key])
        out[key] = {
            "true": value,
            "bound": bound,
            "ratio": value / bound if bound > 0 else math.inf,
        }
    out["K_H"]["along_top_direction"] = float(first[0])
    out["K_H"]["per_start"] = best.tolist()
    out["C"]["eigenvalue"] = lam
    return out
