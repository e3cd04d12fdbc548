"""The numerical checks of the Lipschitz chapter (``python -m rcutil lipschitz``).

For every Lipschitz constant of :mod:`rcutil.bounds` (attention with respect to W_Q, W_K
and W_V, the FFN with respect to W_1, W_2 and Z, the output map with respect to W_U and
H): finite-difference ratios divided by the constant, on random instances and on one
instance built so that the constant is attained (the acceptance, in
:mod:`rcutil.experiments.lipschitz.verdicts`: no ratio above 1, each constant attained
on its own instance). Every difference is measured in the Frobenius norm and every
constant is built from the norms of the text (assumption ``lip-assumption``, eqs.
``lip-attn``, ``lip-ffn``, ``lip-out``); the attaining instances have flat spectra, so
that another norm moves their ratio away from 1.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
import torch

from ... import bounds, profiles, results
from ...linalg import sigma_max
from ...model import attention, ffn
from ...progress import steps
from ...threads import torch_threads


@dataclass(frozen=True, kw_only=True)
class Settings(profiles.Settings):
    """How many random instances the chapter measures."""

    n_instances: int  #: random instances, each measuring every constant
    seed: int


CI = Settings(n_instances=200, seed=0)
BOOK = replace(CI, n_instances=1000)
PAPER = replace(CI, n_instances=5000)
SETTINGS = {"ci": CI, "book": BOOK, "paper": PAPER}

#: The constants, by the argument they are taken in.
CONSTANTS = ("W_Q", "W_K", "W_V", "W_1", "W_2", "Z", "W_U", "H")


@dataclass
class Instance:
    """One input ``X`` (also the FFN's ``Z`` and the output map's ``H``), the
    weights ``W`` by name, the temperature, and the direction ``D[name]`` of a step of
    size ``h`` in each argument that is measured."""

    X: torch.Tensor
    W: dict[str, torch.Tensor]
    tau: float
    D: dict[str, torch.Tensor]
    h: float


def constants(inst: Instance) -> dict[str, float]:
    """Every constant of eqs. ``lip-attn``, ``lip-ffn`` and ``lip-out`` at the instance,
    from the norms the lemmas name: spectral norms, the largest row norm of ``X``, and
    the Frobenius norm of ``Z`` in ``L_{W_2}``."""
    X, W, tau = inst.X, inst.W, inst.tau
    n, d_F = X.shape[0], W["W_1"].shape[1]

    def spec(M):
        return float(sigma_max(M))

    return {
        "W_Q": bounds.attention_lipschitz_WQ(
            spec(X), spec(W["W_K"]), spec(W["W_V"]), tau
        ),
        "W_K": bounds.attention_lipschitz_WK(
            spec(X), spec(W["W_Q"]), spec(W["W_V"]), tau
        ),
        "W_V": bounds.attention_lipschitz_WV(n, float(X.norm(dim=1).max())),
        "W_1": bounds.ffn_lipschitz_W1(spec(X), spec(W["W_2"])),
        "W_2": bounds.ffn_lipschitz_W2(float(X.norm()), spec(W["W_1"]), n * d_F),
        "Z": bounds.ffn_lipschitz_Z(spec(W["W_1"]), spec(W["W_2"])),
        "W_U": bounds.output_lipschitz_WU(spec(X)),
        "H": bounds.output_lipschitz_H(spec(W["W_U"])),
    }


def maps(inst: Instance) -> dict[str, tuple[torch.Tensor, object]]:
    """Per constant: the point of its argument and the map of that argument alone."""
    X, W, tau = inst.X, inst.W, inst.tau

    def attn(**changed):
        w = dict(W, **changed)
        return attention(X, w["W_Q"], w["W_K"], w["W_V"], tau)

    return {
        "W_Q": (W["W_Q"], lambda M: attn(W_Q=M)),
        "W_K": (W["W_K"], lambda M: attn(W_K=M)),
        "W_V": (W["W_V"], lambda M: attn(W_V=M)),
        "W_1": (W["W_1"], lambda M: ffn(X, M, W["W_2"])),
        "W_2": (W["W_2"], lambda M: ffn(X, W["W_1"], M)),
        "Z": (X, lambda M: ffn(M, W["W_1"], W["W_2"])),
        "W_U": (W["W_U"], lambda M: X @ M),
        "H": (X, lambda M: M @ W["W_U"]),
    }


def ratio(f, a0: torch.Tensor, a1: torch.Tensor, L: float) -> float:
    """``||f(a1) - f(a0)||_F / (||a1 - a0||_F L)``: every difference in the Frobenius
    norm, as assumption ``lip-assumption`` measures a step."""
    moved = torch.linalg.matrix_norm(f(a1) - f(a0))
    step = torch.linalg.matrix_norm(a1 - a0)
    return float(moved / (step * L))


def ratios(inst: Instance) -> dict[str, float]:
    """The ratio of every argument the instance has a direction for."""
    L, at = constants(inst), maps(inst)
    return {
        name: ratio(at[name][1], at[name][0], at[name][0] + inst.h * D, L[name])
        for name, D in inst.D.items()
    }


def random_instance(g: torch.Generator, i: int) -> Instance:
    """Random sizes (``n <= 5``, ``d <= 7``), an input scale from 0.1 to 10, a random
    temperature and Gaussian weights; a step of ``1e-6`` (local slope) for even ``i``,
    of 1 (global) for odd ``i``."""

    def rn(*shape):
        return torch.randn(*shape, generator=g, dtype=torch.float64)

    n, d, d_qk, d_F = (
        int(torch.randint(lo, hi, (1,), generator=g))
        for lo, hi in ((2, 6), (2, 8), (1, 4), (1, 8))
    )
    scale = float(10 ** (2 * torch.rand(1, generator=g) - 1))
    tau = float(10 ** (torch.rand(1, generator=g) - 0.5))
    X = rn(n, d) * scale / math.sqrt(d)
    W = dict(
        W_Q=rn(d, d_qk),
        W_K=rn(d, d_qk),
        W_V=rn(d, d) / math.sqrt(d),
        W_1=rn(d, d_F) / math.sqrt(d),
        W_2=rn(d_F, d) / math.sqrt(d_F),
        W_U=rn(d, 2),
    )
    args = dict(W, Z=X, H=X)
    D = {name: rn(*args[name].shape) for name in CONSTANTS}
    return Instance(X, W, tau, D, 1e-6 if i % 2 == 0 else 1.0)


def _orthonormal(rows: int, cols: int, seed: int) -> torch.Tensor:
    """A ``rows x cols`` matrix with orthonormal columns (rows, if wider than tall)."""
    g = torch.Generator().manual_seed(seed)
    M = torch.randn(max(rows, cols), min(rows, cols), generator=g, dtype=torch.float64)
    Q = torch.linalg.qr(M).Q
    return Q if rows >= cols else Q.T


def _instance(X, name, D, *, tau=1.0, h=1e-6, **W) -> Instance:
    """An instance that measures ``name`` only; weights not given are zero (``W_V``:
    the identity)."""
    d = X.shape[1]
    zero = torch.zeros(d, 1, dtype=torch.float64)
    full = (
        dict(
            W_Q=zero,
            W_K=zero,
            W_V=torch.eye(d, dtype=torch.float64),
            W_1=zero,
            W_2=zero.T,
            W_U=zero,
        )
        | W
    )
    return Instance(X, full, tau, {name: D}, h)


def attaining_instances() -> dict[str, Instance]:
    """Per constant, an instance on which it is attained, to first order in the step.

    * ``W_Q``, ``W_K``: two tokens, scores zero (the softmax Jacobian at its norm 1/2),
      ``X = [[a, b], [-a, b]]`` with ``a > b`` (its top left singular vector is
      ``(1, -1)``, the direction the Jacobian keeps), the step and the other query or
      key weight along the top right singular vector, ``W_V`` a multiple of ``I``;
    * ``W_V``: equal rows of ``X``, so that ``P X`` has every row of norm ``rho``;
    * ``W_1``, ``Z``, ``W_U``, ``H``: matrices with orthonormal columns or rows times a
      scale, so that every direction attains; ``ZW_1 = 0`` where the FFN's slope is 1;
    * ``W_2``: a rank-one ``Z`` of small norm (``tanh(x) ~ x``), ``W_1`` aligned.
    """
    f64 = dict(dtype=torch.float64)
    e1 = torch.tensor([[1.0], [0.0]], **f64)
    X2 = torch.tensor([[1.0, 0.9], [-1.0, 0.9]], **f64)
    V = 0.7 * torch.eye(2, **f64)
    x = torch.tensor([[1.2, -0.5]], **f64)
    u, v = _orthonormal(3, 1, 1), _orthonormal(2, 1, 2)
    w = _orthonormal(2, 1, 3)
    Q43, Q32, Q22 = _orthonormal(4, 3, 4), _orthonormal(3, 2, 5), _orthonormal(2, 2, 6)
    return {
        "W_Q": _instance(X2, "W_Q", e1, tau=1.5, W_K=1.3 * e1, W_V=V),
        "W_K": _instance(X2, "W_K", e1, tau=1.5, W_Q=1.3 * e1, W_V=V),
        "W_V": _instance(
            x.expand(3, 2).clone(),
            "W_V",
            x.T @ w.T,
            W_Q=_orthonormal(2, 1, 7),
            W_K=_orthonormal(2, 1, 8),
        ),
        "W_1": _instance(
            1.7 * Q43, "W_1", Q32, W_1=torch.zeros(3, 2, **f64), W_2=0.8 * Q32.T
        ),
        "W_2": _instance(
            1e-3 * u @ v.T, "W_2", w @ v.T, W_1=v @ w.T, W_2=_orthonormal(2, 2, 9)
        ),
        "Z": _instance(
            torch.zeros(3, 2, **f64),
            "Z",
            _orthonormal(3, 2, 10),
            W_1=1.4 * Q22,
            W_2=0.6 * _orthonormal(2, 2, 11),
        ),
        "W_U": _instance(1.7 * Q43, "W_U", Q32, h=1.0, W_U=torch.zeros(3, 2, **f64)),
        "H": _instance(
            _orthonormal(4, 3, 12), "H", Q43, h=1.0, W_U=0.9 * _orthonormal(3, 3, 13)
        ),
    }


@dataclass
class Constant:
    """One constant: its ratios on the random instances, and on its attaining one."""

    name: str
    ratios: np.ndarray
    attained: float


@dataclass
class Result(results.Result):
    """The ratios of every constant, in the order of :data:`CONSTANTS`."""

    settings: Settings
    constants: list[Constant]


def run(settings: Settings, *, device: str = "cpu", progress: bool = True) -> Result:
    """Ratios measured / constant (always on the CPU, float64: tiny matrices)."""
    if settings.n_instances <= 0:
        raise ValueError(f"n_instances must be positive, got {settings.n_instances!r}")
    found: dict[str, list[float]] = {name: [] for name in CONSTANTS}
    with torch_threads(1):
        g = torch.Generator().manual_seed(settings.seed)
        for i in steps(
            settings.n_instances,
            desc="Lipschitz ratios",
            unit="instance",
            progress=progress,
        ):
            for name, value in ratios(random_instance(g, i)).items():
                found[name].append(value)
        attained = {
            name: ratios(inst)[name] for name, inst in attaining_instances().items()
        }
    return Result(
        settings=settings,
        constants=[
            Constant(name, np.asarray(found[name]), attained[name])
            for name in CONSTANTS
        ],
    )
