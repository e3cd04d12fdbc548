"""Theorem 1, Corollary 1 and the multi-layer theorem, checked on certifying instances.

For each depth ``L`` the experiment builds one instance (model at ``theta_0`` with
``W_U^0 = 0``, inputs ``X``, targets a small multiple of another model's output),
evaluates the certificate of :mod:`rcutil.certificate` twice, from
``s0 = sigma_{Nn}(H_0)`` and from its lower bound ``beta sigma_{Nn}(Z_0) -
||FFN(Z_0)||_2`` through the attention-layer output (eq. ``conv-weyl``; ``W_2`` starts
small for it to be positive), and runs full-batch GD at the theorem's step ``mu = 1/C``
until ``Phi <= tol Phi_0`` (Corollary 1). At every iterate it records what the proof
asserts (distance from ``theta_0``, ``sigma_{Nn}(H_t)``, local PL ratio), and at
``theta_0`` and at the last iterate it measures the values that ``G_H``, ``K_H`` and
``C`` bound (:func:`rcutil.tightness.measure`, lower estimates). A sweep of the residual
strength ``beta`` certifies each ``beta`` both ways and compares the late GD rate at
``mu = 1/C`` with the slowest mode of least squares on ``H_0``,
``(1 - mu sigma_{Nn}(H_0)^2)^2``. The sizes are the book's choice (the paper's are not
public). The checks and claims, and the readings of the result that decide them, are in
:mod:`rcutil.experiments.convergence.verdicts`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
import torch

from ... import profiles, results
from ...certificate import Certificate, best_certificate, z_lower_bound
from ...linalg import singular_values, stacked_rows
from ...model import Transformer
from ...progress import steps
from ...threads import torch_threads
from ...tightness import measure
from ...train import gradient_descent


@dataclass(frozen=True, kw_only=True)
class Settings(profiles.Settings):
    """The certifying instances, GD to the tolerance, and the sweep of beta."""

    N: int  #: samples
    n: int  #: tokens per sample
    d: int  #: width of a token (the PL bound needs d >= N n)
    d_qk: int  #: width of queries and keys
    d_F: int  #: width of the FFN
    d_out: int  #: width of the output
    tau: float  #: attention temperature
    beta: float  #: residual strength of the instances of every depth
    x_std: float  #: standard deviation of the inputs
    W_2_scale: float  #: W_2 starts at this multiple of its usual std (small, not zero)
    seed_model: int  #: draws the model at theta_0
    seed_X: int  #: draws the inputs
    seed_target: int  #: draws the model whose output, scaled, is the target
    tol: float  #: GD runs until Phi_t <= tol Phi_0 (Corollary 1)
    n_radii: int  #: radii the certificate scans
    chunk: int  #: GD steps between two readings of the tolerance
    layers: tuple[int, ...]  #: the depths L
    target_scale: tuple[float, ...]  #: ||Y||_F per depth, below the largest certified
    max_steps: int  #: GD steps at most
    sweep_betas: tuple[float, ...]  #: residual strengths of the sweep
    sweep_steps: int  #: GD steps of a point of the sweep
    power_iterations: int  #: Lanczos steps of the tightness measurements


CI = Settings(
    N=4, n=4, d=64, d_qk=8, d_F=64, d_out=2, tau=1.0, beta=1.0, x_std=0.125,
    W_2_scale=0.01, seed_model=0, seed_X=1, seed_target=2, tol=1e-10, n_radii=60,
    chunk=250, layers=(1, 2, 4), target_scale=(1e-3, 4e-4, 1e-4), max_steps=20000,
    sweep_betas=tuple(round(0.05 * k, 2) for k in range(21)), sweep_steps=150,
    power_iterations=30,
)  # fmt: skip
BOOK = replace(CI, sweep_steps=300, power_iterations=100)
PAPER = replace(BOOK, max_steps=50000, sweep_steps=600, power_iterations=300)
SETTINGS = {"ci": CI, "book": BOOK, "paper": PAPER}


def target_scale_of(settings: Settings, layers: int) -> float:
    """``||Y||_F`` of the instance of depth ``layers``."""
    return settings.target_scale[settings.layers.index(layers)]


def make_instance(
    settings: Settings,
    layers: int = 1,
    *,
    beta: float | None = None,
    target_scale: float | None = None,
    device="cpu",
):
    """The certifying instance ``(model, X, Y)`` in float64: ``W_U^0 = 0`` and
    ``||Y||_F = target_scale`` (default: the depth's, :func:`target_scale_of`).

    Block weights are Gaussian with std ``1/sqrt(fan_in)``, except the two maps that
    write into the residual stream, ``W_V`` and ``W_2``, whose std is divided by the
    depth ``L`` (the book's "suitable initialisation" for the multi-layer theorem), and
    ``W_2``, whose std is further multiplied by ``settings.W_2_scale`` (the same draw,
    scaled), so that ``FFN(Z_0)`` is small beside ``beta Z_0``. The targets come from
    a model of the usual scales."""
    s = settings
    beta = s.beta if beta is None else beta
    if target_scale is None:
        target_scale = target_scale_of(s, layers)
    d, d_F = s.d, s.d_F
    usual = {
        "W_V": 1.0 / (layers * math.sqrt(d)),
        "W_2": 1.0 / (layers * math.sqrt(d_F)),
    }
    small = dict(usual, W_2=s.W_2_scale * usual["W_2"])
    sizes = (d, s.d_qk, d_F, s.d_out)
    common = dict(n_layers=layers, tau=s.tau, beta=beta, device=device)
    model = Transformer(
        *sizes, W_U_init="zero", seed=s.seed_model, init_std=small, **common
    )
    gen = torch.Generator().manual_seed(s.seed_X)
    X = torch.randn(s.N, s.n, d, generator=gen, dtype=torch.float64)
    X = (X * s.x_std).to(device)
    teacher = Transformer(*sizes, seed=s.seed_target, init_std=usual, **common)
    with torch.no_grad():
        Y = teacher(X)
    return model, X, target_scale * Y / torch.linalg.vector_norm(Y)


@dataclass
class Depth:
    """GD at ``mu = 1/C`` on the instance of depth ``layers``. The lists hold one value
    per iterate run (whole chunks of GD, so a few past the tolerance); ``tightness``
    maps ``"theta0"`` and ``"last"`` to :func:`rcutil.tightness.measure` there."""

    layers: int
    target_scale: float
    certificate: Certificate  #: through ``H``: from ``s0``; GD runs at its ``mu``
    z_certificate: Certificate  #: through ``Z``: from ``s_Z`` (eq. ``conv-weyl``)
    loss: list[float]  #: ``Phi(theta_t)``
    grad_norm: list[float]  #: ``||grad Phi(theta_t)||``
    distance: list[float]  #: ``||theta_t - theta_0||``, all parameters, Euclidean
    distance_U: list[float]  #: ``||W_U^t - W_U^0||_F``, the output map alone
    sigma_min_H: list[float]  #: ``sigma_{Nn}(H_t)``
    local_pl: list[float]  #: ``||grad Phi(theta_t)||^2 / (2 Phi(theta_t))``
    least_squares: list[float]  #: the loss of :func:`least_squares` at the same step
    steps_to_tolerance: int  #: first ``t`` with ``Phi_t <= tol Phi_0``
    bound_steps: int  #: steps after which ``(1 - mu alpha)^t <= tol``
    tightness: dict


@dataclass
class SweepPoint:
    """One layer at residual strength ``beta``, certified through ``H`` and through
    ``Z``, and GD at the theorem's step ``mu = 1/C``."""

    beta: float
    mu: float  #: ``1/C`` of the best certificate through ``H``
    sigma_min_H: float  #: ``sigma_{Nn}(H_0)``
    kappa_H: float  #: ``kappa(H_0)``
    sigma_min_Z: float  #: ``sigma_{Nn}(Z_0)``
    kappa_Z: float  #: ``kappa(Z_0)``
    ffn: float  #: ``||FFN(Z_0)||_2``
    late_rate: float  #: geometric mean of ``Phi_{t+1}/Phi_t``, last third
    alpha_over_C: float  #: of the best certificate through ``H``
    certified: bool  #: a certificate through ``H`` holds
    alpha_over_C_Z: float  #: of the best certificate through ``Z``
    certified_Z: bool  #: a certificate through ``Z`` holds
    loss: list[float]  #: ``Phi_t / Phi_0``


@dataclass
class Result(results.Result):
    """One :class:`Depth` per ``settings.layers`` and one :class:`SweepPoint` per
    ``settings.sweep_betas``."""

    settings: Settings
    depths: list[Depth]
    sweep: list[SweepPoint]


def _flat(model) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def least_squares(
    H0: torch.Tensor, Y: torch.Tensor, W_U: torch.Tensor, mu: float, steps: int
) -> list[float]:
    """GD on ``W_U`` alone with the features frozen at ``H_0``, ``W_U <- W_U - mu
    H_0^T (H_0 W_U - Y)`` from ``W_U^0``: linear least squares, the lazy reading of
    Theorem 1. Returns the loss ``1/2 ||H_0 W_U - Y||_F^2`` of each of the ``steps + 1``
    iterates (``H_0`` and ``Y`` stacked, ``(N n) x d`` and ``(N n) x d_out``)."""
    W_U, out = W_U.detach().clone(), []
    for _ in range(steps + 1):
        E = H0 @ W_U - Y
        out.append(0.5 * float(torch.sum(E**2)))
        W_U = W_U - mu * (H0.T @ E)
    return out


def depth_run(settings: Settings, layers: int, *, device="cpu") -> Depth:
    """Certificate, GD at ``mu = 1/C`` and the tightness of the constants, one depth."""
    model, X, Y = make_instance(settings, layers, device=device)
    cert = best_certificate(model, X, Y, n_radii=settings.n_radii)
    z_cert = best_certificate(model, X, Y, n_radii=settings.n_radii, through="Z")
    iterations = settings.power_iterations
    at_theta0 = measure(model, X, Y, cert.to_dict(), iterations=iterations)
    theta0, W_U0 = _flat(model), model.W_U.detach().clone()
    with torch.no_grad():
        H0 = stacked_rows(model(X, return_all=True).features)

    def observe(out):
        return {
            "distance": torch.linalg.vector_norm(_flat(model) - theta0),
            "distance_U": torch.linalg.matrix_norm(model.W_U.detach() - W_U0),
            "sigma_min_H": singular_values(out.features)[-1],
        }

    tol, chunk = settings.tol, settings.chunk
    bound_steps = math.ceil(math.log(tol) / math.log(cert.predicted_rate))
    # as many chunks as the theorem needs, at most max_steps: what --estimate projects
    chunks = math.ceil(min(bound_steps, settings.max_steps) / chunk)
    h = gradient_descent(  # until Phi_t <= tol Phi_0, read at the end of each chunk
        model,
        X,
        Y,
        mu=cert.mu,
        steps=chunks * chunk,
        observe=observe,
        tol=tol,
        check_every=chunk,
        desc=f"GD L={layers}",
    )
    at_last = measure(model, X, Y, cert.to_dict(), iterations=iterations)
    loss, grad = np.array(h.loss), np.array(h.grad_norm)
    hit = np.flatnonzero(loss <= tol * loss[0])
    return Depth(
        layers=layers,
        target_scale=target_scale_of(settings, layers),
        certificate=cert,
        z_certificate=z_cert,
        loss=h.loss,
        grad_norm=h.grad_norm,
        distance=h.observed["distance"],
        distance_U=h.observed["distance_U"],
        sigma_min_H=h.observed["sigma_min_H"],
        local_pl=(grad**2 / (2 * loss)).tolist(),
        least_squares=least_squares(H0, stacked_rows(Y), W_U0, cert.mu, len(loss) - 1),
        steps_to_tolerance=int(hit[0]) if hit.size else len(loss) - 1,
        bound_steps=bound_steps,
        tightness={"theta0": at_theta0, "last": at_last},
    )


def sweep_point(settings: Settings, beta: float, *, device="cpu") -> SweepPoint:
    """One layer at ``beta``: the singular values of ``H_0`` and ``Z_0``, the best
    certificates through ``H`` and through ``Z``, and the late GD rate at the theorem's
    step ``mu = 1/C``, which is stable at every ``beta`` (``C >= ||H_0||^2``, and at
    ``beta = 0`` the step ``1/||H_0||^2`` of the tangent kernel alone diverges)."""
    model, X, Y = make_instance(settings, 1, beta=beta, device=device)
    with torch.no_grad():
        out = model(X, return_all=True)
    sH = singular_values(out.features)
    z = z_lower_bound(model, X)
    n_radii = settings.n_radii // 2
    cert = best_certificate(model, X, Y, n_radii=n_radii)
    z_cert = best_certificate(model, X, Y, n_radii=n_radii, through="Z")
    h = gradient_descent(model, X, Y, mu=cert.mu, steps=settings.sweep_steps)
    loss = np.array(h.loss)
    tail = loss[-settings.sweep_steps // 3 :]
    return SweepPoint(
        beta=beta,
        mu=cert.mu,
        sigma_min_H=float(sH[-1]),
        kappa_H=float(sH[0] / sH[-1]),
        sigma_min_Z=z.sigma_min_Z,
        kappa_Z=z.sigma_max_Z / z.sigma_min_Z,
        ffn=z.ffn,
        late_rate=float((tail[-1] / tail[0]) ** (1.0 / (len(tail) - 1))),
        alpha_over_C=cert.alpha / cert.C,
        certified=cert.holds,
        alpha_over_C_Z=z_cert.alpha / z_cert.C,
        certified_Z=z_cert.holds,
        loss=(loss / loss[0]).tolist(),
    )


def run(settings: Settings, *, device: str = "cpu", progress: bool = True) -> Result:
    """Every depth of ``settings.layers``, then the ``beta`` sweep."""
    with torch_threads(1):  # tiny matrices (see rcutil.threads)
        depths = [
            depth_run(settings, L, device=device)
            for L in steps(
                settings.layers, desc="depths", unit="depth", progress=progress
            )
        ]
        sweep = [
            sweep_point(settings, beta, device=device)
            for beta in steps(
                settings.sweep_betas,
                desc="beta sweep",
                unit="beta",
                progress=progress,
            )
        ]
    return Result(settings=settings, depths=depths, sweep=sweep)
