"""Singular values at the rounding floor of their precision.

A matrix whose smallest singular value is zero in exact arithmetic, or below the
resolution of its format, comes out of a backward-stable decomposition with
``sigma_hat_min = c eps ||Z||_2`` for a factor ``c`` of order one or less (eq.
``jena-floor`` of chapter :ref:`jena`). This module reads ``sigma_min`` and the norms of
a batch of matrices in float32 and float64, per sample and stacked (:data:`READINGS`),
and measures ``c`` on matrices of known rank deficiency (:func:`floor_factors`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

#: The eight readings of ``min_t sigma_min^2(Z_t) / max_t ||Z_t||``: the precision of
#: the singular values, per sample (``min_{t,p} sigma_min^2(Z_t(X_p)) / max_{t,p}
#: ||Z_t(X_p)||``) or of the stacked (N n) x d matrix, and the norm.
PRECISIONS = ("float32", "float64")
LAYOUTS = ("per-sample", "stacked")
NORMS = ("spectral", "Frobenius")
READINGS = tuple(
    f"{p}/{lay}/{nm}" for p in PRECISIONS for lay in LAYOUTS for nm in NORMS
)


@dataclass
class FloorFactor:
    """``c = sigma_hat_min / (eps_32 ||Z||_2)`` of float32 singular values of matrices
    of one ``layout`` with exact rank ``d - deficiency``, one value per matrix."""

    layout: str
    deficiency: int
    c: np.ndarray


def eps(precision: str) -> float:
    """Machine epsilon of ``"float32"`` or ``"float64"``."""
    return float(torch.finfo(getattr(torch, precision)).eps)


def reading_spectra(Z: torch.Tensor, n: int) -> dict[str, np.ndarray]:
    """What the eight readings need of ``Z`` (B, N n, d), windows of ``n`` tokens: for
    each precision and layout the smallest singular value (per sample: the smallest over
    the samples) and the spectral and Frobenius norms (per sample: the largest), (B,)
    each."""
    out = {}
    B, rows, d = Z.shape
    for precision in PRECISIONS:
        Zp = Z.detach().to(getattr(torch, precision))
        per = Zp.reshape(B, rows // n, n, d)
        s = torch.linalg.svdvals(per)
        out[f"{precision}/per-sample/sigma_min"] = s[..., -1].amin(1)
        out[f"{precision}/per-sample/spectral"] = s[..., 0].amax(1)
        out[f"{precision}/per-sample/Frobenius"] = torch.linalg.matrix_norm(per).amax(1)
        s = torch.linalg.svdvals(torch.linalg.qr(Zp, mode="r")[1])  # those of Zp
        out[f"{precision}/stacked/sigma_min"] = s[:, -1]
        out[f"{precision}/stacked/spectral"] = s[:, 0]
        out[f"{precision}/stacked/Frobenius"] = torch.linalg.matrix_norm(Zp)
    return {k: v.double().cpu().numpy() for k, v in out.items()}


def floor_factors(
    Z: torch.Tensor, n: int, deficiencies, draws: int
) -> list[FloorFactor]:
    """The float32 floor factor ``c = sigma_hat_min / (eps_32 ||Z||_2)`` (eq.
    ``jena-floor``) of matrices of exact rank ``r - k`` (``r`` their rank): the matrices
    ``Z`` (B, N n, d), stacked and per sample (at most ``draws`` of each layout), with
    their ``k`` smallest singular values set to zero in float64, rounded to float32,
    decomposed in float32."""
    d = Z.shape[-1]
    found = []
    for layout, mats in (
        ("per-sample", Z.reshape(-1, n, d)[:draws]),
        ("stacked", Z[:draws]),
    ):
        U, S, Vh = torch.linalg.svd(mats.double(), full_matrices=False)
        for k in deficiencies:
            kept = S.clone()
            kept[:, S.shape[1] - k :] = 0
            s = torch.linalg.svdvals(((U * kept.unsqueeze(-2)) @ Vh).float())
            c = s[:, -1] / (eps("float32") * s[:, 0])
            found.append(FloorFactor(layout, int(k), c.double().cpu().numpy()))
    return found
