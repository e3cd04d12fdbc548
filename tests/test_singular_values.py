"""The beta sweep of the singular-value chapter (rcutil.experiments.singular_values):
Weyl's bound holds on every draw, and the claim follows from the stored sweep."""

import copy

import numpy as np
import pytest

from rcutil import checks, claims
from rcutil.experiments import singular_values as sv
from rcutil.experiments.singular_values import verdicts
from rcutil.profiles import settings_for


@pytest.fixture(scope="module")
def result():
    run = sv.run(settings_for(sv.SETTINGS, "ci"), progress=False)
    return sv.Result.from_json(run.to_json())  # as the store gives it back


def test_the_sweep_is_deterministic_and_weyl_holds(result):
    again = sv.run(settings_for(sv.SETTINGS, "ci"), progress=False)
    assert [r.scaling for r in result.regimes] == [sv.STANDARD, sv.COLLAPSED]
    for a, b in zip(result.regimes, again.regimes):
        np.testing.assert_array_equal(a.sigma_min, b.sigma_min)
        assert a.weyl_lower.shape == a.sigma_min.shape == (41, 200)
        assert (a.weyl_lower <= a.sigma_min * (1 + verdicts.RTOL)).all()
    checks.require(verdicts.checks(result))


def _regime(result, scaling):
    (found,) = [r for r in result.regimes if r.scaling == scaling]
    return found


def _row(result, beta):
    return int(np.flatnonzero(np.isclose(result.betas, beta))[0])


def _status(result):
    """The claim's status from the stored sweep, written out here."""
    reg = _regime(result, "tau=d_qk")
    b0, b1 = _row(result, 0.0), _row(result, 1.0)
    gain = np.min(reg.sigma_min[b1] / reg.sigma_min[b0])
    drop = np.median(reg.kappa[b0]) / np.median(reg.kappa[b1])
    weyl = all(
        (r.weyl_lower <= r.sigma_min * (1 + 1e-10)).all() for r in result.regimes
    )
    ok = gain > 100 and drop > 10 and weyl
    return claims.REPRODUCED if ok else claims.NOT_REPRODUCED


def test_the_bound_claim_follows_from_the_collapsed_regime(result):
    stated, bound = verdicts.claims(result)
    assert bound.key == "residual-bound" and bound.rule
    assert bound.verdict == _status(result) == claims.REPRODUCED
    assert bound.setting.kind == claims.RECONSTRUCTION
    assert bound.setting.differences[0].startswith("the book's bound, which needs")
    # and the sweep's choices the paper does not make: the scaling, the draws' scale
    assert len(bound.setting.differences) == 3
    assert r"\tau = d_{QK}" in bound.setting.differences[1]
    assert r"1/\sqrt d" in bound.setting.differences[2]
    gain = verdicts.gains(result, _regime(result, "tau=d_qk"))
    assert (
        f"by at least {gain.min():,.0f} (median {np.median(gain):,.0f})" in bound.book
    )
    assert "{eq}`sv-weyl-min`" in bound.reason and "{eq}`sv-identity`" in bound.reason


def test_the_statement_as_the_paper_gives_it_is_refuted(result):
    stated, _ = verdicts.claims(result)
    assert stated.key == "lemma-residual" and stated.verdict == claims.NOT_REPRODUCED
    assert stated.setting == claims.STATED
    assert stated.reason.startswith("2 counterexamples: the statement is false")
    assert "below 1e-12 of the largest" in stated.rule  # the tolerance of "singular"
    found = verdicts.rank_counterexamples()
    assert [c.refutes for c in found] == [True, True]
    for c in found:  # X of full rank, Z singular to round-off
        assert c.sigma_X[-1] > 0.1 and c.sigma_Z[-1] < 1e-14 * c.sigma_Z[0]
        assert f"{c.what}: $\\sigma_{{\\min}}(Z)/\\sigma_{{\\max}}(Z)$" in stated.book
        assert (  # the smallest singular values of Z and of X, as shown
            f"= {c.sigma_Z[-1] / c.sigma_Z[0]:.1e} while $\\sigma_{{\\min}}(X)$ = "
            f"{c.sigma_X[-1]:.3g}" in stated.book
        )
    assert found[0].what.startswith("$W_V = I$, $\\beta = 0.5$")
    assert found[1].what.startswith("$W_V = -I$, $\\beta = 1$")
    # W_V = I: P + beta I = (1 + beta)/2 11^T, singular values (1 + beta) and 0
    first = found[0]
    assert first.sigma_Z == pytest.approx((1.5, 0.0), abs=1e-15)
    assert first.sigma_X == (1.0, 1.0)
    # W_V = -I, beta = 1: one rank lost per sample, N = 2
    assert sum(v < 1e-12 * found[1].sigma_Z[0] for v in found[1].sigma_Z) == 2


