"""Experiment 2 of the paper: SST-2 with GPT-2 at L = 2, 6, 10, with and without
residual connections (chapter :ref:`sst2`, ``python -m rcutil sst2``).

Every arm (init, L, residual) gets the same recipe: AdamW, warm-up then cosine decay,
batches of sentences of similar length, gradient clipping; only the depth, the residual
switch and the peak rate differ. An arm's rate is chosen by full-length runs of a
seed that is never reported (:func:`select_rate`), then the arm trains from every seed.
On a fixed subset of the training sentences the run records the cross-entropy, the error
and the ranks of the last block's attention-layer output ``z``; at the end, the dev
accuracy. A control trains the deepest model without residuals with unscaled output
projections.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace

import numpy as np
import torch

from ... import profiles, results
from ... import sst2_train as recipe
from ...gpt2 import GPT2_SMALL
from ...progress import steps as loop
from ...sst2_data import SPLITS, TOKENIZER_FILES
from ...threads import torch_threads
from ...validate import device as check_device


@dataclass(frozen=True)
class Rates:
    """The peak rates an arm's grid tries, with (``w``) and without (``wo``)
    residuals."""

    w: tuple[float, ...]
    wo: tuple[float, ...]


@dataclass(frozen=True, kw_only=True)
class Settings(profiles.Settings):
    """The recipe (the same for every arm), the model's sizes, and the data and seeds of
    a profile."""

    layers: tuple[int, ...]  #: depths L of the arms
    residual: tuple[bool, ...]  #: with and without residuals
    max_len: int  #: tokens of a sentence read at most
    warmup: float  #: share of the steps of linear warm-up (eq. ``sst2-schedule``)
    min_lr_ratio: float  #: the rate at the end of the cosine decay, over the peak
    weight_decay: float  #: AdamW's, on the matrices (eq. ``sst2-adamw``)
    betas: tuple[float, float]  #: AdamW's
    grad_clip: float  #: largest gradient norm
    data_seed: int  #: draws the training and dev subsets
    selection_seed: int  #: whose full-length runs choose the rate; never reported
    inits: tuple[str, ...]  #: where the weights start (:data:`rcutil.sst2_train.INITS`)
    d_model: int
    n_head: int
    d_ff: int
    n_train: int | None  #: training sentences (``None``: all 67,349)
    n_train_eval: int  #: those on which error, loss and ranks are measured
    n_dev: int | None  #: dev sentences (``None``: all 872)
    batch_size: int
    steps: int  #: AdamW steps of every run
    eval_every: int  #: steps between two measurements
    lr_grid: dict[str, Rates]  #: per init, the rates tried
    seeds: tuple[int, ...]  #: the reported seeds
    control_seeds: int  #: how many of them the control runs
    precision: str  #: ``float32`` or ``bf16`` (:data:`rcutil.sst2_train.PRECISIONS`)
    threads: int | None  #: torch CPU threads (``None``: as is)


CI = Settings(
    layers=(2, 6, 10), residual=(True, False), inits=("scratch",),
    d_model=32, n_head=2, d_ff=128,
    max_len=64, data_seed=0, n_train=256, n_train_eval=128, n_dev=128,
    steps=40, batch_size=16, warmup=0.1, min_lr_ratio=0.1, weight_decay=0.01,
    betas=(0.9, 0.999), grad_clip=1.0, precision="float32", threads=1,
    lr_grid={"scratch": Rates(w=(1e-3, 3e-3), wo=(1e-3, 3e-3))}, selection_seed=100,
    eval_every=20, seeds=(0, 1), control_seeds=1,
)  # fmt: skip
BOOK = replace(
    CI, d_model=64, d_ff=256, n_train=4096, n_train_eval=512, n_dev=None,
    steps=300, batch_size=32, eval_every=50, seeds=(0, 1, 2, 3, 4), control_seeds=3,
    lr_grid={"scratch": Rates(w=(3e-4, 1e-3, 3e-3), wo=(3e-4, 1e-3, 3e-3))},
)  # fmt: skip
# GPT-2 small on every sentence, about two epochs: fine-tuned and from scratch
PAPER = replace(
    BOOK, inits=("pretrained", "scratch"), d_model=768, n_head=12, d_ff=3072,
    n_train=None, n_train_eval=4096, steps=4200, eval_every=300, seeds=(0, 1, 2),
    precision="bf16", threads=None,
    lr_grid={
        "pretrained": Rates(w=(1e-5, 3e-5, 1e-4), wo=(1e-5, 1e-4, 1e-3)),
        "scratch": Rates(w=(1e-4, 3e-4, 1e-3), wo=(1e-4, 3e-4, 1e-3)),
    },
)  # fmt: skip
SETTINGS = {"ci": CI, "book": BOOK, "paper": PAPER}


def check_settings(settings: Settings) -> None:
    """Refuse settings the run cannot honour, naming the value and the fix."""
    s = settings
    for init in s.inits:
        grid = s.lr_grid.get(init)
        if init not in recipe.INITS or grid is None or not (grid.w and grid.wo):
            raise ValueError(
                f"inits: {init!r} must be one of {recipe.INITS}, with "
                f"lr_grid[{init!r}] = Rates(w=..., wo=...), both non-empty"
            )
    if "scratch" not in s.inits:
        raise ValueError("inits must include 'scratch': the control starts from it")
    if s.selection_seed in s.seeds:
        raise ValueError(
            f"selection_seed {s.selection_seed} is a reported seed {s.seeds}: "
            f"choose another selection_seed"
        )
    if not 1 <= s.control_seeds <= len(s.seeds):
        raise ValueError(
            f"control_seeds must lie in [1, {len(s.seeds)}], got {s.control_seeds}"
        )


def data_files(settings: Settings) -> list[str]:
    """The data files the run reads (their sha256 keys the stored result)."""
    files = [SPLITS["train"], SPLITS["dev"], *TOKENIZER_FILES]
    return files + [GPT2_SMALL.relpath] if "pretrained" in settings.inits else files


#: What a run records at every evaluation step, per seed.
CURVES = ("train_error", "train_loss", "batch_loss", "stable_rank", "effective_rank")


@dataclass
class Curve:
    """One training run: the measurements on the training subset per evaluation step."""

    steps: list[int]
    train_loss: list[float]
    train_error: list[float]
    stable_rank: list[float]
    effective_rank: list[float]
    batch_loss: list[float]
    dev_accuracy: float = math.nan
    seconds: float = 0.0
    parameters: int = 0


def train_one(
    settings: Settings,
    data: dict,
    init: str,
    layers: int,
    residual: bool,
    seed: int,
    lr: float,
    *,
    device="cpu",
    progress=False,
    weights=None,
    record: bool = True,
    scaled_projections: bool = True,
) -> Curve:
    """Train one model at peak rate ``lr``. With ``record``, evaluate at step 0 and
    every ``eval_every`` steps (ranks included) and the dev accuracy at the end; without
    it, only the final training loss and error. The host reads the loss only at an
    evaluation; a non-finite one raises ``FloatingPointError`` naming the steps."""
    torch.manual_seed(seed)
    model = recipe.make_model(
        settings,
        init,
        layers,
        residual,
        seed,
        data["vocabulary"],
        device,
        weights=weights,
        scaled_projections=scaled_projections,
    )
    opt, sched = recipe.make_optimizer(model, settings, lr)
    amp = recipe.autocast_dtype(settings, device)
    batches = recipe.Batches(data["train"], settings.batch_size, seed, device)
    curve = Curve([], [], [], [], [], [], parameters=model.num_parameters())

    def measure(step, batch_loss):
        tr = recipe.evaluate(
            model, *data["train_eval"], device=device, rank=record, amp=amp
        )
        curve.steps.append(step)
        curve.train_loss.append(tr["loss"])
        curve.train_error.append(tr["error"])
        curve.batch_loss.append(tr["loss"] if batch_loss is None else batch_loss)
        if record:
            curve.stable_rank.append(tr["stable_rank"])
            curve.effective_rank.append(tr["effective_rank"])

    start, total, done = time.perf_counter(), settings.steps, 0
    every = settings.eval_every if record else total
    if record:
        measure(0, None)
    tag = f"L={layers} {'w' if residual else 'wo'}"
    for end in loop(
        [*range(every, total, every), total],
        desc=f"{tag}: evaluations",
        unit="evaluation",
        progress=progress,
    ):
        running = torch.zeros((), device=device)
        for _ in loop(
            range(done, end), desc=tag, unit="optimizer step", progress=progress
        ):
            running += recipe.train_step(
                model,
                opt,
                sched,
                *batches.next(),
                grad_clip=settings.grad_clip,
                amp=amp,
            )
        batch_loss = float(running) / (end - done)  # the one wait for the device
        if not math.isfinite(batch_loss):
            raise FloatingPointError(
                f"the loss became {batch_loss} between steps {done} and {end} ({init}, "
                f"{tag}, lr={lr:g}, seed={seed}); lower the profile's lr_grid"
            )
        measure(end, batch_loss)
        done = end
    if record:
        dev = recipe.evaluate(model, *data["dev"], device=device, amp=amp)
        curve.dev_accuracy = 1 - dev["error"]
    curve.seconds = time.perf_counter() - start
    return curve


@dataclass
class Selection:
    """The full-length runs of the selection seed at every rate of an arm's grid: final
    training loss and error per rate (a run that diverged: loss inf, error nan)."""

    init: str
    layers: int
    residual: bool
    lr_grid: list[float]
    train_loss: list[float]
    train_error: list[float]
    lr: float  #: the rate chosen, eq. ``sst2-select``


def select_rate(
    settings: Settings, data: dict, init: str, layers: int, residual: bool, **kw
) -> Selection:
    """Eq. ``sst2-select``: the full recipe from ``selection_seed`` at every rate of
    the arm's grid; the lowest final training loss wins (the first of a tie)."""
    rates = settings.lr_grid[init]
    grid = rates.w if residual else rates.wo
    losses, errors = [], []
    for lr in loop(
        grid,
        desc=f"L={layers} {'w' if residual else 'wo'}: rate grid",
        unit="rate",
        progress=kw.get("progress", False),
    ):
        try:
            c = train_one(
                settings,
                data,
                init,
                layers,
                residual,
                settings.selection_seed,
                lr,
                record=False,
                **kw,
            )
            loss, error = c.train_loss[-1], c.train_error[-1]
        except FloatingPointError:
            loss, error = math.inf, math.nan
        losses.append(loss if math.isfinite(loss) else math.inf)
        errors.append(error)
    return Selection(
        init, layers, residual, list(grid), losses, errors, grid[int(np.argmin(losses))]
    )


