"""The rank-collapse experiment: its typed result, the batched GD runs against
``gradient_descent``, the bound of eq. ``rc-centred``, the acceptance table, and claims
whose statuses follow from the numbers (recomputed here, then flipped by editing
them)."""

import copy
import dataclasses
import math

import numpy as np
import pytest
import torch

from rcutil import claims
from rcutil.checks import require
from rcutil.claims import INCONCLUSIVE, NOT_REPRODUCED, REPRODUCED
from rcutil.experiments import rank_collapse as rc
from rcutil.experiments.rank_collapse import verdicts
from rcutil.model import Transformer, attention
from rcutil.profiles import PROFILES, settings_for
from rcutil.spectra import random_inputs, spectrum, uniform_deviation
from rcutil.train import gradient_descent


@pytest.fixture(scope="module")
def result():
    return rc.run(settings_for(rc.SETTINGS, "ci"), progress=False)


def small_settings(**changes):
    small = dict(
        seeds=(0, 1),
        max_log2_d_qk=14,
        train_seeds=(0, 1),
        train_d_qk=64,
        train_steps=6,
        depth_draws=2,
        depth_layers=3,
    )
    return dataclasses.replace(settings_for(rc.SETTINGS, "ci"), **(small | changes))


# --------------------------------------------------------------------------- the result
def test_the_result_is_typed_and_survives_json(result):
    settings = result.settings
    S, V = len(settings.seeds), settings.max_log2_d_qk + 1
    assert result.d_qk == [2**k for k in range(V)]
    assert {(p.scaling, p.beta) for p in result.sweep} == {
        (s, b) for s in ("tau=d_qk", "tau=sqrt(d_qk)", "tau=1") for b in rc.BETAS
    }
    for p in result.sweep:
        for array in (
            p.sigma_min,
            p.effective_rank,
            p.centred_lower,
            p.max_weight,
            p.deviation,
        ):
            assert array.shape == (S, V)
    T = len(settings.train_seeds)
    assert [r.beta for r in result.training] == [0.0, 1.0]
    for r in result.training:
        assert r.loss.shape == r.sigma_min.shape == (T, settings.train_steps + 1)
    assert len(result.training_floor) == T and len(result.inputs.sigma_min) == S
    back = rc.Result.from_json(result.to_json())
    for a, b in zip(back.sweep + back.training, result.sweep + result.training):
        for field in dataclasses.fields(a):
            name = field.name
            np.testing.assert_array_equal(getattr(a, name), getattr(b, name))


def test_every_profile_sweeps_far_and_compares_enough_seeds():
    for profile in PROFILES:
        settings = settings_for(rc.SETTINGS, profile)
        assert settings.max_log2_d_qk >= 14
    assert len(settings_for(rc.SETTINGS, "book").train_seeds) >= 5
    assert len(settings_for(rc.SETTINGS, "paper").train_seeds) >= 3


def test_the_runs_are_deterministic():
    settings = small_settings()
    a, b = rc.run(settings, progress=False), rc.run(settings, progress=False)
    assert a.to_json() == b.to_json()


def test_the_acceptance_table_holds_on_the_ci_result(result):
    table = verdicts.checks(result)
    assert len(table) == 32
    require(table)


def test_the_acceptance_table_fails_when_the_residual_run_stalls(result):
    edited = copy.deepcopy(result)
    run1 = next(r for r in edited.training if r.beta == 1.0)
    run1.loss[:, -1] = run1.loss[:, 0]
    with pytest.raises(AssertionError, match="Phi_T"):
        require(verdicts.checks(edited))


# --------------------------------------------------------------------------- training
@pytest.mark.parametrize("beta", [0.0, 1.0])
def test_batched_training_is_gradient_descent_on_each_model(beta):
    """Every member of the batch follows ``gradient_descent`` on its own model."""
    settings = small_settings()
    runs = {r.beta: r for r in rc.train(settings)}
    for i, seed in enumerate(settings.train_seeds):
        X, Y = rc.training_problem(settings, seed)
        d_qk = settings.train_d_qk
        model = Transformer(
            settings.d,
            d_qk,
            settings.train_d_F,
            settings.train_d_out,
            tau=float(d_qk),
            beta=beta,
            seed=seed,
        )
        h = gradient_descent(
            model, X, Y, mu=settings.train_mu, steps=settings.train_steps
        )
        np.testing.assert_allclose(runs[beta].loss[i], h.loss, rtol=1e-10)
        np.testing.assert_allclose(runs[beta].sigma_min[i], h.sigma_min, rtol=1e-8)


def test_training_refuses_a_step_that_diverges():
    with pytest.raises(FloatingPointError, match="train_mu"):
        rc.train(small_settings(train_mu=1e6, train_steps=40))


