"""Rank collapse of the attention output as d_QK grows, and what the residual changes.

Chapter :ref:`rank-collapse`. :func:`run` has three parts: :func:`sweep`, sigma_min and
effective rank of ``Attn(X) + beta X`` over d_QK under three score scalings (eq.
``rc-variance``) with the bound of eq. ``rc-centred``; :func:`train`, GD from the
collapsed regime with beta = 0 and beta = 1 over seeds; :func:`depth_collapse`, eq.
``rc-res`` through a stack of attention layers (Dong et al. 2021).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from .. import results, spectra
from ..checks import Check
from ..claims import Claim, compare, decide, fmt, mean_se, rule_text, status
from ..model import (
    ModelOutput,
    Transformer,
    attention,
    attention_weights,
    block,
    squared_loss,
)
from ..progress import steps as loop
from ..spectra import SCALINGS, spectrum, temperature
from ..threads import torch_threads
from ..train import descend, stack

#: The scaling under which the attention output collapses as d_QK grows (eq.
#: ``rc-variance``), the usual one, and unscaled scores.
COLLAPSE_SCALING, USUAL_SCALING, UNSCALED = "tau=d_qk", "tau=sqrt(d_qk)", "tau=1"
#: Residual strengths of the sweep (``beta = 0`` is ``Attn(X)`` itself) and of training.
BETAS, TRAIN_BETAS = (0.0, 0.5, 1.0), (0.0, 1.0)
#: Relative residuals below this are drawn at it (eq. ``rc-res``).
RES_FLOOR = 1e-16

# Sizes are the book's choice (the paper's are not public). N < d, so that the stacked
# (N n) x d attention output can lose rank (its uniform part has rank <= N), and n >= d.
SETTINGS = {
    "ci": {
        "N": 4,
        "n": 16,
        "d": 8,
        "seeds": tuple(range(8)),
        "max_log2_d_qk": 16,
        "train_seeds": (0, 1, 2, 3),
        "train_d_qk": 4096,
        "train_d_F": 32,
        "train_d_out": 2,
        "train_mu": 0.002,
        "train_steps": 300,
        "depth_layers": 12,
        "depth_n": 16,
        "depth_draws": 16,
    },
    "book": {
        "N": 4,
        "n": 16,
        "d": 8,
        "seeds": tuple(range(16)),
        "max_log2_d_qk": 18,
        "train_seeds": tuple(range(8)),
        "train_d_qk": 4096,
        "train_d_F": 32,
        "train_d_out": 2,
        "train_mu": 0.002,
        "train_steps": 1000,
        "depth_layers": 16,
        "depth_n": 16,
        "depth_draws": 64,
    },
    "paper": {
        "N": 4,
        "n": 16,
        "d": 8,
        "seeds": tuple(range(32)),
        "max_log2_d_qk": 20,
        "train_seeds": tuple(range(16)),
        "train_d_qk": 4096,
        "train_d_F": 32,
        "train_d_out": 2,
        "train_mu": 0.002,
        "train_steps": 2000,
        "depth_layers": 16,
        "depth_n": 32,
        "depth_draws": 256,
    },
}


# --------------------------------------------------------------------------- result
@dataclass
class SweepPoint:
    """``Attn(X) + beta X`` under one scaling; arrays are (seeds, d_QK). ``max_weight``
    (mean over rows of the largest attention weight) and ``deviation`` (``delta =
    max_p ||P_p - U||_2``) belong to the attention matrices, the same at every beta."""

    scaling: str
    beta: float
    sigma_min: np.ndarray  #: of the stacked (N n) x d matrix
    effective_rank: np.ndarray  #: per sample, averaged over the samples
    centred_lower: np.ndarray  #: the bound of eq. rc-centred
    max_weight: np.ndarray
    deviation: np.ndarray


@dataclass
class Inputs:
    """Per seed of the sweep: sigma_min of X and of the centred X~, the norms."""

    sigma_min: list[float]
    sigma_min_centred: list[float]
    norm: list[float]
    norm_W_V: list[float]


@dataclass
class TrainingRun:
    """GD at one beta: loss and sigma_min(Z_t), arrays (train seeds, steps + 1)."""

    beta: float
    loss: np.ndarray
    sigma_min: np.ndarray


@dataclass
class DepthStack:
    """Relative residual (eq. rc-res) after each layer, (draws, layers + 1)."""

    skip: bool
    residual: np.ndarray


@dataclass
class Result(results.Result):
    d_qk: list[int]
    sweep: list[SweepPoint]
    inputs: Inputs
    training: list[TrainingRun]
    training_floor: list[float]  #: per train seed, :func:`per_sample_floor`
    depth: list[DepthStack]


# --------------------------------------------------------------------------- d_QK sweep
def centred_lower_bound(
    X: torch.Tensor, W_V: torch.Tensor, deviation: torch.Tensor, beta: float
) -> torch.Tensor:
    """Eq. ``rc-centred``: ``beta sigma_min(X~) - delta ||X||_2 ||W_V||_2``.

    A lower bound on ``sigma_min(Attn(X) + beta X)`` for every ``W_V``. ``X~`` is the
    stacked input with each sample's mean token removed, ``delta`` the largest distance
    ``||P_p - U||_2`` of an attention matrix from uniform attention (one value per
    ``d_QK``, shape ``(V,)``). ``X`` has shape ``(1, N, n, d)``.
    """
    centred = X - X.mean(dim=-2, keepdim=True)
    spread = deviation * spectrum(X)["sigma_max"] * torch.linalg.matrix_norm(W_V, ord=2)
    return beta * spectrum(centred)["sigma_min"] - spread


def sweep(settings: dict, *, progress: bool = False):
    """``(d_qk, points, inputs)``: the sweep over seeds, d_QK, scalings and betas."""
    d_qk = [2**k for k in range(settings["max_log2_d_qk"] + 1)]
    d = settings["d"]
    I = torch.eye(d, dtype=torch.float64)
    found = {name: [] for name in SCALINGS}
    inputs = Inputs([], [], [], [])
    for seed in loop(
        settings["seeds"], desc="d_QK sweep", unit="seed", progress=progress
    ):
        X = spectra.random_inputs(1, settings["N"], settings["n"], d, seed=seed)
        gen = torch.Generator().manual_seed(10_000 + seed)
        W_V = torch.randn(d, d, generator=gen, dtype=torch.float64) / math.sqrt(d)
        # W_Q W_K^T for every d_QK, (V, 1, d, d): X W_Q (X W_K)^T = X (W_Q W_K^T) X^T
        M = spectra.nested_score_products(d, d_qk, seed=20_000 + seed).unsqueeze(1)
        x, centred = spectrum(X), spectrum(X - X.mean(dim=-2, keepdim=True))
        inputs.sigma_min.append(x["sigma_min"].item())
        inputs.sigma_min_centred.append(centred["sigma_min"].item())
        inputs.norm.append(x["sigma_max"].item())
        inputs.norm_W_V.append(torch.linalg.matrix_norm(W_V, ord=2).item())
        for name in SCALINGS:
            tau = torch.tensor(
                [temperature(name, v) for v in d_qk], dtype=torch.float64
            ).view(-1, 1, 1, 1)
            A = attention(X, M, I, W_V, tau)  # (V, N, n, d)
            spec = spectrum(torch.stack([A + b * X for b in BETAS]), per_sample=True)
            delta = spectra.uniform_deviation(X, M, I, tau)  # (V,)
            P = attention_weights(X, M, I, tau)
            weight = P.amax(dim=-1).mean(dim=(-2, -1))
            found[name].append(
                torch.stack(
                    [
                        spec["sigma_min"],
                        spec["effective_rank_per_sample"],
                        torch.stack(
                            [centred_lower_bound(X, W_V, delta, b) for b in BETAS]
                        ),
                        weight.expand(len(BETAS), -1),
                        delta.expand(len(BETAS), -1),
                    ]
                )
            )
    points = []
    for name in SCALINGS:  # (seeds, quantity, beta, V) -> (beta, quantity, seeds, V)
        q = torch.stack(found[name]).permute(2, 1, 0, 3).numpy()
        points += [SweepPoint(name, beta, *q[i]) for i, beta in enumerate(BETAS)]
    return d_qk, points, inputs


# --------------------------------------------------------------------------- training
def training_problem(settings: dict, seed: int):
    """Gaussian inputs ``X`` (N, n, d) and targets ``Y`` (N, n, d_out) of one seed."""
    gen = torch.Generator().manual_seed(30_000 + seed)
    shape = (settings["N"], settings["n"])
    X = torch.randn(*shape, settings["d"], generator=gen, dtype=torch.float64)
    Y = torch.randn(*shape, settings["train_d_out"], generator=gen, dtype=torch.float64)
    return X, Y


def per_sample_floor(Y) -> float:
    """``1/2 sum_p ||Y_p - 1 y_p^T||^2``, ``y_p`` the mean target of sample ``p``: the
    least loss of any model whose outputs are equal across the tokens of a sample."""
    return float(squared_loss(Y.mean(dim=-2, keepdim=True).expand_as(Y), Y))


def train(settings: dict, *, progress: bool = False) -> list[TrainingRun]:
    """GD (eq. ``model-gd``) from the collapsed initialisation (``tau = d_QK``) with
    ``beta = 0`` and ``beta = 1`` at the same step, for every seed.

    Each (beta, seed) is a model of one :class:`rcutil.train.Stack`, trained by
    :func:`rcutil.train.descend` on its seed's samples; both betas of a seed start from
    the same weights. The scores are formed as ``X (W_Q W_K^T) X^T``, the same matrix
    as ``(X W_Q)(X W_K)^T`` at a cost independent of ``d_QK``.
    """
    members = [(beta, seed) for beta in TRAIN_BETAS for seed in settings["train_seeds"]]
    d, d_qk = settings["d"], settings["train_d_qk"]
    tau = temperature(COLLAPSE_SCALING, d_qk)
    s = stack(
        Transformer(
            d,
            d_qk,
            settings["train_d_F"],
            settings["train_d_out"],
            tau=tau,
            beta=beta,
            seed=seed,
        )
        for beta, seed in members
    ).trainable()
    data = [training_problem(settings, seed) for _, seed in members]
    X, Y = (torch.stack(z) for z in zip(*data))  # (members, N, n, .)
    I = torch.eye(d, dtype=torch.float64)

    def loss():
        W = {k: w[:, None] for k, w in s.W.items()}  # (members, 1, rows, cols)
        H, Z = block(  # eqs. model-z to model-out
            X,
            W["blocks.0.W_Q"] @ W["blocks.0.W_K"].mT,
            I,
            W["blocks.0.W_V"],
            W["blocks.0.W_1"],
            W["blocks.0.W_2"],
            beta=s.beta.view(-1, 1, 1, 1),
            tau=tau,
            activation=s.activation,
        )
        F = H @ W["output.W_U"]
        return 0.5 * ((F - Y) ** 2).flatten(1).sum(1), ModelOutput(F, [Z], H)

    h = descend(
        loss,
        s.W,
        mu=settings["train_mu"],
        steps=settings["train_steps"],
        progress=progress,
        desc="GD, every beta and seed",
        setting="train_mu",
    )
    S = len(settings["train_seeds"])
    return [
        TrainingRun(beta, h.loss[i * S : (i + 1) * S], h.sigma_min[i * S : (i + 1) * S])
        for i, beta in enumerate(TRAIN_BETAS)
    ]


# --------------------------------------------------------------------------- depth
def relative_residual(X: torch.Tensor) -> torch.Tensor:
    """Eq. ``rc-res``: ``||X - 1 x^T||_F / ||X||_F`` with ``x`` the mean token (the best
    fit of the form ``1 x^T``), per matrix of a batch ``(..., n, d)``."""
    R = X - X.mean(dim=-2, keepdim=True)
    return torch.linalg.matrix_norm(R) / torch.linalg.matrix_norm(X)


def depth_collapse(settings: dict) -> list[DepthStack]:
    """Relative residual after each of ``depth_layers`` attention layers, without and
    with skip connections. Each layer draws fresh Gaussian ``W_Q, W_K, W_V`` (std
    ``1/sqrt(d)``), ``d_QK = d``, ``tau = sqrt(d_QK)``; both stacks share inputs and
    weights."""
    S, n, d = settings["depth_draws"], settings["depth_n"], settings["d"]
    gen = torch.Generator().manual_seed(40_000)
    X0 = torch.randn(S, n, d, generator=gen, dtype=torch.float64)
    weights = [
        [
            torch.randn(S, d, d, generator=gen, dtype=torch.float64) / math.sqrt(d)
            for _ in range(3)
        ]
        for _ in range(settings["depth_layers"])
    ]
    out = []
    for skip in (False, True):
        X, res = X0, [relative_residual(X0)]
        for W_Q, W_K, W_V in weights:
            A = attention(X, W_Q, W_K, W_V, math.sqrt(d))
            X = A + X if skip else A
            res.append(relative_residual(X))
        out.append(DepthStack(skip, torch.stack(res, dim=1).numpy()))
    return out


# --------------------------------------------------------------------------- run
def run(settings: dict, *, device: str = "cpu", progress: bool = True) -> Result:
    """The three parts. They are small: float64 on the CPU with one torch thread,
    whatever ``device`` says."""
    with torch_threads(1):
        d_qk, points, inputs = sweep(settings, progress=progress)
        training = train(settings, progress=progress)
        depth = depth_collapse(settings)
    floors = [
        per_sample_floor(training_problem(settings, s)[1])
        for s in settings["train_seeds"]
    ]
    return Result(
        settings=settings,
        d_qk=d_qk,
        sweep=points,
        inputs=inputs,
        training=training,
        training_floor=floors,
        depth=depth,
    )


# --------------------------------------------------------------------------- readings
#: Collapse: at the largest d_QK, the seed mean of sigma_min(Attn X) is below this
#: fraction of that of Attn X + X, and falls at each of (at least) DECADE_POINTS d_QK
#: of the last decade.
COLLAPSE_RATIO, DECADE_POINTS = 1e-3, 3


@dataclass(frozen=True)
class Collapse:
    """sigma_min(Attn X) against sigma_min(Attn X + X) under one scaling."""

    scaling: str
    d_qk: int  #: the largest
    attention: np.ndarray  #: sigma_min(Attn X) per seed at the largest d_QK
    residual: np.ndarray  #: sigma_min(Attn X + X) per seed at the largest d_QK
    decade: tuple[float, ...]  #: seed means of sigma_min(Attn X), d_QK >= largest / 10

    @property
    def ratio(self) -> float:
        return float(self.attention.mean() / self.residual.mean())

    @property
    def falling(self) -> bool:
        return all(b < a for a, b in zip(self.decade, self.decade[1:]))

    @property
    def collapses(self) -> bool:
        return (
            self.ratio < COLLAPSE_RATIO
            and self.falling
            and len(self.decade) >= DECADE_POINTS
        )


def point(result: Result, scaling: str, beta: float) -> SweepPoint:
    """The sweep at one scaling and beta."""
    return results.pick(result.sweep, scaling=scaling, beta=beta)


def collapse(result: Result, scaling: str) -> Collapse:
    """:class:`Collapse` of one scaling."""
    attn = point(result, scaling, 0.0).sigma_min
    last = [j for j, v in enumerate(result.d_qk) if v >= result.d_qk[-1] / 10]
    return Collapse(
        scaling,
        result.d_qk[-1],
        attn[:, -1],
        point(result, scaling, 1.0).sigma_min[:, -1],
        tuple(float(attn[:, j].mean()) for j in last),
    )


def slope(result: Result, start: int = 2**8) -> float:
    """Least-squares slope of log sigma_min(Attn X) (seed means) against log d_QK from
    ``d_QK >= start``, under tau = d_QK: -1/2 by eq. rc-variance."""
    keep = [j for j, v in enumerate(result.d_qk) if v >= start]
    mean = point(result, COLLAPSE_SCALING, 0.0).sigma_min.mean(axis=0)[keep]
    return float(np.polyfit(np.log(np.asarray(result.d_qk)[keep]), np.log(mean), 1)[0])


def bound_excess(result: Result) -> float:
    """Largest bound of eq. rc-centred over the sigma_min it bounds, over every seed,
    d_QK, beta and scaling (at most 1 where the bound holds)."""
    return max(float((p.centred_lower / p.sigma_min).max()) for p in result.sweep)


def final_over_floor(result: Result, beta: float) -> np.ndarray:
    """``Phi_T / Phi_floor`` per seed: GD's last loss over :func:`per_sample_floor`."""
    run = results.pick(result.training, beta=beta)
    return run.loss[:, -1] / np.asarray(result.training_floor)


