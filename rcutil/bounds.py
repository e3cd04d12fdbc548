"""Elementary derivative rules and Lipschitz constants of the model, chapter
:ref:`lipschitz`.

Each function states one rule, so that each can be tested on its own near its worst
case. The constants are the book's own derivation (the paper's lemmas and constants are
not public). Norms: ``||.||_2`` is the spectral norm of a matrix, ``||.||_F`` the
Frobenius norm; a perturbation of a weight matrix is measured in the Frobenius norm,
that is the Euclidean norm of the parameter vector.

Two layers of rules:

* scalar rules and Lipschitz constants (eqs. ``lip-softmax-jac`` ... ``lip-smooth``);
* :class:`Jet` and the ``jet_*`` rules, which carry bounds on a matrix-valued function
  of the parameters and on its first and second derivatives along any direction, through
  every operation of the model. :mod:`rcutil.certificate` composes them into the bounds
  ``G_H`` and ``K_H`` of the features ``H`` on a ball around the initialisation.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from .activations import TANH, Activation
from .linalg import sigma_max
from .model import (
    BLOCK_NAMES,
    attention,
    attention_scores,
    attention_weights,
    block,
    block_shapes,
    ffn,
)

# --------------------------------------------------------------------------- softmax
#: ``||diag(p) - p p^T||_2 <= 1/2`` for every probability vector p (eq.
#: ``lip-softmax-jac``); attained at ``p = (1/2, 1/2, 0, ...)``.
SOFTMAX_JACOBIAN_BOUND = 0.5
#: ``||D^2 softmax(s)[u, u]||_2 <= ||u||_2^2`` (eq. ``lip-softmax-hess``): the constant
#: with a two-line proof for every ``n``, which the rules carry.
SOFTMAX_SECOND_BOUND = 1.0
#: The exact supremum of ``||D^2 softmax(s)[u, u]||_2 / ||u||_2^2`` at ``n = 2``,
#: ``sqrt(2) / (3 sqrt 3)``, attained at ``p_1 = (1 - 1/sqrt 3) / 2`` and ``u = (1,
#: -1)``.
SOFTMAX_SECOND_SUPREMUM_N2 = math.sqrt(2.0) / (3.0 * math.sqrt(3.0))
#: ``|tanh'| <= 1`` (attained at 0) and ``|tanh''| <= 4 / (3 sqrt 3)`` (attained at
#: ``tanh x = 1/sqrt 3``), eq. ``lip-tanh``.
TANH_FIRST_BOUND = TANH.first_bound
TANH_SECOND_BOUND = TANH.second_bound


def softmax_jacobian(p: torch.Tensor) -> torch.Tensor:
    """The Jacobian ``diag(p) - p p^T`` of the softmax at a point with output ``p``
    (eq. ``lip-softmax-jac``)."""
    if p.dim() != 1:
        raise ValueError(
            f"p must be a probability vector (1-D), got shape {tuple(p.shape)}"
        )
    return torch.diag(p) - torch.outer(p, p)


def softmax_second_derivative(p: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """``D^2 softmax(s)[u, u] = p * (ubar^2 - Var_p(u))`` with ``ubar = u - <p, u>``
    (eq. ``lip-softmax-hess``)."""
    if p.shape != u.shape or p.dim() != 1:
        raise ValueError(
            f"p and u must be vectors of the same length, got "
            f"{tuple(p.shape)} and {tuple(u.shape)}"
        )
    ubar = u - (p * u).sum()
    var = (p * ubar**2).sum()
    return p * (ubar**2 - var)


def softmax_jacobian_bound() -> float:
    """Rule: the row softmax maps a score perturbation ``ds`` to ``dp`` with ``||dp|| <=
    ||ds|| / 2``."""
    return SOFTMAX_JACOBIAN_BOUND


def softmax_second_bound() -> float:
    """Rule: ``||D^2 softmax[u, u]||_2 <= 1 * ||u||^2`` (proof in :ref:`lipschitz`)."""
    return SOFTMAX_SECOND_BOUND


def tanh_first_bound() -> float:
    """Rule: ``sup |tanh'(x)| = 1``."""
    return TANH_FIRST_BOUND


