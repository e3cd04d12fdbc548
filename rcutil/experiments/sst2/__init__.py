"""Experiment 2 of the paper: SST-2 with GPT-2 at L = 2, 6, 10, with and without
residual connections (chapter :ref:`sst2`, ``python -m rcutil sst2``).

Every arm (init, L, residual) gets the same recipe: AdamW, warm-up then cosine decay,
batches of sentences of similar length, gradient clipping; only the depth, the residual
switch and the peak rate differ. An arm's rate is chosen by full-length runs of a seed
that is never reported, on a grid that grows until the chosen rate has a worse
neighbour on each side (:func:`select_rates`); then the arm trains from every seed. The
arms with residuals train again at a second, longer budget (``long_steps``), each at a
rate chosen the same way at that length, or (``long_lr_grid=None``) at the rate chosen
for it at the first budget. On a fixed subset of the training sentences the
run records the cross-entropy, the error and the ranks of the last block's
attention-layer output ``z``; at the end, the dev accuracy. A control trains the
deepest model without residuals with unscaled output projections.

The runs of one architecture, budget and stage train as one ensemble
(:func:`rcutil.sst2_train.train`), and the ensembles run side by side on ``workers``
processes (:func:`rcutil.parallel.parallel_map`). The checks and the claims are in
:mod:`rcutil.experiments.sst2.verdicts`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np

from ... import profiles, results
from ... import sst2_train as recipe
from ...gpt2 import GPT2_SMALL
from ...parallel import parallel_map
from ...sst2_data import SPLITS, TOKENIZER_FILES
from ...sst2_train import CURVES, Member
from ...threads import torch_threads
from ...validate import device as check_device

#: The peak rates a grid may try, half a decade apart: a grid grows along this ladder.
RATE_LADDER = tuple(float(f"{m}e{e}") for e in range(-8, 0) for m in (1, 3))
#: Rates a grid may add beyond its start before the run gives up (the chosen rate then
#: stays at an edge, which the acceptance table refuses).
MAX_EXTENSIONS = 4


@dataclass(frozen=True)
class Rates:
    """The peak rates the grids of an init start from, one grid per depth (in the order
    of ``Settings.layers``), with (``w``) and without (``wo``) residuals. Each rate is
    on :data:`RATE_LADDER`."""

    w: tuple[tuple[float, ...], ...]
    wo: tuple[tuple[float, ...], ...] = ()

    @classmethod
    def every(cls, w=(), wo=(), *, depths: int = 3) -> Rates:
        """The same grids at every one of ``depths`` depths."""
        return cls((tuple(w),) * depths, (tuple(wo),) * depths)

    def start(self, residual: bool, depth: int) -> tuple[float, ...]:
        """The grid the arm at the ``depth``-th depth starts from."""
        return (self.w if residual else self.wo)[depth]


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
    steps: int  #: AdamW steps of every run at the book's budget
    eval_every: int  #: steps between two measurements
    lr_grid: dict[str, Rates]  #: per init, the grids the rates start from
    seeds: tuple[int, ...]  #: the reported seeds
    control_seeds: int  #: how many of them the control runs
    #: a longer budget (AdamW steps) at which the arms with residuals train again from
    #: scratch (``None``: none)
    long_steps: int | None
    long_seeds: int  #: how many of the reported seeds train at ``long_steps``
    long_eval_every: int  #: steps between two measurements at ``long_steps``
    #: the grids with residuals start from at ``long_steps`` (``None``: each arm keeps
    #: the rate chosen for it at ``steps``)
    long_lr_grid: Rates | None
    precision: str  #: ``float32`` or ``bf16`` (:data:`rcutil.sst2_train.PRECISIONS`)
    threads: int | None  #: torch CPU threads (``None``: as is)
    workers: int  #: processes that train side by side


CI = Settings(
    layers=(2, 6, 10), residual=(True, False), inits=("scratch",),
    d_model=32, n_head=2, d_ff=128,
    max_len=64, data_seed=0, n_train=256, n_train_eval=128, n_dev=128,
    steps=40, batch_size=16, warmup=0.1, min_lr_ratio=0.1, weight_decay=0.01,
    betas=(0.9, 0.999), grad_clip=1.0, precision="float32", threads=1,
    lr_grid={"scratch": Rates.every(w=(1e-3, 3e-3, 1e-2), wo=(3e-4, 1e-3, 3e-3))},
    selection_seed=100, eval_every=20, seeds=(0, 1), control_seeds=1,
    long_steps=120, long_seeds=2, long_eval_every=40,
    long_lr_grid=Rates.every(w=(1e-3, 3e-3, 1e-2)), workers=1,
)  # fmt: skip
# the start grids come from a pilot over the whole ladder (the rates each arm chose),
# so that the book's run rarely has to grow them; without residuals the rate that
# trains best falls with depth
BOOK = replace(
    CI, d_model=64, d_ff=256, n_train=4096, n_train_eval=512, n_dev=None,
    steps=300, batch_size=32, eval_every=100, seeds=(0, 1, 2, 3, 4), control_seeds=2,
    lr_grid={
        "scratch": Rates(
            w=((1e-3, 3e-3, 1e-2),) * 3,
            wo=((1e-4, 3e-4, 1e-3), (3e-6, 1e-5, 3e-5), (3e-6, 1e-5, 3e-5)),
        )
    },
    long_steps=900, long_seeds=3, long_eval_every=300, long_lr_grid=None,
    workers=2,
)  # fmt: skip
# GPT-2 small on every sentence, about two epochs: fine-tuned and from scratch
PAPER = replace(
    BOOK, inits=("pretrained", "scratch"), d_model=768, n_head=12, d_ff=3072,
    n_train=None, n_train_eval=4096, steps=4200, eval_every=300, seeds=(0, 1, 2),
    precision="bf16", threads=None, long_steps=None, workers=1,
    lr_grid={
        "pretrained": Rates.every(w=(1e-5, 3e-5, 1e-4), wo=(1e-5, 1e-4, 1e-3)),
        "scratch": Rates.every(w=(1e-4, 3e-4, 1e-3), wo=(1e-4, 3e-4, 1e-3)),
    },
)  # fmt: skip
SETTINGS = {"ci": CI, "book": BOOK, "paper": PAPER}


def on_ladder(rate: float) -> bool:
    return any(math.isclose(rate, x, rel_tol=1e-9) for x in RATE_LADDER)


def check_settings(settings: Settings) -> None:
    """Refuse settings the run cannot honour, naming the value and the fix."""
    s = settings
    for init in s.inits:
        grid = s.lr_grid.get(init)
        if init not in recipe.INITS or grid is None:
            raise ValueError(
                f"inits: {init!r} must be one of {recipe.INITS}, with "
                f"lr_grid[{init!r}] = Rates(w=..., wo=...)"
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
    if len(s.seeds) < 2:
        raise ValueError(
            f"seeds {s.seeds}: the claims compare seeds, so give at least two"
        )
    if s.long_steps is not None and not 2 <= s.long_seeds <= len(s.seeds):
        raise ValueError(
            f"long_seeds must lie in [2, {len(s.seeds)}], got {s.long_seeds}"
        )
    grids = [(f"lr_grid[{i!r}]", g, ("w", "wo")) for i, g in s.lr_grid.items()]
    if s.long_steps is not None and s.long_lr_grid is not None:
        grids.append(("long_lr_grid", s.long_lr_grid, ("w",)))
    for name, rates, arms in grids:
        for arm in arms:
            per_depth = getattr(rates, arm)
            if len(per_depth) != len(s.layers) or not all(per_depth):
                raise ValueError(
                    f"{name}.{arm} needs one non-empty grid per depth {s.layers}, got "
                    f"{per_depth!r}"
                )
            off = sorted({r for g in per_depth for r in g if not on_ladder(r)})
            if off:
                raise ValueError(
                    f"{name}.{arm}: the rates {off} are not on RATE_LADDER (1 or 3 "
                    f"times a power of ten): a grid grows along it"
                )


def data_files(settings: Settings) -> list[str]:
    """The data files the run reads (their sha256 keys the stored result)."""
    files = [SPLITS["train"], SPLITS["dev"], *TOKENIZER_FILES]
    return files + [GPT2_SMALL.relpath] if "pretrained" in settings.inits else files


@dataclass(frozen=True)
class Job:
    """Models of one architecture and budget trained as one ensemble: the rates of an
    arm's grid (``record=False``) or its reported seeds."""

    settings: Settings
    init: str
    layers: int
    residual: bool
    steps: int  #: the budget, AdamW steps
    members: tuple[Member, ...]
    record: bool = True
    device: str = "cpu"

    @property
    def cost(self) -> float:
        """Proportional to its time: steps times models times blocks."""
        return self.steps * len(self.members) * self.layers

    @property
    def shape(self) -> tuple:
        """What its cost depends on: jobs of one shape cost alike (``--estimate`` runs
        one of each)."""
        return (self.layers, self.steps, len(self.members), self.record)