@pytest.mark.parametrize("beta, ratio", [(0.1, "1.22222"), (0.5, "3"), (0.9, "19")])
def test_the_identity_counterexample_holds_for_every_residual_strength_below_one(
    beta, ratio
):
    c = verdicts.rank_counterexamples(beta)[0]
    assert c.refutes and c.sigma_Z[0] == pytest.approx(1 + beta)
    # its text gives the score gap g = log((1 + beta) / (1 - beta)) it uses
    assert c.what.endswith(f"$g = \\log {ratio}$")


def test_without_a_counterexample_the_statement_is_not_resolved(result, monkeypatch):
    full = verdicts.Counterexample("x", (2.0, 1.0), (2.0, 1e-11))
    assert not full.refutes
    assert verdicts.Counterexample("x", (2.0, 1.0), (2.0, 1e-12)).refutes
    assert not verdicts.Counterexample("x", (2.0, 1e-12), (2.0, 0.0)).refutes
    monkeypatch.setattr(verdicts, "rank_counterexamples", lambda: [full])
    stated = verdicts.claims(result)[0]
    assert stated.verdict == claims.INCONCLUSIVE
    assert stated.reason.startswith("no instance of the book refutes it")
    assert "a proof" in stated.takes
    one = verdicts.Counterexample("y", (1.0, 1.0), (1.5, 0.0))
    monkeypatch.setattr(verdicts, "rank_counterexamples", lambda: [full, one])
    stated = verdicts.claims(result)[0]
    assert stated.verdict == claims.NOT_REPRODUCED
    assert stated.reason.startswith("1 counterexample: ")
    assert stated.takes == ""


def _edited(result, scaling, field, beta, change):
    edited = copy.deepcopy(result)
    values = getattr(_regime(edited, scaling), field)
    row = _row(edited, beta)
    values[row] = change(values[row], edited)
    return edited


def _one_draw_gains_50(row, edited):
    """At beta = 0: one draw (not the one of the smallest gain) raised to 1/50 of its
    value at beta = 1; the median gain hardly moves."""
    reg = _regime(edited, "tau=d_qk")
    at_one = reg.sigma_min[_row(edited, 1.0)]
    j = int(np.argmax(at_one / row))
    row = row.copy()
    row[j] = at_one[j] / 50
    return row


def _one_draw_falls(row, edited):
    row = row.copy()
    row[3] = row[3] / 1e4
    return row


@pytest.mark.parametrize(
    "scaling, field, beta, change, flips",
    [
        ("tau=d_qk", "sigma_min", 0.0, _one_draw_gains_50, True),
        ("tau=d_qk", "sigma_min", 1.0, _one_draw_falls, True),
        ("tau=d_qk", "kappa", 1.0, lambda row, e: row * 400, True),
        ("tau=sqrt(d_qk)", "sigma_min", 0.0, _one_draw_gains_50, False),
        ("tau=d_qk", "sigma_min", 0.5, _one_draw_falls, False),
        ("tau=d_qk", "weyl_lower", 1.0, lambda row, e: row * 0, False),
        ("tau=sqrt(d_qk)", "weyl_lower", 0.5, lambda row, e: row + 100.0, True),
    ],
    ids=[
        "one-draw-at-beta-0",
        "one-draw-at-beta-1",
        "kappa-at-beta-1",
        "other-regime",
        "other-beta",
        "other-field",
        "weyl-above-sigma",
    ],
)
def test_the_claim_flips_with_its_evidence_and_only_with_it(
    result, scaling, field, beta, change, flips
):
    edited = _edited(result, scaling, field, beta, change)
    expected = claims.NOT_REPRODUCED if flips else claims.REPRODUCED
    assert _status(edited) == expected
    bound = verdicts.claims(edited)[1]
    assert bound.verdict == expected
    if flips:
        assert bound.reason.startswith("fails: ")


def test_one_draw_below_the_gain_fails_the_acceptance_table(result):
    edited = _edited(result, "tau=d_qk", "sigma_min", 0.0, _one_draw_gains_50)
    failed = [row.what for row in verdicts.checks(edited) if not row.ok]
    assert len(failed) == 1 and "smallest gain" in failed[0]


def test_the_weyl_onset_is_where_the_median_bound_turns_positive(result):
    reg = _regime(result, "tau=d_qk")
    median = np.median(reg.weyl_lower, axis=1)
    onset = verdicts.weyl_onset(result, reg)
    i = _row(result, onset)
    assert (median[i:] > 0).all() and median[i - 1] <= 0
    never = copy.deepcopy(result)
    _regime(never, "tau=d_qk").weyl_lower[-1] = -1.0
    assert np.isnan(verdicts.weyl_onset(never, _regime(never, "tau=d_qk")))


def _onset_row(result):
    (row,) = [c for c in verdicts.checks(result) if "Weyl bound is positive" in c.what]
    return row


def test_a_bound_positive_at_every_beta_has_its_onset_at_zero(result):
    always = copy.deepcopy(result)
    reg = _regime(always, "tau=d_qk")
    reg.weyl_lower = np.minimum(reg.sigma_min, 1e-3)  # still below sigma_min
    assert verdicts.weyl_onset(always, reg) == 0.0
    assert _onset_row(always).value == 0.0 and _onset_row(always).ok


