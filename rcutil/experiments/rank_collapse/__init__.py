"""Rank collapse of the attention output as d_QK grows, and what the residual changes.

Chapter :ref:`rank-collapse`. :func:`run` has three parts: :func:`sweep`, sigma_min and
effective rank of ``Attn(X) + beta X`` over d_QK under three score scalings (eq.
``rc-variance``) with the bound of eq. ``rc-centred``; :func:`train`, GD from the
collapsed regime with beta = 0 and beta = 1 over seeds; :func:`depth_collapse`, eq.
``rc-res`` through a stack of attention layers (Dong et al. 2021). The checks, the
claims and the readings of the result that decide them are in
:mod:`rcutil.experiments.rank_collapse.verdicts`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
import torch

from ... import profiles, results, spectra
from ...model import (
    ModelOutput,
    Transformer,
    attention,
    attention_weights,
    block,
    squared_loss,
)
from ...progress import steps as loop
from ...spectra import SCALINGS, spectrum, temperature
from ...threads import torch_threads
from ...train import descend, stack

#: The scaling under which the attention output collapses as d_QK grows (eq.
#: ``rc-variance``), the usual one, and unscaled scores.
COLLAPSE_SCALING, USUAL_SCALING, UNSCALED = "tau=d_qk", "tau=sqrt(d_qk)", "tau=1"
#: Residual strengths of the sweep (``beta = 0`` is ``Attn(X)`` itself) and of training.
BETAS, TRAIN_BETAS = (0.0, 0.5, 1.0), (0.0, 1.0)


@dataclass(frozen=True, kw_only=True)
class Settings(profiles.Settings):
    """Sizes of the three parts. They are the book's choice (the paper's are not
    public): N < d, so that the stacked (N n) x d attention output can lose rank (its
    uniform part has rank <= N), and n >= d."""

    N: int  #: samples
    n: int  #: tokens per sample
    d: int  #: width of a token
    seeds: tuple[int, ...]  #: seeds of the d_QK sweep
    max_log2_d_qk: int  #: the sweep runs d_QK = 1, 2, 4, ..., 2^max_log2_d_qk
    train_seeds: tuple[int, ...]  #: seeds of GD, each beta
    train_d_qk: int  #: d_QK of GD, in the collapse
    train_d_F: int  #: width of the FFN of GD
    train_d_out: int  #: width of GD's targets
    train_mu: float  #: GD step size
    train_steps: int  #: GD steps
    depth_layers: int  #: attention layers of the depth stacks
    depth_n: int  #: tokens of an input of the depth stacks
    depth_draws: int  #: inputs (and weights) of the depth stacks


CI = Settings(
    N=4, n=16, d=8, seeds=tuple(range(8)), max_log2_d_qk=16,
    train_seeds=(0, 1, 2, 3), train_d_qk=4096, train_d_F=32, train_d_out=2,
    train_mu=0.002, train_steps=300, depth_layers=12, depth_n=16, depth_draws=16,
)  # fmt: skip
BOOK = replace(
    CI, seeds=tuple(range(16)), max_log2_d_qk=18, train_seeds=tuple(range(8)),
    train_steps=1000, depth_layers=16, depth_draws=64,
)  # fmt: skip
PAPER = replace(
    BOOK, seeds=tuple(range(32)), max_log2_d_qk=20, train_seeds=tuple(range(16)),
    train_steps=2000, depth_n=32, depth_draws=256,
)  # fmt: skip
SETTINGS = {"ci": CI, "book": BOOK, "paper": PAPER}


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
    settings: Settings
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


def sweep(settings: Settings, *, progress: bool = False):
    """``(d_qk, points, inputs)``: the sweep over seeds, d_QK, scalings and betas."""
    d_qk = [2**k for k in range(settings.max_log2_d_qk + 1)]
    d = settings.d
    I = torch.eye(d, dtype=torch.float64)
    found = {name: [] for name in SCALINGS}
    inputs = Inputs([], [], [], [])
    for seed in loop(settings.seeds, desc="d_QK sweep", unit="seed", progress=progress):
        X = spectra.random_inputs(1, settings.N, settings.n, d, seed=seed)
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
def training_problem(settings: Settings, seed: int):
    """Gaussian inputs ``X`` (N, n, d) and targets ``Y`` (N, n, d_out) of one seed."""
    gen = torch.Generator().manual_seed(30_000 + seed)
    shape = (settings.N, settings.n)
    X = torch.randn(*shape, settings.d, generator=gen, dtype=torch.float64)
    Y = torch.randn(*shape, settings.train_d_out, generator=gen, dtype=torch.float64)
    return X, Y


def per_sample_floor(Y) -> float:
    """``1/2 sum_p ||Y_p - 1 y_p^T||^2``, ``y_p`` the mean target of sample ``p``: the
    least loss of any model whose outputs are equal across the tokens of a sample."""
    return float(squared_loss(Y.mean(dim=-2, keepdim=True).expand_as(Y), Y))


def train(settings: Settings, *, progress: bool = False) -> list[TrainingRun]:
    """GD (eq. ``model-gd``) from the collapsed initialisation (``tau = d_QK``) with
    ``beta = 0`` and ``beta = 1`` at the same step, for every seed.

    Each (beta, seed) is a model of one :class:`rcutil.train.Stack`, trained by
    :func:`rcutil.train.descend` on its seed's samples; both betas of a seed start from
    the same weights. The scores are formed as ``X (W_Q W_K^T) X^T``, the same matrix
    as ``(X W_Q)(X W_K)^T`` at a cost independent of ``d_QK``.
    """
    members = [(beta, seed) for beta in TRAIN_BETAS for seed in settings.train_seeds]
    d, d_qk = settings.d, settings.train_d_qk
    tau = temperature(COLLAPSE_SCALING, d_qk)
    s = stack(
        Transformer(
            d,
            d_qk,
            settings.train_d_F,
            settings.train_d_out,
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
        mu=settings.train_mu,
        steps=settings.train_steps,
        progress=progress,
        desc="GD, every beta and seed",
        setting="train_mu",
    )
    S = len(settings.train_seeds)
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


def depth_collapse(settings: Settings) -> list[DepthStack]:
    """Relative residual after each of ``depth_layers`` attention layers, without and
    with skip connections. Each layer draws fresh Gaussian ``W_Q, W_K, W_V`` (std
    ``1/sqrt(d)``), ``d_QK = d``, ``tau = sqrt(d_QK)``; both stacks share inputs and
    weights."""
    S, n, d = settings.depth_draws, settings.depth_n, settings.d
    gen = torch.Generator().manual_seed(40_000)
    X0 = torch.randn(S, n, d, generator=gen, dtype=torch.float64)
    weights = [
        [
            torch.randn(S, d, d, generator=gen, dtype=torch.float64) / math.sqrt(d)
            for _ in range(3)
        ]
        for _ in range(settings.depth_layers)
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
def run(settings: Settings, *, device: str = "cpu", progress: bool = True) -> Result:
    """The three parts. They are small: float64 on the CPU with one torch thread,
    whatever ``device`` says."""
    with torch_threads(1):
        d_qk, points, inputs = sweep(settings, progress=progress)
        training = train(settings, progress=progress)
        depth = depth_collapse(settings)
    floors = [
        per_sample_floor(training_problem(settings, s)[1]) for s in settings.train_seeds
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
