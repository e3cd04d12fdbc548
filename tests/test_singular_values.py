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
    found = verdicts.rank_counterexamples()
    assert [c.refutes for c in found] == [True, True]
    for c in found:  # X of full rank, Z singular to round-off
        assert c.sigma_X[-1] > 0.1 and c.sigma_Z[-1] < 1e-14 * c.sigma_Z[0]
        assert f"= {c.sigma_Z[-1] / c.sigma_Z[0]:.1e} while" in stated.book
    # W_V = I: P + beta I = (1 + beta)/2 11^T, singular values (1 + beta) and 0
    first = found[0]
    assert first.sigma_Z == pytest.approx((1.5, 0.0), abs=1e-15)
    assert first.sigma_X == (1.0, 1.0)
    # W_V = -I, beta = 1: one rank lost per sample, N = 2
    assert sum(v < 1e-12 * found[1].sigma_Z[0] for v in found[1].sigma_Z) == 2


@pytest.mark.parametrize("beta", [0.1, 0.5, 0.9])
def test_the_identity_counterexample_holds_for_every_residual_strength_below_one(beta):
    c = verdicts.rank_counterexamples(beta)[0]
    assert c.refutes and c.sigma_Z[0] == pytest.approx(1 + beta)


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
