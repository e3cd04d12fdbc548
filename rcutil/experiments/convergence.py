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
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from .. import results
from ..certificate import best_certificate
from ..checks import Check
from ..claims import Claim, status
from ..linalg import singular_values
from ..model import Transformer
from ..progress import steps
from ..threads import torch_threads
from ..tightness import measure
from ..train import gradient_descent

_INSTANCE = dict(
    N=4,
    n=4,
    d=64,
    d_qk=8,
    d_F=64,
    d_out=2,
    tau=1.0,
    beta=1.0,
    x_std=0.125,
    seed_model=0,
    seed_X=1,
    seed_target=2,
    tol=1e-10,
    n_radii=60,
    chunk=250,
    layers=[1, 2, 4],
    target_scale={"1": 1e-3, "2": 4e-4, "4": 1e-4},
)
_BETAS = [0.0, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0]

#: ``target_scale``: ``||Y||_F`` per depth, below the largest the certificate accepts
SETTINGS = {
    "ci": dict(
        _INSTANCE,
        max_steps=20000,
        sweep_betas=[0.0, 0.1, 0.25, 0.5, 0.75, 1.0],
        sweep_steps=150,
        power_iterations=30,
    ),
    "book": dict(
        _INSTANCE,
        max_steps=20000,
        sweep_betas=_BETAS,
        sweep_steps=300,
        power_iterations=100,
    ),
    "paper": dict(
        _INSTANCE,
        max_steps=50000,
        sweep_betas=_BETAS,
        sweep_steps=600,
        power_iterations=300,
    ),
}


def make_instance(
    settings: dict,
    layers: int = 1,
    *,
    beta: float | None = None,
    target_scale: float | None = None,
    device="cpu",
):
    """The certifying instance ``(model, X, Y)`` in float64: ``W_U^0 = 0`` and
    ``||Y||_F = target_scale``.

    Block weights are Gaussian with std ``1/sqrt(fan_in)``, except the two maps that
    write into the residual stream, ``W_V`` and ``W_2``, whose std is divided by the
    depth ``L`` (the book's "suitable initialisation" for the multi-layer theorem)."""
    beta = settings["beta"] if beta is None else beta
    if target_scale is None:
        target_scale = settings["target_scale"][str(layers)]
    d, d_F = settings["d"], settings["d_F"]
    init_std = {
        "W_V": 1.0 / (layers * math.sqrt(d)),
        "W_2": 1.0 / (layers * math.sqrt(d_F)),
    }
    sizes = (d, settings["d_qk"], d_F, settings["d_out"])
    common = dict(
        n_layers=layers,
        tau=settings["tau"],
        beta=beta,
        init_std=init_std,
        device=device,
    )
    model = Transformer(*sizes, W_U_init="zero", seed=settings["seed_model"], **common)
    gen = torch.Generator().manual_seed(settings["seed_X"])
    X = torch.randn(settings["N"], settings["n"], d, generator=gen, dtype=torch.float64)
    X = (X * settings["x_std"]).to(device)
    teacher = Transformer(*sizes, seed=settings["seed_target"], **common)
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
    certificate: dict  #: :meth:`rcutil.certificate.Certificate.to_dict`
    loss: list[float]  #: ``Phi(theta_t)``
    grad_norm: list[float]  #: ``||grad Phi(theta_t)||``
    distance: list[float]  #: ``||theta_t - theta_0||``, all parameters, Euclidean
    sigma_min_H: list[float]  #: ``sigma_{Nn}(H_t)``
    local_pl: list[float]  #: ``||grad Phi(theta_t)||^2 / (2 Phi(theta_t))``
    steps_to_tolerance: int  #: first ``t`` with ``Phi_t <= tol Phi_0``
    bound_steps: int  #: steps after which ``(1 - mu alpha)^t <= tol``
    tightness: dict

    @property
    def alpha(self) -> float:
        return self.certificate["alpha"]

    @property
    def predicted_rate(self) -> float:
        """``1 - mu alpha``, eq. ``conv-rate``."""
        return self.certificate["predicted_rate"]

    @property
    def rates(self) -> np.ndarray:
        """``Phi_{t+1} / Phi_t`` up to the iterate that reaches the tolerance."""
        loss = np.array(self.loss[: self.steps_to_tolerance + 1])
        return loss[1:] / loss[:-1]

    @property
    def max_rate(self) -> float:
        return float(self.rates.max())

    @property
    def final_over_initial(self) -> float:
        return self.loss[self.steps_to_tolerance] / self.loss[0]

    @property
    def rate_check_factor(self) -> float:
        """``(1 - max rate) / (mu alpha)``: the rate check fails only for a claimed
        ``mu alpha`` larger than the certified one by more than this factor."""
        c = self.certificate
        return (1.0 - self.max_rate) / (c["mu"] * c["alpha"])


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

    @property
    def predicted_late_rate(self) -> float:
        """``(1 - kappa(H_0)^-2)^2``: the slowest mode of least squares in ``W_U``."""
        return (1.0 - self.kappa_H**-2) ** 2


