"""rcutil.experiments.sst2: the rate selection, the training loop's host waits, the
settings, and the three claims and the control's reading, each flipped by its
evidence."""

import math
from dataclasses import replace

import numpy as np
import pytest
import torch
from test_gpt2 import SETTINGS, synthetic_data
from torch.utils._python_dispatch import TorchDispatchMode

from rcutil import claims as rules
from rcutil import sst2_train
from rcutil.estimate import project
from rcutil.experiments import sst2
from rcutil.experiments.sst2 import verdicts
from rcutil.profiles import settings_for


def tiny_data():
    tokens, lengths, labels, vocab, compact = synthetic_data(n=64, T=8)
    return {
        "train": (compact, lengths, labels),
        "train_eval": (compact[:16], lengths[:16], labels[:16]),
        "dev": (compact[:8], lengths[:8], labels[:8]),
        "vocabulary": vocab,
    }


# ----------------------------------------------------------------- choosing the rate
def fake_grids(monkeypatch, losses):
    """Replace the training of an ensemble by ``losses[(layers, residual, steps)](lr)``
    (``inf``: a run that diverged); returns the jobs it was asked to run."""
    seen = []

    def train_job(job, device="cpu"):
        seen.append(job)
        out = []
        for m in job.members:
            loss = losses[(job.layers, job.residual, job.steps)](m.lr)
            error = math.nan if math.isinf(loss) else loss / 2
            out.append({"train_loss": [loss], "train_error": [error]})
        return out

    monkeypatch.setattr(sst2, "train_job", train_job)
    return seen


def v_shaped(best: float):
    """A final loss that is least at ``best`` and grows by 0.1 per half decade away."""
    return lambda lr: 0.3 + 0.1 * abs(math.log10(lr / best)) * 2


def test_every_grid_runs_at_full_length_from_the_selection_seed(monkeypatch):
    """Each arm's start grid is one ensemble of the selection seed at that arm's
    budget; the lowest final training loss wins, and an arm whose best rate is inside
    its grid needs nothing more."""
    settings = replace(
        sst2.CI,
        layers=(2,),
        selection_seed=9,
        steps=300,
        long_steps=900,
        lr_grid={
            "scratch": sst2.Rates.every(
                w=(1e-4, 3e-4, 1e-3), wo=(1e-3, 3e-3, 1e-2), depths=1
            )
        },
        long_lr_grid=sst2.Rates.every(w=(3e-4, 1e-3, 3e-3), depths=1),
    )
    seen = fake_grids(
        monkeypatch,
        {
            (2, True, 300): v_shaped(3e-4),
            (2, False, 300): v_shaped(3e-3),
            (2, True, 900): v_shaped(1e-3),
        },
    )
    picked = sst2.select_rates(settings, sst2.arms_of(settings))
    assert [(x.residual, x.budget, x.lr) for x in picked] == [
        (True, 300, 3e-4),
        (False, 300, 3e-3),
        (True, 900, 1e-3),
    ]
    assert [(j.steps, j.record, {m.seed for m in j.members}) for j in seen] == [
        (300, False, {9}),
        (300, False, {9}),
        (900, False, {9}),
    ]
    assert [m.lr for m in seen[1].members] == [1e-3, 3e-3, 1e-2]
    assert not any(x.at_edge for x in picked)
    assert picked[0].train_error == [x / 2 for x in picked[0].train_loss]


def test_without_a_long_grid_the_longer_budget_keeps_each_arms_first_rate(monkeypatch):
    """``long_lr_grid=None``: only the arms at the first budget choose a rate, and each
    arm with residuals trains at the longer budget at the rate chosen for it there (a
    different rate per depth, so that a mix-up of depths shows)."""
    settings = replace(sst2.CI, long_lr_grid=None)
    asked, jobs = [], []
    rate = {2: 1e-3, 6: 3e-4, 10: 1e-4}

    def select_rates(s, arms, **kwargs):
        asked.extend(arms)
        out = []
        for a in arms:  # without residuals ten times the rate: arms kept apart
            lr = rate[a[1]] * (1 + 9 * (not a[2]))
            out.append(sst2.Selection(*a, [lr], [lr], [0.5], [0.2], lr))
        return out

    class Stop(Exception):
        pass

    def parallel_map(func, pieces, **kwargs):
        jobs.extend(pieces)
        raise Stop

    monkeypatch.setattr(sst2, "select_rates", select_rates)
    monkeypatch.setattr(sst2, "parallel_map", parallel_map)
    with pytest.raises(Stop):
        sst2.run(settings, progress=False)
    assert {a[3] for a in asked} == {settings.steps}
    assert len(asked) == 2 * len(settings.layers)
    long = [j for j in jobs if j.steps == settings.long_steps]
    assert [j.layers for j in long] == list(settings.layers)
    assert all(j.residual for j in long)
    for j in long:
        assert {m.lr for m in j.members} == {rate[j.layers]}
        assert len(j.members) == settings.long_seeds