@dataclass
class Run:
    """One arm trained from every seed at its chosen rate ``lr``: arrays of seeds (rows)
    by evaluation steps (columns); dev accuracy and seconds per seed."""

    init: str
    layers: int
    residual: bool
    lr: float
    steps: list[int]
    train_error: np.ndarray
    train_loss: np.ndarray
    batch_loss: np.ndarray
    stable_rank: np.ndarray
    effective_rank: np.ndarray
    dev_accuracy: list[float]
    seconds: list[float]
    parameters: int

    @property
    def final_error(self) -> np.ndarray:
        return self.train_error[:, -1]

    @property
    def final_loss(self) -> np.ndarray:
        return self.train_loss[:, -1]


@dataclass
class Control:
    """The deepest model without residuals from scratch, its output projections not
    scaled by ``1/sqrt(2L)``, at that arm's rate, per seed of the first
    ``control_seeds``."""

    layers: int
    lr: float
    final_error: list[float]
    final_loss: list[float]


@dataclass
class Result(results.Result):
    settings: Settings
    runs: list[Run]
    selections: list[Selection]
    control: Control
    majority_error: float  #: of always answering the majority label (training subset)
    n_train_rows: int
    n_train_used: int
    n_dev_used: int
    vocabulary_size: int
    precision: str


