"""The rules that decide a claim (rcutil.claims): the statuses, the summaries shown
beside a verdict, and the one-sided permutation test behind every comparison of runs,
against an oracle that enumerates every split of the pooled values."""

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rcutil import claims
from rcutil.claims import FAILS, HOLDS, UNRESOLVED


def oracle_p(a, b, alternative: str) -> float:
    """One-sided p of ``mean(a) - mean(b)``: the share of the splits of the pooled
    values into groups of ``len(a)`` and ``len(b)`` whose difference of means is at
    least as extreme (``"less"``: as low) as the observed one, every split counted."""
    pooled, k = np.concatenate([a, b]).astype(float), len(a)
    observed = np.mean(a) - np.mean(b)
    diffs = []
    for idx in itertools.combinations(range(len(pooled)), k):
        mask = np.zeros(len(pooled), dtype=bool)
        mask[list(idx)] = True
        diffs.append(pooled[mask].mean() - pooled[~mask].mean())
    diffs = np.array(diffs)
    tol = 1e-9 * max(1.0, abs(observed))
    if alternative == "less":
        return float(np.mean(diffs <= observed + tol))
    return float(np.mean(diffs >= observed - tol))


def oracle_outcome(a, b, direction="less", level=0.05) -> str:
    reverse = "greater" if direction == "less" else "less"
    if oracle_p(a, b, direction) <= level:
        return HOLDS
    return FAILS if oracle_p(a, b, reverse) <= level else UNRESOLVED


# ---------------------------------------------------------------------- statuses
def test_status_of_an_exact_check():
    assert claims.status(True) == claims.REPRODUCED
    assert claims.status(True, deviation=True) == claims.DEVIATION
    assert claims.status(False) == claims.NOT_REPRODUCED
    assert claims.status(False, deviation=True) == claims.NOT_REPRODUCED


@pytest.mark.parametrize(
    "outcome, deviation, floor, expected",
    [
        (HOLDS, False, False, claims.REPRODUCED),
        (HOLDS, True, False, claims.DEVIATION),
        (FAILS, False, False, claims.NOT_REPRODUCED),
        (FAILS, True, False, claims.NOT_REPRODUCED),
        (UNRESOLVED, False, False, claims.INCONCLUSIVE),
        (UNRESOLVED, True, False, claims.INCONCLUSIVE),
        (HOLDS, False, True, claims.INCONCLUSIVE),
        (FAILS, True, True, claims.INCONCLUSIVE),
    ],
)
def test_decide_maps_each_outcome_and_a_floor_to_its_status(
    outcome, deviation, floor, expected
):
    assert claims.decide(outcome, deviation=deviation, floor=floor) == expected


def test_decide_refuses_an_outcome_of_no_rule():
    with pytest.raises(ValueError, match="outcome must be one of"):
        claims.decide("reproduced")


def test_a_claim_carries_one_of_the_four_statuses():
    row = claims.Claim("k", "c", "p", "b", claims.DEVIATION, "why", rule="r")
    assert row.to_dict()["status"] == claims.DEVIATION and row.chapter == ""
    assert set(claims.DEFINITIONS) == set(claims.STATUSES)
    with pytest.raises(ValueError, match="status must be one of"):
        claims.Claim("k", "c", "p", "b", "holds", "why")


# ---------------------------------------------------------------------- summaries
def test_mean_and_standard_error():
    mean, se = claims.mean_se([1.0, 2.0, 3.0, 6.0])
    assert mean == 3.0
    assert se == pytest.approx(np.std([1, 2, 3, 6], ddof=1) / 2)
    one = claims.mean_se([4.0])
    assert one[0] == 4.0 and math.isnan(one[1])
    with pytest.raises(ValueError, match="at least one seed"):
        claims.mean_se([])


def test_fmt_shows_the_mean_and_its_standard_error():
    assert claims.fmt(0.12345, 0.00678) == "0.123 ± 0.0068"
    assert claims.fmt(0.12345, 0.00678, digits=2) == "0.12 ± 0.0068"
    assert claims.fmt(0.12345, math.nan) == "0.123"


def test_bootstrap_interval_of_the_difference_of_means():
    a, b = [1.0, 1.2, 0.9, 1.1, 1.0], [2.0, 2.1, 1.9, 2.2, 2.0]
    low, high = claims.bootstrap_ci(a, b)
    assert low <= np.mean(a) - np.mean(b) <= high < 0
    assert (low, high) == claims.bootstrap_ci(a, b)  # a fixed seed
    wide = claims.bootstrap_ci(a, b, level=0.99)
    assert wide[0] <= low and high <= wide[1]
    # the interval lies within the range of differences a resample can give
    assert low >= min(a) - max(b) and high <= max(a) - min(b)
    assert claims.bootstrap_ci([1.0, 1.0], [3.0, 3.0]) == (-2.0, -2.0)
    assert all(math.isnan(x) for x in claims.bootstrap_ci([1.0], [2.0, 3.0]))


