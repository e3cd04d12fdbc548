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
def test_selection_runs_every_rate_at_full_length_from_the_selection_seed(monkeypatch):
    """Every rate of the arm's grid is trained by the full recipe from the selection
    seed; the lowest final training loss wins; a diverging run counts as infinite."""
    seen = []

    def fake_train_one(settings, data, init, layers, residual, seed, lr, **kw):
        seen.append((settings.steps, seed, lr, kw["record"]))
        if lr == 1e-2:
            raise FloatingPointError("the loss became nan")
        loss = {1e-4: 0.5, 3e-4: 0.3, 1e-3: 0.4}[lr]
        return sst2.Curve([300], [loss], [loss / 2], [], [], [loss])

    monkeypatch.setattr(sst2, "train_one", fake_train_one)
    grid = [1e-4, 3e-4, 1e-3, 1e-2]
    settings = replace(
        SETTINGS,
        steps=300,
        seeds=(3, 4),
        selection_seed=9,
        lr_grid={"scratch": sst2.Rates(w=tuple(grid), wo=(1e-3,))},
    )
    chosen = sst2.select_rate(settings, {}, "scratch", 2, True)
    assert chosen.lr == 3e-4 and chosen.train_loss == [0.5, 0.3, 0.4, math.inf]
    assert chosen.train_error[:3] == [0.25, 0.15, 0.2]
    assert math.isnan(chosen.train_error[3])
    assert seen == [(300, 9, lr, False) for lr in grid]  # full length, unreported seed
    seen.clear()
    assert sst2.select_rate(settings, {}, "scratch", 2, False).lr == 1e-3  # wo grid
    assert seen == [(300, 9, 1e-3, False)]