def run(settings: Settings, *, device: str = "cpu", progress: bool = True) -> Result:
    """Choose every arm's rate (:func:`select_rate`), train the arm from every seed,
    then run the control."""
    check_settings(settings)
    device = str(check_device(device))
    with torch_threads(settings.threads):
        data = recipe.prepare_data(settings)
        pretrained = "pretrained" in settings.inits
        weights = recipe.pretrained_weights(settings) if pretrained else None
        kw = dict(device=device, weights=weights, progress=progress)
        runs, selections = [], []
        for init in settings.inits:
            for layers in settings.layers:
                for residual in settings.residual:
                    sel = select_rate(settings, data, init, layers, residual, **kw)
                    tag = f"L={layers} {'w' if residual else 'wo'}"
                    seeds = loop(
                        settings.seeds,
                        desc=f"{tag}: seeds",
                        unit="seed",
                        progress=progress,
                    )
                    curves = [
                        train_one(
                            settings, data, init, layers, residual, s, sel.lr, **kw
                        )
                        for s in seeds
                    ]
                    arrays = (np.array([getattr(c, k) for c in curves]) for k in CURVES)
                    selections.append(sel)
                    runs.append(
                        Run(
                            init,
                            layers,
                            residual,
                            sel.lr,
                            curves[0].steps,
                            *arrays,
                            [c.dev_accuracy for c in curves],
                            [c.seconds for c in curves],
                            curves[0].parameters,
                        )
                    )
        deep = max(settings.layers)
        lr = results.pick(selections, init="scratch", layers=deep, residual=False).lr
        control = [
            train_one(
                settings,
                data,
                "scratch",
                deep,
                False,
                s,
                lr,
                record=False,
                scaled_projections=False,
                **kw,
            )
            for s in loop(
                settings.seeds[: settings.control_seeds],
                desc="control: seeds",
                unit="seed",
                progress=progress,
            )
        ]
    positive = data["train_eval"][2].float().mean().item()
    amp = recipe.autocast_dtype(settings, device)
    return Result(
        settings=settings,
        runs=runs,
        selections=selections,
        control=Control(
            deep,
            lr,
            [c.train_error[-1] for c in control],
            [c.train_loss[-1] for c in control],
        ),
        majority_error=min(positive, 1 - positive),
        n_train_rows=data["n_train_rows"],
        n_train_used=len(data["train"][2]),
        n_dev_used=len(data["dev"][2]),
        vocabulary_size=len(data["vocabulary"]),
        precision="bf16" if amp else "float32",
    )


def estimate_settings(settings: Settings) -> Settings:
    """What ``--estimate`` probes: GPT-2's initialisation in place of the pretrained
    weights (the same shapes and cost, and no 548 MB download)."""
    return replace(settings, inits=("scratch",) * len(settings.inits))