def tanh_second_bound() -> float:
    """Rule: ``sup |tanh''(x)| = 4 / (3 sqrt 3)``."""
    return TANH_SECOND_BOUND


def row_stochastic_norm_bound(n: int) -> float:
    """``||P||_2 <= sqrt(n)`` for a row-stochastic ``P`` with ``n`` rows (``||P||_2^2 <=
    ||P||_1 ||P||_inf``, and every column sum is at most ``n``)."""
    if n <= 0:
        raise ValueError(f"n must be a positive integer, got {n!r}")
    return math.sqrt(n)


# --------------------------------------------------------------------------- Lipschitz
# constants
def _nonneg(**kw) -> None:
    for name, v in kw.items():
        if not (isinstance(v, (int, float)) and math.isfinite(v) and v >= 0):
            raise ValueError(f"{name} must be a finite non-negative number, got {v!r}")


def attention_lipschitz_WV(n: int, x_row_max: float) -> float:
    """Lipschitz constant of ``W_V -> Attn(X)`` (eq. ``lip-attn``): ``sqrt(n) max_i
    ||x_i||``.

    Every row of ``P X`` is a convex combination of rows of ``X``, so
    ``||P X dW_V||_F <= ||P X||_F ||dW_V||_F <= sqrt(n) max_i ||x_i|| ||dW_V||_F``.
    """
    _nonneg(x_row_max=x_row_max)
    return math.sqrt(n) * x_row_max


def attention_lipschitz_WQ(x_norm: float, R_K: float, R_V: float, tau: float) -> float:
    """Lipschitz constant of ``W_Q -> Attn(X)`` on ``||W_K||_2 <= R_K, ||W_V||_2 <=
    R_V`` (eq. ``lip-attn``).

    ``||X||_2^3 R_K R_V / (2 tau)``: the scores move by at most ``||X||_2^2 R_K
    ||dW_Q||_F / tau``, the softmax halves that, and ``X W_V`` multiplies by at most
    ``||X||_2 R_V``.
    """
    _nonneg(x_norm=x_norm, R_K=R_K, R_V=R_V)
    if tau <= 0:
        raise ValueError(f"tau must be positive, got {tau!r}")
    return SOFTMAX_JACOBIAN_BOUND * x_norm**3 * R_K * R_V / tau


def attention_lipschitz_WK(x_norm: float, R_Q: float, R_V: float, tau: float) -> float:
    """Lipschitz constant of ``W_K -> Attn(X)``: ``||X||_2^3 R_Q R_V / (2 tau)`` (eq.
    ``lip-attn``)."""
    return attention_lipschitz_WQ(x_norm, R_Q, R_V, tau)


def ffn_lipschitz_W1(
    z_norm: float, R_2: float, act_first: float = TANH_FIRST_BOUND
) -> float:
    """Lipschitz constant of ``W_1 -> sigma(Z W_1) W_2``: ``L_sigma ||Z||_2 R_2`` (eq.
    ``lip-ffn``)."""
    _nonneg(z_norm=z_norm, R_2=R_2, act_first=act_first)
    return act_first * z_norm * R_2


def ffn_lipschitz_W2(
    z_fro: float,
    R_1: float,
    n_entries: int,
    act_first: float = TANH_FIRST_BOUND,
    act_sup: float = 1.0,
) -> float:
    """Lipschitz constant of ``W_2 -> sigma(Z W_1) W_2``: a bound on ``||sigma(Z
    W_1)||_2`` (eq. ``lip-ffn``).

    With ``sigma(0) = 0``, ``|sigma| <= act_sup``: ``min(L_sigma ||Z||_F R_1, act_sup
    sqrt(n d_F))``.
    """
    _nonneg(z_fro=z_fro, R_1=R_1)
    return min(act_first * z_fro * R_1, act_sup * math.sqrt(n_entries))


