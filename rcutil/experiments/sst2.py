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
from dataclasses import dataclass

import numpy as np
import torch

from .. import claims as rules
from .. import results
from .. import sst2_train as recipe
from ..checks import Check
from ..gpt2 import GPT2_SMALL
from ..progress import same
from ..progress import steps as loop
from ..sst2_data import SPLITS, TOKENIZER_FILES
from ..threads import torch_threads
from ..validate import device as check_device

_RECIPE = dict(
    layers=[2, 6, 10],
    residual=[True, False],
    max_len=64,
    warmup=0.1,
    min_lr_ratio=0.1,
    weight_decay=0.01,
    betas=[0.9, 0.999],
    grad_clip=1.0,
    data_seed=0,
    selection_seed=100,
)
#: ``inits``: where the weights start (:data:`INITS`); ``lr_grid[init]["w"]`` and
#: ``["wo"]``: peak rates tried with and without residuals; ``selection_seed``: the
#: seed whose full-length runs choose the rate, never reported; ``n_train``: training
#: sentences (``None``: all 67,349); ``n_train_eval``: those on which error, loss and
#: ranks are measured; ``n_dev``: dev sentences (``None``: all 872); ``control_seeds``:
#: how many seeds the control runs; ``threads``: torch CPU threads (``None``: as is).
SETTINGS = {
    "ci": dict(
        _RECIPE,
        inits=["scratch"],
        d_model=32,
        n_head=2,
        d_ff=128,
        n_train=256,
        n_train_eval=128,
        n_dev=128,
        batch_size=16,
        steps=40,
        eval_every=20,
        lr_grid={"scratch": {"w": [1e-3, 3e-3], "wo": [1e-3, 3e-3]}},
        seeds=[0, 1],
        control_seeds=1,
        precision="float32",
        threads=1,
    ),
    "book": dict(
        _RECIPE,
        inits=["scratch"],
        d_model=64,
        n_head=2,
        d_ff=256,
        n_train=4096,
        n_train_eval=512,
        n_dev=None,
        batch_size=32,
        steps=300,
        eval_every=50,
        lr_grid={"scratch": {"w": [3e-4, 1e-3, 3e-3], "wo": [3e-4, 1e-3, 3e-3]}},
        seeds=[0, 1, 2, 3, 4],
        control_seeds=3,
        precision="float32",
        threads=1,
    ),
    # GPT-2 small on every sentence, about two epochs: fine-tuned and from scratch
    "paper": dict(
        _RECIPE,
        inits=["pretrained", "scratch"],
        d_model=768,
        n_head=12,
        d_ff=3072,
        n_train=None,
        n_train_eval=4096,
        n_dev=None,
        batch_size=32,
        steps=4200,
        eval_every=300,
        lr_grid={
            "pretrained": {"w": [1e-5, 3e-5, 1e-4], "wo": [1e-5, 1e-4, 1e-3]},
            "scratch": {"w": [1e-4, 3e-4, 1e-3], "wo": [1e-4, 3e-4, 1e-3]},
        },
        seeds=[0, 1, 2],
        control_seeds=3,
        precision="bf16",
        threads=None,
    ),
}
#: "Barely trains": a training error within this much of the majority-label error.
BARELY_MARGIN = 0.05
#: A mean training error at most this is a fit of (nearly) every sentence: a floor.
FLOOR_ERROR = 0.02


def check_settings(settings: dict) -> None:
    """Refuse settings the run cannot honour, naming the value and the fix."""
    for init in settings["inits"]:
        grids = settings["lr_grid"].get(init, {})
        if init not in recipe.INITS or not (grids.get("w") and grids.get("wo")):
            raise ValueError(
                f"inits: {init!r} must be one of {recipe.INITS}, with "
                f"non-empty lr_grid[{init!r}]['w'] and ['wo'] rate lists"
            )
    if "scratch" not in settings["inits"]:
        raise ValueError("inits must include 'scratch': the control starts from it")
    if settings["selection_seed"] in settings["seeds"]:
        raise ValueError(
            f"selection_seed {settings['selection_seed']} is a reported "
            f"seed {settings['seeds']}: choose another selection_seed"
        )
    if not 1 <= settings["control_seeds"] <= len(settings["seeds"]):
        raise ValueError(
            f"control_seeds must lie in [1, {len(settings['seeds'])}], "
            f"got {settings['control_seeds']}"
        )