def test_the_floor_is_the_least_loss_of_token_constant_outputs():
    settings = small_settings()
    _, Y = rc.training_problem(settings, 0)
    floor = rc.per_sample_floor(Y)
    mean = Y.mean(dim=-2, keepdim=True)
    for shift in (0.0, 0.1, -0.3):  # any other constant per sample is worse
        other = 0.5 * float(((mean + shift - Y) ** 2).sum())
        assert other >= floor - 1e-12
    assert floor == pytest.approx(0.5 * float(((mean - Y) ** 2).sum()), rel=1e-12)


# --------------------------------------------------------------------------- the bound
def _instances(S: int, seed: int = 0):
    """Inputs (S, N, n, d), Gaussian W_Q, W_K with scales from nearly uniform to nearly
    hard attention, and Gaussian W_V, for the bound of eq. rc-centred."""
    N, n, d = 4, 16, 8
    X = random_inputs(S, N, n, d, seed=seed)
    gen = torch.Generator().manual_seed(seed + 1)
    scale = 10.0 ** (4 * torch.rand(S, 1, 1, 1, generator=gen, dtype=torch.float64) - 3)
    W_Q = torch.randn(S, 1, d, d, generator=gen, dtype=torch.float64) * scale
    W_Q = W_Q / math.sqrt(d)
    W_K = torch.randn(S, 1, d, d, generator=gen, dtype=torch.float64) / math.sqrt(d)
    W_V = torch.randn(S, 1, d, d, generator=gen, dtype=torch.float64) / math.sqrt(d)
    return X, W_Q, W_K, W_V


@pytest.mark.parametrize("beta", [0.0, 0.5, 1.0, 2.0])
def test_centred_bound_holds_for_any_value_matrix(beta):
    X, W_Q, W_K, W_V = _instances(400)
    tau = math.sqrt(X.shape[-1])
    delta = uniform_deviation(X, W_Q, W_K, tau)
    smin = spectrum(attention(X, W_Q, W_K, W_V, tau) + beta * X)["sigma_min"]
    for s in range(X.shape[0]):  # the bound takes one instance at a time, (1, N, n, d)
        lower = rc.centred_lower_bound(X[s : s + 1], W_V[s, 0], delta[s : s + 1], beta)
        assert lower.item() <= smin[s].item() * (1 + 1e-10), (s, beta)


def test_centred_bound_is_attained_with_uniform_attention_and_w_v_minus_beta_i():
    """With P = U and W_V = -beta I, Attn(X) + beta X = beta (X - 1 x_bar^T) exactly:
    the bound beta sigma_min(X~) is sigma_min itself, so no larger bound (such as
    beta sigma_min(X)) holds."""
    X = random_inputs(1, 4, 16, 8, seed=3)
    beta, d = 0.7, X.shape[-1]
    W_V = -beta * torch.eye(d, dtype=torch.float64)
    zero = torch.zeros(d, d, dtype=torch.float64)
    delta = uniform_deviation(X, zero, zero, 1.0)
    assert delta.item() < 1e-15
    smin = spectrum(attention(X, zero, zero, W_V, 1.0) + beta * X)["sigma_min"].item()
    lower = rc.centred_lower_bound(X, W_V, delta, beta).item()
    assert lower == pytest.approx(smin, rel=1e-12)
    assert beta * spectrum(X)["sigma_min"].item() > smin * (1 + 1e-3)


def test_the_stored_bound_is_the_formula_on_the_stored_ingredients(result):
    inputs = result.inputs
    for p in result.sweep:
        expected = (
            p.beta * np.asarray(inputs.sigma_min_centred)[:, None]
            - p.deviation
            * np.asarray(inputs.norm)[:, None]
            * np.asarray(inputs.norm_W_V)[:, None]
        )
        np.testing.assert_allclose(p.centred_lower, expected, rtol=1e-9, atol=1e-12)


# --------------------------------------------------------------------------- claims
def _sweep(result, scaling, beta):
    (p,) = [p for p in result.sweep if p.scaling == scaling and p.beta == beta]
    return p


def _collapses(result, scaling) -> bool:
    """The collapse rule, written out: at the largest d_QK the seed mean of
    sigma_min(Attn X) is below 1e-3 of that of Attn X + X, and it decreases strictly
    over the (at least three) d_QK of the last decade."""
    a = _sweep(result, scaling, 0.0).sigma_min
    z = _sweep(result, scaling, 1.0).sigma_min
    last = [j for j, v in enumerate(result.d_qk) if 10 * v >= result.d_qk[-1]]
    means = [a[:, j].mean() for j in last]
    falling = all(means[k + 1] < means[k] for k in range(len(means) - 1))
    return a[:, -1].mean() < 1e-3 * z[:, -1].mean() and len(means) >= 3 and falling