def cubic_exponents(res: np.ndarray, start: float = 0.9, floor: float = 1e-13) -> list:
    """``log r_{l+1} / log r_l`` of the mean over draws of ``log r``, at the layers with
    ``r_l < start`` and ``r_{l+1} > floor``: about 3 for Dong et al.'s cubic
    contraction, 1 for a geometric one."""
    logr = np.log(np.clip(res, RES_FLOOR, None)).mean(axis=0)
    return [
        float(b / a)
        for a, b in zip(logr[:-1], logr[1:])
        if a < math.log(start) and b > math.log(floor)
    ]


def geometric_mean(res: np.ndarray) -> np.ndarray:
    """Per layer, the geometric mean over draws of the residual clipped at RES_FLOOR."""
    return np.exp(np.log(np.clip(res, RES_FLOOR, None)).mean(axis=0))


# --------------------------------------------------------------------------- checks
LARGEST_D_QK = 2**14  # the sweep reaches at least this d_QK
SLOPE_RANGE = (-0.8, -0.3)  # slope of sigma_min(Attn X), about -1/2 (eq. rc-variance)
RANK_ONE = 1.1  # collapsed: effective rank per sample below this
UNIFORM = 1.1  # collapsed: largest weight times n below this
KEEPS = 0.5  # sigma_min(Attn X + X) at the largest over d_QK = 1
HALF_RESIDUAL = 100.0  # sigma_min(Attn X + X/2) over sigma_min(Attn X)
FLAT = 0.3  # tau = sqrt(d_QK): smallest over largest from d_QK = 2^6
HARD = 0.95  # tau = 1: largest attention weight above this
HARD_OVER_COLLAPSE = 10.0  # tau = 1 over tau = d_QK: sigma_min(Attn X)
ROUNDING = 1e-10  # eq. rc-centred holds up to this relative rounding
TIGHT = 0.9  # in the collapse, the bound over beta sigma_min(X~)
CENTRED = 0.8  # sigma_min(X~) over sigma_min(X)
FALLS, STAYS = 0.1, 0.5  # Phi_T / Phi_0 with the residual below, without above
SEPARATED = 1e-2  # sigma_min(Z_t): largest without over smallest with
STALLED = 0.75  # Phi_T / Phi_floor without the residual, on every seed
BELOW_FLOOR = 0.2  # Phi_T / Phi_floor with the residual, on every seed
DOUBLE_LAYERS = 2  # layers where log r_{l+1} / log r_l is measured
DOUBLES = 2.0  # ... and at least this (doubly exponential decay)
FLOOR_LAYER, AT_FLOOR = 6, 1e-12  # pure attention's r_l at this layer below this
SKIP_KEEPS = 0.05  # with skips, r at the last layer above this
SKIP_STEP = 0.5  # with skips, r_{l+1} / r_l above this


