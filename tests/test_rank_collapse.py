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


# --------------------------------------------------------------------------- the table
def _row(table, words):
    """The row of the acceptance table whose text is ``words``, or the one row whose
    text has them."""
    exact = [c for c in table if c.what == words]
    (row,) = exact or [c for c in table if words in c.what]
    return row


def _readings(result) -> dict:
    """What each row of the acceptance table reads, by words of its text, written out
    from the stored arrays: the seed means at the largest d_QK, the sweep's windows,
    GD's first and last losses, the last layer of the stacks with skips."""
    at = {b: _sweep(result, "tau=d_qk", b) for b in rc.BETAS}
    usual0, usual1 = (_sweep(result, "tau=sqrt(d_qk)", b) for b in (0.0, 1.0))
    hard0 = _sweep(result, "tau=1", 0.0)
    d_qk = np.asarray(result.d_qk)
    centred = np.asarray(result.inputs.sigma_min_centred)
    attn = at[0.0].sigma_min.mean(axis=0)
    rank = at[0.0].effective_rank.mean(axis=0)
    flat = usual0.sigma_min.mean(axis=0)[d_qk >= 64]
    window = d_qk >= 256
    runs = {r.beta: r for r in result.training}
    start = {b: r.loss[:, -1] / r.loss[:, 0] for b, r in runs.items()}
    skip = np.exp(np.log(np.clip(result.depth[1].residual, 1e-16, None)).mean(axis=0))
    slope = np.polyfit(np.log(d_qk[window]), np.log(attn[window]), 1)[0]
    lowest = at[1.0].centred_lower[:, -1].min()
    return {
        "the largest $d_{QK}$": result.d_qk[-1],
        "over $\\sigma_{\\min}(\\mathrm{Attn}(X) + X)$": attn[-1]
        / at[1.0].sigma_min[:, -1].mean(),
        "in the last decade": int((10 * d_qk >= d_qk[-1]).sum()),
        "slope of $\\log$": slope,
        "effective rank per sample": rank[-1],
        "16 times smaller": rank[-1] / rank[-5],
        "largest attention weight times $n$": at[0.0].max_weight[:, -1].mean()
        * result.settings.n,
        "over $d_{QK} = 1$": at[1.0].sigma_min[:, -1].mean()
        / at[1.0].sigma_min[:, 0].mean(),
        "X/2)$ over": at[0.5].sigma_min[:, -1].mean() / attn[-1],
        "smallest over largest": flat.min() / flat.max(),
        "$\\tau = 1$: largest attention weight": hard0.max_weight[:, -1].mean(),
        "under $\\tau = 1$ over": hard0.sigma_min[:, -1].mean() / attn[-1],
        "$\\beta = 1$: the bound over": (at[1.0].centred_lower[:, -1] / centred).min(),
        "$\\beta = 0.5$: the bound over": (
            at[0.5].centred_lower[:, -1] / (0.5 * centred)
        ).min(),
        "the bound at the largest $d_{QK}$, smallest": lowest,
        "$\\sigma_{\\min}(X)$, smallest": (
            centred / np.asarray(result.inputs.sigma_min)
        ).min(),
        "the bound at the largest $d_{QK}$, largest": usual1.centred_lower[:, -1].max(),
        "GD, $\\beta = 1$: $\\Phi_T / \\Phi_0$": start[1.0].max(),
        "GD, $\\beta = 0$: $\\Phi_T / \\Phi_0$": start[0.0].min(),
        "with skips (geometric mean)": skip[-1],
    }


def test_each_row_of_the_table_shows_its_reading(result):
    table = verdicts.checks(result)
    for words, value in _readings(result).items():
        assert _row(table, words).value == pytest.approx(value, rel=1e-12), words
    # the attention's own readings are the same at every beta (one attention matrix
    # per seed and d_QK), so the table may read them at any
    for scaling in ("tau=d_qk", "tau=sqrt(d_qk)", "tau=1"):
        weights = [_sweep(result, scaling, b).max_weight for b in rc.BETAS]
        for other in weights[1:]:
            np.testing.assert_array_equal(other, weights[0])


