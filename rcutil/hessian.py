"""Extreme eigenvalues of Hessians and Jacobians from matrix-free products.

Two iterations on a symmetric operator given only by its products, each run on a batch
of independent problems at once (a leading axis ``B``: one problem per model of a
sweep, or one per start of a search):

* :func:`lanczos`: the Lanczos iteration with full reorthogonalisation; its extreme
  Ritz value is the best estimate from the Krylov space, in far fewer products than
* :func:`power_iteration`: the power iteration, for the largest ``|eigenvalue|``.

Both return lower estimates of what they approach: a Ritz value, like a Rayleigh
quotient, lies inside the spectrum, so ``|value| <= max |lambda|``.

An operator is a function ``op(V) -> W`` on ``(B, n)`` tensors, row ``b`` of ``W`` the
product of problem ``b``'s matrix with row ``b`` of ``V``. The builders make one by
automatic differentiation (:mod:`torch.func` or :mod:`torch.autograd`):

* :func:`hvp`: the Hessian of a scalar function of a flat parameter vector;
* :func:`gram`: ``J^T J`` for the Jacobian ``J`` of a vector function (its top
  eigenvalue is the squared top singular value of ``J``);
* :func:`batched_hvp`: the Hessians of a batch of independent losses, e.g. a sweep of
  models whose parameters carry a leading model axis (exact, reverse over reverse).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

#: A symmetric operator per problem of a batch: ``(B, n) -> (B, n)``.
Operator = Callable[[torch.Tensor], torch.Tensor]
#: The Ritz value :func:`lanczos` returns, by name.
WHICH = ("largest", "smallest", "magnitude")


def random_unit(
    shape: Sequence[int], seed: int, *, like: torch.Tensor | None = None
) -> torch.Tensor:
    """Seeded standard Gaussian rows of unit norm, of shape ``(B, n)`` or ``(n,)``,
    drawn in float64 on the CPU and cast to the dtype and device of ``like``."""
    gen = torch.Generator().manual_seed(int(seed))
    v = torch.randn(tuple(shape), generator=gen, dtype=torch.float64)
    v = v / torch.linalg.vector_norm(v, dim=-1, keepdim=True)
    return v if like is None else v.to(like)


def _rows(start: torch.Tensor) -> tuple[torch.Tensor, bool]:
    if start.dim() not in (1, 2):
        raise ValueError(
            f"start must have shape (n,) or (B, n), got {tuple(start.shape)}"
        )
    return (start.unsqueeze(0), True) if start.dim() == 1 else (start, False)


def _dot(U: torch.Tensor, V: torch.Tensor) -> torch.Tensor:
    return (U * V).sum(-1)


def _check_iterations(iterations) -> int:
    if (
        isinstance(iterations, bool)
        or not isinstance(iterations, int)
        or iterations < 1
    ):
        raise ValueError(f"iterations must be a positive integer, got {iterations!r}")
    return iterations


def power_iteration(
    op: Operator, start: torch.Tensor, *, iterations: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(values, vectors)``: power iteration ``v <- op(v) / ||op(v)||`` from ``start``.

    ``values`` are the Rayleigh quotients ``v . op(v)`` of the last unit ``v`` (shape
    ``(B,)``; signed, they approach the eigenvalue of largest absolute value),
    ``vectors`` the normalised ``op(v)`` of that step. A 1-D ``start`` gives a 0-D value
    and a 1-D vector.
    """
    V, single = _rows(start)
    _check_iterations(iterations)
    V = V / torch.linalg.vector_norm(V, dim=-1, keepdim=True)
    for _ in range(iterations):
        W = op(V)
        values = _dot(V, W)
        norm = torch.linalg.vector_norm(W, dim=-1, keepdim=True)
        V = torch.where(norm > 0, W / torch.where(norm > 0, norm, 1), V)
    return (values[0], V[0]) if single else (values, V)