#: Typeset scalings and quantities of the table and the claims.
TAU = {
    COLLAPSE_SCALING: r"$\tau = d_{QK}$",
    USUAL_SCALING: r"$\tau = \sqrt{d_{QK}}$",
    UNSCALED: r"$\tau = 1$",
}
_ATTN = r"$\sigma_{\min}(\mathrm{Attn}(X))$"
_RESID = r"$\sigma_{\min}(\mathrm{Attn}(X) + X)$"
_HALF = r"$\sigma_{\min}(\mathrm{Attn}(X) + X/2)$"


def checks(result: Result) -> list[Check]:
    """The chapter's acceptance table."""
    book, usual, hard = (collapse(result, k) for k in SCALINGS)
    at = {b: point(result, COLLAPSE_SCALING, b) for b in BETAS}
    usual0, hard0 = point(result, USUAL_SCALING, 0.0), point(result, UNSCALED, 0.0)
    flat = usual0.sigma_min.mean(axis=0)[np.asarray(result.d_qk) >= 2**6]
    rank = at[0.0].effective_rank.mean(axis=0)
    centred = np.asarray(result.inputs.sigma_min_centred)
    tight = {b: (at[b].centred_lower[:, -1] / (b * centred)).min() for b in (1.0, 0.5)}
    run = {r.beta: r for r in result.training}
    start = {b: run[b].loss[:, -1] / run[b].loss[:, 0] for b in TRAIN_BETAS}
    pure, skip = (geometric_mean(d.residual) for d in result.depth)
    exps = cubic_exponents(result.depth[0].residual)
    tq, tu, t1 = TAU.values()
    end, ratio = "at the largest $d_{QK}$", r"$\Phi_T / \Phi_{\mathrm{floor}}$"
    return [
        Check("the sweep starts at $d_{QK} = 1$", result.d_qk[0], "==", 1),
        Check("the largest $d_{QK}$", result.d_qk[-1], ">=", LARGEST_D_QK),
        Check(f"{tq}: {_ATTN} over {_RESID} {end}", book.ratio, "<", COLLAPSE_RATIO),
        Check("$d_{QK}$ in the last decade", len(book.decade), ">=", DECADE_POINTS),
        Check(f"{tq}: {_ATTN} falls at each", book.falling, "==", True),
        Check(
            f"{tq}: slope of $\\log$ {_ATTN} in $\\log d_{{QK}}$ from $2^8$",
            slope(result),
            ">",
            SLOPE_RANGE[0],
        ),
        Check("the same slope", slope(result), "<", SLOPE_RANGE[1]),
        Check(f"{tq}: effective rank per sample {end}", float(rank[-1]), "<", RANK_ONE),
        Check(
            "the same, over its value at a 16 times smaller $d_{QK}$",
            float(rank[-1] / rank[-5]),
            "<",
            1.0,
        ),
        Check(
            f"{tq}: largest attention weight times $n$ {end}",
            float(at[0.0].max_weight[:, -1].mean() * result.settings["n"]),
            "<",
            UNIFORM,
        ),
        Check(
            f"{tq}: {_RESID} {end} over $d_{{QK}} = 1$",
            float(at[1.0].sigma_min[:, -1].mean() / at[1.0].sigma_min[:, 0].mean()),
            ">",
            KEEPS,
        ),
        Check(
            f"{tq}: {_HALF} over {_ATTN} {end}",
            float(at[0.5].sigma_min[:, -1].mean() / book.attention.mean()),
            ">",
            HALF_RESIDUAL,
        ),
        Check(
            f"{tu}: smallest over largest {_ATTN} from $d_{{QK}} = 2^6$",
            float(flat.min() / flat.max()),
            ">",
            FLAT,
        ),
        Check(
            f"{t1}: largest attention weight {end}",
            float(hard0.max_weight[:, -1].mean()),
            ">",
            HARD,
        ),
        Check(
            f"{_ATTN} under {t1} over {tq}",
            float(hard.attention.mean() / book.attention.mean()),
            ">",
            HARD_OVER_COLLAPSE,
        ),
        Check(
            "bound {eq}`rc-centred` over what it bounds, largest anywhere",
            bound_excess(result),
            "<=",
            1 + ROUNDING,
        ),
        *[
            Check(
                f"{tq}, $\\beta = {b:g}$: the bound over "
                f"$\\beta\\,\\sigma_{{\\min}}(\\tilde X)$ {end}, smallest",
                float(tight[b]),
                ">",
                TIGHT,
            )
            for b in (1.0, 0.5)
        ],
        Check(
            f"{tq}, $\\beta = 1$: the bound {end}, smallest",
            float(at[1.0].centred_lower[:, -1].min()),
            ">",
            0.0,
        ),
        Check(
            r"$\sigma_{\min}(\tilde X) / \sigma_{\min}(X)$, smallest",
            float((centred / np.asarray(result.inputs.sigma_min)).min()),
            ">",
            CENTRED,
        ),
        Check(
            f"{tu}, $\\beta = 1$: the bound {end}, largest",
            float(point(result, USUAL_SCALING, 1.0).centred_lower[:, -1].max()),
            "<",
            0.0,
        ),
        Check(
            "GD records every step",
            {r.loss.shape[1] for r in result.training}
            == {result.settings["train_steps"] + 1},
            "==",
            True,
        ),
        Check(
            r"GD, $\beta = 1$: $\Phi_T / \Phi_0$, largest",
            float(start[1.0].max()),
            "<",
            FALLS,
        ),
        Check(
            r"GD, $\beta = 0$: $\Phi_T / \Phi_0$, smallest",
            float(start[0.0].min()),
            ">",
            STAYS,
        ),
        Check(
            r"GD: $\sigma_{\min}(Z_t)$, largest at $\beta = 0$ over smallest at "
            r"$\beta = 1$",
            float(run[0.0].sigma_min.max() / run[1.0].sigma_min.min()),
            "<",
            SEPARATED,
        ),
        Check(
            f"GD, $\\beta = 0$: {ratio}, smallest",
            float(final_over_floor(result, 0.0).min()),
            ">",
            STALLED,
        ),
        Check(
            f"GD, $\\beta = 1$: {ratio}, largest",
            float(final_over_floor(result, 1.0).max()),
            "<",
            BELOW_FLOOR,
        ),
        Check(
            "depth: layers of doubly exponential decay", len(exps), ">=", DOUBLE_LAYERS
        ),
        Check(
            r"depth: $\log r_{l+1} / \log r_l$ there, smallest",
            min(exps, default=0.0),
            ">=",
            DOUBLES,
        ),
        Check(
            f"depth: $r_{{{FLOOR_LAYER}}}$ without skips (geometric mean)",
            float(pure[FLOOR_LAYER]),
            "<",
            AT_FLOOR,
        ),
        Check(
            f"depth: $r_{{{len(skip) - 1}}}$ with skips (geometric mean)",
            float(skip[-1]),
            ">",
            SKIP_KEEPS,
        ),
        Check(
            r"depth: $r_{l+1} / r_l$ with skips, smallest",
            float((skip[1:] / skip[:-1]).min()),
            ">",
            SKIP_STEP,
        ),
    ]