def test_a_bound_positive_only_at_beta_one_fails_the_onset_row(result):
    late = copy.deepcopy(result)
    _regime(late, "tau=d_qk").weyl_lower[:-1] = 0.0
    row = _onset_row(late)
    assert row.value == 1.0 and not row.ok
    assert _onset_row(result).value == verdicts.weyl_onset(
        result, _regime(result, "tau=d_qk")
    )


def test_the_table_reads_each_scalings_own_sweep(result):
    """Weyl's bound and the step in beta have one row per scaling, each the reading of
    its own regime; the median condition number's row is its fall, beta = 0 over 1."""
    table = {c.what: c for c in verdicts.checks(result)}
    for scaling in (sv.STANDARD, sv.COLLAPSED):
        reg, tau = _regime(result, scaling), verdicts.TAU[scaling]
        weyl = table[f"{tau}: Weyl's lower bound over $\\sigma_{{\\min}}(Z)$, largest"]
        assert weyl.value == (reg.weyl_lower / reg.sigma_min).max()
        (step,) = [c for w, c in table.items() if w.startswith(f"{tau}: mean ")]
        assert step.value == np.diff(reg.sigma_min.mean(axis=1)).min() > 0
    reg = _regime(result, sv.COLLAPSED)
    b0, b1 = _row(result, 0.0), _row(result, 1.0)
    (kappa,) = [c for w, c in table.items() if "median $\\kappa(Z)$" in w]
    fall = np.median(reg.kappa[b0]) / np.median(reg.kappa[b1])
    assert kappa.value == pytest.approx(fall, rel=1e-12) and kappa.op == ">"


def _at(edited, scaling, beta, draw, **values):
    """``edited`` with the given fields of one draw at one beta set."""
    reg, row = _regime(edited, scaling), _row(edited, beta)
    for field, value in values.items():
        getattr(reg, field)[row, draw] = value
    return edited


def _failed_rows(result):
    return [c.what for c in verdicts.checks(result) if not c.ok]


def test_weyl_above_sigma_min_only_by_round_off_still_holds(result):
    """The bound may exceed the SVD's sigma_min by the relative round-off RTOL, not
    more: at exactly 1 + RTOL the claim and its row hold, one float above they fail,
    and so does a bound at 1.5 times sigma_min."""

    def bound_at(ratio):  # one draw's bound at ``ratio`` times its sigma_min of 1
        edited = copy.deepcopy(result)
        return _at(edited, sv.STANDARD, 0.5, 0, sigma_min=1.0, weyl_lower=ratio)

    limit = 1 + verdicts.RTOL
    at_limit = bound_at(limit)
    assert verdicts.claims(at_limit)[1].verdict == claims.REPRODUCED
    assert not any("Weyl's lower bound" in w for w in _failed_rows(at_limit))
    for above in (np.nextafter(limit, 2.0), 1.5):
        edited = bound_at(above)
        bound = verdicts.claims(edited)[1]
        assert bound.verdict == claims.NOT_REPRODUCED
        assert bound.reason == "fails: Weyl's bound"
        (failed,) = _failed_rows(edited)
        assert failed.startswith(verdicts.TAU[sv.STANDARD]) and "Weyl's lower" in failed


def _assert_bound_row(edited, holds, part, row):
    """The bound claim and its acceptance row on an edited result: both hold, or the
    claim fails naming ``part`` and the one failing row is the one about ``row``."""
    bound = verdicts.claims(edited)[1]
    failed = _failed_rows(edited)
    if holds:
        assert bound.verdict == claims.REPRODUCED and not failed
    else:
        assert bound.verdict == claims.NOT_REPRODUCED
        assert bound.reason == f"fails: {part}"
        assert len(failed) == 1 and row in failed[0]


def test_a_gain_of_exactly_the_floor_is_not_enough(result):
    """One draw whose sigma_min(Z) grows exactly GAIN = 100 times fails the claim and
    its row (the rule asks for more than 100); 100.5 times passes."""
    for gain, holds in ((100.0, False), (100.5, True)):
        edited = _at(copy.deepcopy(result), sv.COLLAPSED, 1.0, 7, sigma_min=gain)
        edited = _at(edited, sv.COLLAPSED, 0.0, 7, sigma_min=1.0)
        assert verdicts.gains(edited, _regime(edited, sv.COLLAPSED)).min() == gain
        _assert_bound_row(edited, holds, "the gain in the collapse", "smallest gain")


def test_a_fall_of_exactly_kappa_drop_is_not_enough(result):
    """The median condition number falling exactly KAPPA_DROP = 10 times fails the
    claim and its row (the rule asks for more); 10.5 times passes."""
    for fall, holds in ((10.0, False), (10.5, True)):
        edited = copy.deepcopy(result)
        reg = _regime(edited, sv.COLLAPSED)
        reg.kappa[_row(edited, 0.0)] = fall
        reg.kappa[_row(edited, 1.0)] = 1.0
        _assert_bound_row(
            edited, holds, "the fall of the condition number", "median $\\kappa(Z)$"
        )