def _scaled(array, j, value, now):
    """``array[:, j]`` scaled so that a reading proportional to it moves from ``now``
    to ``value``."""
    array[:, j] *= value / now


def _set_slope(result, value):
    attn = _sweep(result, "tau=d_qk", 0.0)
    now = _readings(result)["slope of $\\log$"]
    attn.sigma_min = attn.sigma_min * np.asarray(result.d_qk) ** (value - now)


def _set_rank(result, value):
    rank = _sweep(result, "tau=d_qk", 0.0).effective_rank
    rank[:, -1] = value


def _set_rank_ratio(result, value):
    rank = _sweep(result, "tau=d_qk", 0.0).effective_rank
    rank[:, -1] = value * rank[:, -5].mean()


def _set_weight(result, value):
    for beta in rc.BETAS:  # one attention matrix, read at every beta
        _sweep(result, "tau=d_qk", beta).max_weight[:, -1] = value / result.settings.n


def _set_flat(result, value):
    """The mean at d_QK = 2^6 under tau = sqrt(d_QK) made ``value`` times the largest
    mean from there on (and the smallest)."""
    usual = _sweep(result, "tau=sqrt(d_qk)", 0.0).sigma_min
    means = usual.mean(axis=0)
    _scaled(usual, 6, value * means[7:].max(), means[6])


def _set_largest(result, value):
    """The sweep cut at d_QK = ``value``."""
    k = result.d_qk.index(value) + 1
    result.d_qk = result.d_qk[:k]
    for p in result.sweep:
        for field in dataclasses.fields(p):
            if isinstance(getattr(p, field.name), np.ndarray):
                setattr(p, field.name, getattr(p, field.name)[:, :k])


def _set_half(result, value):
    half = _sweep(result, "tau=d_qk", 0.5).sigma_min
    attn = _sweep(result, "tau=d_qk", 0.0).sigma_min
    _scaled(half, -1, value, half[:, -1].mean() / attn[:, -1].mean())


def _set_unscaled(result, value):
    hard = _sweep(result, "tau=1", 0.0).sigma_min
    attn = _sweep(result, "tau=d_qk", 0.0).sigma_min
    _scaled(hard, -1, value, hard[:, -1].mean() / attn[:, -1].mean())


def _set_excess(result, value):
    """One point of the sweep no other row reads: sigma_min 1, the bound ``value``."""
    point = _sweep(result, "tau=1", 0.5)
    point.sigma_min[1, 3], point.centred_lower[1, 3] = 1.0, value


def _set_lowest(result, value):
    _sweep(result, "tau=d_qk", 1.0).centred_lower[0, -1] = value


def _set_usual_bound(result, value):
    _sweep(result, "tau=sqrt(d_qk)", 1.0).centred_lower[0, -1] = value


def _gd(result, beta):
    return next(r for r in result.training if r.beta == beta)


def _set_start(result, value):
    run = _gd(result, 1.0)
    run.loss[0, -1] = value * run.loss[0, 0]


def _set_separated(result, value):
    run0 = _gd(result, 0.0)
    run0.sigma_min = run0.sigma_min * (
        value * _gd(result, 1.0).sigma_min.min() / run0.sigma_min.max()
    )


def _set_floor(result, value):
    _gd(result, 1.0).loss[:, -1] = value * np.asarray(result.training_floor)


def _set_pure(result, value):
    result.depth[0].residual[:, 6] = value


def _decay(exponent, layers=12):
    """Residuals (2 draws, layers + 1) from 0.5 with ``log r_{l+1} = exponent log
    r_l``."""
    logr = math.log(0.5) * exponent ** np.arange(layers + 1.0)
    return np.tile(np.exp(np.maximum(logr, -700.0)), (2, 1))


def _set_exponent(result, value):
    result.depth[0].residual = _decay(value)


