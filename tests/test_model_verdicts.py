"""The model chapter's claim: it follows every acceptance check of the chapter, and
each check, edited on the stored result, flips it and the numbers the row shows."""

import copy

import pytest

import rcutil  # noqa: F401  (thread policy before numpy)
from rcutil import claims as C
from rcutil import settings_for
from rcutil.experiments import model
from rcutil.experiments.model import verdicts


@pytest.fixture(scope="module")
def result():
    run = model.run(settings_for(model.SETTINGS, "ci"), progress=False)
    return model.Result.from_json(run.to_json())  # as the store gives it back


def _claim(result):
    (row,) = verdicts.claims(result)
    return row


def test_the_claim_holds_with_every_check_in_the_books_setting(result):
    row = _claim(result)
    assert row.key == "model" and row.verdict == C.REPRODUCED
    assert all(c.ok for c in verdicts.checks(result))
    assert row.setting.kind == C.RECONSTRUCTION
    assert row.setting.differences[:2] == (
        r"activation $\tanh$",
        r"temperature $\tau = \sqrt{d_{QK}}$",
    )
    # every choice the paper leaves open is listed: the initialisation, and where beta
    # enters a deep model
    assert len(row.setting.differences) == 4
    assert "initialisation" in row.setting.differences[2]
    assert "beta" in row.setting.differences[3].replace("\\", "")
    n = len(verdicts.checks(result))
    assert row.reason.startswith(f"all {n} checks hold") and f"({n} checks)" in row.rule
    fd = max(result.finite_difference_rel_error.values())
    diff = max(v.max_abs_diff for v in result.variants)
    assert f"to {fd:.1e} (relative)" in row.book and row.book.endswith(f"{diff:.1e}")


def _edit(result, how):
    edited = copy.deepcopy(result)
    how(edited)
    return edited


def _one_block(r):
    name = sorted(r.finite_difference_rel_error)[1]
    r.finite_difference_rel_error[name] = 3e-5


EDITS = {
    "a gradient block off its finite differences": _one_block,
    "one block fails gradcheck": lambda r: r.gradcheck.update(
        {sorted(r.gradcheck)[-1]: False}
    ),
    "a block without its gradient check": lambda r: r.finite_difference_rel_error.pop(
        sorted(r.finite_difference_rel_error)[0]
    ),
    "beta = 1/2 off the formula": lambda r: setattr(
        [v for v in r.variants if v.beta == 0.5][0], "max_abs_diff", 1e-9
    ),
    "beta = 0 off the formula": lambda r: setattr(
        [v for v in r.variants if v.beta == 0.0][0], "max_abs_diff", 1e-9
    ),
    "one GD step up": lambda r: r.gd[0].loss.__setitem__(5, r.gd[0].loss[4] * 1.01),
    "no gain of sigma_min(Z_0) from the residual": lambda r: [
        g.sigma_min.__setitem__(0, 1.0) for g in r.gd
    ],
}


@pytest.mark.parametrize("edit", EDITS)
def test_each_failed_check_makes_the_model_not_reproduced(result, edit):
    edited = _edit(result, EDITS[edit])
    failed = [c.what for c in verdicts.checks(edited) if not c.ok]
    assert len(failed) == 1, failed
    row = _claim(edited)
    assert row.verdict == C.NOT_REPRODUCED
    assert row.reason == f"a check fails: {failed[0]}"
    assert row.setting == _claim(result).setting  # the setting stays with the verdict


def test_the_row_shows_the_worst_block_and_the_worst_formula(result):
    edited = _edit(result, _one_block)
    assert "to 3.0e-05 (relative)" in _claim(edited).book
    worst = _edit(
        result,
        lambda r: setattr(
            [v for v in r.variants if v.beta == 0.5][0], "max_abs_diff", 7e-13
        ),
    )
    assert _claim(worst).book.endswith("7.0e-13") and _claim(worst).verdict == (
        C.REPRODUCED
    )


@pytest.mark.parametrize("gain, ok", [(10.5, True), (9.5, False)])
def test_the_residual_must_multiply_sigma_min_of_z0_by_more_than_ten(result, gain, ok):
    def scaled(r):
        run0, run1 = (next(g for g in r.gd if g.beta == b) for b in (0.0, 1.0))
        run1.sigma_min[0] = gain * run0.sigma_min[0]

    edited = _edit(result, scaled)
    check = verdicts.checks(edited)[-1]
    assert check.value == pytest.approx(gain) and check.ok is ok
    assert _claim(edited).verdict == (C.REPRODUCED if ok else C.NOT_REPRODUCED)