def ffn_lipschitz_Z(
    R_1: float, R_2: float, act_first: float = TANH_FIRST_BOUND
) -> float:
    """Lipschitz constant of ``Z -> FFN(Z)``: ``L_sigma R_1 R_2`` (eq. ``lip-ffn``)."""
    _nonneg(R_1=R_1, R_2=R_2)
    return act_first * R_1 * R_2


def output_lipschitz_WU(h_norm: float) -> float:
    """Lipschitz constant of ``W_U -> H W_U``: ``||H||_2`` (eq. ``lip-out``)."""
    _nonneg(h_norm=h_norm)
    return h_norm


def output_lipschitz_H(R_U: float) -> float:
    """Lipschitz constant of ``H -> H W_U`` on ``||W_U||_2 <= R_U`` (eq.
    ``lip-out``)."""
    _nonneg(R_U=R_U)
    return R_U


def output_gradient_bound(H_max: float, G_H: float, R_U: float) -> float:
    """``G = sqrt(H_max^2 + R_U^2 G_H^2)``: bound on the Jacobian of
    ``theta -> F = H W_U`` (eq. ``lip-G``)."""
    _nonneg(H_max=H_max, G_H=G_H, R_U=R_U)
    return math.sqrt(H_max**2 + R_U**2 * G_H**2)


def output_second_bound(G_H: float, K_H: float, R_U: float) -> float:
    """``K = K_H R_U + G_H``: bound on ``||D^2 F[delta, delta]||`` per
    ``||delta||^2 = 1`` (eq. ``lip-K``)."""
    _nonneg(G_H=G_H, K_H=K_H, R_U=R_U)
    return K_H * R_U + G_H


def smoothness_constant(G: float, K: float, phi0: float, r: float) -> float:
    """``C = G^2 + K (sqrt(2 Phi_0) + G r)``: Lipschitz constant of ``grad Phi`` on the
    ball (eq. ``lip-smooth``)."""
    _nonneg(G=G, K=K, phi0=phi0, r=r)
    return G**2 + K * (math.sqrt(2.0 * phi0) + G * r)


# --------------------------------------------------------------------------- jets
@dataclass
class Jet:
    """Bounds on a matrix-valued map ``theta -> A(theta)`` over a ball, along unit
    directions.

    With ``a_k = ||delta_k||_F`` the sizes of a direction's components (one per weight
    matrix, ``sum a_k^2 <= 1``), for every ``theta`` in the ball:
    ``||A||_2 <= value``, ``||A'||_F <= g . a`` and ``||A''||_F <= a^T Hq a``
    (``'`` = derivative along the direction). ``g >= 0`` and ``Hq >= 0`` entrywise.
    """

    value: float
    g: np.ndarray
    Hq: np.ndarray
    shape: tuple[int, int]

    @property
    def first(self) -> float:
        """``sup_a g . a = ||g||_2``: the Lipschitz constant of the map on the ball."""
        return float(np.linalg.norm(self.g))

    @property
    def second(self) -> float:
        """``sup_a a^T Hq a = lambda_max(Hq)`` (Perron: ``Hq`` is entrywise
        non-negative)."""
        return float(np.linalg.eigvalsh(self.Hq)[-1]) if self.Hq.size else 0.0


def jet_const(value: float, shape, n_params: int) -> Jet:
    """A constant (the input ``X``): no derivatives."""
    return Jet(
        float(value), np.zeros(n_params), np.zeros((n_params, n_params)), tuple(shape)
    )


def jet_weight(radius: float, index: int, shape, n_params: int) -> Jet:
    """Weight matrix number ``index`` with ``||W||_2 <= radius``: ``W' = delta_index``,
    ``W'' = 0``."""
    g = np.zeros(n_params)
    g[index] = 1.0
    return Jet(float(radius), g, np.zeros((n_params, n_params)), tuple(shape))


