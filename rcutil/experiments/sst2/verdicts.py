"""The SST-2 chapter's acceptance checks and its claims, and the readings of a stored
:class:`~rcutil.experiments.sst2.Result` that decide them: the arms by depth and
budget, whether an arm barely trains, whether the control stalls. Each init of the
profile (from scratch; in ``paper`` also GPT-2 small's weights) decides its own rows."""

from __future__ import annotations

import numpy as np

from ... import claims as rules
from ...checks import Check
from . import CURVES, Result, Settings

#: "Barely trains": a training error within this much of the majority-label error.
BARELY_MARGIN = 0.05
#: A mean training error at most this is a fit of (nearly) every sentence: a floor.
FLOOR_ERROR = 0.02
#: The two measures of the depth comparison: the claim's (training error) and the
#: cross-entropy, which has no floor at these sizes.
MEASURES = {"error": "final_error", "loss": "final_loss"}


def ratio(a: np.ndarray, b: np.ndarray, i: int, j: int) -> float:
    """Mean over seeds of column ``i`` of ``a`` over that of column ``j`` of ``b``."""
    return float(a[:, i].mean() / b[:, j].mean())


def arms(result: Result, init: str = "scratch", budget: int | None = None):
    """The runs of ``init`` at ``budget`` (default the book's, ``steps``) with
    (``w``) and without (``wo``) residuals, by depth (an arm not trained at that budget
    is left out)."""
    s = result.settings
    budget = s.steps if budget is None else budget
    return tuple(
        {
            r.layers: r
            for r in result.runs
            if (r.init, r.residual, r.budget) == (init, residual, budget)
        }
        for residual in (True, False)
    )


def budgets(result: Result) -> list[int]:
    """The budgets of the depth comparison: the book's first."""
    return list(result.budgets)


def checks(result: Result) -> list[Check]:
    """The chapter's acceptance table."""
    s, layers = result.settings, result.settings.layers
    finite = all(np.isfinite(getattr(r, k)).all() for r in result.runs for k in CURVES)
    complete = all(
        r.train_error.shape[0]
        == (len(s.seeds) if r.budget == s.steps else s.long_seeds)
        for r in result.runs
    )
    same_steps = len({tuple(r.steps) for r in result.runs if r.budget == s.steps}) == 1
    unreported = s.selection_seed not in s.seeds
    edges = [x for x in result.selections if x.at_edge]
    rows = [
        Check("every recorded number is finite", finite, "==", True),
        Check("every arm has its seeds, and the same evaluation steps", complete and same_steps, "==", True),
        Check("the selection seed is not a reported seed", unreported, "==", True),
        Check("chosen rates without a worse neighbour on each side of their grid", len(edges), "==", 0),
        Check("share of GPT-2's 50,257 token ids the data reads", result.vocabulary_size / 50_257, "<", 0.5),
    ]  # fmt: skip
    for init in s.inits:
        w, wo = arms(result, init)
        loss = max(ratio(w[L].train_loss, w[L].train_loss, -1, 0) for L in layers)
        start = min(ratio(w[L].stable_rank, wo[L].stable_rank, 0, 0) for L in layers)
        rows += [
            Check(f"{init}, w: final over initial training loss, largest over $L$", loss, "<", 1.0),
            Check(f"{init}: stable rank of $Z_L$ at step 0, w over wo, smallest over $L$", start, ">=", 2.0),
        ]  # fmt: skip
    return rows


def rank_separation(result: Result, init: str = "scratch") -> float:
    """The effective rank of the last block's attention output at the end of training,
    with residuals over without, smallest over the depths from the second up (seed
    means): how far the deeper models without residuals end closer to rank one."""
    w, wo = arms(result, init)
    return min(
        ratio(w[L].effective_rank, wo[L].effective_rank, -1, -1)
        for L in result.settings.layers[1:]
    )


def collapses_without_residuals(result: Result, init: str = "scratch") -> bool:
    """Whether the deeper arms without residuals end markedly closer to rank one than
    those with residuals: :func:`rank_separation` at least 1.5."""
    return rank_separation(result, init) >= 1.5


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


def setting(settings: Settings, init: str, budget: int | None = None) -> rules.Setting:
    """How the book's test differs from the paper's, in a few words."""
    s = settings
    start = {
        "scratch": f"from scratch at width {s.d_model}",
        "pretrained": "GPT-2 small's published weights, the first L blocks",
    }[init]
    n = "all" if s.n_train is None else f"{s.n_train:,} of the"
    out = [start, f"{n} 67,349 training sentences"]
    out += [f"{budget or s.steps:,} AdamW steps", f"{len(s.seeds)} seeds"]
    out.append("each arm at its own rate, chosen on an unreported seed")
    return rules.reconstruction(*out)