# row, how to set its value, a value within its threshold, one beyond
THRESHOLDS = [
    ("the largest $d_{QK}$", _set_largest, 2**14, 2**13),
    ("slope of $\\log$", _set_slope, -0.75, -1.0),
    ("the same slope", _set_slope, -0.35, 0.0),
    ("effective rank per sample", _set_rank, 1.05, 1.5),
    ("16 times smaller", _set_rank_ratio, 0.95, 1.5),
    ("largest attention weight times $n$", _set_weight, 1.05, 1.5),
    ("X/2)$ over", _set_half, 100.5, 99.5),
    ("smallest over largest", _set_flat, 0.35, 0.25),
    ("under $\\tau = 1$ over", _set_unscaled, 10.5, 9.5),
    ("over what it bounds", _set_excess, 1 + verdicts.ROUNDING, 1.5),
    ("over what it bounds", _set_excess, 1.0, np.nextafter(1 + verdicts.ROUNDING, 2)),
    ("the bound at the largest $d_{QK}$, smallest", _set_lowest, 0.5, 0.0),
    ("the bound at the largest $d_{QK}$, largest", _set_usual_bound, -0.5, 0.5),
    ("GD, $\\beta = 1$: $\\Phi_T / \\Phi_0$", _set_start, 0.05, 0.5),
    ("largest at $\\beta = 0$ over smallest", _set_separated, 0.005, 0.5),
    ("GD, $\\beta = 1$: $\\Phi_T / \\Phi_{\\mathrm{floor}}$", _set_floor, 0.15, 0.5),
    ("without skips", _set_pure, 1e-13, 1e-6),
    ("\\log r_{l+1} / \\log r_l$ there", _set_exponent, 2.5, 1.5),
]


@pytest.mark.parametrize(
    "words, set_value, within, beyond",
    THRESHOLDS,
    ids=[
        f"{i}-{t[1].__name__.removeprefix('_set_')}" for i, t in enumerate(THRESHOLDS)
    ],
)
def test_a_row_holds_within_its_threshold_and_fails_beyond(
    result, words, set_value, within, beyond
):
    """Each row's value, set on the stored result through the arrays it reads, holds
    on the side of its threshold the chapter states and fails just across it."""
    for value, holds in ((within, True), (beyond, False)):
        edited = copy.deepcopy(result)
        set_value(edited, value)
        row = _row(verdicts.checks(edited), words)
        assert row.value == pytest.approx(value, rel=1e-9), (words, value)
        assert row.ok is holds, (words, value)


def test_the_sweep_cut_short_still_reads_its_largest_d_qk(result):
    edited = copy.deepcopy(result)
    _set_largest(edited, 2**14)
    for words, value in _readings(edited).items():
        assert _row(verdicts.checks(edited), words).value == pytest.approx(value), words


def test_without_a_layer_of_fast_decay_the_exponent_rows_fail_and_show_zero(result):
    edited = copy.deepcopy(result)
    edited.depth[0].residual = np.ones_like(edited.depth[0].residual)  # no decay
    table = verdicts.checks(edited)
    layers = _row(table, "layers of doubly exponential decay")
    exponent = _row(table, "\\log r_l$ there, smallest")
    assert layers.value == 0 and not layers.ok
    assert exponent.value == 0.0 and not exponent.ok
    with pytest.raises(AssertionError, match="there, smallest: 0 is not ≥ 2"):
        require(table)


def test_the_decay_exponents_are_read_between_the_start_and_the_floor():
    """A pair of layers counts when r_l is below 0.9 and r_{l+1} above 1e-13, both
    strictly, the last pair too."""
    ratio = math.log(0.1) / math.log(0.5)
    res = np.array([[0.95, 0.9, 0.5, 0.1, 1e-13, 1e-20]])
    assert verdicts.cubic_exponents(res) == pytest.approx([ratio])
    assert verdicts.cubic_exponents(np.array([[0.5, 0.1]])) == pytest.approx([ratio])


def test_a_residual_of_zero_is_read_at_the_floor():
    """Residuals below RES_FLOOR (exact zeros too) are read at it, in the geometric
    mean over draws and in the decay exponents."""
    res = np.array([[0.5, 0.0], [0.5, 1e-8]])
    mean = math.sqrt(verdicts.RES_FLOOR * 1e-8)
    np.testing.assert_allclose(verdicts.geometric_mean(res), [0.5, mean], rtol=1e-12)
    (exponent,) = verdicts.cubic_exponents(res)
    assert exponent == pytest.approx(math.log(mean) / math.log(0.5))


