"""The Jena sweep: every model of the sweep is gradient descent of rcutil.Transformer,
the sharpness is the top of the Hessian's spectrum, the readings and the floor factor
are what they say, the result is typed and reproducible, and each claim's status flips
with the evidence it reads (the rules themselves are tested in tests/test_claims.py).
"""

import copy
import itertools
import json
from dataclasses import replace

import numpy as np
import pytest
import torch

import rcutil
from rcutil import checks, data, results, rounding, store
from rcutil import claims as C
from rcutil.estimate import project
from rcutil.experiments import jena
from rcutil.experiments.jena import verdicts
from rcutil.profiles import settings_for
from rcutil.train import TrainingDiverged

SHORT = {
    "steps": 40,
    "floor_iterations": 60,
    "spectra_every": 10,
    "lanczos_steps": 6,
    "seeds": (0, 1, 2, 3, 4),
}


@pytest.fixture(autouse=True)
def one_thread():
    """Small matrices: one torch thread is faster on a shared two-core machine."""
    with jena.torch_threads(1):
        yield


def excerpt():
    try:
        return data.find(jena.CI.file, allow_download=False)
    except data.DataError as exc:
        pytest.skip(f"the ci excerpt is not available: {exc}")


def short_ci(**changes):
    return replace(settings_for(jena.SETTINGS, "ci"), **(SHORT | changes))


@pytest.fixture(scope="module")
def stored():
    """A short ci run, stored as JSON and read back, as the chapter and the report see
    it. The JSON stays in the results folder under the run's store key (settings, code
    of the run, data), so that a later session on the same code reads it instead of
    training again: mutation testing runs these tests once per mutant of the verdicts,
    which the run never calls."""
    excerpt()
    settings = short_ci()
    key = store.result_key(jena, settings, "cpu")
    path = store.results_dir() / f"test_jena-short-{key}.json"
    if not path.is_file():
        with jena.torch_threads(1):
            result = jena.run(settings, progress=False)
        store.write_json(result.to_json(), path)
    return jena.Result.from_json(json.loads(path.read_text()))


# --------------------------------------------------------------------------- the sweep
def test_every_model_of_the_sweep_is_gradient_descent_of_its_transformer(stored):
    s = stored.settings
    prepared = jena.load_data(s)
    X, Y = torch.as_tensor(prepared.X), torch.as_tensor(prepared.Y)
    for run in stored.runs:
        for i, seed in enumerate(s.seeds):
            model = jena.make_model(s, beta=run.beta, seed=seed)
            h = rcutil.gradient_descent(model, X, Y, mu=run.step_size[i], steps=s.steps)
            np.testing.assert_allclose(
                run.loss[i],
                h.loss,
                rtol=1e-9,
                err_msg=f"{run.rule}, {run.beta}, {seed}",
            )
            np.testing.assert_allclose(run.sigma_min[i], h.sigma_min, rtol=1e-6)
            np.testing.assert_allclose(run.sigma_max[i], h.sigma_max, rtol=1e-9)


def test_step_rules_floor_and_ratio_are_what_the_result_says(stored):
    lam = np.array([p.sharpness for p in stored.points])
    for run in stored.runs:
        b = verdicts.betas(stored).index(run.beta)
        expected = 1 / lam.max() if run.rule == "common" else 1 / lam[b]
        np.testing.assert_allclose(run.step_size, expected, rtol=1e-12)
    for p in stored.points:
        lowest = np.min(
            [r.loss.min(1) for r in stored.runs if r.beta == p.beta]
            + [p.floor_run.min(1)],
            axis=0,
        )
        np.testing.assert_array_equal(p.floor, lowest)
        common = results.pick(stored.runs, beta=p.beta, rule="common")
        np.testing.assert_allclose(
            p.ratio, (common.sigma_min**2).min(1) / common.sigma_max.max(1), rtol=1e-12
        )
    assert stored.grid == list(range(0, SHORT["steps"] + 1, SHORT["spectra_every"]))
    start = jena.models(stored.settings)
    S = len(stored.settings.seeds)
    for i, p in enumerate(
        stored.points
    ):  # the factors on the grid, at t = 0 the draw's
        W_V = start.W["blocks.0.W_V"][i * S : (i + 1) * S]
        np.testing.assert_allclose(
            p.factors.sigma_W_V[:, 0], torch.linalg.svdvals(W_V)[:, -1], rtol=1e-12
        )
        assert p.factors.sigma_Z.shape == (S, len(stored.grid))
        # the smallest per-sample sigma over the grid is the float64 per-sample reading
        per_sample = verdicts.reading(p, "float64", "per-sample", "spectral")
        np.testing.assert_allclose(
            p.factors.sigma_Z.min(1), per_sample.sigma_min, rtol=1e-9
        )
        f = p.factors  # sigma_k(Z_p) between sigma_k(P X_p) times W_V's extremes
        if p.beta == 0.0:
            assert (f.sigma_Z <= f.sigma_PX * f.norm_W_V * (1 + 1e-9)).all()
            assert (f.sigma_Z >= f.sigma_PX * f.sigma_W_V * (1 - 1e-9)).all()
        assert (f.rank_one <= 1).all() and (f.sigma_X <= f.norm_X).all()
        # eq. (jena-factors): sigma_k(P X) below each factor's cap; P's rows sum to one
        assert (f.norm_P >= 1 - 1e-12).all() and (f.sigma_P <= f.norm_P).all()
        cap = np.minimum(f.sigma_P * f.norm_X, f.norm_P * f.sigma_X)
        assert (f.sigma_PX <= cap * (1 + 1e-9)).all()


def test_models_of_one_seed_differ_only_by_beta():
    s = settings_for(jena.SETTINGS, "ci")
    stack = jena.models(s)
    S = len(s.seeds)
    for w in stack.W.values():
        torch.testing.assert_close(w[2], w[4 * S + 2])
    assert stack.beta[2] == 0.0 and stack.beta[4 * S + 2] == 1.0


