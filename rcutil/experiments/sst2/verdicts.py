"""The SST-2 chapter's acceptance checks and its three claims, and the readings of a
stored :class:`~rcutil.experiments.sst2.Result` that decide them: the arms by depth,
whether an arm barely trains, whether the control stalls."""

from __future__ import annotations

import numpy as np

from ... import claims as rules
from ... import results
from ...checks import Check
from . import CURVES, Result, Settings

#: "Barely trains": a training error within this much of the majority-label error.
BARELY_MARGIN = 0.05
#: A mean training error at most this is a fit of (nearly) every sentence: a floor.
FLOOR_ERROR = 0.02


def ratio(a: np.ndarray, b: np.ndarray, i: int, j: int) -> float:
    """Mean over seeds of column ``i`` of ``a`` over that of column ``j`` of ``b``."""
    return float(a[:, i].mean() / b[:, j].mean())


def arms(result: Result, init: str = "scratch") -> tuple[dict, dict]:
    """The runs of ``init`` with (``w``) and without (``wo``) residuals, by depth."""
    layers = result.settings.layers
    return tuple(
        {L: results.pick(result.runs, init=init, layers=L, residual=r) for L in layers}
        for r in (True, False)
    )


def checks(result: Result) -> list[Check]:
    """The chapter's acceptance table."""
    s, layers = result.settings, result.settings.layers
    finite = all(np.isfinite(getattr(r, k)).all() for r in result.runs for k in CURVES)
    shapes = {r.train_error.shape for r in result.runs}
    complete = shapes == {(len(s.seeds), len(result.runs[0].steps))}
    unreported = s.selection_seed not in s.seeds
    rows = [
        Check("every recorded number is finite", finite, "==", True),
        Check("every arm has every seed and the same evaluation steps", complete, "==", True),
        Check("the selection seed is not a reported seed", unreported, "==", True),
        Check("share of GPT-2's 50,257 token ids the data reads", result.vocabulary_size / 50_257, "<", 0.5),
    ]  # fmt: skip
    for init in s.inits:
        w, wo = arms(result, init)
        loss = max(ratio(w[L].train_loss, w[L].train_loss, -1, 0) for L in layers)
        start = min(ratio(w[L].stable_rank, wo[L].stable_rank, 0, 0) for L in layers)
        deep = f"$L \\geq {layers[1]}$"
        end = min(
            ratio(w[L].effective_rank, wo[L].effective_rank, -1, -1) for L in layers[1:]
        )
        rows += [
            Check(f"{init}, w: final over initial training loss, largest over $L$", loss, "<", 1.0),
            Check(f"{init}: stable rank of $z_L$ at step 0, w over wo, smallest over $L$", start, ">=", 2.0),
            Check(f"{init}: effective rank of $z_L$ at the end, w over wo, smallest, {deep}", end, ">=", 1.5),
        ]  # fmt: skip
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


def control_stalls(result: Result) -> bool:
    """Whether the control and the arm of its depth without residuals (scaled
    projections, the same seeds) both end within :data:`BARELY_MARGIN` of the
    majority-label error on every seed: then the deep model without residuals stalls
    whichever scale its output projections start from."""
    control = result.control
    scaled = arms(result)[1][control.layers].final_error[: len(control.final_error)]
    stalled = result.majority_error - BARELY_MARGIN
    return bool(min([*control.final_error, *scaled]) >= stalled)


def at_paper_scale(settings: Settings) -> bool:
    """GPT-2 small's sizes on every training sentence: the paper's public setting."""
    s = settings
    return (s.d_model, s.n_head, s.d_ff, s.n_train) == (768, 12, 3072, None)


def protocol(settings: Settings) -> str:
    """The setting behind the numbers, for the claims' rows."""
    s = settings
    n = "all" if s.n_train is None else f"{s.n_train:,} of the"
    rates = ", ".join(f"{lr:g}" for lr in s.lr_grid["scratch"].w)
    return (
        f"GPT-2 architecture from scratch, width {s.d_model}, {n} 67,349 training "
        f"sentences, {s.steps:,} AdamW steps, {len(s.seeds)} seeds; each arm at the "
        f"rate (of {rates}) with the lowest full-length training loss of an "
        f"unreported seed"
    )


def claims(result: Result) -> list[rules.Claim]:
    """The three claims of experiment 2, decided on the ``scratch`` arms over seeds."""
    s = result.settings
    layers, n, deep = s.layers, len(s.seeds), s.layers[1:]
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
