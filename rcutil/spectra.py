"""Singular values of the attention output with and without the residual.

Shared by the chapters :ref:`singular-values` and :ref:`rank-collapse`. Everything is
batched: a leading "instance" dimension ``S`` (seeds, random draws) runs through
:func:`rcutil.model.attention` by broadcasting, and the spectra of all instances come
from one batched SVD (:mod:`rcutil.linalg`). Shapes:

* inputs ``X``: ``(S, N, n, d)``, ``N`` samples of ``n`` tokens by ``d`` features;
* weights: ``(S, 1, d, k)``, broadcast over the ``N`` samples of an instance;
* the theory's matrix is the stacked ``(N n) x d`` one (:func:`stack`).

Equation labels refer to the chapter ``singular-values`` (prefix ``sv-``) and
``rank-collapse`` (prefix ``rc-``). The lower bound for any ``W_V`` near uniform
attention, eq. ``rc-centred``, is
:func:`rcutil.experiments.rank_collapse.centred_lower_bound`; it uses
:func:`uniform_deviation` from here.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import torch

from .linalg import effective_rank, singular_values
from .model import attention, attention_weights

#: Score scalings of the rank-collapse sweep: name -> temperature ``tau`` as a function
#: of ``d_QK`` (the scores are divided by ``tau``), eq. ``rc-variance``.
SCALINGS = {
    "tau=d_qk": lambda d_qk: float(d_qk),
    "tau=sqrt(d_qk)": lambda d_qk: math.sqrt(d_qk),
    "tau=1": lambda d_qk: 1.0,
}


# --------------------------------------------------------------------------- checks
def _check_int(name: str, value, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return value


def temperature(scaling: str, d_qk: int) -> float:
    """``tau`` of the named score scaling at ``d_QK`` (see :data:`SCALINGS`)."""
    if scaling not in SCALINGS:
        raise ValueError(
            f"unknown scaling {scaling!r}: choose one of {', '.join(SCALINGS)}"
        )
    return SCALINGS[scaling](_check_int("d_qk", d_qk))


# --------------------------------------------------------------------------- sampling
def random_inputs(
    instances: int, N: int, n: int, d: int, *, seed: int, dtype=torch.float64
) -> torch.Tensor:
    """``instances`` batches of inputs with i.i.d. standard Gaussian entries, ``(S, N,
    n, d)``."""
    shape = tuple(
        _check_int(k, v)
        for k, v in (("instances", instances), ("N", N), ("n", n), ("d", d))
    )
    gen = torch.Generator().manual_seed(int(seed))
    return torch.randn(shape, generator=gen, dtype=torch.float64).to(dtype)


def random_attention_weights(
    instances: int,
    d: int,
    d_qk: int,
    *,
    seed: int,
    std=None,
    value: str = "gaussian",
    dtype=torch.float64,
):
    """``(W_Q, W_K, W_V)`` for ``instances`` draws, each of shape ``(S, 1, rows,
    cols)``.

    Entries are i.i.d. Gaussian with standard deviation ``std`` (default ``1/sqrt(d)``,
    the model's default ``1/sqrt(fan_in)``). ``value="identity"`` sets ``W_V = I``.
    """
    S, d, d_qk = (
        _check_int(k, v)
        for k, v in (("instances", instances), ("d", d), ("d_qk", d_qk))
    )
    if value not in ("gaussian", "identity"):
        raise ValueError(f"value must be 'gaussian' or 'identity', got {value!r}")
    std = 1.0 / math.sqrt(d) if std is None else float(std)
    if not math.isfinite(std) or std < 0:
        raise ValueError(f"std must be finite and non-negative, got {std!r}")
    gen = torch.Generator().manual_seed(int(seed))
    W_Q = torch.randn(S, 1, d, d_qk, generator=gen, dtype=torch.float64) * std
    W_K = torch.randn(S, 1, d, d_qk, generator=gen, dtype=torch.float64) * std
    if value == "identity":
        W_V = torch.eye(d, dtype=torch.float64).expand(S, 1, d, d).clone()
    else:
        W_V = torch.randn(S, 1, d, d, generator=gen, dtype=torch.float64) / math.sqrt(d)
    return W_Q.to(dtype), W_K.to(dtype), W_V.to(dtype)


def nested_score_products(
    d: int, d_qk_values: Sequence[int], *, seed: int, std=None, chunk: int = 1 << 15
) -> torch.Tensor:
    """``W_Q W_K^T`` for every ``d_QK`` in ``d_qk_values``, shape ``(len(values), d,
    d)``.

    One pair ``W_Q, W_K`` of ``d x max(values)`` i.i.d. Gaussian entries (std
    ``1/sqrt(d)`` by default) is drawn column block by column block; the value at
    ``d_QK`` uses its first ``d_QK`` columns. Every entry is therefore exactly the
    product of ``d x d_QK`` Gaussian matrices, and neighbouring ``d_QK`` share columns
    (the curves are smooth in ``d_QK``). Since ``(X W_Q)(X W_K)^T = X (W_Q W_K^T) X^T``,
    the scores need only this ``d x d`` product, which keeps memory independent of
    ``d_QK``.
    """
    d = _check_int("d", d)
    values = [_check_int("d_qk", v) for v in d_qk_values]
    if not values or values != sorted(set(values)):
        raise ValueError(
            f"d_qk_values must be strictly increasing and non-empty, got {values}"
        )
    std = 1.0 / math.sqrt(d) if std is None else float(std)
    gen = torch.Generator().manual_seed(int(seed))
    acc = torch.zeros(d, d, dtype=torch.float64)
    out, done = [], 0
    for v in values:
        while done < v:
            m = min(chunk, v - done)
            W_Q = torch.randn(d, m, generator=gen, dtype=torch.float64) * std
            W_K = torch.randn(d, m, generator=gen, dtype=torch.float64) * std
            acc = acc + W_Q @ W_K.T
            done += m
        out.append(acc.clone())
    return torch.stack(out)


def attention_from_product(X, W_Q, W_K, W_V, tau) -> torch.Tensor:
    """``Attn(X)`` of eq. ``model-attn`` through :func:`rcutil.model.attention`, with
    the scores formed as ``X (W_Q W_K^T) X^T``: the same matrix, in memory independent
    of ``d_QK``."""
    I = torch.eye(X.shape[-1], dtype=X.dtype)
    return attention(X, W_Q @ W_K.transpose(-1, -2), I, W_V, tau)


# --------------------------------------------------------------------------- spectra
def stack(M: torch.Tensor) -> torch.Tensor:
    """``(..., N, n, k) -> (..., N n, k)``: the stacked matrix of eq. ``model-z`` per
    instance."""
    return M.reshape(*M.shape[:-3], M.shape[-3] * M.shape[-2], M.shape[-1])


def spectrum(M: torch.Tensor, *, per_sample: bool = False) -> dict[str, torch.Tensor]:
    """``sigma_min``, ``sigma_max``, ``kappa`` and effective rank of each stacked
    instance.

    ``M`` has shape ``(..., N, n, k)``; every quantity has shape ``(...)``. The
    effective rank (Roy & Vetterli) of the stacked matrix is ``effective_rank``; with
    ``per_sample=True`` it is also given per sample, averaged over the ``N`` samples
    (``effective_rank_per_sample``), which tends to 1 when each sample's matrix becomes
    rank one.
    """
    S = stack(M)
    flat = S.reshape(-1, *S.shape[-2:])
    s = singular_values(flat, stacked=False).reshape(*S.shape[:-2], -1)
    out = {
        "sigma_min": s[..., -1],
        "sigma_max": s[..., 0],
        "kappa": s[..., 0] / s[..., -1],
        "effective_rank": effective_rank(flat, stacked=False).reshape(S.shape[:-2]),
    }
    if per_sample:
        er = effective_rank(M.reshape(-1, *M.shape[-2:]), stacked=False)
        out["effective_rank_per_sample"] = er.reshape(M.shape[:-2]).mean(dim=-1)
    return out


def residual_spectra(
    A: torch.Tensor, X: torch.Tensor, betas: Iterable[float]
) -> dict[str, torch.Tensor]:
    """Spectra of ``Z = Attn(X) + beta X`` (eq. ``model-z``) for each beta.

    ``A = Attn(X)`` and ``X`` have shape ``(..., N, n, d)``; each entry of the result
    has shape ``(len(betas), ...)``.
    """
    betas = [float(b) for b in betas]
    if not betas:
        raise ValueError("betas must hold at least one residual strength")
    Z = torch.stack([A + b * X for b in betas])
    return spectrum(Z)


# --------------------------------------------------------------------------- bounds
def weyl_bounds(
    A: torch.Tensor, X: torch.Tensor, beta: float
) -> dict[str, torch.Tensor]:
    """Weyl's bounds (eqs. ``sv-weyl-min`` and ``sv-weyl-max``) on the stacked ``Z = A +
    beta X``.

    From ``|sigma_i(P + Q) - sigma_i(Q)| <= ||P||_2`` used both ways round:

    * ``min_lower = max(beta sigma_min(X) - ||A||, sigma_min(A) - beta ||X||, 0)``
    * ``min_upper = min(beta sigma_min(X) + ||A||, sigma_min(A) + beta ||X||)``
    * ``max_lower = | beta ||X|| - ||A|| |`` and ``max_upper = ||A|| + beta ||X||``.

    ``beta`` must be non-negative: a number, or a tensor that broadcasts against the
    shape ``(...)`` of :func:`spectrum` (e.g. ``betas.view(-1, 1)`` for every beta at
    once, giving shape ``(len(betas), ...)``).
    """
    beta = torch.as_tensor(beta, dtype=torch.float64)
    if not torch.isfinite(beta).all() or (beta < 0).any():
        raise ValueError(f"beta must be finite and non-negative, got {beta.tolist()!r}")
    a, x = spectrum(A), spectrum(X)
    zero = torch.zeros_like(a["sigma_min"])
    return {
        "min_lower": torch.maximum(
            torch.maximum(
                beta * x["sigma_min"] - a["sigma_max"],
                a["sigma_min"] - beta * x["sigma_max"],
            ),
            zero,
        ),
        "min_upper": torch.minimum(
            beta * x["sigma_min"] + a["sigma_max"],
            a["sigma_min"] + beta * x["sigma_max"],
        ),
        "max_lower": (beta * x["sigma_max"] - a["sigma_max"]).abs(),
        "max_upper": a["sigma_max"] + beta * x["sigma_max"],
    }


def uniform_deviation(X, W_Q, W_K, tau) -> torch.Tensor:
    """``delta = max_p ||P_p - Pi||_2``, ``Pi = 1 1^T / n``: distance of the attention
    matrices from uniform attention.

    Shape ``(...)`` for inputs ``(..., N, n, d)``; the ``max`` runs over the ``N``
    samples.
    """
    P = attention_weights(X, W_Q, W_K, tau)
    n = P.shape[-1]
    return torch.linalg.matrix_norm(P - 1.0 / n, ord=2).amax(dim=-1)


def score_deviation_bound(X, W_Q, W_K, tau) -> torch.Tensor:
    """Right-hand side of eq. ``sv-deviation``: ``max_p (1/2) ||S_p||_F``, scores
    ``S_p``."""
    from .model import attention_scores

    S = attention_scores(X, W_Q, W_K, tau)
    return 0.5 * torch.linalg.matrix_norm(S, ord="fro").amax(dim=-1)


def collapse_upper_bound(X, W_Q, W_K, W_V, tau) -> torch.Tensor:
    """Eq. ``sv-collapse``:
    ``sigma_r(Attn(X)) <= max_p ||P_p - Pi||_2 ||X||_2 ||W_V||_2``, ``Pi = 1 1^T / n``.

    Valid when ``r = min(N n, d) > N``: more columns than samples (tall regime), or at
    least two tokens per sample (wide regime).
    """
    N, n, d = X.shape[-3], X.shape[-2], X.shape[-1]
    if min(N * n, d) <= N:
        raise ValueError(
            f"the collapse bound needs r = min(N n, d) > N, got N = {N}, n = {n}, "
            f"d = {d}: use d > N and at least two tokens per sample"
        )
    norm_X = spectrum(X)["sigma_max"]
    norm_V = torch.linalg.matrix_norm(W_V, ord=2).reshape(norm_X.shape)
    return uniform_deviation(X, W_Q, W_K, tau) * norm_X * norm_V


def identity_value_lower_bound(X, W_Q, W_K, tau, beta: float) -> torch.Tensor:
    """Eq. ``sv-identity``: with ``W_V = I``,
    ``sigma_r(Z) >= (beta - max_p ||P_p - Pi||_2) sigma_r(X)``, in both regimes."""
    return (float(beta) - uniform_deviation(X, W_Q, W_K, tau)) * spectrum(X)[
        "sigma_min"
    ]
