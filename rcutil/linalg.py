"""Spectral quantities the book measures: singular values, condition number, ranks.

The theory works with the stacked ``(N n) x d`` matrix of a batch
(:func:`stacked_rows`); these helpers accept a single matrix or a batch and say which
they use.
"""

from __future__ import annotations

import torch


def stacked_rows(M: torch.Tensor) -> torch.Tensor:
    """Stack a batch ``(N, n, k)`` into the ``(N n) x k`` matrix the theory works
    with."""
    return M.reshape(-1, M.shape[-1])


def singular_values(M: torch.Tensor, *, stacked: bool = True) -> torch.Tensor:
    """Singular values in decreasing order.

    A 3-D batch ``(N, n, k)`` is stacked into one ``(N n) x k`` matrix when ``stacked``
    is true, else the values are returned per matrix, shape ``(N, min(n, k))``.
    """
    M = M.detach()
    if M.dim() == 3 and stacked:
        M = stacked_rows(M)
    return torch.linalg.svdvals(M)


def sigma_min(M: torch.Tensor, *, stacked: bool = True) -> torch.Tensor:
    """Smallest singular value, ``sigma_{min(rows, cols)}``."""
    return singular_values(M, stacked=stacked)[..., -1]


def sigma_max(M: torch.Tensor, *, stacked: bool = True) -> torch.Tensor:
    """Largest singular value, the spectral norm ``||M||_2``."""
    return singular_values(M, stacked=stacked)[..., 0]


def condition_number(M: torch.Tensor, *, stacked: bool = True) -> torch.Tensor:
    """``kappa(M) = sigma_max / sigma_min`` (inf when ``sigma_min = 0``)."""
    s = singular_values(M, stacked=stacked)
    return s[..., 0] / s[..., -1]


def effective_rank(M: torch.Tensor, *, stacked: bool = True) -> torch.Tensor:
    """Entropy effective rank of Roy & Vetterli (2007): ``exp(-sum p_i log p_i)``, ``p =
    s / sum s``.

    It is 1 for a rank-one matrix and ``min(rows, cols)`` when all singular values are
    equal.
    """
    s = singular_values(M, stacked=stacked)
    p = s / s.sum(dim=-1, keepdim=True)
    plogp = torch.where(p > 0, p * torch.log(p), torch.zeros_like(p))
    return torch.exp(-plogp.sum(dim=-1))


def stable_rank(M: torch.Tensor, *, stacked: bool = True) -> torch.Tensor:
    """Stable rank ``||M||_F^2 / ||M||_2^2``, between 1 and the rank."""
    s = singular_values(M, stacked=stacked)
    return (s**2).sum(dim=-1) / s[..., 0] ** 2