def test_sharpness_is_the_top_eigenvalue_of_the_dense_hessian():
    s = replace(
        settings_for(jena.SETTINGS, "ci"), d_qk=2, d_F=3, betas=(0.0, 1.0), seeds=(0,)
    )
    g = torch.Generator().manual_seed(1)
    X = torch.randn(3, 4, 14, generator=g, dtype=torch.float64)
    Y = torch.randn(3, 4, 1, generator=g, dtype=torch.float64)
    stack = jena.models(s)
    lam = jena.sharpness(stack, X, Y, iterations=60)
    rough = jena.sharpness(stack, X, Y, iterations=3)
    for b, beta in enumerate(s.betas):
        model = jena.make_model(s, beta=beta, seed=0)
        names = [k for k, _ in model.named_parameters()]
        shapes = [p.shape for _, p in model.named_parameters()]
        flat0 = torch.cat([p.detach().reshape(-1) for _, p in model.named_parameters()])

        def loss(flat, model=model, names=names, shapes=shapes):
            parts, k = {}, 0
            for name, shape in zip(names, shapes):
                parts[name] = flat[k : k + shape.numel()].reshape(shape)
                k += shape.numel()
            out = torch.func.functional_call(model, parts, (X,))
            return rcutil.squared_loss(out, Y)

        hessian = torch.autograd.functional.hessian(loss, flat0)
        top = torch.linalg.eigvalsh(hessian)[-1].item()
        np.testing.assert_allclose(lam[b], top, rtol=1e-9)
        assert rough[b] < top * (1 - 1e-6)  # three Lanczos steps are not enough


def test_readings_are_the_spectra_they_name():
    gen = torch.Generator().manual_seed(4)
    B, N, n, d = 2, 5, 6, 4
    Z = torch.randn(B, N * n, d, generator=gen, dtype=torch.float64)
    Z[1, :n] = torch.outer(
        torch.randn(n, generator=gen, dtype=torch.float64),
        torch.randn(d, generator=gen, dtype=torch.float64),
    )  # rank 1
    got = rounding.reading_spectra(Z, n)
    per = torch.linalg.svdvals(Z.reshape(B, N, n, d))
    whole = torch.linalg.svdvals(Z)
    np.testing.assert_allclose(
        got["float64/per-sample/sigma_min"],
        per[..., -1].amin(1),
        rtol=1e-12,
        atol=1e-15,
    )
    np.testing.assert_allclose(
        got["float64/per-sample/spectral"], per[..., 0].amax(1), rtol=1e-12
    )
    np.testing.assert_allclose(
        got["float64/per-sample/Frobenius"],
        torch.linalg.matrix_norm(Z.reshape(B, N, n, d)).amax(1),
        rtol=1e-12,
    )
    np.testing.assert_allclose(
        got["float64/stacked/sigma_min"], whole[:, -1], rtol=1e-12
    )
    np.testing.assert_allclose(
        got["float64/stacked/Frobenius"], torch.linalg.matrix_norm(Z), rtol=1e-12
    )
    np.testing.assert_allclose(got["float32/stacked/spectral"], whole[:, 0], rtol=1e-6)
    # the rank-one sample sits at each precision's floor, the full-rank model far above
    # it
    for precision in rounding.PRECISIONS:
        units = got[f"{precision}/per-sample/sigma_min"] / (
            rounding.eps(precision) * got[f"{precision}/per-sample/spectral"]
        )
        assert units[1] <= verdicts.FLOOR_UNITS < 1e3 < units[0], (precision, units)


def test_floor_factor_of_exactly_rank_deficient_matrices():
    gen = torch.Generator().manual_seed(5)
    Z = torch.randn(3, 4 * 8, 6, generator=gen, dtype=torch.float64)
    found = {
        (f.layout, f.deficiency): f.c for f in rounding.floor_factors(Z, 8, (1, 3), 64)
    }
    assert sorted(found) == [
        ("per-sample", 1),
        ("per-sample", 3),
        ("stacked", 1),
        ("stacked", 3),
    ]
    assert found[("per-sample", 1)].shape == (12,)
    assert found[("stacked", 3)].shape == (3,)
    for c in found.values():
        assert (c > 0).all() and (c <= verdicts.FLOOR_UNITS).all()
    # by hand for the first stacked matrix: its smallest singular value removed
    U, S, Vh = torch.linalg.svd(Z[0], full_matrices=False)
    S[-1] = 0
    s = torch.linalg.svdvals(((U * S) @ Vh).float())
    assert found[("stacked", 1)][0] == pytest.approx(
        (s[-1] / (np.finfo(np.float32).eps * s[0])).item(), rel=1e-6
    )
    # and a full-rank matrix is far above the float32 floor
    s = torch.linalg.svdvals(Z[0].float())
    assert s[-1] / (np.finfo(np.float32).eps * s[0]) > 1e4


def test_result_is_typed_and_reproducible(stored):
    again = jena.run(short_ci(), progress=False)
    assert json.dumps(again.to_json(), sort_keys=True) == json.dumps(
        stored.to_json(), sort_keys=True
    )
    assert tuple(p.beta for p in stored.points) == jena.CI.betas
    assert {(r.beta, r.rule) for r in stored.runs} == {
        (b, rule) for b in jena.CI.betas for rule in jena.RULES
    }
    run = results.pick(stored.runs, beta=0.5, rule="own")
    assert isinstance(run.loss, np.ndarray)
    S = len(SHORT["seeds"])
    assert run.loss.shape == (S, SHORT["steps"] + 1)
    point = results.pick(stored.points, beta=0.0)
    assert point.floor_run.shape == (S, SHORT["floor_iterations"] + 1)
    assert isinstance(point.factors.sigma_P, np.ndarray)
    every = itertools.product(rounding.PRECISIONS, rounding.LAYOUTS, rounding.NORMS)
    assert [(r.precision, r.layout, r.norm) for r in point.readings] == list(every)
    reading = verdicts.reading(point, "float32", "per-sample", "spectral")
    assert reading.name == "float32, per-sample, spectral" and len(reading.c) == S
    assert stored.data.sha256 == data.sha256sum(excerpt())
    assert stored.data.cleaning.rows_kept == stored.data.rows_clean


