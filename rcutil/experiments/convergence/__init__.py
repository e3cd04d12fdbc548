"""Theorem 1, Corollary 1 and the multi-layer theorem, checked on certifying instances.

For each depth ``L`` the experiment builds one instance (model at ``theta_0`` with
``W_U^0 = 0``, inputs ``X``, targets a small multiple of another model's output),
evaluates the certificate of :mod:`rcutil.certificate`, and runs full-batch GD at the
theorem's step ``mu = 1/C`` until ``Phi <= tol Phi_0`` (Corollary 1). At every iterate
it records what the proof asserts (distance from ``theta_0``, ``sigma_{Nn}(H_t)``,
local PL ratio), and at ``theta_0`` and at the last iterate it measures the values that
``G_H``, ``K_H`` and ``C`` bound (:func:`rcutil.tightness.measure`, lower estimates). A
sweep of the residual strength ``beta`` compares the late GD rate with
``(1 - kappa(H_0)^-2)^2``. The sizes are the book's choice (the paper's are not public).
The checks and claims, and the readings of the result that decide them, are in
:mod:`rcutil.experiments.convergence.verdicts`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
import torch

from ... import profiles, results
from ...certificate import Certificate, best_certificate
from ...linalg import singular_values
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
    seed_model=0, seed_X=1, seed_target=2, tol=1e-10, n_radii=60, chunk=250,
    layers=(1, 2, 4), target_scale=(1e-3, 4e-4, 1e-4), max_steps=20000,
    sweep_betas=(0.0, 0.1, 0.25, 0.5, 0.75, 1.0), sweep_steps=150, power_iterations=30,
)  # fmt: skip
BOOK = replace(
    CI, sweep_steps=300, power_iterations=100,
    sweep_betas=(0.0, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0),
)  # fmt: skip
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
    depth ``L`` (the book's "suitable initialisation" for the multi-layer theorem)."""
    s = settings
    beta = s.beta if beta is None else beta
    if target_scale is None:
        target_scale = target_scale_of(s, layers)
    d, d_F = s.d, s.d_F
    init_std = {
        "W_V": 1.0 / (layers * math.sqrt(d)),
        "W_2": 1.0 / (layers * math.sqrt(d_F)),
    }
    sizes = (d, s.d_qk, d_F, s.d_out)
    common = dict(
        n_layers=layers,
        tau=s.tau,
        beta=beta,
        init_std=init_std,
        device=device,
    )
    model = Transformer(*sizes, W_U_init="zero", seed=s.seed_model, **common)
    gen = torch.Generator().manual_seed(s.seed_X)
    X = torch.randn(s.N, s.n, d, generator=gen, dtype=torch.float64)
    X = (X * s.x_std).to(device)
    teacher = Transformer(*sizes, seed=s.seed_target, **common)
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
    certificate: Certificate
    loss: list[float]  #: ``Phi(theta_t)``
    grad_norm: list[float]  #: ``||grad Phi(theta_t)||``
    distance: list[float]  #: ``||theta_t - theta_0||``, all parameters, Euclidean
    sigma_min_H: list[float]  #: ``sigma_{Nn}(H_t)``
    local_pl: list[float]  #: ``||grad Phi(theta_t)||^2 / (2 Phi(theta_t))``
    steps_to_tolerance: int  #: first ``t`` with ``Phi_t <= tol Phi_0``
    bound_steps: int  #: steps after which ``(1 - mu alpha)^t <= tol``
    tightness: dict


@dataclass
class SweepPoint:
    """One layer at residual strength ``beta``, GD at ``mu = 1/sigma_max(H_0)^2``."""

    beta: float
    kappa_H: float  #: ``kappa(H_0)``
    kappa_Z: float  #: ``kappa(Z_0)``
    late_rate: float  #: geometric mean of ``Phi_{t+1}/Phi_t``, last third
    alpha_over_C: float  #: of the best certificate at this ``beta``
    certified: bool
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


def depth_run(settings: Settings, layers: int, *, device="cpu") -> Depth:
    """Certificate, GD at ``mu = 1/C`` and the tightness of the constants, one depth."""
    model, X, Y = make_instance(settings, layers, device=device)
    cert = best_certificate(model, X, Y, n_radii=settings.n_radii)
    iterations = settings.power_iterations
    at_theta0 = measure(model, X, Y, cert.to_dict(), iterations=iterations)
    theta0 = _flat(model)

    def observe(out):
        return {
            "distance": torch.linalg.vector_norm(_flat(model) - theta0),
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
        loss=h.loss,
        grad_norm=h.grad_norm,
        distance=h.observed["distance"],
        sigma_min_H=h.observed["sigma_min_H"],
        local_pl=(grad**2 / (2 * loss)).tolist(),
        steps_to_tolerance=int(hit[0]) if hit.size else len(loss) - 1,
        bound_steps=bound_steps,
        tightness={"theta0": at_theta0, "last": at_last},
    )


def sweep_point(settings: Settings, beta: float, *, device="cpu") -> SweepPoint:
    """One layer at ``beta``: ``kappa(H_0)``, ``kappa(Z_0)``, the certificate, and the
    late GD rate at ``mu = 1/sigma_max(H_0)^2``, the inverse top eigenvalue of the
    tangent kernel at ``W_U = 0``."""
    model, X, Y = make_instance(settings, 1, beta=beta, device=device)
    with torch.no_grad():
        out = model(X, return_all=True)
    sH, sZ = singular_values(out.features), singular_values(out.Z[0])
    cert = best_certificate(model, X, Y, n_radii=settings.n_radii // 2)
    h = gradient_descent(
        model, X, Y, mu=1.0 / float(sH[0]) ** 2, steps=settings.sweep_steps
    )
    loss = np.array(h.loss)
    tail = loss[-settings.sweep_steps // 3 :]
    return SweepPoint(
        beta=beta,
        kappa_H=float(sH[0] / sH[-1]),
        kappa_Z=float(sZ[0] / sZ[-1]),
        late_rate=float((tail[-1] / tail[0]) ** (1.0 / (len(tail) - 1))),
        alpha_over_C=cert.alpha / cert.C,
        certified=cert.holds,
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