def jet_matmul(A: Jet, B: Jet) -> Jet:
    """Product rule: ``(AB)' = A'B + AB'``, ``(AB)'' = A''B + 2A'B' + AB''``.

    ``||A'B||_F <= ||A'||_F ||B||_2`` and ``||A'B'||_F <= ||A'||_F ||B'||_F``.
    """
    if A.shape[1] != B.shape[0]:
        raise ValueError(f"jet_matmul: shapes {A.shape} and {B.shape} do not chain")
    g = A.g * B.value + A.value * B.g
    Hq = A.Hq * B.value + A.value * B.Hq + np.outer(A.g, B.g) + np.outer(B.g, A.g)
    return Jet(A.value * B.value, g, Hq, (A.shape[0], B.shape[1]))


def jet_transpose(A: Jet) -> Jet:
    """Transposition keeps every norm."""
    return Jet(A.value, A.g, A.Hq, (A.shape[1], A.shape[0]))


def jet_scale(A: Jet, c: float) -> Jet:
    """``c A``: every bound times ``|c|``."""
    c = abs(float(c))
    return Jet(c * A.value, c * A.g, c * A.Hq, A.shape)


def jet_add(A: Jet, B: Jet) -> Jet:
    """Triangle inequality for ``A + B``."""
    if A.shape != B.shape:
        raise ValueError(f"jet_add: shapes {A.shape} and {B.shape} differ")
    return Jet(A.value + B.value, A.g + B.g, A.Hq + B.Hq, A.shape)


def jet_softmax(S: Jet) -> Jet:
    """Row softmax of an ``n x m`` score matrix: ``||P||_2 <= sqrt(n)``, ``||P'||_F <=
    ||S'||_F / 2`` and ``||P''||_F <= ||S''||_F / 2 + ||S'||_F^2``.

    Row by row ``p'' = J s'' + D^2 softmax[s', s']``; ``sqrt(sum_i ||s_i'||^4) <=
    ||S'||_F^2``.
    """
    return Jet(
        row_stochastic_norm_bound(S.shape[0]),
        SOFTMAX_JACOBIAN_BOUND * S.g,
        SOFTMAX_JACOBIAN_BOUND * S.Hq + SOFTMAX_SECOND_BOUND * np.outer(S.g, S.g),
        S.shape,
    )


def jet_activation(A: Jet, act: Activation = TANH) -> Jet:
    """Entrywise ``sigma`` (:mod:`rcutil.activations`): ``(sigma A)' = sigma'(A) o A'``
    and ``(sigma A)'' = sigma''(A) o A' o A' + sigma'(A) o A''``, so the derivative
    bounds scale by ``sup |sigma'|`` and ``sup |sigma''|`` (``||A' o A'||_F <=
    ||A'||_F^2``); with ``sigma(0) = 0``, ``||sigma(A)||_2 <= ||sigma(A)||_F <=
    min(sup|sigma'| ||A||_F, sup|sigma| sqrt(#entries))``. For tanh (eq. ``lip-tanh``)
    the factors are 1, 4 / (3 sqrt 3) and 1.
    """
    if not act.certifiable:
        raise ValueError(
            "the rules need sup|sigma'|, sup|sigma''| and sup|sigma| of the "
            "activation "
            f"{act.name!r}, which has none: use one of rcutil.activations.ACTIVATIONS"
        )
    rows, cols = A.shape
    value = min(
        act.first_bound * math.sqrt(min(rows, cols)) * A.value,
        act.value_bound * math.sqrt(rows * cols),
    )
    return Jet(
        value,
        act.first_bound * A.g,
        act.first_bound * A.Hq + act.second_bound * np.outer(A.g, A.g),
        A.shape,
    )