def test_selection_on_a_real_model_prefers_a_rate_that_trains():
    settings = replace(
        SETTINGS, steps=8, lr_grid={"scratch": sst2.Rates(w=(1e-7, 3e-3), wo=(1e-3,))}
    )
    chosen = sst2.select_rate(settings, tiny_data(), "scratch", 2, True)
    assert chosen.lr == 3e-3 and chosen.train_loss[1] < chosen.train_loss[0]


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
    batches)."""
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
    counts = {}
    for n in (steps, 2):
        with ScalarReads() as reads:
            sst2.train_one(
                replace(SETTINGS, steps=n, eval_every=100),
                data,
                "scratch",
                2,
                True,
                0,
                1e-3,
            )
        counts[n] = reads.count
    assert counts[steps] == counts[2], counts


def test_a_diverging_run_names_the_steps_and_the_fix(monkeypatch):
    losses = iter([0.7, 0.6, 0.5, 0.4, float("nan"), 0.3])
    monkeypatch.setattr(
        sst2_train, "train_step", lambda *a, **k: torch.tensor(next(losses))
    )
    with pytest.raises(
        FloatingPointError, match=r"steps 3 and 6.*lower the profile's lr_grid"
    ):
        sst2.train_one(
            replace(SETTINGS, steps=6, eval_every=3),
            tiny_data(),
            "scratch",
            2,
            True,
            0,
            1e-3,
        )


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
        (dict(lr_grid={"scratch": sst2.Rates(w=(1e-3,), wo=())}), "both non-empty"),
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
    assert max(rows["paper"].lr_grid["pretrained"].wo) >= 1e-3  # room to retrain
    for r in rows.values():
        assert r.selection_seed not in r.seeds
    assert verdicts.at_paper_scale(rows["paper"])
    assert not verdicts.at_paper_scale(rows["book"])


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


#: What the result holds elsewhere: earlier on the error curves and in the pretrained
#: arm, errors that would decide every claim the other way.
DECOY_W = {L: W[LAYERS[-1 - i]] for i, L in enumerate(LAYERS)}  # depth reversed
DECOY_WO = {L: [0.05, 0.06, 0.07, 0.08, 0.09] for L in LAYERS}  # wo trains well


def stored(w=W, wo=WO, *, majority=MAJORITY, settings=None):
    """A result as the store holds it, with the given per-seed final training errors.
    The other fields say the opposite: the error curves before their end and the
    pretrained arm hold :data:`DECOY_W` and :data:`DECOY_WO`, and the final training
    losses fall with the error (``0.5 - error / 2``), so that a claim that reads the
    wrong step, arm or field flips."""
    settings = settings or replace(sst2.BOOK, inits=("scratch", "pretrained"))
    runs = []
    for init in settings.inits:
        for L in LAYERS:
            for residual, final, early in (
                (True, w[L], DECOY_W[L]),
                (False, wo[L], DECOY_WO[L]),
            ):
                early = np.array(early[: len(final)], dtype=float)
                if init == "pretrained":
                    final = early
                error = np.column_stack([early, early, np.array(final, dtype=float)])
                loss = np.column_stack(
                    [0.7 + 0 * early, 0.6 + 0 * early, 0.5 - error[:, -1] / 2]
                )
                ones = np.ones_like(error)
                stable, effective = 3 + 6 * residual, 2 + 9 * residual
                runs.append(
                    sst2.Run(
                        init,
                        L,
                        residual,
                        1e-3,
                        [0, 150, 300],
                        error,
                        loss,
                        loss,
                        stable * ones,
                        effective * ones,
                        [0.7] * len(final),
                        [1.0] * len(final),
                        1000,
                    )
                )
    selections = [
        sst2.Selection(r.init, r.layers, r.residual, [1e-3], [0.5], [0.2], 1e-3)
        for r in runs
    ]
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
    )
    return sst2.Result.from_json(result.to_json())


def statuses(result):
    return [c.status for c in verdicts.claims(result)]


def test_the_claims_follow_from_the_stored_numbers():
    """Every w arm below its wo arm and each depth below the one before, every seed
    apart (exact one-sided p = 1/252 per comparison of five seeds); wo at L >= 6 within
    2 s.e. of the majority-label error: each claim holds."""
    assert statuses(stored()) == [rules.DEVIATION] * 3
    assert [c.key for c in verdicts.claims(stored())] == [
        "sst2-lower",
        "sst2-depth",
        "sst2-noresidual",
    ]


def with_errors(table, L, values):
    return {**table, L: values}


@pytest.mark.parametrize(
    "name, w, wo, flips",
    [
        # w no better than wo at L = 2: "lower at every depth" is not resolved
        (
            "w ties wo at L = 2",
            with_errors(W, 2, [0.30, 0.31, 0.32, 0.33, 0.345]),
            WO,
            [rules.INCONCLUSIVE, rules.DEVIATION, rules.DEVIATION],
        ),
        # w worse than wo at L = 6
        (
            "w above wo at L = 6",
            W,
            with_errors(WO, 6, [0.05, 0.06, 0.07, 0.08, 0.09]),
            [rules.NOT_REPRODUCED, rules.DEVIATION, rules.NOT_REPRODUCED],
        ),
        # the deepest residual model no better than L = 6: the trend is not resolved
        (
            "L = 10 ties L = 6",
            with_errors(W, 10, [0.155, 0.16, 0.17, 0.18, 0.19]),
            WO,
            [rules.DEVIATION, rules.INCONCLUSIVE, rules.DEVIATION],
        ),
        # depth lowers nothing: L = 10 above L = 2
        (
            "L = 10 above L = 2",
            with_errors(W, 10, [0.25, 0.26, 0.27, 0.28, 0.29]),
            WO,
            [rules.DEVIATION, rules.NOT_REPRODUCED, rules.DEVIATION],
        ),
        # the shallow residual model fits its sentences: a floor
        (
            "L = 2 at the floor",
            with_errors(W, 2, [0.0, 0.01, 0.0, 0.02, 0.01]),
            WO,
            [rules.DEVIATION, rules.INCONCLUSIVE, rules.DEVIATION],
        ),
        # wo fits its sentences at L = 2: a floor for the first claim
        (
            "wo at the floor",
            W,
            with_errors(WO, 2, [0.0, 0.01, 0.0, 0.02, 0.01]),
            [rules.INCONCLUSIVE, rules.DEVIATION, rules.DEVIATION],
        ),
        # the deepest model without residuals trains
        (
            "L = 10 wo trains",
            W,
            with_errors(WO, 10, [0.30, 0.31, 0.32, 0.33, 0.34]),
            [rules.DEVIATION, rules.DEVIATION, rules.NOT_REPRODUCED],
        ),
        # L = 6 wo trains a little, the seeds spread: not resolved
        (
            "L = 6 wo unclear",
            W,
            with_errors(WO, 6, [0.44, 0.30, 0.44, 0.33, 0.44]),
            [rules.DEVIATION, rules.DEVIATION, rules.INCONCLUSIVE],
        ),
    ],
)
def test_editing_the_evidence_flips_the_claim(name, w, wo, flips):
    assert statuses(stored(w, wo)) == flips, name


def test_the_decoys_would_flip_every_claim():
    """Read as final errors, the decoys of :func:`stored` decide every claim the other
    way: a claim that read them would flip, so the statuses above prove it did not."""
    assert statuses(stored(DECOY_W, DECOY_WO)) == [rules.NOT_REPRODUCED] * 3


def test_the_majority_error_moves_the_threshold_of_the_third_claim():
    assert statuses(stored(majority=0.55))[2] == rules.NOT_REPRODUCED


def test_one_seed_resolves_nothing():
    one = {L: v[:1] for L, v in W.items()}, {L: v[:1] for L, v in WO.items()}
    settings = replace(sst2.BOOK, seeds=(0,), control_seeds=1)
    assert statuses(stored(*one, settings=settings)) == [rules.INCONCLUSIVE] * 3


def test_at_paper_scale_the_status_has_no_deviation():
    settings = replace(sst2.PAPER, inits=("scratch",), seeds=(0, 1, 2, 3, 4))
    assert statuses(stored(settings=settings)) == [rules.REPRODUCED] * 3


def test_the_rows_show_means_with_standard_errors_and_p():
    lower, depth, stall = verdicts.claims(stored())
    assert lower.book.startswith(
        "L = 2: w 0.22 ± 0.0071 vs wo 0.32 ± 0.0071, p = 0.004"
    )
    assert "L = 10 below L = 6: p = 0.004" in depth.book
    assert "within 0.05 of the majority-label error" in stall.claim
    assert "0.05" in stall.rule and "BARELY" not in stall.rule


# ----------------------------------------------------------------- acceptance
def test_acceptance_fails_on_a_non_finite_number_and_on_a_wrong_rank_ratio():
    assert all(c.ok for c in verdicts.checks(stored()))
    broken = stored()
    broken.runs[0].train_loss[1, 1] = float("nan")
    assert [c.what for c in verdicts.checks(broken) if not c.ok] == [
        "every recorded number is finite"
    ]
    flat = stored()
    for r in flat.runs:
        r.stable_rank[:] = 3.0  # the same rank with and without residuals
    assert any("stable rank" in c.what and not c.ok for c in verdicts.checks(flat))


@pytest.mark.parametrize(
    "control, stalls",
    [
        ([0.44] * 3, True),  # the stored control: at the majority-label error
        ([0.44, 0.38, 0.44], False),  # one seed trains past the margin
        ([0.40] * 3, True),  # within the margin of 0.05
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