_DATA: dict = {}


def prepared(settings: Settings) -> dict:
    """The data of a run (:func:`rcutil.sst2_train.prepare_data`), and GPT-2 small's
    weights when an arm starts from them, prepared once per process."""
    key = (settings.data_seed, settings.n_train, settings.n_train_eval, settings.n_dev)
    key += (settings.max_len, "pretrained" in settings.inits)
    if key not in _DATA:
        data = recipe.prepare_data(settings)
        if "pretrained" in settings.inits:
            data["weights"] = recipe.pretrained_weights(settings)
        _DATA.clear()
        _DATA[key] = data
    return _DATA[key]


def train_job(job: Job) -> list[dict]:
    """Train a :class:`Job` (:func:`rcutil.sst2_train.train`) at its budget on its
    device: one curve per member."""
    s = job.settings
    every = s.eval_every if job.steps == s.steps else s.long_eval_every
    settings = replace(s, steps=job.steps, eval_every=every)
    data = prepared(s)
    with torch_threads(s.threads):
        return recipe.train(
            settings,
            data,
            job.init,
            job.layers,
            job.residual,
            list(job.members),
            record=job.record,
            device=job.device,
            weights=data.get("weights"),
        )


@dataclass
class Selection:
    """Eq. ``sst2-select`` for one arm at one budget: the full-length runs of the
    selection seed at every rate the grid tried (in increasing order), their final
    training loss and error (a run that diverged: loss inf, error nan), and the rate
    chosen. ``start`` is the grid it started from; rates beyond it were added where the
    best rate lay at an edge."""

    init: str
    layers: int
    residual: bool
    budget: int
    start: list[float]
    lr_grid: list[float]
    train_loss: list[float]
    train_error: list[float]
    lr: float

    @property
    def at_edge(self) -> bool:
        """Whether the chosen rate lacks a worse neighbour on one side."""
        i = self.lr_grid.index(self.lr)
        return i in (0, len(self.lr_grid) - 1)