def test_a_grid_grows_past_the_edge_where_its_best_rate_lies(monkeypatch):
    """The best rate at the top of the grid: the next rate of the ladder above is tried,
    then the next, until a worse one closes the grid; at the bottom, the same downward.
    A run that diverges counts as the worst."""
    settings = replace(
        sst2.CI,
        layers=(2,),
        long_steps=None,
        lr_grid={
            "scratch": sst2.Rates.every(w=(1e-4, 3e-4), wo=(1e-3, 3e-3), depths=1)
        },
    )
    seen = fake_grids(
        monkeypatch,
        {
            (2, True, 40): v_shaped(3e-3),
            (2, False, 40): lambda lr: math.inf if lr > 1e-3 else v_shaped(1e-4)(lr),
        },
    )
    w, wo = sst2.select_rates(settings, sst2.arms_of(settings))
    assert w.lr_grid == [1e-4, 3e-4, 1e-3, 3e-3, 1e-2] and w.lr == 3e-3
    assert w.start == [1e-4, 3e-4] and not w.at_edge
    assert wo.lr_grid == [3e-5, 1e-4, 3e-4, 1e-3, 3e-3] and wo.lr == 1e-4
    assert wo.train_loss[-1] == math.inf and math.isnan(wo.train_error[-1])
    assert [len(j.members) for j in seen] == [2, 2, 1, 1, 1, 1, 1, 1]


def test_a_grid_that_finds_no_worse_neighbour_stops_and_the_acceptance_refuses_it(
    monkeypatch,
):
    """A loss that keeps falling with the rate: the grid grows by MAX_EXTENSIONS rates
    and stops with its best rate at the edge, which the acceptance table refuses."""
    settings = replace(
        sst2.CI,
        layers=(2,),
        long_steps=None,
        lr_grid={
            "scratch": sst2.Rates.every(
                w=(1e-4, 3e-4, 1e-3), wo=(1e-4, 3e-4, 1e-3), depths=1
            )
        },
    )
    fake_grids(
        monkeypatch,
        {(2, True, 40): lambda lr: 1 - lr, (2, False, 40): v_shaped(3e-4)},
    )
    w, wo = sst2.select_rates(settings, sst2.arms_of(settings))
    assert (
        len(w.lr_grid) == 3 + sst2.MAX_EXTENSIONS
        and w.at_edge
        and w.lr == max(w.lr_grid)
    )
    assert not wo.at_edge
    result = stored()
    result.selections[0] = replace(result.selections[0], lr_grid=w.lr_grid, lr=w.lr)
    failed = [c.what for c in verdicts.checks(result) if not c.ok]
    assert failed == [
        "chosen rates without a worse neighbour on each side of their grid"
    ]


def test_the_ladder_and_the_next_rate():
    assert sst2.next_rate([1e-4, 3e-4], up=True) == 1e-3
    assert sst2.next_rate([1e-4, 3e-4], up=False) == 3e-5
    assert sst2.next_rate([sst2.RATE_LADDER[-1]], up=True) is None
    assert sst2.chosen({1e-3: (0.2, 0.1), 3e-4: (0.2, 0.1), 1e-2: (0.5, 0.3)}) == 3e-4


class ScalarReads(TorchDispatchMode):
    """Counts reads of a tensor's value by the host (``item``, ``float``, ``int``)."""

    def __init__(self):
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is torch.ops.aten._local_scalar_dense.default:
            self.count += 1
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("steps", [3, 7])
def test_training_steps_do_not_wait_for_the_device(steps, monkeypatch):
    """Between two evaluations the loop reads no tensor value: the host never waits for
    the device. The number of reads is the same for 3 steps as for 7 (an epoch is 8
    batches), for two models trained as one."""
    monkeypatch.setattr(
        sst2_train,
        "evaluate",
        lambda *a, **k: {
            "loss": 0.5,
            "error": 0.5,
            "stable_rank": 1.0,
            "effective_rank": 1.0,
        },
    )
    data = tiny_data()
    members = [sst2_train.Member(0, 1e-3), sst2_train.Member(1, 3e-3)]
    counts = {}
    for n in (steps, 2):
        with ScalarReads() as reads:
            sst2_train.train(
                replace(SETTINGS, steps=n, eval_every=100),
                data,
                "scratch",
                2,
                True,
                members,
            )
        counts[n] = reads.count
    assert counts[steps] == counts[2], counts