@dataclass
class Result(results.Result):
    """One :class:`Depth` per ``settings["layers"]`` and one :class:`SweepPoint` per
    ``settings["sweep_betas"]``."""

    depths: list[Depth]
    sweep: list[SweepPoint]


def _flat(model) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def depth_run(settings: dict, layers: int, *, device="cpu") -> Depth:
    """Certificate, GD at ``mu = 1/C`` and the tightness of the constants, one depth."""
    model, X, Y = make_instance(settings, layers, device=device)
    cert = best_certificate(model, X, Y, n_radii=settings["n_radii"]).to_dict()
    iterations = settings["power_iterations"]
    at_theta0 = measure(model, X, Y, cert, iterations=iterations)
    theta0 = _flat(model)

    def observe(out):
        return {
            "distance": torch.linalg.vector_norm(_flat(model) - theta0),
            "sigma_min_H": singular_values(out.features)[-1],
        }

    tol, chunk = settings["tol"], settings["chunk"]
    bound_steps = math.ceil(math.log(tol) / math.log(cert["predicted_rate"]))
    # as many chunks as the theorem needs, at most max_steps: what --estimate projects
    chunks = math.ceil(min(bound_steps, settings["max_steps"]) / chunk)
    h = gradient_descent(  # until Phi_t <= tol Phi_0, read at the end of each chunk
        model,
        X,
        Y,
        mu=cert["mu"],
        steps=chunks * chunk,
        observe=observe,
        tol=tol,
        check_every=chunk,
        desc=f"GD L={layers}",
    )
    at_last = measure(model, X, Y, cert, iterations=iterations)
    loss, grad = np.array(h.loss), np.array(h.grad_norm)
    hit = np.flatnonzero(loss <= tol * loss[0])
    return Depth(
        layers=layers,
        target_scale=settings["target_scale"][str(layers)],
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


def sweep_point(settings: dict, beta: float, *, device="cpu") -> SweepPoint:
    """One layer at ``beta``: ``kappa(H_0)``, ``kappa(Z_0)``, the certificate, and the
    late GD rate at ``mu = 1/sigma_max(H_0)^2``, the inverse top eigenvalue of the
    tangent kernel at ``W_U = 0``."""
    model, X, Y = make_instance(
        settings,
        1,
        beta=beta,
        device=device,
        target_scale=settings["target_scale"]["1"],
    )
    with torch.no_grad():
        out = model(X, return_all=True)
    sH, sZ = singular_values(out.features), singular_values(out.Z[0])
    cert = best_certificate(model, X, Y, n_radii=settings["n_radii"] // 2)
    h = gradient_descent(
        model, X, Y, mu=1.0 / float(sH[0]) ** 2, steps=settings["sweep_steps"]
    )
    loss = np.array(h.loss)
    tail = loss[-settings["sweep_steps"] // 3 :]
    return SweepPoint(
        beta=beta,
        kappa_H=float(sH[0] / sH[-1]),
        kappa_Z=float(sZ[0] / sZ[-1]),
        late_rate=float((tail[-1] / tail[0]) ** (1.0 / (len(tail) - 1))),
        alpha_over_C=cert.alpha / cert.C,
        certified=cert.holds,
        loss=(loss / loss[0]).tolist(),
    )


def run(settings: dict, *, device: str = "cpu", progress: bool = True) -> Result:
    """Every depth of ``settings["layers"]``, then the ``beta`` sweep."""
    with torch_threads(1):  # tiny matrices (see rcutil.threads)
        depths = [
            depth_run(settings, L, device=device)
            for L in steps(
                settings["layers"], desc="depths", unit="depth", progress=progress
            )
        ]
        sweep = [
            sweep_point(settings, beta, device=device)
            for beta in steps(
                settings["sweep_betas"],
                desc="beta sweep",
                unit="beta",
                progress=progress,
            )
        ]
    return Result(settings=settings, depths=depths, sweep=sweep)


# ----------------------------------------------------------------------- checks, claims
#: Rounding allowance of ``max_t Phi_{t+1}/Phi_t <= 1 - mu alpha`` (float64).
RATE_SLACK = 1e-12
#: The late rate follows the slow mode: ``1 - rate`` within this factor of
#: ``1 - (1 - kappa(H_0)^-2)^2`` ...
LATE_FACTOR = 1.5
#: ... at every ``beta`` from this one up (below, the slowest mode has not yet come to
#: dominate within the sweep's steps).
SLOW_MODE_BETA = 0.25
#: At ``beta = 0``: the certificate is vacuous (``alpha / C`` below this) ...
VACUOUS = 1e-6
#: ... the loss falls below ``EARLY_DROP`` of its start within ``EARLY_STEPS`` steps,
#: then stalls (late rate above ``STALL_RATE``).
EARLY_DROP, EARLY_STEPS, STALL_RATE = 0.5, 10, 0.999


def _worst_tightness(depth: Depth) -> float:
    return max(v["ratio"] for point in depth.tightness.values() for v in point.values())


def _slow_mode(result: Result) -> list[SweepPoint]:
    return [p for p in result.sweep if p.beta >= SLOW_MODE_BETA]


def _late_factor(p: SweepPoint) -> float:
    """``(1 - late rate) / (1 - predicted late rate)``."""
    return (1.0 - p.late_rate) / (1.0 - p.predicted_late_rate)


def checks(result: Result) -> list[Check]:
    """The chapter's acceptance table: every assertion of the proof, at every depth (the
    worst depth's value shown), and the ``beta`` sweep."""
    D, tol = result.depths, result.settings["tol"]
    c = [d.certificate for d in D]
    beta0 = results.pick(result.sweep, beta=0.0)
    late = [p.late_rate for p in result.sweep]
    return [
        Check(
            "the certificate holds at every depth",
            all(x["holds"] for x in c),
            "==",
            True,
        ),
        Check(
            r"$\max_t\Phi_{t+1}/\Phi_t - (1-\mu\alpha)$, largest over depths",
            max(d.max_rate - d.predicted_rate for d in D),
            "<=",
            RATE_SLACK,
        ),
        Check(
            r"$\Phi_T/\Phi_0$ at $\mu = 1/C$, largest over depths",
            max(d.final_over_initial for d in D),
            "<=",
            tol,
        ),
        Check(
            r"$\max_t\Vert\theta_t-\theta_0\Vert$ over the path bound, largest",
            max(max(d.distance) / x["path_bound"] for d, x in zip(D, c)),
            "<=",
            1.0,
        ),
        Check(
            "path bound over $r$, largest over depths",
            max(x["path_bound"] / x["r"] for x in c),
            "<=",
            1.0,
        ),
        Check(
            r"$\min_t\sigma_{Nn}(H_t)$ over $s_0-G_Hr$, smallest over depths",
            min(min(d.sigma_min_H) / x["lam"] for d, x in zip(D, c)),
            ">=",
            1.0,
        ),
        Check(
            r"$\min_t\Vert\nabla\Phi_t\Vert^2/(2\Phi_t)$ over $\alpha$, smallest",
            min(min(d.local_pl) / d.alpha for d in D),
            ">=",
            1.0,
        ),
        Check(
            "measured value over its bound ($G_H$, $K_H$, $C$), largest",
            max(_worst_tightness(d) for d in D),
            "<=",
            1.0,
        ),
        Check(
            r"$\alpha/C$ over $\kappa(H_0)^{-2}$, largest over depths",
            max(x["alpha"] / x["C"] / x["kappa_inv_sq"] for x in c),
            "<=",
            1.0,
        ),
        Check(
            f"late $1-$rate over its prediction, farthest from 1 for "
            f"$\\beta\\ge{SLOW_MODE_BETA:g}$ (factor)",
            max(max(f, 1 / f) for f in map(_late_factor, _slow_mode(result))),
            "<=",
            LATE_FACTOR,
        ),
        Check(
            r"late rate falls as $\beta$ grows, largest step",
            float(np.diff(late).max()),
            "<",
            0.0,
        ),
        Check(
            r"$\beta = 0$: $\alpha/C$ of the best certificate",
            beta0.alpha_over_C,
            "<",
            VACUOUS,
        ),
        Check(r"$\beta = 0$: the certificate holds", beta0.certified, "==", False),
        Check(
            f"$\\beta = 0$: $\\Phi_{{{EARLY_STEPS}}}/\\Phi_0$",
            beta0.loss[EARLY_STEPS],
            "<",
            EARLY_DROP,
        ),
        Check(r"$\beta = 0$: late rate", beta0.late_rate, ">", STALL_RATE),
    ]


def claims(result: Result) -> list[Claim]:
    """The lemma (PL along GD), Theorem 1, the rate against ``kappa(H_0)``, Corollary 1
    and the multi-layer theorem, on the certifying instances."""
    one = results.pick(result.depths, layers=1)
    deep = [d for d in result.depths if d.layers > 1]
    tol, c1 = result.settings["tol"], one.certificate
    mine = "the book's constants and instance (the paper's are not public)"
    path_ok = [
        min(d.local_pl) >= d.alpha
        and max(d.distance) <= d.certificate["path_bound"] <= d.certificate["r"]
        and min(d.sigma_min_H) >= d.certificate["lam"]
        and _worst_tightness(d) <= 1.0
        for d in result.depths
    ]
    late = [p.late_rate for p in result.sweep]
    factor = max(max(f, 1 / f) for f in map(_late_factor, _slow_mode(result)))
    follows = factor <= LATE_FACTOR and all(np.diff(late) < 0)

    def theorem_holds(d: Depth) -> bool:
        return d.max_rate <= d.predicted_rate + RATE_SLACK

    def minimum_reached(d: Depth) -> bool:
        return d.final_over_initial <= tol

    def layers_text(ds):
        return "; ".join(
            f"$L = {d.layers}$: max rate {d.max_rate:.6f} vs "
            f"{d.predicted_rate:.6f}, $\\Phi_T/\\Phi_0$ = "
            f"{d.final_over_initial:.1e}"
            for d in ds
        )

    worst = max(_worst_tightness(d) for d in result.depths)
    return [
        Claim(
            "lemma-smoothness",
            "Lemma: smoothness and gradient lower bound",
            r"$\nabla\Phi$ is $C$-Lipschitz near the initialisation and "
            r"$\Vert\nabla\Phi\Vert^2\ge2\alpha\Phi$ there",
            f"$L = 1$: smallest PL ratio along GD {min(one.local_pl):.3g} vs "
            f"$\\alpha$ = {one.alpha:.3g}; largest measured / bound {worst:.3g} "
            f"over {len(result.depths)} depths",
            status(all(path_ok), deviation=True),
            f"the lemmas are proved with {mine}",
            rule=r"at every depth and iterate: PL ratio $\ge\alpha$, distance $\le$ "
            r"path bound $\le r$, $\sigma_{Nn}(H_t)\ge s_0-G_Hr$; no measured "
            "value above its bound",
        ),
        Claim(
            "theorem-1",
            "Theorem 1: linear convergence",
            r"if $\mu\le\min(1/C,1/\alpha)$ then "
            r"$\Phi(\theta_{t+1})\le(1-\mu\alpha)\Phi(\theta_t)$",
            f"$\\mu = 1/C$ = {c1['mu']:.3g}: largest $\\Phi_{{t+1}}/\\Phi_t$ = "
            f"{one.max_rate:.6f} vs $1-\\mu\\alpha$ = {one.predicted_rate:.6f}",
            status(theorem_holds(one), deviation=True),
            f"with {mine}; the check misses an error in $\\mu\\alpha$ up to a "
            f"factor {one.rate_check_factor:.2f}",
            rule=r"$L = 1$: every step up to the tolerance has "
            r"$\Phi_{t+1}/\Phi_t\le1-\mu\alpha$",
        ),
        Claim(
            "rate-singular-values",
            r"The rate follows $\sigma_{\min}/\sigma_{\max}$",
            "the rate is governed by the extreme singular values of the attention "
            "output",
            f"{len(result.sweep)} values of $\\beta$; for "
            f"$\\beta\\ge{SLOW_MODE_BETA:g}$ the late $1-$rate is within a factor "
            f"{factor:.2f} of $1-(1-\\kappa(H_0)^{{-2}})^2$",
            status(follows, deviation=True),
            "measured through the features $H$ that contain $Z$; below "
            f"$\\beta = {SLOW_MODE_BETA:g}$ the slowest mode does not yet dominate "
            "within the sweep's steps",
            rule=f"late $1-$rate within a factor {LATE_FACTOR:g} of "
            f"$1-(1-\\kappa(H_0)^{{-2}})^2$ at every $\\beta\\ge"
            f"{SLOW_MODE_BETA:g}$, and the late rate falls at every step of "
            "$\\beta$",
        ),
        Claim(
            "corollary-1",
            "Corollary 1: global minimum",
            r"under the same conditions GD reaches a global minimum, "
            r"$\Phi(\theta^*)=0$",
            f"$\\mu = 1/C$: $\\Phi_T/\\Phi_0$ = {one.final_over_initial:.1e} in "
            f"{one.steps_to_tolerance} steps (bound: {one.bound_steps})",
            status(minimum_reached(one), deviation=True),
            f"with {mine}, the instance of Theorem 1",
            rule=f"$L = 1$: $\\Phi_T/\\Phi_0\\le$ {tol:g} at the theorem's step",
        ),
        Claim(
            "multilayer",
            "Multi-layer theorem",
            "the same linear rate holds for an $L$-layer stack under suitable "
            "initialisation",
            layers_text(deep),
            status(
                bool(deep)
                and all(theorem_holds(d) and minimum_reached(d) for d in deep),
                deviation=True,
            ),
            "constants evaluated numerically around $\\theta_0$; the residual-stream "
            "maps start scaled by $1/L$, the book's choice of initialisation",
            rule=r"every $L > 1$: every step has $\Phi_{t+1}/\Phi_t\le1-\mu\alpha$, "
            f"and $\\Phi_T/\\Phi_0\\le$ {tol:g}",
        ),
    ]