def next_rate(rates: list[float], up: bool) -> float | None:
    """The rate of :data:`RATE_LADDER` just beyond the largest (``up``) or smallest of
    ``rates``; ``None`` past the ladder's end."""
    edge = max(rates) if up else min(rates)
    (i,) = [j for j, x in enumerate(RATE_LADDER) if math.isclose(x, edge, rel_tol=1e-9)]
    j = i + (1 if up else -1)
    return RATE_LADDER[j] if 0 <= j < len(RATE_LADDER) else None


def train_jobs(
    settings: Settings, jobs: list[Job], progress: bool, desc: str, unit: str
) -> list[list[dict]]:
    """:func:`train_job` of every job, on ``settings.workers`` processes side by side
    (:func:`rcutil.parallel.parallel_map`; ``--estimate`` probes one job per shape)."""
    return parallel_map(
        train_job,
        jobs,
        workers=settings.workers,
        cost=lambda j: j.cost,
        shape=lambda j: j.shape,
        progress=progress,
        desc=desc,
        unit=unit,
    )


def chosen(tried: dict[float, tuple[float, float]]) -> float:
    """The rate with the lowest final training loss (the smaller of a tie)."""
    return min(sorted(tried), key=lambda lr: tried[lr][0])


def select_rates(
    settings: Settings,
    arms: list[tuple[str, int, bool, int]],
    *,
    device: str = "cpu",
    progress: bool = False,
) -> list[Selection]:
    """Eq. ``sst2-select`` for every arm ``(init, layers, residual, budget)``: the full
    recipe from ``selection_seed`` at every rate of the arm's start grid, all rates of
    an arm as one ensemble; while the lowest final training loss lies at an edge of the
    rates tried, the next rate of :data:`RATE_LADDER` beyond it is tried too (at most
    :data:`MAX_EXTENSIONS`)."""
    s = settings
    tried: dict[tuple, dict[float, tuple[float, float]]] = {arm: {} for arm in arms}
    starts = {}
    for init, layers, residual, budget in arms:
        grid = s.lr_grid[init] if budget == s.steps else s.long_lr_grid
        depth = s.layers.index(layers)
        starts[(init, layers, residual, budget)] = grid.start(residual, depth)
    pending = dict(starts)
    for _ in range(MAX_EXTENSIONS + 1):
        if not pending:
            break
        jobs = [
            Job(
                s,
                *arm[:3],
                arm[3],
                tuple(Member(s.selection_seed, lr) for lr in rates),
                record=False,
                device=device,
            )
            for arm, rates in pending.items()
        ]
        curves = train_jobs(s, jobs, progress, "rate grids", "grid")
        for arm, rates, runs in zip(pending, pending.values(), curves):
            for lr, c in zip(rates, runs):
                loss = c["train_loss"][-1]
                tried[arm][lr] = (
                    loss if math.isfinite(loss) else math.inf,
                    c["train_error"][-1],
                )
        pending = {}
        for arm, t in tried.items():
            best, rates = chosen(t), sorted(t)
            if best in (rates[0], rates[-1]):
                extra = next_rate(rates, up=best == rates[-1])
                if extra is not None and len(t) < len(starts[arm]) + MAX_EXTENSIONS:
                    pending[arm] = (extra,)
    out = []
    for arm, t in tried.items():
        rates = sorted(t)
        out.append(
            Selection(
                *arm,
                list(starts[arm]),
                rates,
                [t[lr][0] for lr in rates],
                [t[lr][1] for lr in rates],
                chosen(t),
            )
        )
    return out