def test_the_control_leaves_the_output_projections_unscaled():
    vocab = synthetic_data()[3]
    for scaled, factor in ((True, 1 / math.sqrt(2 * 6)), (False, 1.0)):
        model = sst2_train.make_model(
            replace(SETTINGS, d_model=64, d_ff=256),
            "scratch",
            6,
            False,
            0,
            vocab,
            scaled_projections=scaled,
        )
        std = torch.cat([b.mlp.c_proj.weight.flatten() for b in model.h]).std().item()
        assert std == pytest.approx(0.02 * factor, rel=0.05)


# ----------------------------------------------------------------- settings
def test_bf16_asked_where_it_cannot_run_warns_and_uses_float32():
    bf16 = replace(SETTINGS, precision="bf16")
    with pytest.warns(RuntimeWarning, match="bf16 needs a CUDA device"):
        assert sst2_train.autocast_dtype(bf16, "cpu") is None
    assert (
        sst2_train.autocast_dtype(replace(SETTINGS, precision="float32"), "cpu") is None
    )
    with pytest.raises(ValueError, match="precision must be one of"):
        sst2_train.autocast_dtype(replace(SETTINGS, precision="fp8"), "cpu")
    with pytest.raises(ValueError, match="init must be one of"):
        sst2_train.make_model(SETTINGS, "random", 2, True, 0, torch.tensor([1, 2]))


@pytest.mark.parametrize(
    "change, words",
    [
        (dict(selection_seed=0), "selection_seed 0 is a reported seed"),
        (dict(control_seeds=3), r"control_seeds must lie in \[1, 2\]"),
        (dict(inits=("random",)), "'random' must be one of"),
        (dict(inits=("pretrained",)), r"must be one of .* lr_grid\['pretrained'\]"),
        (
            dict(lr_grid={"scratch": sst2.Rates.every(w=(1e-3,), wo=())}),
            r"lr_grid\['scratch'\].wo needs one non-empty grid per depth",
        ),
        (
            dict(lr_grid={"scratch": sst2.Rates.every(w=(2e-3,), wo=(1e-3,))}),
            r"the rates \[0.002\] are not on RATE_LADDER",
        ),
        (
            dict(long_lr_grid=sst2.Rates.every(w=(1e-3,), depths=2)),
            "long_lr_grid.w needs one non-empty grid per depth",
        ),
        (dict(long_seeds=3), r"long_seeds must lie in \[2, 2\]"),
        (dict(seeds=(0,), control_seeds=1), r"give at least two"),
    ],
)
def test_settings_the_run_cannot_honour_are_named(change, words):
    settings = replace(settings_for(sst2.SETTINGS, "ci"), **change)
    with pytest.raises(ValueError, match=words):
        sst2.run(settings)


def test_profiles_meet_the_seed_counts_and_the_paper_arms():
    rows = {p: settings_for(sst2.SETTINGS, p) for p in ("ci", "book", "paper")}
    assert all(
        r.layers == (2, 6, 10) and r.residual == (True, False) for r in rows.values()
    )
    assert len(rows["book"].seeds) >= 5 and len(rows["paper"].seeds) >= 3
    assert rows["paper"].inits == ("pretrained", "scratch")
    assert (
        min(max(g) for g in rows["paper"].lr_grid["pretrained"].wo) >= 1e-3
    )  # retrains
    for r in rows.values():
        assert r.selection_seed not in r.seeds
    assert verdicts.at_paper_scale(rows["paper"])
    assert not verdicts.at_paper_scale(rows["book"])
    # the longer budget: about three times the book's, with residuals, several seeds
    book = rows["book"]
    assert book.long_steps == 3 * book.steps and book.long_seeds >= 3
    assert book.workers == 2 and rows["paper"].workers == 1


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA device")
def test_a_missing_gpu_is_named():
    with pytest.raises(ValueError, match="device 'cuda' asked for, but this torch"):
        project(sst2, settings_for(sst2.SETTINGS, "ci"), device="cuda")
    with pytest.raises(ValueError, match="device 'cuda:1' asked for, but this torch"):
        sst2.run(settings_for(sst2.SETTINGS, "ci"), device="cuda:1")