def test_the_bound_may_exceed_what_it_bounds_by_the_rounding_only(result):
    limit = 1 + verdicts.ROUNDING
    for value, holds in ((1.0, True), (limit, True), (np.nextafter(limit, 2), False)):
        edited = copy.deepcopy(result)
        _set_excess(edited, value)
        spectral = verdicts.claims(edited)[0]
        assert (spectral.verdict == REPRODUCED) is holds, value
        assert holds or spectral.reason == "fails: the bound"


def test_a_positive_bound_is_one_above_zero_on_every_seed(result):
    for value, holds in ((0.5, True), (0.0, False)):
        edited = copy.deepcopy(result)
        _set_lowest(edited, value)
        spectral = verdicts.claims(edited)[0]
        assert (spectral.verdict == REPRODUCED) is holds, value
        assert f"$\\ge$ {value:.2f} on every seed" in spectral.book
        assert holds or spectral.reason == "fails: a positive bound"


def test_the_collapse_reading_shows_each_scalings_mean_trend_and_largest_d_qk(result):
    spectral = verdicts.claims(result)[0]
    assert spectral.book.startswith("at $d_{QK} = 2^{16}$, ")
    for scaling, trend in (("tau=d_qk", "falling"), ("tau=sqrt(d_qk)", "not falling")):
        attn = _sweep(result, scaling, 0.0).sigma_min[:, -1]
        ratio = attn.mean() / _sweep(result, scaling, 1.0).sigma_min[:, -1].mean()
        mean = claims.fmt(*claims.mean_se(attn))
        tex, resid = verdicts.TEX[scaling], verdicts.TEX["resid"]
        assert f"{mean} under {tex} ({ratio:.1e} of {resid}, {trend})" in spectral.book
    assert _collapses(result, "tau=d_qk") and not _collapses(result, "tau=sqrt(d_qk)")
    # held: the reason gives the condition of the limit, not a failure
    assert "{eq}`rc-variance`" in spectral.reason
    assert spectral.setting.differences[-1] in spectral.reason


def test_the_settings_name_each_difference_from_the_paper(result):
    spectral, gd = verdicts.claims(result)
    first = spectral.setting.differences
    assert len(first) == 4 and first[0] == r"$\tau = d_{QK}$"
    assert r"1/\sqrt d" in first[1] and "{eq}`rc-centred`" in first[2]
    second = gd.setting.differences
    assert len(second) == 3 and r"\tau = d_{QK}" in second[0]
    assert r"\tanh" in second[1] and "sizes and step" in second[2]


def test_the_gd_row_shows_the_last_loss_over_the_floor_of_each_residual_strength(
    result,
):
    gd = verdicts.claims(result)[1]
    for beta in (1.0, 0.0):
        shown = claims.fmt(*claims.mean_se(verdicts.final_over_floor(result, beta)))
        assert f"$\\beta = {beta:g}$: {shown}" in gd.book
    assert gd.book.index("$\\beta = 1$") < gd.book.index("$\\beta = 0$")


def test_the_depth_checks_name_the_layer_they_read(result):
    """The depth checks name the layer they read: r_6 without skips (where pure
    attention has reached the floor), and the last layer of the stack with skips."""
    rows = [c.what for c in verdicts.checks(result)]
    layers = result.settings.depth_layers
    assert f"depth: $r_{{{layers}}}$ with skips (geometric mean)" in rows
    assert "depth: $r_{6}$ without skips (geometric mean)" in rows


def test_the_gd_evidence_names_its_quantity_and_the_order_of_the_difference(result):
    """The estimate is log10 of the last loss over the floor, beta = 1 minus beta = 0:
    negative where the residual ends lower."""
    gd = verdicts.claims(result)[1]
    label = r"$\log_{10}\Phi_T/\Phi_{\mathrm{floor}}$, $\beta = 1$ minus $\beta = 0$"
    assert gd.evidence.startswith(f"{label}: −")