def test_acceptance_holds_on_a_short_run_and_fails_on_a_broken_one(stored):
    checks.require(verdicts.checks(stored))
    broken = copy.deepcopy(stored)
    broken.floor_factors[0].c[0] = 3.0  # a floor factor above FLOOR_UNITS
    results.pick(broken.runs, beta=0.5, rule="own").step_size[0] *= 1.01
    failed = [c.what for c in verdicts.checks(broken) if not c.ok]
    assert any("floor factor" in w for w in failed)
    assert any("own steps" in w for w in failed)


# --------------------------------------------------------------------------- the claims
def verdict(result, key):
    return next(c.verdict for c in verdicts.claims(result) if c.key == key)


def row(result, key):
    return next(c for c in verdicts.claims(result) if c.key == key)


def set_gaps(result, values, rules=("common", "own"), times=None):
    """Edit the losses of both step rules (or of ``rules``) so that the loss above the
    best-found loss at ``times`` (default T/4, T/2, T) is ``values[beta]`` per seed."""
    T = result.settings.steps
    for p in result.points:
        for rule in (rules,) if isinstance(rules, str) else rules:
            run = results.pick(result.runs, beta=p.beta, rule=rule)
            for t in times or (T // 4, T // 2, T):
                run.loss[:, t] = np.asarray(p.floor) + values[p.beta]


def settle(result, drift=0.0, betas=None):
    """Set the last-stage drift of the best-found losses (of ``betas``, default all) to
    ``drift``: the L-BFGS run's loss at its half-way point, above its end."""
    for p in result.points:
        if betas is None or p.beta in betas:
            p.floor_run[:, p.floor_run.shape[1] // 2] = np.asarray(p.floor) + drift


def spread(levels):
    """Per-seed values around ``levels[beta]``, five seeds, small noise."""
    noise = np.array([0.0, 0.01, -0.01, 0.02, -0.02])
    return {b: v + noise for b, v in levels.items()}


FALLING = spread({0.0: 5.0, 0.25: 4.0, 0.5: 3.0, 0.75: 2.0, 1.0: 1.0})
RISING = spread({0.0: 1.0, 0.25: 2.0, 0.5: 3.0, 0.75: 4.0, 1.0: 5.0})
FLAT = spread({b: 3.0 for b in jena.CI.betas})
STALL = spread({0.0: 9.0, 0.25: 2.0, 0.5: 3.0, 0.75: 1.0, 1.0: 2.0})


@pytest.fixture
def result(stored):
    """The stored run with a best-found loss that has stopped moving."""
    out = copy.deepcopy(stored)
    settle(out)
    return out


def test_claims_show_their_rule_numbers_and_setting(stored):
    rows = verdicts.claims(stored)
    assert [c.key for c in rows] == ["jena-order", "jena-stall", "jena-ratio"]
    for claim in rows:
        assert claim.rule and any(ch.isdigit() for ch in claim.book)
        assert claim.verdict in C.VERDICTS and claim.decision is not None
        assert claim.setting.kind == C.RECONSTRUCTION


def test_order_holds_only_when_both_step_rules_show_it(result):
    """The trend along beta under both step rules: reproduced; under the common step
    and the other way at each model's own step: holds under one protocol only, which
    is not reproduced; flat at the own step: inconclusive."""
    set_gaps(result, FALLING)
    assert verdict(result, "jena-order") == C.REPRODUCED
    set_gaps(result, RISING, rules="own")
    assert verdict(result, "jena-order") == C.NOT_REPRODUCED
    reason = row(result, "jena-order").reason
    assert "holds only in part" in reason and "own step" in reason
    set_gaps(result, FLAT, rules="own")
    assert verdict(result, "jena-order") == C.INCONCLUSIVE
    set_gaps(result, RISING)
    assert verdict(result, "jena-order") == C.NOT_REPRODUCED


def test_order_and_stall_are_decided_at_T_and_show_the_other_horizons(result):
    """Only the horizon T decides; T/4 and T/2 are shown as readings."""
    T = result.settings.steps
    set_gaps(result, FLAT)
    set_gaps(result, FALLING, times=[T])
    assert verdict(result, "jena-order") == C.REPRODUCED
    book = row(result, "jena-order").book
    assert f"excess at t = {T // 4}: inconclusive" in book
    assert f"excess at t = {T // 2}: inconclusive" in book
    assert f"excess at t = {T}:" not in book
    set_gaps(result, FALLING, times=[T // 2])
    assert f"excess at t = {T // 2}: reproduced" in row(result, "jena-order").book


def test_order_reads_the_best_found_loss(result):
    set_gaps(result, FALLING)
    assert verdict(result, "jena-order") == C.REPRODUCED
    for p in result.points:  # the same losses above other best-found losses
        p.floor = list(np.asarray(p.floor) - 8 * p.beta)
        p.floor_run = p.floor_run - 8 * p.beta
    assert verdict(result, "jena-order") == C.NOT_REPRODUCED


def test_a_part_within_five_times_the_drift_is_inconclusive_because_of_the_floor(
    result,
):
    """The trend's fitted change is 4 (1 per level); a drift of 0.9 at one beta (5 ×
    0.9 = 4.5 > 4) makes both claims inconclusive and says so; 0.7 (3.5 < 4) does not
    for the trend, while the stall's smallest gap (beta = 0 against 0.25: 1) is still
    within 5 × 0.7."""
    set_gaps(result, FALLING)
    settle(result, 0.9, betas=[0.5])
    assert verdict(result, "jena-order") == C.INCONCLUSIVE
    assert "because of the best-found loss" in row(result, "jena-order").reason
    assert "4 against 5 × 0.9" in row(result, "jena-order").reason
    settle(result, 0.7, betas=[0.5])
    assert verdict(result, "jena-order") == C.REPRODUCED
    assert verdict(result, "jena-stall") == C.INCONCLUSIVE
    # the raw loss reads no best-found loss: its reading is not guarded
    assert verdicts.stall_decision(result, None, "raw").measurable


def test_stall_flips_with_the_distance_of_beta0_to_its_floor(result):
    """beta = 0 farthest on every seed under both rules: reproduced. Closest on every
    seed: its eight parts all go the other way, but a paired p of five seeds is at
    least 1/32, above the 0.05/8 that Holm asks of a reversal among eight parts, so
    the claim stays open (with ten seeds it would not)."""
    set_gaps(result, STALL)
    assert verdict(result, "jena-stall") == C.REPRODUCED
    set_gaps(result, spread({0.0: 0.5, 0.25: 2.0, 0.5: 3.0, 0.75: 1.0, 1.0: 2.0}))
    assert verdict(result, "jena-stall") == C.INCONCLUSIVE
    decision = verdicts.stall_decision(result)
    assert all(p.p_against == 1 / 32 for p in decision.parts)
    set_gaps(result, spread({0.0: 9.0, 0.25: 9.0, 0.5: 3.0, 0.75: 1.0, 1.0: 2.0}))
    assert verdict(result, "jena-stall") == C.INCONCLUSIVE


def test_stall_that_the_own_steps_reverse_is_open_and_says_what_holds(result):
    set_gaps(result, STALL)
    own = spread({0.0: 0.5, 0.25: 2.0, 0.5: 3.0, 0.75: 1.0, 1.0: 2.0})
    set_gaps(result, own, rules="own")
    assert verdict(result, "jena-stall") == C.INCONCLUSIVE
    reason = row(result, "jena-stall").reason
    assert "common step, β = 0 − β = 0.25" in reason and "holds" in reason


def test_stall_against_each_beta_and_each_seed(result):
    """One beta > 0 as far from its floor as beta = 0 leaves the claim open; so does
    one seed of beta = 0 closer than the others' (the paired test needs every seed)."""
    set_gaps(result, STALL)
    set_gaps(result, {**STALL, 1.0: STALL[0.0]}, rules="own")
    assert verdict(result, "jena-stall") == C.INCONCLUSIVE
    set_gaps(result, STALL)
    one = {**STALL, 0.0: STALL[0.0] - np.array([0, 0, 0, 0, 8.5])}
    set_gaps(result, one, rules="common")
    assert verdict(result, "jena-stall") == C.INCONCLUSIVE


def test_rows_show_the_excess_per_beta_under_each_rule_and_the_readings(result):
    set_gaps(result, STALL)
    book = row(result, "jena-stall").book
    assert "common step: 0: 9 ± 0.0071; 0.25: 2 ± 0.0071" in book
    assert "own step: 0: 9 ± 0.0071" in book
    assert "raw at T:" in book and "rate at T:" in book


def test_the_raw_loss_and_the_rate_read_their_own_quantities(result):
    T = result.settings.steps
    set_gaps(result, STALL)
    raw = verdicts.measure(result, 0.5, "own", None, "raw")
    run = results.pick(result.runs, beta=0.5, rule="own")
    np.testing.assert_array_equal(raw, run.loss[:, T])
    floor = verdicts.best_found(result, 0.5)
    rate = verdicts.measure(result, 0.5, "own", None, "rate")
    np.testing.assert_allclose(
        rate, np.log((run.loss[:, T] - floor) / (run.loss[:, 0] - floor)) / T
    )
    with pytest.raises(ValueError, match="kind must be one of"):
        verdicts.measure(result, 0.5, kind="speed")


def test_ratio_flips_with_the_factor_at_any_beta(result):
    """A factor of 1e4 at every beta > 0: reproduced. Only 10 at one beta, or rho(0)
    itself raised: that part goes the other way on every seed, which with five paired
    seeds (p = 1/32) and four parts (Holm: 0.05/4) leaves the claim open."""
    rho0 = np.array([1e-9, 2e-9, 3e-9, 4e-9, 5e-9])
    for p in result.points:
        p.ratio = list(rho0 * (1.0 if p.beta == 0 else 1e4))
    assert verdict(result, "jena-ratio") == C.REPRODUCED
    parts = verdicts.ratio_gap(result)
    assert [p.estimate for p in parts] == pytest.approx([4.0] * 4)
    results.pick(result.points, beta=0.75).ratio = list(rho0 * 10)
    assert verdict(result, "jena-ratio") == C.INCONCLUSIVE
    assert verdicts.ratio_gap(result)[2].p_against == 1 / 32
    results.pick(result.points, beta=0.75).ratio = list(rho0 * 1e4)
    results.pick(result.points, beta=0.0).ratio = list(rho0 * 1e3)  # rho(0) itself
    assert verdict(result, "jena-ratio") == C.INCONCLUSIVE
    assert [p.estimate for p in verdicts.ratio_gap(result)] == pytest.approx([1.0] * 4)


def test_the_drift_is_the_l_bfgs_runs_last_half(result):
    point = results.pick(result.points, beta=0.25)
    half = point.floor_run.shape[1] // 2
    point.floor_run[:, half] = np.asarray(point.floor) + np.arange(5.0)
    np.testing.assert_allclose(verdicts.floor_drift(result, 0.25), np.arange(5.0))
    assert verdicts.drift_of(result, [0.0, 0.25]) == 4.0


def test_the_best_found_loss_is_the_lowest_of_every_run(result):
    assert all(c.ok for c in verdicts.checks(result) if "best-found" in c.what)
    run = results.pick(result.runs, beta=0.25, rule="own")
    run.loss[0, 5] = verdicts.best_found(result, 0.25)[0] - 1.0  # GD went lower
    failed = [c.what for c in verdicts.checks(result) if not c.ok]
    assert failed == ["best-found loss: GD's lowest loss above it, smallest"]


def test_the_float64_readings_that_bracket_the_papers_value(result):
    point = results.pick(result.points, beta=0.0)
    for k, r in enumerate(r for r in point.readings if r.precision == "float64"):
        r.ratio = [10.0 ** (-20 + 3 * k)] * len(r.ratio)  # 1e-20, 1e-17, ..., 1e-11
    below, above = verdicts.bracket(result)
    assert np.mean(below.ratio) == pytest.approx(1e-14)
    assert np.mean(above.ratio) == pytest.approx(1e-11)


def test_a_reading_is_at_the_floor_when_its_c_is_within_the_units(result):
    point = results.pick(result.points, beta=0.0)
    for r in point.readings:
        r.c = [10.0 * verdicts.FLOOR_UNITS] * len(r.c)
    assert verdicts.readings_at_floor(point) == []
    low = verdicts.reading(point, "float32", "stacked", "Frobenius")
    low.c = [verdicts.FLOOR_UNITS] * len(low.c)
    assert verdicts.readings_at_floor(point) == [low]


def test_paper_norms_span_the_measured_floor_factors(stored):
    c = np.concatenate([f.c for f in stored.floor_factors])
    low, high = verdicts.paper_norms(stored)
    eps32 = np.finfo(np.float32).eps
    assert low == pytest.approx(verdicts.PAPER_RATIO_BETA0 / (c.max() * eps32) ** 2)
    assert high == pytest.approx(verdicts.PAPER_RATIO_BETA0 / (c.min() * eps32) ** 2)
    assert verdicts.PAPER_RATIO_BETA0 / eps32**2 <= low < high  # c <= 1: from 5.44 up


# --------------------------------------------------------------------------- faults
def test_gelu_trains_like_its_transformer_and_an_unknown_activation_is_named():
    excerpt()
    s = short_ci(
        steps=6,
        floor_iterations=6,
        spectra_every=3,
        lanczos_steps=3,
        activation="gelu",
        betas=(0.0, 1.0),
        seeds=(0,),
    )
    result = jena.run(s, progress=False)
    prepared = jena.load_data(s)
    X, Y = torch.as_tensor(prepared.X), torch.as_tensor(prepared.Y)
    for run in result.runs:
        model = jena.make_model(s, beta=run.beta, seed=0)
        h = rcutil.gradient_descent(model, X, Y, mu=run.step_size[0], steps=s.steps)
        np.testing.assert_allclose(run.loss[0], h.loss, rtol=1e-9)
    with pytest.raises(ValueError, match="unknown activation 'swish'") as err:
        jena.run(replace(s, activation="swish"), progress=False)
    assert "tanh" in str(err.value)


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_a_missing_gpu_is_named_before_any_work():
    with pytest.raises(ValueError, match="no usable CUDA device") as err:
        project(jena, settings_for(jena.SETTINGS, "ci"), device="cuda")
    assert "use cpu" in str(err.value)
    with pytest.raises(ValueError, match="'cuda' asked for"):
        jena.run(settings_for(jena.SETTINGS, "ci"), device="cuda", progress=False)


def test_a_diverging_sweep_names_the_setting_to_lower():
    excerpt()
    with pytest.raises(TrainingDiverged) as err, np.errstate(all="ignore"):
        jena.run(short_ci(mu_factor=1e4, betas=(0.0, 1.0), seeds=(0,)), progress=False)
    msg = str(err.value)
    assert "lower mu_factor" in msg and "models [" in msg


def test_rows_out_of_order_or_repeated_are_cleaned_and_counted_in_the_result(tmp_path):
    lines = excerpt().read_bytes().split(b"\n")
    header, rows = lines[0], [r for r in lines[1:] if r]
    rows[0], rows[1] = rows[1], rows[0]  # the first two rows reversed
    rows[70], rows[71] = rows[71], rows[70]
    rows.append(rows[-1])  # the last row repeated
    path = tmp_path / "jena.csv"
    path.write_bytes(b"\n".join([header, *rows]) + b"\n")
    result = jena.run(
        short_ci(steps=3, floor_iterations=3, spectra_every=1),
        progress=False,
        path=path,
    )
    cleaning = result.data.cleaning
    assert cleaning.out_of_order == 2 and cleaning.duplicates == 1
    assert cleaning.rows_read == 155 and result.data.rows_clean == 154
    assert result.data.first_time == "2009-01-01T00:10:00"


@pytest.mark.slow
def test_book_settings_run_end_to_end_on_a_longer_file(tmp_path):
    """The book's data and model settings (sampling, n, windows) on a file of 3,000 rows
    made from the excerpt's values with new timestamps, with a wind-speed sentinel; two
    steps."""
    table = rcutil.jena_data.read_csv(excerpt())
    rows = 3000
    values = np.tile(table.values, (rows // len(table.values) + 1, 1))[:rows]
    wind = rcutil.jena_data.FEATURES.index("wv (m/s)")
    values[1000, wind] = rcutil.jena_data.SENTINEL
    start = np.datetime64("2009-01-01T00:10:00")
    times = start + np.arange(rows) * np.timedelta64(600, "s")
    header = excerpt().read_text().splitlines()[0]
    lines = [header] + [
        f"{t.astype(object):%d.%m.%Y %H:%M:%S}," + ",".join(f"{v:.2f}" for v in row)
        for t, row in zip(times, values)
    ]
    path = tmp_path / "jena.csv"
    path.write_text("\n".join(lines) + "\n")
    s = replace(
        settings_for(jena.SETTINGS, "book"),
        steps=2,
        floor_iterations=2,
        spectra_every=1,
        lanczos_steps=2,
        draws=8,
    )
    result = jena.run(s, progress=False, path=path)
    assert result.data.rows_in_file == rows
    assert result.data.sentinels_replaced == {"wv (m/s)": 1, "max. wv (m/s)": 0}
    assert result.data.rows_train == int(rows * s.train_fraction)
    window = 2 * s.n * s.sampling
    last = max(result.data.window_starts) + window
    assert last <= result.data.rows_train + s.sampling
    for run in result.runs:
        assert run.loss.shape == (5, 3) and np.isfinite(run.loss).all()


def test_settings_rows_agree_and_seeds_suffice():
    for profile in ("ci", "book", "paper"):
        s = settings_for(jena.SETTINGS, profile)
        assert s.file in data.ASSETS
        assert len(s.seeds) >= (5 if profile == "book" else 3)
        assert s.betas == (0.0, 0.25, 0.5, 0.75, 1.0)
        assert s.steps % s.spectra_every == 0 and s.steps % 4 == 0


# --------------------------------------------------------------------------- readings
def test_within_drift_counts_the_parts_the_best_found_loss_cannot_decide(result):
    """Stall gaps of 7, 6, 8, 7 (beta = 0 against 0.25 ... 1) under each rule and a
    drift of 1.5 at beta = 0.5 only: the part against 0.5 (6 < 5 × 1.5) is within it,
    one per rule; the trend's fitted change of 6 (slope -1.5 per level) is within
    5 × 1.5 under both rules."""
    set_gaps(result, STALL)
    settle(result, 1.5, betas=[0.5])
    assert verdicts.within_drift(result, "jena-stall") == 2
    assert verdicts.within_drift(result, "jena-order") == 2
    assert verdicts.compared(result, "jena-stall")[5] == [0.0, 0.5]
    # the trend reads every beta: a drift at beta = 0 alone reaches both its parts
    settle(result)
    settle(result, 1.5, betas=[0.0])
    assert verdicts.within_drift(result, "jena-order") == 2
    settle(result)
    assert verdicts.within_drift(result, "jena-order") == 0
    assert verdicts.speed_decision(result, "jena-stall").verdict == C.REPRODUCED


def factors_of(result, beta=0.0, **fields):
    f = results.pick(result.points, beta=beta).factors
    for name, value in fields.items():
        getattr(f, name)[:] = value
    return f


def test_the_factor_reading_names_the_factors_near_singular(result):
    """Unit largest singular values; the attention at 1e-4, the window at 1e-5 and
    sigma_min(P X) at their product: both near singular, and they multiply. The window
    raised to 1e-1: only the attention is near, and P X is 2 decades from the product.
    W_V at 1e-4 of its norm on one seed only: not near (the median), but values_low
    says so."""
    S = len(result.settings.seeds)
    ones = dict(norm_P=1.0, norm_X=1.0, norm_W_V=1.0, sigma_W_V=0.5, sigma_Z=1e-9)
    factors_of(result, **ones, sigma_P=1e-4, sigma_X=1e-5, sigma_PX=1e-9)
    reading = verdicts.factor_reading(result)
    assert reading.near == {"attention", "window"} and reading.multiply
    assert reading.product_off == pytest.approx(0.0, abs=1e-12)
    assert reading.below_cap == pytest.approx(4.0)
    assert reading.values_low == pytest.approx(np.log10(0.5))
    factors_of(result, rank_one=0.09)
    assert verdicts.factor_reading(result).collapsed
    factors_of(result, rank_one=0.1)
    assert not verdicts.factor_reading(result).collapsed
    factors_of(result, sigma_X=1e-1)
    reading = verdicts.factor_reading(result)
    assert reading.near == {"attention"} and not reading.multiply
    assert reading.product_off == pytest.approx(4.0)
    # near singular means at most NEAR_SINGULAR of the largest, the bound included
    factors_of(result, sigma_X=verdicts.NEAR_SINGULAR)
    assert verdicts.factor_reading(result).near == {"attention", "window"}
    factors_of(result, sigma_X=2 * verdicts.NEAR_SINGULAR)
    assert verdicts.factor_reading(result).near == {"attention"}
    f = factors_of(result)
    f.sigma_W_V[0, :] = 1e-4
    reading = verdicts.factor_reading(result)
    assert "values" not in reading.near and reading.values_low == pytest.approx(-4.0)
    assert reading.relative["values"].shape == (S,)
    # the reading of the smallest sigma_min(Z_p) per seed is the one read
    f.sigma_Z[:, 0] = 1e-12
    f.sigma_P[:, 0] = 0.5
    assert "attention" not in verdicts.factor_reading(result).near


def test_one_seed_under_one_step_rule_moves_the_numbers_the_row_shows(result):
    """Raising one seed of beta = 0 under the own step by 5 moves that rule's mean at
    beta = 0 by 1 in the row's text and the own-step part against beta = 1 by 1 in its
    line of evidence; the common step's numbers stay."""
    set_gaps(result, STALL)
    before = row(result, "jena-stall")
    T = result.settings.steps
    own0 = results.pick(result.runs, beta=0.0, rule="own")
    own0.loss[2, T] += 5.0
    after = row(result, "jena-stall")
    assert "own step: 0: 9 ± 0.0071" in before.book
    assert "own step: 0: 10 ± 1" in after.book
    assert "common step: 0: 9 ± 0.0071" in after.book

    def part(r, label):
        return next(p for p in r.decision.parts if p.label == label)

    label = "own step, β = 0 − β = 1"
    assert part(after, label).estimate == pytest.approx(
        part(before, label).estimate + 1.0
    )
    common = "common step, β = 0 − β = 1"
    assert part(after, common).estimate == part(before, common).estimate
    assert f"{label}: 8 [" in after.decision.line()


# ------------------------------------------------------------ defaults, kinds, horizons
def test_the_readings_default_to_the_excess_under_the_common_step_at_T(result):
    """Called without a rule, a horizon or a kind, every reading is the main one: the
    loss above the best-found loss at T under the common step; a horizon given to
    ``excess`` is the one read (the chapter reads T/2 that way)."""
    T = result.settings.steps
    set_gaps(result, STALL, rules="common")
    set_gaps(result, FALLING, rules="own")
    set_gaps(result, FLAT, times=[T // 2])
    for b in verdicts.betas(result):
        main = verdicts.measure(result, b, "common", T, "excess")
        np.testing.assert_array_equal(verdicts.measure(result, b), main)
        np.testing.assert_array_equal(verdicts.excess(result, b), main)
        np.testing.assert_allclose(
            verdicts.measure(result, b, t=T // 2), FLAT[b], rtol=1e-12
        )
        half = verdicts.excess(result, b, "common", T // 2)
        np.testing.assert_allclose(half, FLAT[b], rtol=1e-12)
    trend = verdicts.order_part(result)
    assert trend.label == "common step, slope per β level"
    assert trend.estimate == verdicts.order_part(result, "common", T, "excess").estimate
    stall = verdicts.stall_parts(result)
    assert [p.label for p in stall][0] == "common step, β = 0 − β = 0.25"
    assert [p.estimate for p in stall] == [
        p.estimate for p in verdicts.stall_parts(result, "common", T, "excess")
    ]


BS = (0.25, 0.5, 0.75, 1.0)


def raw_against_excess(result):
    """Best-found losses raised by 40 beta (drift kept at zero) under gaps that fall
    along beta (and the first losses with them): the loss above them falls, the raw
    loss rises."""
    for p in result.points:
        p.floor = list(np.asarray(p.floor) + 40 * p.beta)
    for run in result.runs:
        run.loss[:, 0] += 40 * run.beta
    settle(result)
    set_gaps(result, STALL)


def test_the_raw_loss_decides_its_own_reading_of_both_claims(result):
    """Under the raw loss beta = 0 ends lowest and the loss rises along beta, while
    the loss above the best-found loss falls and beta = 0 stays highest: each reading
    decides from its own measure, and the row shows the raw reading's verdict."""
    raw_against_excess(result)
    assert verdicts.order_decision(result).verdict == C.REPRODUCED
    assert verdicts.order_decision(result, None, "raw").verdict == C.NOT_REPRODUCED
    assert verdicts.stall_decision(result).verdict == C.REPRODUCED
    raw_stall = verdicts.stall_decision(result, None, "raw")
    assert raw_stall.verdict == C.INCONCLUSIVE
    assert all(p.estimate < 0 for p in raw_stall.parts)
    raw0 = verdicts.measure(result, 0.0, "own", None, "raw")
    raw_parts = verdicts.stall_parts(result, "own", None, "raw")
    assert [p.estimate for p in raw_parts] == pytest.approx(
        [np.mean(raw0 - verdicts.measure(result, b, "own", None, "raw")) for b in BS]
    )
    for key in ("jena-order", "jena-stall"):
        raw = verdicts.speed_decision(result, key, None, "raw")
        assert raw.verdict != verdicts.speed_decision(result, key).verdict
    assert "raw at T: not reproduced" in row(result, "jena-order").book
    assert "raw at T: inconclusive" in row(result, "jena-stall").book


def test_the_raw_order_is_not_guarded_by_the_best_found_loss(result):
    """A drift of 1.5 at beta = 0.5 makes the main reading of the order inconclusive
    (4 < 5 × 1.5); the raw loss reads no best-found loss and still decides, though
    its own change along beta (about 5) is within 5 × 1.5 as well."""
    set_gaps(result, FALLING)
    settle(result, 1.5, betas=[0.5])
    assert not verdicts.order_decision(result).measurable
    raw = verdicts.order_decision(result, None, "raw")
    assert raw.measurable and raw.verdict == C.REPRODUCED
    compared = verdicts.compared(result, "jena-order")
    assert len(verdicts.under_drift(result, list(raw.parts), compared)) == 2


def test_the_order_is_guarded_by_the_drift_at_every_beta_of_the_sweep(result):
    """The trend reads every beta, so a drift at the last beta alone (5 × 0.9 > 4)
    leaves both its parts inconclusive."""
    set_gaps(result, FALLING)
    settle(result, 0.9, betas=[1.0])
    decision = verdicts.order_decision(result)
    assert not decision.measurable
    assert decision.why_not_measurable.count("against 5 × 0.9") == 2


def test_the_stall_is_decided_at_the_horizon_it_is_given(result):
    """At T beta = 0 ends lowest; at T/2 it is the farthest from its floor: the stall
    read at T/2 holds, both sides of each part read at T/2, and the row shows it."""
    T = result.settings.steps
    set_gaps(result, spread({0.0: 1.0, 0.25: 10, 0.5: 10, 0.75: 10, 1.0: 10}))
    set_gaps(result, STALL, times=[T // 2])
    assert verdicts.stall_decision(result).verdict != C.REPRODUCED
    assert verdicts.stall_decision(result, T // 2).verdict == C.REPRODUCED
    assert verdicts.speed_decision(result, "jena-stall", T // 2).verdict == C.REPRODUCED
    estimates = [p.estimate for p in verdicts.stall_parts(result, "own", T // 2)]
    assert estimates == pytest.approx([7.0, 6.0, 8.0, 7.0])
    assert f"excess at t = {T // 2}: reproduced" in row(result, "jena-stall").book


def test_a_part_at_exactly_five_times_the_drift_decides(result):
    """Best-found losses of 1 and a drift of 0.25 (both exact in binary), and gaps of
    exact binary values: beta = 0 against 0.25 differs by exactly 1.25 = 5 × 0.25 on
    every seed, which decides; a drift of 0.5 does not let it."""
    noise = np.array([0.0, 0.125, -0.125, 0.25, -0.25])
    levels = {0.0: 5.25, 0.25: 4.0, 0.5: 3.0, 0.75: 2.0, 1.0: 1.0}
    for p in result.points:
        p.floor = [1.0] * len(p.floor)
    settle(result, 0.25)
    set_gaps(result, {b: v + noise for b, v in levels.items()})
    parts = verdicts.stall_parts(result)
    assert parts[0].estimate == 1.25 and verdicts.drift_of(result, [0.0, 0.25]) == 0.25
    assert verdicts.stall_decision(result).verdict == C.REPRODUCED
    settle(result, 0.5)
    assert verdicts.stall_decision(result).verdict == C.INCONCLUSIVE


def test_the_order_is_paired_by_seed(result):
    """Seeds that end 10 apart, each falling by 0.25 per beta level: paired by seed
    (the models of one seed start from the same weights) the trend holds; the spread
    between seeds would hide it from an unpaired test."""
    offsets = np.array([0.0, 10.0, 20.0, 30.0, 40.0])
    levels = {b: 10.0 - b + offsets for b in verdicts.betas(result)}
    set_gaps(result, levels)
    part = verdicts.order_part(result)
    assert part.design == C.PAIRED_TREND
    assert part.estimate == pytest.approx(-0.25)
    assert verdicts.order_decision(result).verdict == C.REPRODUCED


# --------------------------------------------------------------------------- acceptance
def test_acceptance_reads_each_number_against_its_own_threshold(result):
    """A run whose last loss is 1.5 times its first fails "lowers the loss" (however
    high its loss after one step); a common step off by a millionth fails its rule;
    a float64 reading 1.5 times the main ratio fails the re-reading; a GD run that
    reaches its own seed's best-found loss exactly passes."""
    T = result.settings.steps
    checks.require(verdicts.checks(result))
    run = results.pick(result.runs, beta=0.25, rule="own")
    floor = verdicts.best_found(result, 0.25)
    run.loss[0, 5] = floor[0]  # the lowest best-found loss of the seeds
    assert np.argmin(floor) == 0
    checks.require(verdicts.checks(result))
    run = results.pick(result.runs, beta=0.5, rule="common")
    run.loss[0, 1] = 10 * run.loss[0, 0]
    run.loss[0, T] = 1.5 * run.loss[0, 0]
    failed = [c.what for c in verdicts.checks(result) if not c.ok]
    assert failed == ["largest $\\Phi_T / \\Phi_0$ over all runs"]
    run.loss[0, T] = 0.5 * run.loss[0, 0]
    results.pick(result.runs, beta=1.0, rule="common").step_size[2] *= 1 + 1e-6
    failed = [c.what for c in verdicts.checks(result) if not c.ok]
    assert failed == ["common step times $\\max \\lambda_{\\max}$, largest error"]
    result = copy.deepcopy(result)
    for r in result.runs:
        r.step_size[:] = results.pick(result.runs, beta=1.0, rule=r.rule).step_size[:]
    point = results.pick(result.points, beta=0.5)
    main = verdicts.reading(point, "float64", "stacked", "spectral")
    main.ratio = list(1.5 * np.asarray(main.ratio))
    failed = [c.what for c in verdicts.checks(result) if not c.ok]
    assert "float64 stacked spectral reading over the main ratio on the same grid" in (
        failed
    )


def test_the_book_profile_asks_five_seeds_and_the_others_three(result):
    def seeds_ok(profile, n):
        result.settings = replace(
            result.settings, profile=profile, seeds=tuple(range(n))
        )
        return verdicts.checks(result)[0].ok

    assert seeds_ok("ci", 3) and not seeds_ok("ci", 2)
    assert seeds_ok("paper", 3)
    assert seeds_ok("book", 5) and not seeds_ok("book", 4)


# --------------------------------------------------------------------------- the rows
def test_rows_name_their_horizon_setting_ratio_labels_and_paper_norms(result):
    """The speed rows name T and the setting's sizes (windows, tokens, steps, seeds)
    and measure; the ratio row its precision and factor, the beta of each part, and
    the norms at which the paper's value is the float32 rounding level."""
    s = result.settings
    order, stall, ratio_row = verdicts.claims(result)
    assert order.book.startswith(f"$\\Phi_T - \\hat\\Phi$ at $T = {s.steps:,}$ per")
    for claim in (order, stall):
        text = " | ".join(claim.setting.differences)
        assert f"N = {s.n_windows} windows of n = {s.n} hourly tokens" in text
        assert f"T = {s.steps:,} GD steps, common and own step, 5 seeds" in text
        assert "best-found loss" in text.lower()
    assert "float64" in ratio_row.setting.differences
    assert "a gap of a factor 100 " in " | ".join(ratio_row.setting.differences)
    labels = [p.label for p in ratio_row.decision.parts]
    assert labels == [
        f"log10 ρ(β = {b:g}) − log10 ρ(0)" for b in (0.25, 0.5, 0.75, 1.0)
    ]
    low, high = verdicts.paper_norms(result)
    assert f"{low:.3g} to {high:.3g}" in ratio_row.reason
    assert ratio_row.reason.startswith(ratio_row.decision.reason())
    # the paper's number, as the paper prints it
    assert ratio_row.paper.startswith("$7.74 \\times 10^{-14}$ without the residual")


# ------------------------------------------------------------------ bracket and factors
def test_the_bracket_takes_the_nearest_reading_each_side_the_value_itself_below(result):
    """Four float64 readings, in no order of their values: the nearest below (a
    reading at exactly the paper's value counts as below) and the nearest above; with
    every reading on one side, the other side is None."""
    point = results.pick(result.points, beta=0.0)
    f64 = [r for r in point.readings if r.precision == "float64"]
    paper = verdicts.PAPER_RATIO_BETA0
    for r, value in zip(f64, [1e-11, paper, 1e-12, 1e-16]):
        r.ratio = [value] * len(r.ratio)
    below, above = verdicts.bracket(result)
    assert below is f64[1] and above is f64[2]
    for r, value in zip(f64, [1e-11, 1e-10, 1e-12, 1e-9]):
        r.ratio = [value] * len(r.ratio)
    assert verdicts.bracket(result) == (None, f64[2])
    for r, value in zip(f64, [1e-15, 1e-16, 1e-14, 1e-17]):
        r.ratio = [value] * len(r.ratio)
    assert verdicts.bracket(result) == (f64[2], None)


def test_the_factor_reading_divides_by_each_factors_own_norm(result):
    """Norms of 2, 10 and 4 for the attention, the window and W_V: each smallest
    singular value is read over its own factor's norm, and the tighter cap is
    min(sigma(P) ||X||, ||P|| sigma(X)) = 1e-3, 5 decades above sigma(P X)."""
    ones = dict(norm_P=2.0, norm_X=10.0, norm_W_V=4.0, sigma_Z=1e-9, rank_one=0.5)
    factors_of(result, **ones, sigma_P=1e-4, sigma_X=1e-3, sigma_W_V=0.4)
    factors_of(result, sigma_PX=1e-8)
    reading = verdicts.factor_reading(result)
    np.testing.assert_allclose(reading.relative["attention"], 5e-5)
    np.testing.assert_allclose(reading.relative["window"], 1e-4)
    np.testing.assert_allclose(reading.relative["values"], 0.1)
    assert reading.below_cap == pytest.approx(5.0)


def test_the_factor_reading_takes_each_seeds_own_smallest_reading(result):
    """Seed 0's smallest sigma_min(Z_p) is at the fourth grid point, the others' at
    the second, where their attention is far from singular: the median seed's
    attention is not near singular. A reading of three seeds on the same grid reads
    three seeds."""
    f = factors_of(result, sigma_Z=1.0, sigma_P=1e-4, norm_P=1.0)
    f.sigma_Z[0, 3] = 1e-12
    f.sigma_Z[1:, 1] = 1e-10
    f.sigma_P[:, 1] = 0.5
    reading = verdicts.factor_reading(result)
    assert "attention" not in reading.near
    np.testing.assert_allclose(reading.relative["attention"], [1e-4] + [0.5] * 4)
    fields = [k for k, v in vars(f).items() if isinstance(v, np.ndarray)]
    for name in fields:
        setattr(f, name, getattr(f, name)[:3])
    assert f.sigma_Z.shape == (3, len(result.grid))
    assert verdicts.factor_reading(result).relative["attention"].shape == (3,)