def _spectral_verdict(result) -> str:
    bound = all(
        (p.centred_lower <= p.sigma_min * (1 + 1e-10)).all() for p in result.sweep
    )
    positive = _sweep(result, "tau=d_qk", 1.0).centred_lower[:, -1].min() > 0
    ok = _collapses(result, "tau=d_qk") and bound and positive
    return REPRODUCED if ok else NOT_REPRODUCED


def _ends(result):
    """GD's last loss over its floor, per seed, at beta = 0 and beta = 1."""
    floor = np.asarray(result.training_floor)
    return [
        r.loss[:, -1] / floor for r in sorted(result.training, key=lambda r: r.beta)
    ]


def _verdicts(result) -> dict:
    return {c.key: c.verdict for c in verdicts.claims(result)}


def _with_seeds(result, ends0, ends1):
    """The result with GD's last losses over the floor set seed by seed: ``ends0``
    without, ``ends1`` with the residual (floor 1, as many seeds as given)."""
    edited = copy.deepcopy(result)
    k = len(ends0)
    for run in edited.training:
        loss = np.ones((k, run.loss.shape[1]))
        loss[:, -1] = ends1 if run.beta == 1.0 else ends0
        run.loss = loss
    edited.training_floor = [1.0] * k
    edited.settings = dataclasses.replace(edited.settings, train_seeds=tuple(range(k)))
    return edited


def test_verdicts_follow_from_the_numbers(result):
    """The spectral claim by its rule written out; GD's by its paired test: four seeds
    cannot resolve it (the smallest paired p-value is 1/16)."""
    without, with_ = _ends(result)
    assert with_.max() < without.min() and len(with_) == len(without) == 4
    assert _verdicts(result) == {
        "rank-collapse": _spectral_verdict(result),
        "rank-collapse-gd": INCONCLUSIVE,
    }
    assert _spectral_verdict(result) == REPRODUCED
    gd = verdicts.claims(result)[1]
    assert gd.decision.parts[0].p == pytest.approx(1 / 16)
    assert "it would take about 5 seeds per arm" in gd.reason
    for claim in verdicts.claims(result):
        assert claim.setting.kind == claims.RECONSTRUCTION


def test_the_collapse_is_read_at_the_largest_d_qk(result):
    edited = copy.deepcopy(result)
    attn = _sweep(edited, "tau=d_qk", 0.0).sigma_min
    attn[:, -1] = attn[:, -2] * 1.01  # the last d_QK no longer falls
    assert _spectral_verdict(edited) == NOT_REPRODUCED
    assert _verdicts(edited)["rank-collapse"] == NOT_REPRODUCED
    assert verdicts.claims(edited)[0].reason == "fails: the collapse"
    edited = copy.deepcopy(result)  # falling, but to 2e-3 of the residual
    point = _sweep(edited, "tau=d_qk", 0.0)
    point.sigma_min = (
        point.sigma_min * 2e-3 / verdicts.collapse(result, "tau=d_qk").ratio
    )
    assert _spectral_verdict(edited) == NOT_REPRODUCED
    assert _verdicts(edited)["rank-collapse"] == NOT_REPRODUCED
    assert "(2.0e-03 of" in verdicts.claims(edited)[0].book
    edited = copy.deepcopy(result)  # below 1e-3 only at the largest d_QK
    point = _sweep(edited, "tau=d_qk", 0.0)
    point.sigma_min[:, :-1] *= 10
    second = (
        point.sigma_min[:, -2].mean()
        / _sweep(edited, "tau=d_qk", 1.0).sigma_min[:, -2].mean()
    )
    assert second > 1e-3
    assert _spectral_verdict(edited) == _verdicts(edited)["rank-collapse"] == REPRODUCED


def test_the_collapse_is_read_without_the_residual(result):
    edited = copy.deepcopy(result)
    for p in edited.sweep:  # beta = 0 and beta = 1 swap places
        p.beta = {0.0: 1.0, 1.0: 0.0}.get(p.beta, p.beta)
    assert _verdicts(edited)["rank-collapse"] == NOT_REPRODUCED


def test_the_scaling_changes_the_setting_not_the_verdict(result):
    edited = copy.deepcopy(result)
    for p in edited.sweep:  # the two scalings swap places
        p.scaling = {"tau=d_qk": "tau=sqrt(d_qk)", "tau=sqrt(d_qk)": "tau=d_qk"}.get(
            p.scaling, p.scaling
        )
    assert _verdicts(edited)["rank-collapse"] == NOT_REPRODUCED
    row = verdicts.claims(result)[0]
    assert row.setting.differences[-1].endswith("does not collapse")
    edited = copy.deepcopy(result)  # tau = sqrt(d_QK) collapsing as well
    for beta in rc.BETAS:
        usual = _sweep(edited, "tau=sqrt(d_qk)", beta)
        usual.sigma_min = _sweep(edited, "tau=d_qk", beta).sigma_min.copy()
    assert _spectral_verdict(edited) == REPRODUCED
    row = verdicts.claims(edited)[0]
    assert row.verdict == REPRODUCED
    assert row.setting.differences[-1].endswith("collapses too")