def jet_tighten(A: Jet, norm0: float, r: float) -> Jet:
    """On the ball of radius ``r``: ``||A(theta)||_2 <= ||A(theta_0)||_2 + r sup
    ||A'||_F``.

    The segment from ``theta_0`` to ``theta`` lies in the ball, where ``||A'||_F <=
    ||g||``.
    """
    _nonneg(norm0=norm0, r=r)
    return Jet(min(A.value, norm0 + r * A.first), A.g, A.Hq, A.shape)


#: Intermediate matrices of one block, in the order :func:`jet_block` builds them.
BLOCK_STEPS = ("XQ", "XK", "S", "P", "V", "attn", "Z", "ZW1", "U", "FFN", "H")


def block_norms0(
    X: torch.Tensor,
    W: dict[str, torch.Tensor],
    *,
    beta: float,
    tau: float,
    activation: Activation = TANH,
):
    """Spectral norms at ``theta_0`` of every step of one block (for
    :func:`jet_tighten`), and the block's output, computed by the functions of
    :mod:`rcutil.model`. ``X`` is one sample ``(n, d)``; ``W`` maps ``W_Q ... W_2`` to
    weights."""
    m = {
        "XQ": X @ W["W_Q"],
        "XK": X @ W["W_K"],
        "V": X @ W["W_V"],
        "S": attention_scores(X, W["W_Q"], W["W_K"], tau),
        "P": attention_weights(X, W["W_Q"], W["W_K"], tau),
        "attn": attention(X, W["W_Q"], W["W_K"], W["W_V"], tau),
    }
    m["H"], m["Z"] = block(X, **W, beta=beta, tau=tau, activation=activation)
    m["ZW1"] = m["Z"] @ W["W_1"]
    m["U"] = activation(m["ZW1"])
    m["FFN"] = ffn(m["Z"], W["W_1"], W["W_2"], activation)
    norms = {k: float(sigma_max(m[k])) for k in BLOCK_STEPS}
    return norms, m["H"]


def jet_block(
    X: Jet,
    radii: dict[str, float],
    offset: int,
    n_params: int,
    *,
    d: int,
    d_qk: int,
    d_F: int,
    beta: float,
    tau: float,
    norms0: dict[str, float] | None = None,
    r: float = 0.0,
    activation: Activation = TANH,
) -> Jet:
    """Bounds for one block ``X -> FFN(Z) + beta Z``, ``Z = Attn(X) + beta X`` (eqs.
    ``model-z``, ``model-block``).

    ``radii`` maps ``W_Q ... W_2`` to spectral-norm radii; their parameter indices are
    ``offset .. offset + 4`` in that order. With ``norms0`` (from :func:`block_norms0`)
    every intermediate's value bound is tightened by :func:`jet_tighten` on the ball of
    radius ``r``.
    """
    shapes = block_shapes(d, d_qk, d_F)
    W = {
        k: jet_weight(radii[k], offset + i, shapes[k], n_params)
        for i, k in enumerate(BLOCK_NAMES)
    }

    def t(key, jet):
        return jet if norms0 is None else jet_tighten(jet, norms0[key], r)

    XQ = t("XQ", jet_matmul(X, W["W_Q"]))
    XK = t("XK", jet_matmul(X, W["W_K"]))
    S = t("S", jet_scale(jet_matmul(XQ, jet_transpose(XK)), 1.0 / tau))
    P = t("P", jet_softmax(S))
    V = t("V", jet_matmul(X, W["W_V"]))
    attn = t("attn", jet_matmul(P, V))
    Z = t("Z", jet_add(attn, jet_scale(X, beta)))
    ZW1 = t("ZW1", jet_matmul(Z, W["W_1"]))
    U = t("U", jet_activation(ZW1, activation))
    FFN = t("FFN", jet_matmul(U, W["W_2"]))
    return t("H", jet_add(FFN, jet_scale(Z, beta)))