# ----------------------------------------------------------------- the claims
LAYERS = [2, 6, 10]
MAJORITY = 0.44
#: Per-seed final training errors of a result for which every claim holds.
W = {
    2: [0.20, 0.21, 0.22, 0.23, 0.24],
    6: [0.15, 0.16, 0.17, 0.18, 0.19],
    10: [0.10, 0.11, 0.12, 0.13, 0.14],
}
WO = {
    2: [0.30, 0.31, 0.32, 0.33, 0.34],
    6: [0.43, 0.431, 0.432, 0.433, 0.434],
    10: [0.44, 0.441, 0.439, 0.44, 0.442],
}
#: At the longer budget, with residuals: every depth fits (nearly) every sentence.
LONG = {
    2: [0.0, 0.002, 0.004, 0.0, 0.002],
    6: [0.004, 0.006, 0.002, 0.008, 0.006],
    10: [0.012, 0.01, 0.014, 0.008, 0.016],
}


#: What the result holds elsewhere: earlier on the error curves and in the pretrained
#: arm, errors that would decide every claim the other way.
DECOY_W = {L: W[LAYERS[-1 - i]] for i, L in enumerate(LAYERS)}  # depth reversed
DECOY_WO = {L: [0.05, 0.06, 0.07, 0.08, 0.09] for L in LAYERS}  # wo trains well