def lanczos(
    op: Operator, start: torch.Tensor, *, iterations: int, which: str = "largest"
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(values, vectors)``: a Ritz pair per problem after ``iterations`` steps.

    The Krylov space of ``op`` from ``start`` is built with full reorthogonalisation
    (twice, which keeps the basis orthonormal to round-off); ``which`` picks the Ritz
    value: ``"largest"`` (approaches ``lambda_max``), ``"smallest"`` or ``"magnitude"``
    (largest ``|lambda|``, its sign kept). A problem whose Krylov space closes early (an
    invariant subspace: its Ritz values are then exact eigenvalues) stops there.
    ``vectors`` are the unit Ritz vectors. A 1-D ``start`` gives a 0-D value and a 1-D
    vector.
    """
    if which not in WHICH:
        raise ValueError(f"which must be one of {', '.join(WHICH)}, got {which!r}")
    Q, single = _rows(start)
    _check_iterations(iterations)
    B, n = Q.shape
    Q = Q / torch.linalg.vector_norm(Q, dim=-1, keepdim=True)
    basis, alphas, betas = [Q], [], []
    size = torch.full((B,), min(iterations, n), dtype=torch.long)  # Krylov dimension
    open_ = torch.ones(B, dtype=torch.bool, device=Q.device)
    for j in range(min(iterations, n)):
        W = op(basis[-1])
        alphas.append(_dot(W, basis[-1]))
        for _ in range(2):
            for U in basis:
                W = W - _dot(W, U).unsqueeze(-1) * U
        norm = torch.linalg.vector_norm(W, dim=-1)
        betas.append(norm)
        scale = torch.stack(alphas + betas).abs().amax(0)
        closes = open_ & (norm <= 1e-10 * scale)  # an invariant subspace
        size[closes.cpu()] = j + 1
        open_ = open_ & ~closes
        if j + 1 < min(iterations, n):
            inverse = torch.where(open_, 1 / torch.where(open_, norm, 1), 0)
            basis.append(W * inverse.unsqueeze(-1))
    A, Bt = torch.stack(alphas, 1), torch.stack(betas, 1)
    values, vectors = [], []
    for b in range(B):
        k = int(size[b])
        off = Bt[b, : k - 1]
        T = torch.diag(A[b, :k]) + torch.diag(off, 1) + torch.diag(off, -1)
        theta, Y = torch.linalg.eigh(T)
        i = {"largest": k - 1, "smallest": 0, "magnitude": int(theta.abs().argmax())}[
            which
        ]
        values.append(theta[i])
        vectors.append(sum(Y[m, i] * basis[m][b] for m in range(k)))
    values, vectors = torch.stack(values), torch.stack(vectors)
    vectors = vectors / torch.linalg.vector_norm(vectors, dim=-1, keepdim=True)
    return (values[0], vectors[0]) if single else (values, vectors)


# --------------------------------------------------------------------------- operators
def _rowwise(one: Callable[[torch.Tensor], torch.Tensor]) -> Operator:
    """``one`` on every row: by :func:`torch.func.vmap`, or directly for one row."""
    batched = torch.func.vmap(one)

    def op(V):
        return one(V[0]).unsqueeze(0) if V.shape[0] == 1 else batched(V)

    return op


def hvp(f: Callable[[torch.Tensor], torch.Tensor], theta: torch.Tensor) -> Operator:
    """``V -> Hess f(theta) V`` for a scalar ``f`` of a flat vector ``theta`` (forward
    over reverse mode, every row of ``V`` at once)."""
    grad = torch.func.grad(f)

    def one(v):
        return torch.func.jvp(grad, (theta,), (v,))[1]

    return _rowwise(one)


def gram(f: Callable[[torch.Tensor], torch.Tensor], theta: torch.Tensor) -> Operator:
    """``V -> J^T J V`` with ``J = Df(theta)`` (one JVP and one VJP per row): its
    largest eigenvalue is ``||Df(theta)||_2^2``."""
    _, vjp = torch.func.vjp(f, theta)

    def one(v):
        return vjp(torch.func.jvp(f, (theta,), (v,))[1])[0]

    return _rowwise(one)


def batched_hvp(loss: torch.Tensor, params: Sequence[torch.Tensor]) -> Operator:
    """``V -> (Hess_b loss_b) V_b`` for ``B`` independent losses of a batch of models.

    ``params`` are leaf tensors with ``requires_grad``, each with the leading model axis
    ``B``; ``loss`` is the sum of the models' losses computed from them (model ``b``'s
    loss depends on its own slice only, so the Hessian of the sum is block diagonal).
    Row ``b`` of ``V`` is model ``b``'s parameters flattened in the order of ``params``.
    Exact products by reverse over reverse mode on one retained graph.
    """
    params = list(params)
    B = params[0].shape[0]
    if any(p.shape[0] != B for p in params):
        raise ValueError(
            f"every parameter needs the leading model axis B = {B}, got "
            f"shapes {[tuple(p.shape) for p in params]}"
        )
    gradient = torch.autograd.grad(loss, params, create_graph=True)
    sizes = [p[0].numel() for p in params]

    def op(V):
        parts = [
            part.reshape(p.shape) for part, p in zip(V.split(sizes, dim=-1), params)
        ]
        products = torch.autograd.grad(
            gradient, params, grad_outputs=parts, retain_graph=True
        )
        return torch.cat([h.detach().reshape(B, -1) for h in products], dim=-1)

    return op
