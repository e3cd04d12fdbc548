"""The PL + smoothness certificate of Theorem 1 and its L-layer form, chapter
:ref:`convergence`.

For an instance (a :class:`~rcutil.model.Transformer` at ``theta_0``, inputs ``X``,
targets ``Y``) and a radius ``r`` it computes, on the Euclidean ball ``B_r`` around
``theta_0``:

* ``s0 = sigma_{Nn}(H_0)`` and ``S0 = ||H_0||_2`` of the stacked ``(N n) x d`` features
  ``H_0`` that enter ``W_U`` (needs the width ``d >= N n``), eq. ``conv-s0``;
* the lower bound of ``sigma_{Nn}(H_0)`` the certificate starts from: ``s0`` itself
  (``through="H"``), or ``s_Z = beta sigma_{Nn}(Z_0) - ||FFN(Z_0)||_2`` of the last
  block's attention-layer output (``through="Z"``, eq. ``conv-weyl``,
  :func:`z_lower_bound`), which ties the rate to the singular values of ``Z_0``;
* ``G_H``, ``K_H``: bounds on the first and second derivatives of ``theta -> H`` on the
  ball, composed from the rules of :mod:`rcutil.bounds` (eq. ``conv-GH``);
* the PL constant ``alpha = (s - G_H r)^2`` with that lower bound ``s`` (eq.
  ``conv-alpha``), the smoothness
  constant ``C`` (eq. ``lip-smooth``), the step ``mu = 1/C`` and the stay-in-the-ball
  condition ``2 sqrt(2 Phi_0 / alpha) + mu G sqrt(2 Phi_0) <= r`` (eq. ``conv-ball``).

All bounds are evaluated numerically from the actual weights at ``theta_0``; they are
rigorous for any depth (they do not need a closed form). The rules assume the book's
model: :func:`check_certifiable` refuses any other (another activation, ``beta`` outside
``[0, 1]``, another layout) with a ``ValueError`` that names the reason.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np
import torch

from . import bounds
from .linalg import sigma_max, singular_values, stacked_rows
from .model import BLOCK_NAMES, Transformer, TransformerBlock, ffn, squared_loss
from .validate import inputs as check_input


@dataclass
class Certificate:
    """Every constant of Theorem 1 for one instance and one radius ``r``."""

    r: float
    s0: float  #: sigma_{Nn}(H_0)
    S0: float  #: ||H_0||_2
    through: str  #: "H": the certificate starts from s0; "Z": from s_Z (eq. conv-weyl)
    s_lower: float  #: the lower bound of sigma_{Nn}(H_0) it starts from: s0, or s_Z
    phi0: float  #: Phi(theta_0)
    G_H: float  #: Lipschitz constant of theta -> H on B_r
    K_H: float  #: second-derivative bound of theta -> H on B_r
    H_max: float  #: sup of ||H||_2 on B_r
    R_U: float  #: ||W_U^0||_2 + r
    lam: float  #: s_lower - G_H r, lower bound of sigma_{Nn}(H) on B_r
    alpha: float  #: PL constant lam^2
    G: float  #: Lipschitz constant of theta -> F on B_r
    K: float  #: second-derivative bound of theta -> F on B_r
    C: float  #: smoothness constant of Phi on B_r
    mu: float  #: step size used in the ball condition
    path_bound: float  #: 2 sqrt(2 Phi_0 / alpha) + mu G sqrt(2 Phi_0)
    holds: bool  #: mu <= 1/C and path_bound <= r (a finite path bound needs lam > 0)
    kappa_inv_sq: float  #: (s0 / S0)^2 (0 when H_0 = 0), which alpha / C never exceeds

    @property
    def predicted_rate(self) -> float:
        """``1 - mu alpha``: the contraction factor of Theorem 1."""
        return 1.0 - self.mu * self.alpha

    def to_dict(self) -> dict:
        return dict(asdict(self), predicted_rate=self.predicted_rate)


#: The two lower bounds of ``sigma_{Nn}(H_0)`` a certificate can start from.
ROUTES = ("H", "Z")


@dataclass
class ZBound:
    """The attention-layer output ``Z_0`` of the last block and the FFN's output on it,
    at ``theta_0``: ``H_0 = FFN(Z_0) + beta Z_0`` (eq. ``model-block``)."""

    beta: float
    sigma_min_Z: float  #: sigma_{Nn}(Z_0)
    sigma_max_Z: float  #: ||Z_0||_2
    ffn: float  #: ||FFN(Z_0)||_2

    @property
    def s_Z(self) -> float:
        """``beta sigma_{Nn}(Z_0) - ||FFN(Z_0)||_2 <= sigma_{Nn}(H_0)``, eq.
        ``conv-weyl``."""
        return self.beta * self.sigma_min_Z - self.ffn


def z_lower_bound(model, X: torch.Tensor) -> ZBound:
    """:class:`ZBound` of ``model`` at its weights (``theta_0``) on the inputs ``X``,
    for the last block (the block whose output ``H`` enters ``W_U``)."""
    check_certifiable(model)
    X = check_input(X, model.d)
    with torch.no_grad():
        out = model(X, return_all=True)
        Z0, last = out.Z[-1], model.blocks[-1]
        F0 = ffn(Z0, last.W_1, last.W_2, model.activation)
    sZ = singular_values(Z0)
    if sZ.numel() < X.shape[0] * X.shape[1]:
        raise ValueError(
            f"the route through Z needs width d >= N n, so that sigma_Nn(Z_0) exists: "
            f"N n = {X.shape[0] * X.shape[1]} > d = {model.d}; use fewer "
            "tokens/samples or a wider model"
        )
    return ZBound(
        beta=float(model.beta),
        sigma_min_Z=float(sZ[-1]),
        sigma_max_Z=float(sZ[0]),
        ffn=float(torch.linalg.matrix_norm(stacked_rows(F0), ord=2)),
    )


def check_certifiable(model) -> None:
    """Raise ``ValueError`` naming the reason unless the rules of :mod:`rcutil.bounds`
    cover ``model``.

    They cover a :class:`~rcutil.model.Transformer` as built (blocks of eqs. ``model-z``
    and ``model-block`` in the order ``W_Q, W_K, W_V, W_1, W_2``, then ``F = H W_U``),
    with an activation whose bounds are known (:mod:`rcutil.activations`) and a constant
    residual strength ``beta`` in ``[0, 1]``, the range of the paper's variant for which
    the book states its theorems.
    """
    if (
        not isinstance(model, Transformer)
        or type(model).forward is not Transformer.forward
    ):
        raise ValueError(
            f"the certificate covers rcutil.model.Transformer only (blocks, then W_U), "
            f"got {type(model).__name__}: build the model with rcutil.model.Transformer"
        )
    act = model.activation
    if not act.certifiable:
        raise ValueError(
            f"the certificate's rules need the bounds sup|sigma'|, sup|sigma''| and "
            f"sup|sigma| of the activation, which {act.name!r} lacks: build the model "
            f"with an activation of rcutil.activations.ACTIVATIONS, such as 'tanh'"
        )
    beta = model.beta
    if (
        isinstance(beta, bool)
        or not isinstance(beta, (int, float))
        or not 0 <= beta <= 1
    ):
        raise ValueError(
            f"the certificate covers a constant residual strength beta in [0, 1], "
            f"got beta = {beta!r}: build the model with such a beta"
        )
    names = [f"blocks.{l}.{k}" for l in range(model.n_layers) for k in BLOCK_NAMES] + [
        "output.W_U"
    ]
    if list(model.shapes()) != names or any(
        type(b) is not TransformerBlock for b in model.blocks
    ):
        raise ValueError(
            f"the certificate's rules follow the layout {names[:5]} per block, then "
            f"output.W_U; this model has {list(model.shapes())}: use "
            "rcutil.model.Transformer"
        )


def _trace(model, X: torch.Tensor) -> list[list[dict[str, float]]]:
    """Spectral norms at ``theta_0`` of every intermediate, per sample and block."""
    traces = []
    with torch.no_grad():
        for p in range(X.shape[0]):
            Xl, per_block = X[p], []
            for blk in model.blocks:
                W = {k: getattr(blk, k).detach() for k in BLOCK_NAMES}
                norms, Xl = bounds.block_norms0(
                    Xl, W, beta=model.beta, tau=model.tau, activation=model.activation
                )
                per_block.append(norms)
            traces.append(per_block)
    return traces


def feature_jets(
    model, X: torch.Tensor, r: float, trace=None
) -> list[list[bounds.Jet]]:
    """Per sample ``p`` and block ``l``, the :class:`~rcutil.bounds.Jet` of
    ``theta -> H_l`` (the output of block ``l`` for sample ``p``) on the ball of radius
    ``r``.

    Every block composes the rules with its own radii ``||W^0||_2 + r`` and its own
    norms at ``theta_0`` (``trace``, computed if not given); its input is the jet of the
    block before (for the first, the constant ``X_p``). Parameter index ``5 l + k`` is
    weight ``k`` of block ``l`` in the order ``W_Q, W_K, W_V, W_1, W_2``.
    """
    if not (math.isfinite(r) and r >= 0):
        raise ValueError(
            f"r (the ball radius) must be finite and non-negative, got {r!r}"
        )
    check_certifiable(model)
    X = check_input(X, model.d)
    trace = _trace(model, X) if trace is None else trace
    n_params = len(BLOCK_NAMES) * model.n_layers
    radii = [
        {k: float(sigma_max(getattr(blk, k))) + r for k in BLOCK_NAMES}
        for blk in model.blocks
    ]
    jets = []
    for p in range(X.shape[0]):
        jet = bounds.jet_const(float(sigma_max(X[p])), tuple(X[p].shape), n_params)
        per_block = []
        for l in range(model.n_layers):
            jet = bounds.jet_block(
                jet,
                radii[l],
                len(BLOCK_NAMES) * l,
                n_params,
                d=model.d,
                d_qk=model.d_qk,
                d_F=model.d_F,
                beta=model.beta,
                tau=model.tau,
                norms0=trace[p][l],
                r=r,
                activation=model.activation,
            )
            per_block.append(jet)
        jets.append(per_block)
    return jets


def feature_bounds(
    model, X: torch.Tensor, r: float, trace=None
) -> tuple[float, float, float]:
    """``(G_H, K_H, H_bound)`` for ``theta -> H`` on the ball of radius ``r`` (eq.
    ``conv-GH``).

    Per sample ``p`` a :class:`~rcutil.bounds.Jet` runs through the blocks
    (:func:`feature_jets`), with every weight matrix of spectral norm at most
    ``||W^0||_2 + r``; then ``G_H^2 = lambda_max(sum_p g_p g_p^T)`` (the squared
    spectral norm of the matrix with rows ``g_p``), ``K_H^2 = sum_p lambda_max(Hq_p)^2``
    and ``H_bound^2 = sum_p value_p^2``. Value bounds are tightened around the norms at
    ``theta_0`` (``trace``, computed if not given).
    """
    jets = [per_block[-1] for per_block in feature_jets(model, X, r, trace)]
    G_H = float(np.linalg.norm(np.stack([j.g for j in jets]), 2))
    K_H = math.sqrt(sum(j.second**2 for j in jets))
    H_bound = math.sqrt(sum(j.value**2 for j in jets))
    return G_H, K_H, H_bound


def certificate(
    model,
    X: torch.Tensor,
    Y: torch.Tensor,
    r: float,
    mu: float | None = None,
    *,
    trace=None,
    through: str = "H",
    s_Z: float | None = None,
) -> Certificate:
    """Evaluate Theorem 1's constants for radius ``r`` (and step ``mu``, default
    ``1/C``), starting from ``s0`` (``through="H"``) or from the lower bound ``s_Z`` of
    eq. ``conv-weyl`` (``through="Z"``; computed by :func:`z_lower_bound` unless
    given)."""
    if through not in ROUTES:
        raise ValueError(
            f"through must be one of {ROUTES} (the lower bound of sigma_Nn(H_0) the "
            f"certificate starts from), got {through!r}"
        )
    check_certifiable(model)
    X = check_input(X, model.d)
    if not isinstance(Y, torch.Tensor) or Y.shape != (
        X.shape[0],
        X.shape[1],
        model.d_out,
    ):
        raise ValueError(
            f"Y must be a tensor of shape {(X.shape[0], X.shape[1], model.d_out)} (N, "
            "n, d_out)"
        )
    with torch.no_grad():
        out = model(X, return_all=True)
        H0 = stacked_rows(out.features)
        phi0 = float(squared_loss(out.output, Y))
    if H0.shape[0] > H0.shape[1]:
        raise ValueError(
            f"the PL bound needs width d >= N n so that H_0 can have full row rank: "
            f"N n = {H0.shape[0]} > d = {H0.shape[1]}; use fewer tokens/samples or a "
            "wider model"
        )
    sv = singular_values(H0)
    s0, S0 = float(sv[-1]), float(sv[0])
    if through == "H":
        s_lower = s0
    else:
        s_lower = z_lower_bound(model, X).s_Z if s_Z is None else float(s_Z)
    G_H, K_H, H_bound = feature_bounds(model, X, r, trace)
    H_max = min(S0 + G_H * r, H_bound)
    R_U = float(sigma_max(model.W_U)) + r
    lam = s_lower - G_H * r
    alpha = max(lam, 0.0) ** 2
    G = bounds.output_gradient_bound(H_max, G_H, R_U)
    K = bounds.output_second_bound(G_H, K_H, R_U)
    C = bounds.smoothness_constant(G, K, phi0, r)
    if C == 0:
        raise ValueError(
            "C = 0: the output does not depend on the parameters (is X zero?); nothing "
            "to certify"
        )
    mu = 1.0 / C if mu is None else float(mu)
    if not (math.isfinite(mu) and mu > 0):
        raise ValueError(
            f"mu (the step size) must be a finite positive number, got {mu!r}"
        )
    path = (
        2.0 * math.sqrt(2.0 * phi0 / alpha) if alpha > 0 else math.inf
    ) + mu * G * math.sqrt(2.0 * phi0)
    return Certificate(
        r=r,
        s0=s0,
        S0=S0,
        through=through,
        s_lower=s_lower,
        phi0=phi0,
        G_H=G_H,
        K_H=K_H,
        H_max=H_max,
        R_U=R_U,
        lam=lam,
        alpha=alpha,
        G=G,
        K=K,
        C=C,
        mu=mu,
        path_bound=path,
        holds=bool(mu <= 1.0 / C and path <= r),
        kappa_inv_sq=(s0 / S0) ** 2 if S0 > 0 else 0.0,
    )


def best_certificate(
    model, X: torch.Tensor, Y: torch.Tensor, *, n_radii: int = 120, through: str = "H"
) -> Certificate:
    """Scan ``n_radii`` radii ``r`` on a log grid from ``10^-8 r_max`` to ``r_max =
    s / G_H(0)``, ``s`` the lower bound the route starts from (``s0``, or ``s_Z`` with
    ``through="Z"``), and return the certificate with the fastest rate ``1 - mu alpha``
    among those that hold, or, when none holds, the one closest to holding (smallest
    ``path_bound / r``). When ``s_Z <= 0`` no radius can certify through ``Z``: the
    certificate at ``r = 0`` is returned, which does not hold."""
    if n_radii < 2:
        raise ValueError(f"n_radii must be at least 2, got {n_radii!r}")
    check_certifiable(model)
    X = check_input(X, model.d)
    trace = _trace(model, X)
    s_Z = z_lower_bound(model, X).s_Z if through == "Z" else None
    first = certificate(model, X, Y, r=0.0, trace=trace, through=through, s_Z=s_Z)
    if not first.s0 > 0:
        raise ValueError(
            "H_0 does not have full row rank (s0 = 0): no radius can certify; "
            "draw another initialisation or use fewer samples"
        )
    if not first.s_lower > 0:
        return first
    r_max = first.s_lower / first.G_H
    scanned = [
        certificate(model, X, Y, r=float(r), trace=trace, through=through, s_Z=s_Z)
        for r in np.geomspace(r_max * 1e-8, r_max, n_radii)
    ]
    holding = [c for c in scanned if c.holds]
    if holding:
        return max(holding, key=lambda c: c.mu * c.alpha)
    return min(scanned, key=lambda c: c.path_bound / c.r)