# ---------------------------------------------------------------------- the test
@pytest.mark.parametrize(
    "a, b",
    [
        ([0.1, 0.2, 0.3], [0.4, 0.5, 0.6, 0.7, 0.8]),  # every seed apart
        ([0.1, 0.5, 0.3], [0.4, 0.2, 0.6, 0.7, 0.8]),  # overlapping
        ([0.3, 0.2, 0.3, 0.1], [0.3, 0.3, 0.2, 0.4]),  # ties across the arms
        ([5.0, 6.0], [1.0, 2.0, 3.0]),  # the other way
    ],
)
@pytest.mark.parametrize("alternative", ["less", "greater"])
def test_the_permutation_p_value_counts_every_split(a, b, alternative):
    assert claims.permutation_p(a, b, alternative=alternative) == pytest.approx(
        oracle_p(a, b, alternative), abs=1e-12
    )


def test_five_seeds_apart_give_the_smallest_exact_p():
    a, b = [0.20, 0.21, 0.22, 0.23, 0.24], [0.30, 0.31, 0.32, 0.33, 0.34]
    assert claims.permutation_p(a, b, alternative="less") == pytest.approx(1 / 252)
    assert claims.permutation_p(a, b, alternative="greater") == 1.0


def test_beyond_100_000_splits_the_p_value_is_resampled_close_to_the_exact_one():
    """Ten seeds per arm have 184,756 splits: 99,999 seeded resamples stand in for
    them, within their sampling error."""
    a = np.array([0.0, 1, 2, 3, 4, 5, 6, 7, 8, 12])
    b = a + 2.5
    exact = oracle_p(a, b, "less")
    p = claims.permutation_p(a, b, alternative="less")
    assert p == claims.permutation_p(a, b, alternative="less")  # seeded
    assert abs(p - exact) < 5 * math.sqrt(exact * (1 - exact) / 99_999) + 1e-5