def run_of(init, L, residual, budget, final, early):
    """One arm as the store holds it: errors (early, early, final) per seed, losses
    that fall with the error (``0.5 - error / 2``) after 0.7 and 0.6."""
    early = np.array(early[: len(final)], dtype=float)
    error = np.column_stack([early, early, np.array(final, dtype=float)])
    loss = np.column_stack([0.7 + 0 * early, 0.6 + 0 * early, 0.5 - error[:, -1] / 2])
    ones = np.ones_like(error)
    stable, effective = 3 + 6 * residual, 2 + 9 * residual
    return sst2.Run(
        init,
        L,
        residual,
        budget,
        1e-3,
        [0, budget // 2, budget],
        error,
        loss,
        loss,
        stable * ones,
        effective * ones,
        [0.7] * len(final),
        [1.0] * len(final),
        1000,
    )


def stored(w=W, wo=WO, long=LONG, *, majority=MAJORITY, settings=None, pretrained=None):
    """A result as the store holds it, with the given per-seed final training errors
    at the book's budget (``w``, ``wo``) and at the longer one (``long``, with
    residuals). The other fields say the opposite: the error curves before their end
    hold :data:`DECOY_W` and :data:`DECOY_WO`, and so does the pretrained arm unless
    ``pretrained = (w, wo)`` gives its own."""
    settings = settings or replace(sst2.BOOK, inits=("scratch", "pretrained"))
    s = settings
    runs = []
    for init in s.inits:
        for L in LAYERS:
            for residual, final, early in (
                (True, w[L], DECOY_W[L]),
                (False, wo[L], DECOY_WO[L]),
            ):
                if init == "pretrained":
                    final = early if pretrained is None else pretrained[not residual][L]
                runs.append(run_of(init, L, residual, s.steps, final, early))
    if s.long_steps is not None:
        for L in LAYERS:
            final = long[L][: s.long_seeds]
            runs.append(run_of("scratch", L, True, s.long_steps, final, DECOY_W[L]))
    selections = [
        sst2.Selection(
            r.init, r.layers, r.residual, r.budget, [1e-3], [3e-4, 1e-3, 3e-3],
            [0.6, 0.5, 0.55], [0.3, 0.2, 0.25], 1e-3,
        )
        for r in runs
    ]  # fmt: skip
    result = sst2.Result(
        settings=settings,
        runs=runs,
        selections=selections,
        control=sst2.Control(10, 1e-3, [0.44] * 3, [0.69] * 3),
        majority_error=majority,
        n_train_rows=67_349,
        n_train_used=4096,
        n_dev_used=872,
        vocabulary_size=7000,
        precision="float32",
        budgets=[s.steps] + ([s.long_steps] if s.long_steps is not None else []),
    )
    return sst2.Result.from_json(result.to_json())


def verdicts_of(result, init="scratch"):
    rows = verdicts.claims(result)
    tag = "" if init == "scratch" else f"-{init}"
    return [
        c.verdict
        for c in rows
        if c.key.endswith(tag) and c.key.count("-") == 1 + bool(tag)
    ]


R, I, N = rules.REPRODUCED, rules.INCONCLUSIVE, rules.NOT_REPRODUCED


def test_the_claims_follow_from_the_stored_numbers():
    """Every w arm below its wo arm on every seed (paired, p = 1/32 per depth), each
    depth below the one before on every seed (one paired trend), and wo at L >= 6
    above the majority-label error minus the margin on every seed: each claim holds,
    in a setting of the book's own."""
    rows = verdicts.claims(stored())
    assert [c.key for c in rows][:3] == ["sst2-lower", "sst2-depth", "sst2-noresidual"]
    assert [c.verdict for c in rows[:3]] == [R, R, R]
    assert all(c.setting.kind == rules.RECONSTRUCTION for c in rows)
    assert "300 AdamW steps" in rows[1].setting_text
    assert "from scratch at width 64" in rows[0].setting_text


def with_errors(table, L, values):
    return {**table, L: values}


#: One edit of the evidence at a time (one seed, one arm, one depth), and the verdicts
#: of the three rows after it.
EDITS = [
    # one seed of w at L = 2 above its wo: the pair no longer holds on every seed
    (
        "one seed of w above wo at L = 2",
        {"w": (2, [0.2, 0.21, 0.22, 0.23, 0.4])},
        [I, R, R],
    ),
    # at L = 6 wo trains well and w does not
    ("w above wo at L = 6", {"wo": (6, [0.05, 0.06, 0.07, 0.08, 0.09])}, [I, R, I]),
    # depth lowers nothing: L = 10 above L = 2 on every seed
    ("L = 10 above L = 2", {"w": (10, [0.25, 0.26, 0.27, 0.28, 0.29])}, [R, I, R]),
    # the shallow residual model fits its sentences: a floor
    ("L = 2 at the floor", {"w": (2, [0.0, 0.01, 0.0, 0.02, 0.01])}, [R, I, R]),
    # wo fits its sentences at L = 2: a floor for the first claim
    ("wo at the floor", {"wo": (2, [0.0, 0.01, 0.0, 0.02, 0.01])}, [I, R, R]),
    # the deepest model without residuals trains
    ("L = 10 wo trains", {"wo": (10, [0.30, 0.31, 0.32, 0.33, 0.34])}, [R, R, I]),
    # one seed of L = 6 wo trains: no longer above the margin on every seed
    ("one seed of L = 6 wo", {"wo": (6, [0.43, 0.30, 0.432, 0.433, 0.434])}, [R, R, I]),
]


@pytest.mark.parametrize("name, edit, flips", EDITS, ids=[e[0] for e in EDITS])
def test_editing_the_evidence_flips_the_claim(name, edit, flips):
    w = with_errors(W, *edit["w"]) if "w" in edit else W
    wo = with_errors(WO, *edit["wo"]) if "wo" in edit else WO
    assert verdicts_of(stored(w, wo)) == flips, name


def test_the_depth_trend_reversed_on_every_seed_is_not_reproduced():
    assert verdicts_of(stored(DECOY_W, WO)) == [R, N, R]


def test_the_decoys_would_flip_every_claim():
    """Read as final errors, the decoys of :func:`stored` decide every claim the other
    way or leave it open: a claim that read them would change, so the verdicts above
    prove it did not."""
    assert verdicts_of(stored(DECOY_W, DECOY_WO)) == [I, N, I]


def test_the_majority_error_moves_the_threshold_of_the_third_claim():
    assert verdicts_of(stored(majority=0.55))[2] == rules.INCONCLUSIVE
    assert verdicts_of(stored(majority=0.30))[2] == rules.REPRODUCED


def test_two_seeds_resolve_no_pair_but_can_resolve_the_trend():
    """Two seeds paired: a one-sided p of 1/4 at best for a pair of arms, so neither
    claim of pairs is decided; the ordered trend over three depths has 36
    arrangements, so its p can reach 1/36."""
    two = {L: v[:2] for L, v in W.items()}, {L: v[:2] for L, v in WO.items()}
    settings = replace(sst2.BOOK, seeds=(0, 1), control_seeds=1, long_seeds=2)
    assert verdicts_of(stored(*two, settings=settings)) == [I, R, I]


def test_the_depth_row_is_decided_at_the_books_budget_and_shows_the_longer_one():
    """The depth claim is decided at the book's budget in the training error; the
    longer budget's readings (error at its floor: inconclusive; loss: its own verdict)
    are in the row, and editing them changes the row's text, never its verdict."""
    depth = verdicts.claims(stored())[1]
    assert depth.book.startswith("decided at 300 steps in the training error")
    assert "900 steps, error: inconclusive at this scale" in depth.book
    # the stored losses fall as the errors rise (a decoy of the error): the loss
    # readings go the other way from the error's
    assert "300 steps, loss: not reproduced" in depth.book
    assert "900 steps, loss: reproduced" in depth.book
    flipped = {L: v for L, v in zip(LAYERS, [LONG[10], LONG[6], LONG[2]])}
    again = verdicts.claims(stored(long=flipped))[1]
    assert again.verdict == depth.verdict
    assert "900 steps, loss: not reproduced" in again.book
    # the longer budget's error decides once the shallow models leave the floor
    high = {L: [x + 0.1 for x in v] for L, v in flipped.items()}
    assert "900 steps, error: reproduced" in verdicts.claims(stored(long=high))[1].book
    low = {L: [x + 0.1 for x in v] for L, v in LONG.items()}
    assert (
        "900 steps, error: not reproduced" in verdicts.claims(stored(long=low))[1].book
    )
    # and the row's decision is the book budget's
    assert depth.decision.parts[0].label.startswith("error at 300 steps")


def test_a_part_reads_its_own_budget_and_measure():
    """Each reading reads the runs of its budget and the field of its measure."""
    result = stored()
    part = verdicts.depth_part(result, "scratch", 900, "error")
    n = result.settings.long_seeds
    assert part.values == tuple(tuple(LONG[L][:n]) for L in LAYERS)
    loss = verdicts.depth_part(result, "scratch", 300, "loss")
    assert loss.values == tuple(tuple(0.5 - np.array(W[L]) / 2) for L in LAYERS)
    assert verdicts.depth_at_floor(result, "scratch", 900) == [2, 6]
    assert verdicts.depth_at_floor(result, "scratch", 300) == []


def test_the_pretrained_arms_decide_rows_of_their_own():
    """With both inits (the paper profile), each decides its three rows from its own
    arms: editing the pretrained arms changes only the pretrained rows, and each row
    names its starting weights in its setting."""
    both = stored(pretrained=(W, WO))
    keys = [c.key for c in verdicts.claims(both)]
    assert keys == [
        f"sst2-{claim}{tag}"
        for tag in ("", "-pretrained")
        for claim in ("lower", "depth", "noresidual")
    ]
    assert verdicts_of(both, "pretrained") == [R, R, R]
    worse = stored(pretrained=(DECOY_W, DECOY_WO))
    assert verdicts_of(worse, "pretrained") == [I, N, I]
    assert verdicts_of(worse) == [R, R, R]
    rows = {c.key: c for c in verdicts.claims(both)}
    assert (
        "GPT-2 small's published weights" in rows["sst2-lower-pretrained"].setting_text
    )
    assert "from scratch" in rows["sst2-lower"].setting_text


def test_the_rows_show_each_arm_and_the_majority_error():
    lower, depth, stall = verdicts.claims(stored())[:3]
    assert (
        "w: L = 2: 0.22 ± 0.0071, L = 6: 0.17 ± 0.0071, L = 10: 0.12 ± 0.0071"
        in lower.book
    )
    assert "wo: L = 2: 0.32 ± 0.0071" in lower.book
    assert "majority-label error 0.440" in stall.book
    assert "within 0.05 of the majority-label error" in stall.claim
    assert lower.decision.parts[0].label == "L = 2: w − wo"
    assert [p.label for p in stall.decision.parts] == [
        "L = 6: wo − (majority − 0.05)",
        "L = 10: wo − (majority − 0.05)",
    ]
    assert [p.p for p in lower.decision.parts] == [1 / 32] * 3
    one = stored(with_errors(W, 6, [0.15, 0.16, 0.17, 0.18, 0.20]))
    assert "L = 6: 0.172 ± 0.0086" in verdicts.claims(one)[0].book


def test_each_inits_rows_say_which_weights_they_start_from():
    """The rows from scratch state their claim of SST-2; those from GPT-2 small's
    weights state the same claim of the pretrained model, so the two rows of a claim
    are told apart."""
    rows = verdicts.claims(stored(pretrained=(W, WO)))
    scratch, pretrained = rows[:3], rows[3:]
    assert all(c.claim.startswith("SST-2: ") for c in scratch)
    assert [c.claim for c in pretrained] == [
        c.claim.replace("SST-2", "SST-2, from GPT-2 small's weights", 1)
        for c in scratch
    ]


def test_the_depth_rows_other_readings_leave_out_the_one_that_decides():
    """The depth row is decided at the book's budget in the training error, and its
    reason says so; its other readings are every other budget and measure."""
    depth = verdicts.claims(stored())[1]
    assert depth.reason.startswith("at 300 steps: ")
    readings = depth.book.split("the other readings: ")[1].split("; ")
    assert [r.split(":")[0] for r in readings] == [
        "300 steps, loss",
        "900 steps, error",
        "900 steps, loss",
    ]


FLOOR = verdicts.FLOOR_ERROR


@pytest.mark.parametrize(
    "w, wo, verdict",
    [
        ([0.01] * 5, [FLOOR] * 5, I),  # wo at the floor exactly
        ([0.01] * 5, [0.03] * 5, R),  # wo above it
        ([MAJORITY - verdicts.BARELY_MARGIN] * 5, [0.40] * 5, I),  # at the margin
        ([0.40] * 5, [0.42] * 5, I),  # both within the margin
        ([0.38] * 5, [0.42] * 5, R),  # w past it
    ],
)
def test_the_lower_claim_is_not_measured_where_wo_fits_or_both_arms_stall(
    w, wo, verdict
):
    """At L = 2, w ends below wo on every seed: the pair holds, unless wo's mean
    error is at most :data:`~verdicts.FLOOR_ERROR` or both arms' means are at least
    the majority-label error minus :data:`~verdicts.BARELY_MARGIN`, where the
    measure cannot show the effect."""
    lower = verdicts.claims(stored(with_errors(W, 2, w), with_errors(WO, 2, wo)))[0]
    assert lower.verdict == verdict
    assert ("the measure cannot show the effect" in lower.reason) is (verdict == I)


def test_a_mean_error_at_the_floor_exactly_is_at_the_floor():
    """With residuals at L = 2, a mean training error of exactly FLOOR_ERROR is at the
    floor; a little more is not."""
    at = stored(with_errors(W, 2, [FLOOR] * 5))
    assert verdicts.depth_at_floor(at, "scratch", 300) == [2]
    assert verdicts_of(at)[1] == I
    above = stored(with_errors(W, 2, [0.021] * 5))
    assert verdicts.depth_at_floor(above, "scratch", 300) == []


def test_a_floor_reason_names_every_depth_at_the_floor():
    """Two depths at the floor: the reasons of the first two rows name both."""
    fit = [0.0, 0.01, 0.0, 0.02, 0.01]
    lower = verdicts.claims(
        stored(
            with_errors(with_errors(W, 2, [0.0] * 5), 6, [0.0] * 5),
            with_errors(with_errors(WO, 2, fit), 6, fit),
        )
    )[0]
    assert "at L = 2, 6 the arm without residuals is within" in lower.reason
    depth = verdicts.claims(stored(with_errors(with_errors(W, 2, fit), 6, fit)))[1]
    assert "the training error of L = 2, 6 is within" in depth.reason


def test_the_setting_says_how_many_training_sentences():
    book = verdicts.setting(sst2.BOOK, "scratch").text()
    assert "; 4,096 of the 67,349 training sentences;" in book
    every = verdicts.setting(replace(sst2.BOOK, n_train=None), "scratch").text()
    assert "; all 67,349 training sentences;" in every


# ----------------------------------------------------------------- readings
def test_the_rank_separation_reads_the_end_of_the_deeper_arms():
    """Effective ranks 11 with residuals, 2 without: 5.5. Raising one seed's last
    reading without residuals at L = 6 lowers it (that seed's 11 enters the seed
    mean); the same edit at L = 2, or at an earlier reading, leaves it alone."""
    assert verdicts.rank_separation(stored()) == pytest.approx(5.5)

    def edited(L, column):
        result = stored()
        run = next(
            r
            for r in result.runs
            if r.init == "scratch" and r.layers == L and not r.residual
        )
        run.effective_rank[0, column] = 11.0
        return verdicts.rank_separation(result)

    assert edited(6, -1) == pytest.approx(11 / (2 + 9 / 5))
    assert edited(2, -1) == pytest.approx(5.5)
    assert edited(6, 0) == pytest.approx(5.5)
    assert verdicts.collapses_without_residuals(stored())
    high = stored()
    for r in high.runs:
        if not r.residual:
            r.effective_rank[:, -1] = 11 / 1.5  # the ratio at its bound, then above it
    assert verdicts.collapses_without_residuals(high)
    for r in high.runs:
        if not r.residual:
            r.effective_rank[:, -1] = 11 / 1.49
    assert not verdicts.collapses_without_residuals(high)


def test_the_rank_separation_reads_the_end_of_the_arms_with_residuals():
    """Lowering the effective rank with residuals before the last reading leaves the
    separation alone; lowering one seed's last reading at L = 6 lowers it."""
    result = stored()
    for r in result.runs:
        if r.residual:
            r.effective_rank[:, :-1] = 2.0
    assert verdicts.rank_separation(result) == pytest.approx(5.5)
    run = next(
        r for r in result.runs if (r.init, r.layers, r.residual) == ("scratch", 6, True)
    )
    run.effective_rank[0, -1] = 2.0
    assert verdicts.rank_separation(result) == pytest.approx((11 - 9 / 5) / 2)


def test_the_rank_separation_of_an_init_reads_its_own_arms():
    """The pretrained arms without residuals keep their rank: they do not collapse,
    while those from scratch still do."""
    result = stored()
    for r in result.runs:
        if r.init == "pretrained" and not r.residual:
            r.effective_rank[:, -1] = 11.0
    assert verdicts.rank_separation(result, "pretrained") == pytest.approx(1.0)
    assert not verdicts.collapses_without_residuals(result, "pretrained")
    assert verdicts.rank_separation(result, "scratch") == pytest.approx(5.5)
    assert verdicts.collapses_without_residuals(result, "scratch")


# ----------------------------------------------------------------- acceptance
def test_acceptance_fails_on_a_non_finite_number_and_on_a_wrong_rank_ratio():
    assert all(c.ok for c in verdicts.checks(stored()))
    missing = stored()
    missing.runs[-1].train_error = missing.runs[-1].train_error[:2]
    assert not verdicts.checks(missing)[1].ok  # the longer budget lacks seeds
    broken = stored()
    broken.runs[0].train_loss[1, 1] = float("nan")
    assert [c.what for c in verdicts.checks(broken) if not c.ok] == [
        "every recorded number is finite"
    ]
    flat = stored()
    for r in flat.runs:
        r.stable_rank[:] = 3.0  # the same rank with and without residuals
    assert any("stable rank" in c.what and not c.ok for c in verdicts.checks(flat))


def failed(result):
    return [c.what for c in verdicts.checks(result) if not c.ok]


STABLE = "scratch: stable rank of $Z_L$ at step 0, w over wo, smallest over $L$"
LOSS = "scratch, w: final over initial training loss, largest over $L$"
VOCABULARY = "share of GPT-2's 50,257 token ids the data reads"


def test_the_stable_rank_check_reads_step_0_of_both_arms():
    """After step 0 the stable rank with residuals falls to that without, which rises
    tenfold: the check, of step 0, still passes."""
    result = stored()
    for r in result.runs:
        r.stable_rank[:, 1:] = 3.0 if r.residual else 30.0
    assert failed(result) == []


@pytest.mark.parametrize("w, ok", [(6.0, True), (5.7, False)])
def test_the_stable_rank_check_asks_a_ratio_of_at_least_two(w, ok):
    """Stable rank 3 without residuals: 6 with them (a ratio of exactly 2) passes,
    5.7 does not."""
    result = stored()
    for r in result.runs:
        if r.residual:
            r.stable_rank[:] = w
    assert failed(result) == (
        [] if ok else [STABLE, STABLE.replace("scratch", "pretrained")]
    )


def test_the_loss_check_fails_where_a_w_arm_ends_above_its_initial_loss():
    """One arm with residuals ending at one and a half times its initial loss."""
    result = stored()
    run = next(r for r in result.runs if r.residual and r.init == "scratch")
    run.train_loss[:, -1] = 1.5 * run.train_loss[:, 0]
    assert failed(result) == [LOSS]


def test_each_inits_checks_read_its_own_arms():
    """The pretrained arms' stable ranks equal with and without residuals fail the
    pretrained row only."""
    result = stored()
    for r in result.runs:
        if r.init == "pretrained":
            r.stable_rank[:] = 3.0
    assert failed(result) == [STABLE.replace("scratch", "pretrained")]


@pytest.mark.parametrize(
    "size, ok", [(7000, True), (25_128, True), (25_129, False), (30_000, False)]
)
def test_the_data_reads_less_than_half_of_gpt2s_token_ids(size, ok):
    result = stored()
    result.vocabulary_size = size
    assert failed(result) == ([] if ok else [VOCABULARY])


@pytest.mark.parametrize(
    "control, stalls",
    [
        ([0.44] * 3, True),  # the stored control: at the majority-label error
        ([0.44, 0.38, 0.44], False),  # one seed trains past the margin
        ([0.40] * 3, True),  # within the margin of 0.05
        ([MAJORITY - verdicts.BARELY_MARGIN] * 3, True),  # at the margin exactly
    ],
)
def test_the_control_stalls_only_where_every_seed_ends_within_the_margin(
    control, stalls
):
    result = stored()
    result.control.final_error = control
    assert verdicts.control_stalls(result) is stalls
    # the arm of the control's depth with scaled projections counts too
    result.runs = [
        replace(r, train_error=r.train_error - 0.2)
        if (r.init, r.layers, r.residual) == ("scratch", 10, False)
        else r
        for r in result.runs
    ]
    assert verdicts.control_stalls(result) is False
