"""Experiment 1 of the paper rerun: Jena Climate, one layer, residual strength beta.

Chapter :ref:`jena` (``python -m rcutil jena``). Every (beta, seed) model is trained by
full-batch GD (eq. ``model-gd``) under two step rules, all models as one batched
computation (:func:`rcutil.train.descend` on a :class:`rcutil.train.Stack`): one common
step ``mu_factor / max lambda_max`` and each model at its own ``mu_factor /
lambda_max``, where ``lambda_max`` is the largest Hessian eigenvalue at initialisation
(:func:`sharpness`). L-BFGS from the same initialisation
(:func:`rcutil.lbfgs.batched_lbfgs`) gives each model its best-found loss ``Phi_hat``,
the lowest loss of any of its runs; "faster" is the loss above it, and the drop of the
L-BFGS run over its last half is the best-found loss's own drift.

Recorded for the common step: ``sigma_min(Z_t)`` and ``||Z_t||_2`` of the stacked
attention output at every iterate, the ratio ``min_t sigma_min^2(Z_t) / max_t ||Z_t||``
(eq. ``jena-ratio``) and, every ``spectra_every`` iterates, its eight readings
(precision, layout, norm: :mod:`rcutil.rounding`). The float32 floor factor ``c`` is
measured on rank-deficient matrices of the same shapes
(:func:`rcutil.rounding.floor_factors`). At every reading, the factors of the attention
output of the sample where it is smallest (:func:`attention_factors`). The checks, the
claims and the readings of the result that decide them are in
:mod:`rcutil.experiments.jena.verdicts`.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, replace

import numpy as np
import torch

from ... import hessian, jena_data, profiles, results, rounding
from ...lbfgs import batched_lbfgs
from ...model import Transformer, attention_weights
from ...threads import torch_threads
from ...train import Stack, descend, stack
from ...validate import device as check_device


@dataclass(frozen=True, kw_only=True)
class Settings(profiles.Settings):
    """The data, the model, the step rules and the measurements of a profile (the
    paper's sizes are not public)."""

    file: str  #: the data file, by its :mod:`rcutil.data` name
    sampling: int  #: every ``sampling``-th ten-minute row
    train_fraction: float  #: the first share of the rows is for training
    n: int  #: steps in, and temperatures out, of a window
    n_windows: int  #: windows N
    d_qk: int  #: width of queries and keys
    d_F: int  #: width of the FFN
    tau: float | None  #: attention temperature (``None``: sqrt(d_QK))
    activation: str  #: of the FFN (:mod:`rcutil.activations`)
    mu_factor: float  #: the step is mu_factor / lambda_max
    lanczos_steps: int  #: Lanczos steps of lambda_max
    steps: int  #: the horizon T of both step rules
    spectra_every: int  #: iterates between two readings of the ratio
    floor_iterations: int  #: L-BFGS iterations of the best-found loss
    seeds: tuple[int, ...]
    betas: tuple[float, ...]  #: residual strengths
    deficiencies: tuple[int, ...]  #: rank deficiencies k of the floor factor
    draws: int  #: matrices per layout of the floor factor
    threads: int | None  #: torch threads (one ran these small matrices fastest)


CI = Settings(
    file=jena_data.FIXTURE_FILE, sampling=1, train_fraction=0.7, n=8, n_windows=16,
    d_qk=8, d_F=32, tau=None, activation="tanh", mu_factor=1.0, lanczos_steps=16,
    steps=400, spectra_every=20, floor_iterations=400, seeds=(0, 1, 2),
    betas=(0.0, 0.25, 0.5, 0.75, 1.0), deficiencies=(1, 2, 4), draws=128, threads=1,
)  # fmt: skip
BOOK = replace(
    CI, file=jena_data.FULL_FILE, sampling=6, n=24, n_windows=48, steps=1200,
    spectra_every=50, floor_iterations=800, seeds=(0, 1, 2, 3, 4),
    deficiencies=(1, 2, 4, 8), draws=512,
)  # fmt: skip
PAPER = replace(
    BOOK, n_windows=2048, lanczos_steps=20, steps=20000, spectra_every=500,
    floor_iterations=5000, draws=4096, threads=None,
)  # fmt: skip
SETTINGS = {"ci": CI, "book": BOOK, "paper": PAPER}

#: The two step rules: one step for every model, and each model at its own limit.
RULES = ("common", "own")


# --------------------------------------------------------------------------- result
@dataclass
class Run:
    """GD of every seed at one ``beta`` under one step ``rule``; arrays are (seed,
    iterate)."""

    beta: float
    rule: str
    step_size: list[float]
    loss: np.ndarray
    sigma_min: np.ndarray  #: of the stacked Z_t
    sigma_max: np.ndarray  #: ||Z_t||_2 of the stacked Z_t


@dataclass
class Reading:
    """One reading of the ratio at one ``beta`` (common step): a precision, a layout
    (per sample or stacked) and a norm; per seed, its value, the smallest ``sigma_min``
    and largest norm over the grid, and ``c``: that ``sigma_min`` in units of ``eps
    max_t ||Z_t||_2`` of its precision."""

    precision: str  #: ``float32`` or ``float64``
    layout: str  #: ``per-sample`` or ``stacked``
    norm: str  #: ``spectral`` or ``Frobenius``
    ratio: list[float]
    sigma_min: list[float]
    largest_norm: list[float]
    c: list[float]

    @property
    def name(self) -> str:
        """``precision, layout, norm``, as the chapter's tables show it."""
        return f"{self.precision}, {self.layout}, {self.norm}"


@dataclass
class Cleaning:
    """What the cleaning rules did (:func:`rcutil.jena_data.clean`)."""

    rows_read: int
    rows_kept: int
    out_of_order: int
    duplicates: int
    duplicates_differing: int
    sentinels_replaced: dict[str, int]
    gaps: int
    missing_steps: int
    longest_gap_steps: int
    longest_gap_after: str | None
    irregular_steps: int
    expected_rows: int


@dataclass
class Data:
    """The data file, its checksum, its cleaning and the windows
    (:func:`rcutil.jena_data.load`)."""

    file: str
    path: str
    sha256: str
    rows_in_file: int
    rows_clean: int
    rows_train: int
    rows_used: int
    first_time: str
    last_time: str
    last_train_time: str
    sentinels_replaced: dict[str, int]
    cleaning: Cleaning
    sampling: int
    train_fraction: float
    n_windows: int
    window_starts: list[int]
    features: list[str]
    target: str

    @classmethod
    def of(cls, info: dict) -> Data:
        """The record of :func:`rcutil.jena_data.load` (its ``info``), typed."""
        return cls(**{**info, "cleaning": Cleaning(**info["cleaning"])})


@dataclass
class Factors:
    """At every reading, per seed (arrays (seed, reading)), the factors of the
    attention-layer output of the sample ``p`` where its smallest singular value is
    smallest: ``Z_p = P_p X_p W_V + beta X_p`` (eq. ``model-z``). With ``k = min(n,
    d)``: ``sigma_Z`` = sigma_k(Z_p); ``sigma_PX`` = sigma_k(P_p X_p); ``sigma_P`` =
    sigma_k(P_p), ``norm_P`` = ||P_p||_2 and ``rank_one`` = sigma_2(P_p) / sigma_1(P_p)
    (small when the rows of P_p nearly coincide); ``sigma_X`` = sigma_k(X_p) and
    ``norm_X`` = ||X_p||_2; ``sigma_W_V`` = sigma_min(W_V) and ``norm_W_V`` =
    ||W_V||_2 (eq. ``jena-factors``)."""

    sigma_Z: np.ndarray
    sigma_PX: np.ndarray
    sigma_P: np.ndarray
    norm_P: np.ndarray
    rank_one: np.ndarray
    sigma_X: np.ndarray
    norm_X: np.ndarray
    sigma_W_V: np.ndarray
    norm_W_V: np.ndarray


@dataclass
class Point:
    """What is measured at one ``beta``, per seed: ``lambda_max`` at initialisation, the
    loss of the L-BFGS run (seed, iteration), the best-found loss ``Phi_hat`` (the
    lowest loss of any run of the model), the ratio of eq. ``jena-ratio`` (common
    step), its eight readings, and the factors of the smallest per-sample attention
    output on the grid (common step)."""

    beta: float
    sharpness: list[float]
    floor_run: np.ndarray
    floor: list[float]
    ratio: list[float]
    readings: list[Reading]  #: found with ``results.pick(readings, precision=...)``
    factors: Factors


@dataclass
class Result(results.Result):
    settings: Settings
    data: Data
    norm_X: float  #: ||X||_2 of the stacked normalised input
    sigma_min_X: float
    grid: list[int]  #: the iterates of the readings
    points: list[Point]
    runs: list[Run]
    floor_factors: list[rounding.FloorFactor]


# ---------------------------------------------------------------------- data, models
def data_files(settings: Settings) -> list[str]:
    """The data file the profile reads (its sha256 is part of the stored result's
    key)."""
    return [settings.file]


def load_data(
    settings: Settings, *, path=None, progress: bool = False
) -> jena_data.JenaData:
    """The training windows of a profile (see :func:`rcutil.jena_data.load`)."""
    return jena_data.load(
        settings.file,
        sampling=settings.sampling,
        train_fraction=settings.train_fraction,
        n=settings.n,
        n_windows=settings.n_windows,
        path=path,
        progress=progress,
    )


def make_model(
    settings: Settings,
    *,
    beta: float,
    seed: int,
    d: int = len(jena_data.FEATURES),
    device="cpu",
) -> Transformer:
    """One model of the sweep: the book's Transformer, d_out = 1, float64."""
    return Transformer(
        d,
        settings.d_qk,
        settings.d_F,
        1,
        tau=settings.tau,
        beta=beta,
        activation=settings.activation,
        seed=seed,
        dtype=torch.float64,
        device=device,
    )


def models(
    settings: Settings, *, d: int = len(jena_data.FEATURES), device="cpu"
) -> Stack:
    """Every (beta, seed) model as one stack, beta-major (model ``b S + s`` is
    ``(betas[b], seeds[s])``). Models of one seed start from the same weights."""
    return stack(
        make_model(settings, beta=b, seed=s, d=d, device=device)
        for b in settings.betas
        for s in settings.seeds
    )


def sharpness(
    s: Stack, X: torch.Tensor, Y: torch.Tensor, *, iterations: int = 20, seed: int = 0
) -> np.ndarray:
    """``lambda_max(nabla^2 Phi(theta))`` of every model of the stack (eq. ``jena-mu``):
    :func:`rcutil.hessian.lanczos` on the exact Hessian-vector products of
    :meth:`rcutil.train.Stack.loss` (:func:`rcutil.hessian.batched_hvp`)."""
    s = s.trainable()
    loss, _ = s.loss(X, Y)
    start = hessian.random_unit(
        (len(s.beta), sum(v[0].numel() for v in s.W.values())), seed, like=loss
    )
    top, _ = hessian.lanczos(
        hessian.batched_hvp(loss.sum(), list(s.W.values())),
        start,
        iterations=iterations,
    )
    return top.detach().cpu().numpy()


# ---------------------------------------------------------------------- the ratio
def ratio(sigma_min: np.ndarray, norm: np.ndarray) -> np.ndarray:
    """``min_t sigma_min(Z_t)^2 / max_t ||Z_t||`` along the last axis (eq.
    ``jena-ratio``)."""
    return np.min(np.asarray(sigma_min) ** 2, axis=-1) / np.max(
        np.asarray(norm), axis=-1
    )


def attention_factors(
    Z: torch.Tensor, W: dict, X: torch.Tensor, tau: float
) -> dict[str, torch.Tensor]:
    """The fields of :class:`Factors` for every model of a stack at one iterate (``W``:
    its weights, by name), at the sample where ``sigma_k(Z_p)`` is smallest (``Z``: (B,
    N n, d), ``X``: (N, n, d)); ``sigma_k(Z_p)`` lies between ``sigma_k(P_p X_p)
    sigma_min(W_V)`` and ``sigma_k(P_p X_p) ||W_V||`` at beta = 0."""
    B, (N, n, d) = Z.shape[0], X.shape
    W_Q, W_K, W_V = (W[f"blocks.0.{k}"][:B] for k in ("W_Q", "W_K", "W_V"))
    P = attention_weights(X, W_Q[:, None], W_K[:, None], tau)
    sP = torch.linalg.svdvals(P)  # (B, N, n)
    sZ = torch.linalg.svdvals(Z.reshape(B, N, n, d))[..., -1]  # (B, N): sigma_k
    sPX = torch.linalg.svdvals(P @ X)[..., -1]
    sX = torch.linalg.svdvals(X)  # (N, k)
    sV = torch.linalg.svdvals(W_V)
    p = sZ.argmin(1)
    at = (torch.arange(B), p)
    k = min(n, d)
    return {
        "sigma_Z": sZ[at],
        "sigma_PX": sPX[at],
        "sigma_P": sP[..., k - 1][at],
        "norm_P": sP[..., 0][at],
        "rank_one": (sP[..., 1] / sP[..., 0])[at],
        "sigma_X": sX[p, -1],
        "norm_X": sX[p, 0],
        "sigma_W_V": sV[:, -1],
        "norm_W_V": sV[:, 0],
    }


# --------------------------------------------------------------------------- run
def run(
    settings: Settings, *, device: str = "cpu", progress: bool = True, path=None
) -> Result:
    """Load the profile's data; train every (beta, seed) model under both step rules at
    once, and by L-BFGS for its best-found loss; measure the readings, the factors of
    the attention output and the float32 floor factor. ``path`` reads the data file
    from there (tests use it)."""
    device = check_device(device)
    data = load_data(settings, path=path, progress=progress)
    X = torch.as_tensor(data.X, dtype=torch.float64, device=device)
    Y = torch.as_tensor(data.Y, dtype=torch.float64, device=device)
    betas, S, (n, d) = list(settings.betas), len(settings.seeds), X.shape[1:]
    B = len(betas) * S
    with torch_threads(settings.threads if device.type == "cpu" else None):
        start = models(settings, d=d, device=device)
        lam = sharpness(start, X, Y, iterations=settings.lanczos_steps)
        mu = settings.mu_factor * np.concatenate([np.full(B, 1 / lam.max()), 1 / lam])
        both = start._replace(
            W={k: torch.cat([v, v]) for k, v in start.W.items()},
            beta=torch.cat([start.beta, start.beta]),
        ).trainable()
        gd = descend(
            lambda: both.loss(X, Y),
            both.W,
            mu=mu,
            steps=settings.steps,
            observe=lambda out, W: {
                **rounding.reading_spectra(out.Z[0][:B].reshape(B, -1, d), n),
                **attention_factors(out.Z[0][:B].reshape(B, -1, d), W, X, start.tau),
            },
            observe_every=settings.spectra_every,
            progress=progress,
            desc="GD, both step rules",
            setting="mu_factor",
        )
        best = batched_lbfgs(
            start,
            X,
            Y,
            iterations=settings.floor_iterations,
            progress=progress,
            desc="L-BFGS, the best-found loss",
        )
        factors = rounding.floor_factors(
            start.forward(X).Z[0].reshape(B, -1, d),
            n,
            settings.deficiencies,
            settings.draws,
        )
    lowest = np.minimum(gd.loss[:B].min(1), gd.loss[B:].min(1))
    floor = np.minimum(best.loss.min(1), lowest)
    runs, points = [], []
    for i, beta in enumerate(betas):
        sl = slice(i * S, (i + 1) * S)
        for r, rule in enumerate(RULES):
            m = slice(r * B + i * S, r * B + (i + 1) * S)
            runs.append(
                Run(
                    beta,
                    rule,
                    mu[m].tolist(),
                    gd.loss[m],
                    gd.sigma_min[m],
                    gd.sigma_max[m],
                )
            )
        readings = []
        for precision, layout, norm in itertools.product(
            rounding.PRECISIONS, rounding.LAYOUTS, rounding.NORMS
        ):
            seen = {
                k: gd.observed[f"{precision}/{layout}/{k}"][sl]
                for k in ("sigma_min", "spectral", norm)
            }
            smin = seen["sigma_min"].min(1)
            readings.append(
                Reading(
                    precision,
                    layout,
                    norm,
                    ratio(seen["sigma_min"], seen[norm]).tolist(),
                    smin.tolist(),
                    seen[norm].max(1).tolist(),
                    (
                        smin / (rounding.eps(precision) * seen["spectral"].max(1))
                    ).tolist(),
                )
            )
        points.append(
            Point(
                beta,
                lam[sl].tolist(),
                best.loss[sl],
                floor[sl].tolist(),
                ratio(gd.sigma_min[sl], gd.sigma_max[sl]).tolist(),
                readings,
                Factors(
                    **{k: gd.observed[k][sl] for k in Factors.__dataclass_fields__}
                ),
            )
        )
    sx = torch.linalg.svdvals(X.reshape(-1, d))
    return Result(
        settings=settings,
        data=Data.of(data.info),
        norm_X=float(sx[0]),
        sigma_min_X=float(sx[-1]),
        grid=gd.observed_at,
        points=points,
        runs=runs,
        floor_factors=factors,
    )