@settings(max_examples=max(10, settings.default.max_examples // 6))
@given(
    a=st.lists(st.integers(0, 20), min_size=2, max_size=4).filter(
        lambda x: len(x) in (2, 4)
    ),
    b=st.lists(st.integers(0, 20), min_size=2, max_size=4).filter(
        lambda x: len(x) in (2, 4)
    ),
)
def test_compare_decides_as_the_enumerated_test(a, b):
    """Arms of two or four integer values: their means are exact in floating point, so
    a tie between splits is a tie for both."""
    for direction in ("less", "greater"):
        c = claims.compare(a, b, direction=direction)
        reverse = "greater" if direction == "less" else "less"
        assert c.p == pytest.approx(oracle_p(a, b, direction), abs=1e-12)
        assert c.p_reverse == pytest.approx(oracle_p(a, b, reverse), abs=1e-12)
        assert c.outcome == oracle_outcome(a, b, direction)


def test_the_rule_claims_an_effect_that_is_not_there_at_most_at_its_level():
    """Under no effect every split of the same values is as likely as the observed one:
    over all 252 splits of ten distinct values the exact test holds a claim at level
    0.05 in at most 5 % of them, in each direction."""
    pooled = np.array([0.3, 1.7, 2.2, 2.9, 3.1, 4.4, 5.0, 6.8, 7.5, 9.9])
    for direction in ("less", "greater"):
        held = 0
        splits = list(itertools.combinations(range(10), 5))
        for idx in splits:
            rest = [i for i in range(10) if i not in idx]
            p = claims.permutation_p(
                pooled[list(idx)], pooled[rest], alternative=direction
            )
            held += p <= claims.LEVEL
        assert held / len(splits) <= claims.LEVEL
        assert held == 12  # 1 in 21: the tail of the null distribution, exactly


def test_a_comparison_holds_fails_or_is_unresolved():
    low, high = [0.1, 0.11, 0.12, 0.13, 0.14], [0.2, 0.21, 0.22, 0.23, 0.24]
    assert claims.compare(low, high).outcome == HOLDS
    assert claims.compare(high, low).outcome == FAILS
    assert claims.compare(high, low, direction="greater").outcome == HOLDS
    mixed = [0.25, 0.2, 0.11, 0.23, 0.14]  # p = 1/6 and 0.87
    assert claims.compare(mixed, high).outcome == UNRESOLVED
    strict = claims.compare(low, high, level=0.001)  # p = 1/252 is not below 0.001
    assert strict.outcome == UNRESOLVED and strict.level == 0.001


def test_a_comparison_shows_its_means_interval_and_p():
    c = claims.compare([1.0, 2.0, 3.0], [4.0, 5.0, 6.0])
    assert (c.a_mean, c.b_mean, c.difference) == (2.0, 5.0, -3.0)
    assert c.a_se == pytest.approx(1 / math.sqrt(3))
    assert c.ci_low <= -3.0 <= c.ci_high
    assert c.p == pytest.approx(1 / 20) and c.p_reverse == 1.0
    assert c.text("w", "wo") == "w 2 ± 0.58 vs wo 5 ± 0.58, p = 0.05"


def test_one_seed_per_arm_resolves_nothing():
    c = claims.compare([0.1], [0.9, 0.8])
    assert (c.p, c.p_reverse, c.outcome) == (1.0, 1.0, UNRESOLVED)


@pytest.mark.parametrize(
    "kw, words",
    [
        (dict(a=[1.0, 2.0], b=[1.0, math.nan]), "finite values"),
        (dict(a=[1.0, 2.0], b=[1.0, math.inf]), "finite values"),
        (dict(a=[1.0, 2.0], b=[3.0, 4.0], direction="below"), "direction must be"),
    ],
)
def test_a_comparison_refuses_what_it_cannot_test(kw, words):
    with pytest.raises(ValueError, match=words):
        claims.compare(**kw)


def test_the_rule_in_words_names_the_seeds_and_the_level():
    text = claims.rule_text(5)
    assert "5 seeds per arm" in text and "level 0.05" in text
    assert "inconclusive" in text and "level 0.01" in claims.rule_text(5, level=0.01)


# ---------------------------------------------------------------------- trends
APART = {  # per-seed values at three levels, every level apart from the next
    0: [0.30, 0.31, 0.32, 0.33, 0.34],
    1: [0.20, 0.21, 0.22, 0.23, 0.24],
    2: [0.10, 0.11, 0.12, 0.13, 0.14],
}


def test_a_trend_holds_when_every_step_holds():
    t = claims.trend([0, 1, 2], list(APART.values()))
    assert t.outcome == HOLDS and len(t.steps) == 2
    assert all(c.outcome == HOLDS for c in t.steps) and t.ends.outcome == HOLDS
    assert t.x == (0.0, 1.0, 2.0)
    rising = claims.trend([0, 1, 2], list(APART.values())[::-1], direction="greater")
    assert rising.outcome == HOLDS


def test_a_step_the_other_way_fails_the_trend():
    values = [APART[0], APART[2], APART[1]]  # the last step rises
    assert claims.trend([0, 1, 2], values).outcome == FAILS


def test_ends_the_other_way_fail_a_trend_whose_steps_are_unresolved():
    values = [
        [0.10, 0.14, 0.18, 0.22, 0.26],
        [0.12, 0.16, 0.20, 0.24, 0.28],
        [0.14, 0.18, 0.22, 0.26, 0.30],
    ]
    t = claims.trend([0, 1, 2], values)
    assert all(c.outcome == UNRESOLVED for c in t.steps)
    assert t.ends.outcome == UNRESOLVED and t.outcome == UNRESOLVED
    far = [values[0], values[1], [0.30, 0.31, 0.32, 0.33, 0.34]]
    t = claims.trend([0, 1, 2], far)
    assert t.ends.outcome == FAILS and t.outcome == FAILS


def test_a_trend_that_holds_only_between_the_ends_is_unresolved():
    values = [APART[0], [0.05, 0.36, 0.1, 0.335, 0.2], APART[2]]  # a wide middle
    t = claims.trend([0, 1, 2], values)
    assert t.ends.outcome == HOLDS and t.outcome == UNRESOLVED


@pytest.mark.parametrize(
    "x, values, words",
    [
        ([0], [[1.0, 2.0]], "at least two levels"),
        ([0, 1], [[1.0, 2.0]], "one list of values per level"),
        ([1, 0], [[1.0, 2.0], [3.0, 4.0]], "must increase"),
        ([0, 0], [[1.0, 2.0], [3.0, 4.0]], "must increase"),
    ],
)
def test_a_trend_refuses_levels_it_cannot_order(x, values, words):
    with pytest.raises(ValueError, match=words):
        claims.trend(x, values)