def depth_part(result: Result, init: str, budget: int, measure: str) -> rules.Part:
    """ "Deeper reaches lower" at one budget in one measure: the ordered trend of the
    final value along ``L`` with residuals, paired by seed (the depths of one seed
    read the same batches)."""
    w, _ = arms(result, init, budget)
    layers = result.settings.layers
    return rules.ordered_trend(
        layers,
        [getattr(w[L], MEASURES[measure]) for L in layers],
        direction="less",
        paired=True,
        label=f"{measure} at {budget:,} steps, slope per depth",
    )


def depth_at_floor(result: Result, init: str, budget: int) -> list[int]:
    """The shallower depths whose mean training error is within :data:`FLOOR_ERROR`
    of zero at ``budget``: a deeper model cannot end lower there."""
    w, _ = arms(result, init, budget)
    layers = result.settings.layers
    return [L for L in layers[:-1] if w[L].final_error.mean() <= FLOOR_ERROR]


def depth_decision(
    result: Result, init: str, budget: int, measure: str
) -> rules.Decision:
    """The rule on :func:`depth_part`, with the floor guard on the training error."""
    floor = depth_at_floor(result, init, budget) if measure == "error" else []
    why = (
        f"at {budget:,} steps the training error of L = {', '.join(map(str, floor))} "
        f"is within {FLOOR_ERROR} of zero, so a deeper model cannot end lower"
    )
    return rules.decision(
        depth_part(result, init, budget, measure),
        measurable=not floor,
        why_not_measurable=why if floor else "",
    )


def suffix(init: str) -> str:
    return "" if init == "scratch" else f"-{init}"


def _errors(arm: dict) -> str:
    return ", ".join(
        f"L = {L}: {rules.fmt(*rules.mean_se(run.final_error))}"
        for L, run in arm.items()
    )


def claims(result: Result) -> list[rules.Claim]:
    """The three claims of experiment 2 for every init of the profile, each decided
    over seeds at the book's budget."""
    s = result.settings
    rows = []
    for init in s.inits:
        rows += _claims_of(result, init)
    return rows


def _claims_of(result: Result, init: str) -> list[rules.Claim]:
    s = result.settings
    layers, deep, tag = s.layers, s.layers[1:], suffix(init)
    w, wo = arms(result, init)
    where = "" if init == "scratch" else ", from GPT-2 small's weights"
    stalled = result.majority_error - BARELY_MARGIN

    lower = [
        rules.comparison(
            w[L].final_error,
            wo[L].final_error,
            direction="less",
            paired=True,
            label=f"L = {L}: w − wo",
        )
        for L in layers
    ]
    floor = [
        L
        for L in layers
        if wo[L].final_error.mean() <= FLOOR_ERROR
        or min(w[L].final_error.mean(), wo[L].final_error.mean()) >= stalled
    ]
    why = (
        f"at L = {', '.join(map(str, floor))} the arm without residuals is within "
        f"{FLOOR_ERROR} of zero error, or both arms end within {BARELY_MARGIN} of the "
        "majority-label error"
    )
    d_lower = rules.decision(lower, measurable=not floor, why_not_measurable=why)
    claim_lower = rules.Claim.tested(
        f"sst2-lower{tag}",
        f"SST-2{where}: residuals give lower training error at every depth",
        "with residuals the training error is lower at every depth $L = 2, 6, 10$",
        f"final training error, w: {_errors(w)}; wo: {_errors(wo)}",
        d_lower,
        setting=setting(s, init),
    )

    main = depth_decision(result, init, s.steps, "error")
    readings = [
        f"{b:,} steps, {m}: {depth_decision(result, init, b, m).verdict}"
        for b in budgets(result)
        for m in MEASURES
        if (b, m) != (s.steps, "error") and arms(result, init, b)[0]
    ]
    claim_depth = rules.Claim.tested(
        f"sst2-depth{tag}",
        f"SST-2{where}: with residuals the error keeps falling as $L$ grows",
        "with residuals, deeper models reach a lower training error",
        f"decided at {s.steps:,} steps in the training error, w: {_errors(w)}; the "
        f"other readings: {'; '.join(readings) or 'none'}",
        main,
        setting=setting(s, init),
        reason_prefix=f"at {s.steps:,} steps: ",
    )

    margin = result.majority_error - BARELY_MARGIN
    stall = [
        rules.comparison(
            wo[L].final_error,
            np.zeros(len(wo[L].final_error)),
            direction="greater",
            paired=True,
            shift=margin,
            label=f"L = {L}: wo − (majority − {BARELY_MARGIN:g})",
        )
        for L in deep
    ]
    d_stall = rules.decision(stall)
    claim_stall = rules.Claim.tested(
        f"sst2-noresidual{tag}",
        f"SST-2{where}: without residuals deeper models end within "
        f"{BARELY_MARGIN} of the majority-label error",
        "without residuals the deeper models barely train",
        f"final training error, wo: {_errors(wo)}; majority-label error "
        f"{result.majority_error:.3f}",
        d_stall,
        setting=setting(s, init),
    )
    return [claim_lower, claim_depth, claim_stall]