def data_files(settings: dict) -> list[str]:
    """The data files the run reads (their sha256 keys the stored result)."""
    files = [SPLITS["train"], SPLITS["dev"], *TOKENIZER_FILES]
    return files + [GPT2_SMALL.relpath] if "pretrained" in settings["inits"] else files


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
    settings: dict,
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
    batches = recipe.Batches(data["train"], settings["batch_size"], seed, device)
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

    start, total, done = time.perf_counter(), settings["steps"], 0
    every = settings["eval_every"] if record else total
    if record:
        measure(0, None)
    tag = f"L={layers} {'w' if residual else 'wo'}"
    for end in loop(
        [*range(every, total, every), total],
        desc=f"{tag}: evaluations",
        unit="evaluation",
        progress=progress,
        shape=same,
    ):
        running = torch.zeros((), device=device)
        for _ in loop(
            range(done, end),
            desc=tag,
            unit="optimizer step",
            progress=progress,
            probe_once=True,
        ):
            running += recipe.train_step(
                model,
                opt,
                sched,
                *batches.next(),
                grad_clip=settings["grad_clip"],
                amp=amp,
            )
        batch_loss = float(running) / (end - done)  # the one wait for the device
        if not math.isfinite(batch_loss):
            raise FloatingPointError(
                f"the loss became {batch_loss} between steps {done} and {end} ({init}, "
                f"{tag}, lr={lr:g}, seed={seed}); lower lr_grid in SETTINGS"
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
    settings: dict, data: dict, init: str, layers: int, residual: bool, **kw
) -> Selection:
    """Eq. ``sst2-select``: the full recipe from ``selection_seed`` at every rate of
    the arm's grid; the lowest final training loss wins (the first of a tie)."""
    grid = settings["lr_grid"][init]["w" if residual else "wo"]
    losses, errors = [], []
    for lr in loop(
        grid,
        desc=f"L={layers} {'w' if residual else 'wo'}: rate grid",
        unit="rate",
        progress=kw.get("progress", False),
        shape=same,
    ):
        try:
            c = train_one(
                settings,
                data,
                init,
                layers,
                residual,
                settings["selection_seed"],
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
    runs: list[Run]
    selections: list[Selection]
    control: Control
    majority_error: float  #: of always answering the majority label (training subset)
    n_train_rows: int
    n_train_used: int
    n_dev_used: int
    vocabulary_size: int
    precision: str


def run(settings: dict, *, device: str = "cpu", progress: bool = True) -> Result:
    """Choose every arm's rate (:func:`select_rate`), train the arm from every seed,
    then run the control."""
    check_settings(settings)
    device = str(check_device(device))
    with torch_threads(settings["threads"]):
        data = recipe.prepare_data(settings)
        pretrained = "pretrained" in settings["inits"]
        weights = recipe.pretrained_weights(settings) if pretrained else None
        kw = dict(device=device, weights=weights, progress=progress)
        runs, selections, inits = [], [], settings["inits"]
        # an estimate probes one init and one residual switch per depth: the others
        # have the same shapes (see estimate_settings)
        for init in loop(inits, desc="inits", unit="init", progress=False, shape=same):
            for layers in settings["layers"]:
                for residual in loop(
                    settings["residual"],
                    desc=f"L={layers}: residual switch",
                    unit="arm",
                    progress=False,
                    shape=same,
                ):
                    sel = select_rate(settings, data, init, layers, residual, **kw)
                    tag = f"L={layers} {'w' if residual else 'wo'}"
                    seeds = loop(
                        settings["seeds"],
                        desc=f"{tag}: seeds",
                        unit="seed",
                        progress=progress,
                        shape=same,
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
        deep = max(settings["layers"])
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
                settings["seeds"][: settings["control_seeds"]],
                desc="control: seeds",
                unit="seed",
                progress=progress,
                shape=same,
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


def estimate_settings(settings: dict) -> dict:
    """What ``--estimate`` probes: GPT-2's initialisation in place of the pretrained
    weights (the same shapes and cost, and no 548 MB download), and the arms without
    residuals first, so that the one arm probed per depth is the one whose rate the
    control takes."""
    return dict(
        settings,
        inits=["scratch"] * len(settings["inits"]),
        residual=sorted(settings["residual"]),
    )


# ------------------------------------------------------------------- checks and claims
#: Acceptance: stable rank of ``z_L`` at step 0, with over without residuals, at least.
INIT_RANK_RATIO = 2.0
#: Acceptance: effective rank of ``z_L`` at the end, with over without residuals, at
#: least.
END_RANK_RATIO = 1.5


def ratio(a: np.ndarray, b: np.ndarray, i: int, j: int) -> float:
    """Mean over seeds of column ``i`` of ``a`` over that of column ``j`` of ``b``."""
    return float(a[:, i].mean() / b[:, j].mean())


def arms(result: Result, init: str = "scratch") -> tuple[dict, dict]:
    """The runs of ``init`` with (``w``) and without (``wo``) residuals, by depth."""
    layers = result.settings["layers"]
    return tuple(
        {L: results.pick(result.runs, init=init, layers=L, residual=r) for L in layers}
        for r in (True, False)
    )


def checks(result: Result) -> list[Check]:
    """The chapter's acceptance table."""
    s, layers = result.settings, result.settings["layers"]
    finite = all(np.isfinite(getattr(r, k)).all() for r in result.runs for k in CURVES)
    rows = [
        Check("every recorded number is finite", finite, "==", True),
        Check(
            "every arm has every seed and the same evaluation steps",
            {r.train_error.shape for r in result.runs}
            == {(len(s["seeds"]), len(result.runs[0].steps))},
            "==",
            True,
        ),
        Check(
            "the selection seed is not a reported seed",
            s["selection_seed"] not in s["seeds"],
            "==",
            True,
        ),
        Check(
            "share of GPT-2's 50,257 token ids the data reads",
            result.vocabulary_size / 50_257,
            "<",
            0.5,
        ),
    ]
    for init in s["inits"]:
        w, wo = arms(result, init)
        rows += [
            Check(
                f"{init}: with residuals, largest final over initial training loss "
                f"(means over seeds)",
                max(ratio(w[L].train_loss, w[L].train_loss, -1, 0) for L in layers),
                "<",
                1.0,
            ),
            Check(
                f"{init}: stable rank of $z_L$ at step 0, with over without "
                f"residuals, smallest over $L$",
                min(ratio(w[L].stable_rank, wo[L].stable_rank, 0, 0) for L in layers),
                ">=",
                INIT_RANK_RATIO,
            ),
            Check(
                f"{init}: effective rank of $z_L$ at the end, with over without "
                f"residuals, smallest over $L \\geq {layers[1]}$",
                min(
                    ratio(w[L].effective_rank, wo[L].effective_rank, -1, -1)
                    for L in layers[1:]
                ),
                ">=",
                END_RANK_RATIO,
            ),
        ]
    return rows


def all_of(outcomes) -> str:
    """A claim that needs every part: ``FAILS`` when a part fails, ``HOLDS`` when all
    hold, else ``UNRESOLVED``."""
    outcomes = list(outcomes)
    if rules.FAILS in outcomes:
        return rules.FAILS
    return rules.HOLDS if all(o == rules.HOLDS for o in outcomes) else rules.UNRESOLVED


def barely_trains(errors, majority: float) -> str:
    """``HOLDS`` when the mean final error lies at least 2 s.e. above ``majority -
    BARELY_MARGIN``, ``FAILS`` when 2 s.e. below, else ``UNRESOLVED`` (so for one
    seed)."""
    mean, se = rules.mean_se(errors)
    if mean - 2 * se >= majority - BARELY_MARGIN:
        return rules.HOLDS
    return rules.FAILS if mean + 2 * se < majority - BARELY_MARGIN else rules.UNRESOLVED


def at_paper_scale(settings: dict) -> bool:
    """GPT-2 small's sizes on every training sentence: the paper's public setting."""
    return (
        settings["d_model"],
        settings["n_head"],
        settings["d_ff"],
        settings["n_train"],
    ) == (768, 12, 3072, None)


def protocol(settings: dict) -> str:
    """The setting behind the numbers, for the claims' rows."""
    n = "all" if settings["n_train"] is None else f"{settings['n_train']:,} of the"
    rates = ", ".join(f"{lr:g}" for lr in settings["lr_grid"]["scratch"]["w"])
    return (
        f"GPT-2 architecture from scratch, width {settings['d_model']}, {n} 67,349 "
        f"training sentences, {settings['steps']:,} AdamW steps, "
        f"{len(settings['seeds'])} seeds; each arm at the rate (of {rates}) with "
        f"the lowest full-length training loss of an unreported seed"
    )


def claims(result: Result) -> list[rules.Claim]:
    """The three claims of experiment 2, decided on the ``scratch`` arms over seeds."""
    s = result.settings
    layers, n, deep = s["layers"], len(s["seeds"]), s["layers"][1:]
    w, wo = arms(result)
    deviation = not at_paper_scale(s)
    why = protocol(s) + ("; smaller than GPT-2 small on all of SST-2" * deviation)
    mean_w = {L: w[L].final_error.mean() for L in layers}
    mean_wo = {L: wo[L].final_error.mean() for L in layers}
    stalled = result.majority_error - BARELY_MARGIN

    def errors(arm):
        return ", ".join(
            f"L = {L}: {rules.fmt(*rules.mean_se(arm[L].final_error))}" for L in layers
        )

    lower = {L: rules.compare(w[L].final_error, wo[L].final_error) for L in layers}
    floor = any(
        mean_wo[L] <= FLOOR_ERROR or min(mean_w[L], mean_wo[L]) >= stalled
        for L in layers
    )
    claim_lower = rules.Claim(
        "sst2-lower",
        "SST-2: residuals give lower training error at every depth",
        "with residuals the training error is lower at every depth $L = 2, 6, 10$",
        "; ".join(f"L = {L}: {c.text('w', 'wo')}" for L, c in lower.items()),
        rules.decide(
            all_of(c.outcome for c in lower.values()), deviation=deviation, floor=floor
        ),
        why,
        rule="at every depth, w below wo by " + rules.rule_text(n) + "; not reproduced "
        "when a depth goes the other way; inconclusive when wo is within "
        f"{FLOOR_ERROR} of zero error or both arms end within {BARELY_MARGIN} of "
        "the majority-label error",
    )

    depth = rules.trend(layers, [w[L].final_error for L in layers])
    steps = ", ".join(
        f"L = {b} below L = {a}: p = {c.p:.2g} (above: p = {c.p_reverse:.2g})"
        for a, b, c in zip(layers, layers[1:], depth.steps)
    )
    claim_depth = rules.Claim(
        "sst2-depth",
        "SST-2: with residuals the error keeps falling as $L$ grows",
        "with residuals, deeper models reach a lower training error",
        f"w: {errors(w)}; {steps}",
        rules.decide(
            depth.outcome,
            deviation=deviation,
            floor=any(mean_w[L] <= FLOOR_ERROR for L in layers[:-1]),
        ),
        why,
        rule="each depth below the one before by " + rules.rule_text(n) + "; not "
        "reproduced when a step or the two ends go the other way; inconclusive "
        f"when a shallower model is within {FLOOR_ERROR} of zero error",
    )

    stalls = [barely_trains(wo[L].final_error, result.majority_error) for L in deep]
    claim_stall = rules.Claim(
        "sst2-noresidual",
        "SST-2: without residuals deeper models end within "
        f"{BARELY_MARGIN} of the majority-label error",
        "without residuals the deeper models barely train",
        f"wo: {errors(wo)}; majority-label error {result.majority_error:.3f}",
        rules.decide(all_of(stalls), deviation=deviation),
        why,
        rule=f"at every L >= {deep[0]} without residuals, the mean final training "
        f"error lies at least 2 s.e. above the majority-label error minus "
        f"{BARELY_MARGIN}; not reproduced when it lies 2 s.e. below it",
    )
    return [claim_lower, claim_depth, claim_stall]