def test_the_bound_is_required_on_every_seed_and_everywhere(result):
    edited = copy.deepcopy(result)  # one seed's bound negative, still a bound
    _sweep(edited, "tau=d_qk", 1.0).centred_lower[0, -1] = -1.0
    assert np.median(_sweep(edited, "tau=d_qk", 1.0).centred_lower[:, -1]) > 0
    assert _verdicts(edited)["rank-collapse"] == NOT_REPRODUCED
    row = verdicts.claims(edited)[0]
    assert row.reason == "fails: a positive bound" and "$\\ge$ -1.00 on" in row.book
    edited = copy.deepcopy(result)  # the bound above sigma_min at one point
    p = _sweep(edited, "tau=1", 0.5)
    p.centred_lower[1, 3] = p.sigma_min[1, 3] * 1.01
    assert _verdicts(edited)["rank-collapse"] == NOT_REPRODUCED
    assert verdicts.claims(edited)[0].reason == "fails: the bound"


SIX_WITHOUT = np.array([1.0, 0.9, 1.1, 0.95, 1.05, 1.0])
SIX_WITH = np.array([0.01, 0.02, 0.015, 0.012, 0.03, 0.02])


def test_six_seeds_all_lower_with_the_residual_reproduce_it(result):
    edited = _with_seeds(result, SIX_WITHOUT, SIX_WITH)
    gd = verdicts.claims(edited)[1]
    d = np.log10(SIX_WITH) - np.log10(SIX_WITHOUT)
    part = gd.decision.parts[0]
    assert gd.verdict == REPRODUCED and part.p == pytest.approx(1 / 64)
    assert part.estimate == pytest.approx(d.mean()) and part.high < 0
    assert part.values == (tuple(np.log10(SIX_WITH)), tuple(np.log10(SIX_WITHOUT)))
    assert gd.evidence == gd.decision.line() and "6 paired seeds" in gd.evidence
    assert claims.num(d.mean()) in gd.evidence
    assert "(mean ± s.e., 6 seeds)" in gd.book
    assert gd.reason == "the test decides for it"


def test_one_seed_against_decides_by_its_size(result):
    small = SIX_WITH.copy()
    small[0] = 1.3 * SIX_WITHOUT[0]  # the smallest difference, the other way
    gd_small = verdicts.claims(_with_seeds(result, SIX_WITHOUT, small))[1]
    assert gd_small.verdict == REPRODUCED
    assert gd_small.decision.parts[0].p == pytest.approx(2 / 64)
    large = SIX_WITH.copy()
    large[0] = 100.0 * SIX_WITHOUT[0]  # two decades the other way on one seed
    gd_large = verdicts.claims(_with_seeds(result, SIX_WITHOUT, large))[1]
    assert gd_large.verdict == INCONCLUSIVE
    assert gd_large.decision.parts[0].p > 0.05


def test_gd_is_decided_by_the_last_loss_of_each_residual_strength(result):
    swapped = _with_seeds(result, SIX_WITH, SIX_WITHOUT)
    gd = verdicts.claims(swapped)[1]
    assert gd.verdict == NOT_REPRODUCED
    assert gd.reason.endswith("goes the other way")
    edited = _with_seeds(result, SIX_WITHOUT, SIX_WITH)  # the best step stays low
    run1 = next(r for r in edited.training if r.beta == 1.0)
    run1.loss[:, 1] = 1e-6
    run1.loss[:, -1] = SIX_WITHOUT * 1.5
    assert _verdicts(edited)["rank-collapse-gd"] == NOT_REPRODUCED


def test_noise_alone_is_inconclusive(result):
    noise = np.array([1.001, 0.999, 1.0005, 0.9995, 1.0002, 0.9998])
    edited = _with_seeds(result, SIX_WITHOUT, SIX_WITHOUT * noise)
    without, with_ = _ends(edited)  # the arms interleave: neither side resolves
    assert with_.min() < without.max() and without.min() < with_.max()
    gd = verdicts.claims(edited)[1]
    assert gd.verdict == INCONCLUSIVE and "it would take" in gd.reason


def test_the_claims_show_their_uncertainty_and_typeset_math(result):
    for claim in verdicts.claims(result):
        assert "±" in claim.book and claim.rule
        for text in (claim.claim, claim.paper, claim.book, claim.reason, claim.rule):
            assert "d_QK" not in text and "sigma_min" not in text, text
    gd = verdicts.claims(result)[1]
    assert "p = " in gd.evidence and "4 paired seeds" in gd.evidence