@dataclass
class Run:
    """One arm trained from every seed at its chosen rate ``lr`` for ``budget`` AdamW
    steps: arrays of seeds (rows) by evaluation steps (columns); dev accuracy and
    seconds per seed."""

    init: str
    layers: int
    residual: bool
    budget: int
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
    budgets: list[int] = field(default_factory=list)  #: the book's first


def arms_of(settings: Settings) -> list[tuple[str, int, bool, int]]:
    """Every arm ``(init, layers, residual, budget)`` of a run: all at ``steps``, and
    those from scratch with residuals again at ``long_steps``."""
    s = settings
    arms = [(i, L, r, s.steps) for i in s.inits for L in s.layers for r in s.residual]
    if s.long_steps is not None:
        arms += [("scratch", L, True, s.long_steps) for L in s.layers]
    return arms


def run(settings: Settings, *, device: str = "cpu", progress: bool = True) -> Result:
    """Choose every arm's rate (:func:`select_rates`), then train every arm from its
    seeds at that rate, and the control beside the deepest arm without residuals; the
    ensembles run side by side on ``workers`` processes."""
    check_settings(settings)
    device = str(check_device(device))
    s = settings
    if device != "cpu" and s.workers > 1:
        raise ValueError(
            f"workers={s.workers} trains side by side on the CPU; on {device} set "
            f"workers=1"
        )
    arms = arms_of(s)
    tuned = [a for a in arms if a[3] == s.steps or s.long_lr_grid is not None]
    selections = select_rates(s, tuned, device=device, progress=progress)
    lr = {(x.init, x.layers, x.residual, x.budget): x.lr for x in selections}
    for init, layers, residual, budget in arms:  # long_lr_grid=None: the first rate
        lr.setdefault(
            (init, layers, residual, budget), lr[(init, layers, residual, s.steps)]
        )
    deep = max(s.layers)
    jobs = []
    for arm in arms:
        init, layers, residual, budget = arm
        seeds = s.seeds if budget == s.steps else s.seeds[: s.long_seeds]
        members = [Member(k, lr[arm]) for k in seeds]
        if arm == ("scratch", deep, False, s.steps):  # the control shares its batches
            control = s.seeds[: s.control_seeds]
            members += [Member(k, lr[arm], scaled_projections=False) for k in control]
        jobs.append(
            Job(s, init, layers, residual, budget, tuple(members), device=device)
        )
    curves = train_jobs(s, jobs, progress, "seeds of every arm", "arm")
    runs, control = [], None
    for job, arm_curves in zip(jobs, curves):
        n = len(s.seeds) if job.steps == s.steps else s.long_seeds
        reported, extra = arm_curves[:n], arm_curves[n:]
        if extra:
            control = Control(
                job.layers,
                job.members[0].lr,
                [c["train_error"][-1] for c in extra],
                [c["train_loss"][-1] for c in extra],
            )
        arrays = (np.array([c[k] for c in reported]) for k in CURVES)
        runs.append(
            Run(
                job.init,
                job.layers,
                job.residual,
                job.steps,
                job.members[0].lr,
                reported[0]["steps"],
                *arrays,
                [c["dev_accuracy"] for c in reported],
                [c["seconds"] for c in reported],
                reported[0]["parameters"],
            )
        )
    data = prepared(s)
    positive = data["train_eval"][2].float().mean().item()
    amp = recipe.autocast_dtype(s, device)
    return Result(
        settings=s,
        runs=runs,
        selections=selections,
        control=control,
        majority_error=min(positive, 1 - positive),
        n_train_rows=data["n_train_rows"],
        n_train_used=len(data["train"][2]),
        n_dev_used=len(data["dev"][2]),
        vocabulary_size=len(data["vocabulary"]),
        precision="bf16" if amp else "float32",
        budgets=[s.steps] + ([s.long_steps] if s.long_steps is not None else []),
    )


def estimate_settings(settings: Settings) -> Settings:
    """What ``--estimate`` probes: GPT-2's initialisation in place of the pretrained
    weights (the same shapes and cost, and no 548 MB download)."""
    return replace(settings, inits=("scratch",) * len(settings.inits))