# --------------------------------------------------------------------------- claims
def claims(result: Result) -> list[Claim]:
    """The paper's limit d_QK -> infinity, and what it does to GD."""
    book, usual = collapse(result, COLLAPSE_SCALING), collapse(result, USUAL_SCALING)
    lower = float(point(result, COLLAPSE_SCALING, 1.0).centred_lower[:, -1].min())
    holds = bound_excess(result) <= 1 + ROUNDING

    def reading(c: Collapse) -> str:
        trend = "falling" if c.falling else "not falling"
        return (
            f"{fmt(*mean_se(c.attention))} under {TAU[c.scaling]} ({c.ratio:.1e} "
            f"of {_RESID}, {trend})"
        )

    spectral = Claim(
        "rank-collapse",
        r"Rank collapse as $d_{QK} \to \infty$",
        r"without the residual the attention output collapses as $d_{QK} \to \infty$, "
        rf"{_ATTN} $\to 0$; with it, $Z = \mathrm{{Attn}}(X) + X$ keeps "
        r"$\sigma_{\min}(Z) > 0$",
        f"at $d_{{QK}} = 2^{{{round(math.log2(book.d_qk))}}}$, {_ATTN} is "
        f"{reading(book)}; {reading(usual)}; "
        f"mean ± s.e. over {book.attention.size} seeds; {_RESID} $\\ge$ {lower:.2f} on "
        "every seed by eq. {eq}`rc-centred`",
        status(book.collapses and holds and lower > 0, deviation=not usual.collapses),
        r"the limit needs scores whose variance $d_{QK} s^4 \|x\|^2 \|y\|^2 / \tau^2$ "
        r"(eq. {eq}`rc-variance`) vanishes: with $s = 1/\sqrt d$ that is the book's "
        r"$\tau = d_{QK}$; the usual $\tau = \sqrt{d_{QK}}$ "
        + (
            "collapses too"
            if usual.collapses
            else "keeps it of order one and does not collapse"
        )
        + r"; the paper's $\tau$ and $s$ are not public",
        rule=f"collapse: at the largest $d_{{QK}}$ the seed mean of {_ATTN} is below "
        f"{COLLAPSE_RATIO:g} of that of {_RESID} and falls at each $d_{{QK}}$ of "
        "the last decade; the residual: the bound {eq}`rc-centred` holds "
        "everywhere and is positive on every seed; a stated deviation unless "
        r"$\tau = \sqrt{d_{QK}}$ collapses too",
    )
    s, n = result.settings, len(result.settings["train_seeds"])
    gd = compare(final_over_floor(result, 1.0), final_over_floor(result, 0.0))
    training = Claim(
        "rank-collapse-gd",
        "Gradient descent from the collapse",
        "in the collapse the problem is ill-conditioned: without the residual gradient "
        "descent stalls, with it the loss keeps falling",
        r"$\Phi_T / \Phi_{\mathrm{floor}}$ "
        rf"after $T = {s['train_steps']}$ steps at "
        rf"$\mu = {s['train_mu']:g}$, $d_{{QK}} = {s['train_d_qk']}$, "
        r"$\tau = d_{QK}$; "
        + gd.text(r"$\beta = 1$:", r"$\beta = 0$:")
        + f" (mean ± s.e., {n} seeds)",
        decide(gd.outcome, deviation=True),
        r"the collapse exists only under the book's $\tau = d_{QK}$ (row above); the "
        "activation, the sizes and the step are the book's",
        rule=rule_text(n) + r"; $\Phi_{\mathrm{floor}}$ is the least loss of outputs "
        "that are constant over each sample's tokens",
    )
    return [spectral, training]
