"""The rules that decide a claim (rcutil/claims.py): each path of the rules, the tests
against an oracle that enumerates every rearrangement, and both wrong verdicts under no
effect, simulated for each structure of the book's claims with its seed counts."""

import functools
import itertools
import math
import warnings
from dataclasses import dataclass, replace
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from rcutil import claims as C

LEVEL = C.LEVEL


# ---------------------------------------------------------------- the oracle
def _scores(sizes, paired):
    m = len(sizes)
    c = np.arange(m, dtype=float)
    w = np.ones(m) if paired else np.asarray(sizes, dtype=float)
    return c - (w * c).sum() / w.sum()


def oracle_statistics(design, samples, theta):
    """The statistic of every rearrangement of ``samples`` shifted by ``theta`` (the
    observed one first), by enumeration: two arms, paired arms, paired levels."""
    xs = [np.asarray(s, dtype=float) for s in samples]
    sizes = [len(x) for x in xs]
    if design in (C.TWO_ARMS, C.PAIRED):
        xs = [xs[0] - theta, xs[1]]
    else:
        c = _scores(sizes, design == C.PAIRED_TREND)
        xs = [x - theta * cj for x, cj in zip(xs, c)]
    out = []
    if design == C.TWO_ARMS:
        v = np.concatenate(xs)
        first = tuple(range(sizes[0]))
        splits = [first] + [
            s for s in itertools.combinations(range(v.size), sizes[0]) if s != first
        ]
        for s in splits:
            mask = np.zeros(v.size, bool)
            mask[list(s)] = True
            out.append(v[mask].mean() - v[~mask].mean())
    elif design == C.PAIRED:
        d = xs[0] - xs[1]
        for signs in itertools.product([1, -1], repeat=d.size):
            out.append((np.array(signs) * d).mean())
    else:  # PAIRED_TREND: the levels of each seed rearranged
        c = _scores(sizes, True)
        y = np.stack(xs)  # (levels, seeds)
        per_seed = [list(itertools.permutations(range(len(sizes))))] * y.shape[1]
        for choice in itertools.product(*per_seed):
            z = np.stack([y[list(p), i] for i, p in enumerate(choice)], axis=1)
            out.append((c[:, None] * z).mean(axis=1).sum() / (c**2).sum())
    return np.array(out)


def _trend_statistics(samples, theta):
    """Unpaired trend, every split of the pooled values into the levels' sizes."""
    xs = [np.asarray(s, dtype=float) for s in samples]
    sizes = [len(x) for x in xs]
    c = _scores(sizes, False)
    xs = [x - theta * cj for x, cj in zip(xs, c)]
    v = np.concatenate(xs)
    scale = (np.asarray(sizes) * c**2).sum()
    out = []

    def split(rest, j, acc):
        if j == len(sizes) - 1:
            out.append(acc + c[j] * v[list(rest)].sum())
            return
        for pick in itertools.combinations(rest, sizes[j]):
            left = [i for i in rest if i not in pick]
            split(left, j + 1, acc + c[j] * v[list(pick)].sum())

    split(list(range(v.size)), 0, 0.0)
    t0 = sum(c[j] * x.sum() for j, x in enumerate(xs)) / scale
    return t0, np.array(out) / scale


def oracle(design, samples, theta=0.0):
    """(p_less, p_greater) against ``theta``, by enumeration."""
    if design == C.TREND:
        t0, null = _trend_statistics(samples, theta)
    else:
        null = oracle_statistics(design, samples, theta)
        t0 = null[0]
    tol = 1e-9 * max(1.0, abs(t0))
    return (null <= t0 + tol).mean(), (null >= t0 - tol).mean()


# ---------------------------------------------------------------- against the oracle
DESIGN_SIZES = {
    C.TWO_ARMS: st.tuples(st.integers(1, 5), st.integers(1, 5)),
    C.PAIRED: st.integers(1, 6).map(lambda n: (n, n)),
    C.TREND: st.lists(st.integers(1, 3), min_size=2, max_size=3).map(tuple),
    C.PAIRED_TREND: st.tuples(st.integers(2, 3), st.integers(1, 3)).map(
        lambda mn: (mn[1],) * mn[0]
    ),
}


@st.composite
def data_sets(draw):
    design = draw(st.sampled_from(C.DESIGNS))
    sizes = draw(DESIGN_SIZES[design])
    ties = draw(st.booleans())  # error counts: ties between seeds and arms
    value = (
        st.integers(0, 4).map(lambda k: k / 8)
        if ties
        else st.floats(-10, 10, allow_nan=False).map(lambda x: round(x, 6))
    )
    samples = [draw(st.lists(value, min_size=k, max_size=k)) for k in sizes]
    return design, samples


@settings(max_examples=max(25, settings.default.max_examples // 6))
@given(data_sets(), st.sampled_from([0.0, 0.3]))
def test_p_values_and_interval_are_those_of_every_rearrangement(data, shift):
    design, samples = data
    if design in (C.TREND, C.PAIRED_TREND):
        shift = 0.0  # a trend is tested against no trend
    out = C.permutation_tests(design, samples, shift=shift)
    sizes = [len(s) for s in samples]
    assert out["exact"] and out["size"] == C.group_size(design, sizes)
    p_less, p_greater = oracle(design, samples, shift)
    assert out["p_less"] == pytest.approx(p_less, abs=1e-12)
    assert out["p_greater"] == pytest.approx(p_greater, abs=1e-12)
    assert_interval_inverts_the_test(design, samples, out, shift)


def assert_interval_inverts_the_test(design, samples, out, shift=0.0):
    """The interval holds the effects the same test does not reject (by the oracle),
    and it excludes ``shift`` exactly when the test decides."""
    low, high = float(out["low"]), float(out["high"])
    assert low <= float(out["estimate"]) + 1e-9 <= high + 2e-9
    eps = 1e-6 * (1 + abs(low) + abs(high))
    if math.isfinite(low):  # rejected just below, not rejected at it
        assert oracle(design, samples, low - eps)[1] <= LEVEL
        assert oracle(design, samples, low + eps)[1] > LEVEL
    else:  # too few rearrangements: no effect is ever rejected
        assert oracle(design, samples, -1e6)[1] > LEVEL
    if math.isfinite(high):
        assert oracle(design, samples, high + eps)[0] <= LEVEL
        assert oracle(design, samples, high - eps)[0] > LEVEL
    # so the verdict and the interval agree
    assert (out["p_greater"] <= LEVEL) == (out["low"] > shift)
    assert (out["p_less"] <= LEVEL) == (out["high"] < shift)


def test_five_against_five_seeds_is_exact_over_252_splits():
    a, b = [1.0, 2, 3, 4, 5], [6.0, 7, 8, 9, 10]
    part = C.comparison(a, b, direction="less")
    assert part.size == 252 and part.exact
    assert part.p == pytest.approx(1 / 252) and part.p_against == 1.0
    assert part.coverage == pytest.approx(1 - 24 / 252)
    assert part.estimate == -5.0 and part.means == (3.0, 8.0) and part.n == (5, 5)


def test_five_paired_seeds_give_the_range_of_the_differences():
    d = np.array([0.3, -0.1, 0.5, 0.2, 0.9])
    part = C.comparison(d + 1, np.ones(5), direction="greater", paired=True)
    assert (part.low, part.high) == pytest.approx((d.min(), d.max()))
    assert part.coverage == pytest.approx(1 - 2 / 32) and part.size == 32
    # 4 of 5 differences positive: p = 2/32 (the observed and the all-positive flip)
    assert part.p == pytest.approx(2 / 32) and part.p > LEVEL
    # against the claim "greater": the p-value of "less"
    assert part.p_against == pytest.approx(oracle(C.PAIRED, part.values)[0])


def test_only_five_same_sign_paired_seeds_can_reach_the_level():
    up = C.comparison([1.0, 2, 3, 4, 5], [0.0] * 5, direction="greater", paired=True)
    assert up.p == pytest.approx(1 / 32) and up.p <= LEVEL
    four = C.comparison([1.0, 2, 3, 4], [0.0] * 4, direction="greater", paired=True)
    assert four.p == pytest.approx(1 / 16) and four.p > LEVEL
    assert math.isinf(four.low) and four.low < 0


def test_more_rearrangements_than_the_enumeration_are_drawn_at_random():
    rng = np.random.default_rng(3)
    levels = [rng.normal(size=5) + 1.5 * j for j in range(3)]
    out = C.permutation_tests(C.TREND, levels, resamples=999, seed=5)
    assert not out["exact"] and out["size"] == 1000
    # the p-value of a random test counts the observed split: (b + 1) / (R + 1)
    for p in (out["p_less"], out["p_greater"]):
        assert p >= 1 / 1000 and round(p * 1000) == pytest.approx(p * 1000)
    # the same draws as scipy's test with the same seed, both ways
    pooled = [
        np.stack([x - 0.0, np.full(5, cj)])
        for x, cj in zip(levels, _scores([5] * 3, False))
    ]
    for side in ("less", "greater"):
        ref = stats.permutation_test(
            pooled,
            lambda *xs, axis: (
                sum(cj * x.sum(axis) for cj, x in zip(_scores([5] * 3, False), xs)) / 50
            ),
            permutation_type="independent",
            vectorized=True,
            n_resamples=999,
            alternative=side,
            axis=-1,
            rng=np.random.default_rng(5),
        )
        assert out[f"p_{side}"] == pytest.approx(ref.pvalue[0])
    # the book's part at its seed counts goes the random way too
    part = C.ordered_trend([2, 6, 10], levels, direction="greater")
    assert not part.exact and part.size == C.RESAMPLES + 1
    assert part.p <= LEVEL and part.low > 0


def test_a_part_records_its_data_and_its_level():
    part = C.comparison(
        [1.0, 2, 3], [4.0, 5, 6], direction="less", level=0.1, label="x"
    )
    assert part.values == ((1.0, 2.0, 3.0), (4.0, 5.0, 6.0)) and part.level == 0.1
    assert part.coverage == pytest.approx(C.coverage(20, 0.1)) == 0.8
    assert part.line().startswith("x: −3 [") and "p = 0.05" in part.line()


# ---------------------------------------------------------------- one part: its inputs
def test_a_direction_other_than_less_or_greater_is_refused():
    with pytest.raises(ValueError, match="direction"):
        C.comparison([1, 2], [3, 4], direction="lower")


def test_paired_arms_need_the_same_seeds():
    with pytest.raises(ValueError, match="same seeds"):
        C.comparison([1, 2, 3], [3, 4], direction="less", paired=True)


def test_values_must_be_finite():
    with pytest.raises(ValueError, match="finite"):
        C.comparison([1, math.nan], [3, 4], direction="less")
    with pytest.raises(ValueError, match="finite"):
        C.permutation_tests(C.TWO_ARMS, [[1, np.inf], [3, 4]])


def test_a_trend_needs_increasing_levels_and_one_list_each():
    with pytest.raises(ValueError, match="increase"):
        C.ordered_trend([1, 1, 2], [[1], [2], [3]], direction="less")
    with pytest.raises(ValueError, match="one list of values per level"):
        C.ordered_trend([1, 2, 3], [[1], [2]], direction="less")
    with pytest.raises(ValueError, match="one list of values per level"):
        C.ordered_trend([1], [[1]], direction="less")


def test_the_design_names_its_arms():
    with pytest.raises(ValueError, match="design"):
        C.permutation_tests("three arms", [[1], [2]])
    with pytest.raises(ValueError, match="two arms"):
        C.permutation_tests(C.TWO_ARMS, [[1], [2], [3]])
    with pytest.raises(ValueError, match="at least two levels"):
        C.permutation_tests(C.TREND, [[1, 2]])
    with pytest.raises(ValueError, match="at least one seed"):
        C.permutation_tests(C.TWO_ARMS, [[], [2]])
    with pytest.raises(ValueError, match="design"):
        C.group_size("three arms", [1, 2])


def test_group_sizes():
    assert C.group_size(C.TWO_ARMS, [5, 5]) == 252
    assert C.group_size(C.TWO_ARMS, [3, 4]) == 35
    assert C.group_size(C.PAIRED, [5, 5]) == 32
    assert C.group_size(C.TREND, [5, 5, 5]) == 756_756
    assert C.group_size(C.TREND, [1, 2, 3]) == 60
    assert C.group_size(C.PAIRED_TREND, [5, 5, 5]) == 6**5
    assert C.group_size(C.PAIRED_TREND, [4] * 5) == 120**4


def test_coverage_follows_from_the_rearrangements():
    assert C.coverage(252) == pytest.approx(1 - 24 / 252)
    assert C.coverage(32) == pytest.approx(1 - 2 / 32)
    assert C.coverage(10_000) == pytest.approx(0.9)
    assert C.coverage(20) == pytest.approx(0.9)  # 3 against 3: 1/20 each side
    assert C.coverage(16) == 1.0  # 4 paired seeds: the level is never reached


def test_a_trend_is_the_slope_per_level_step():
    part = C.ordered_trend(
        [0, 0.5, 1], [[1.0, 1.2], [2.0, 2.2], [3.0, 3.2]], direction="greater"
    )
    assert part.estimate == pytest.approx(1.0) and part.design == C.TREND
    paired = C.ordered_trend(
        [1, 2, 3, 4, 5],
        [[j + 0.1 * i for i in range(5)] for j in range(5)],
        direction="greater",
        paired=True,
    )
    assert paired.estimate == pytest.approx(1.0) and paired.design == C.PAIRED_TREND
    assert paired.p <= LEVEL and paired.n == (5,) * 5


def test_unequal_seeds_per_level_weight_the_slope_by_seeds():
    # least squares on the level's rank with 1, 2 and 3 seeds
    y = [[0.0], [1.0, 1.2], [2.5, 2.0, 2.2]]
    x = np.repeat([0, 1, 2], [1, 2, 3])
    slope = np.polyfit(x, np.concatenate(y), 1)[0]
    assert C.ordered_trend([1, 2, 3], y, direction="greater").estimate == pytest.approx(
        slope
    )


# ---------------------------------------------------------------- the rule over parts
def test_every_part_must_hold_for_reproduced():
    assert C.verdicts([0.01, 0.04], [0.99, 0.97]) == 1
    assert C.verdicts([0.01, 0.06], [0.99, 0.5]) == 0
    assert C.verdicts([0.05], [0.96]) == 1  # at the level itself


def test_a_part_reversed_after_holm_is_not_reproduced():
    # k = 2: reversed at 0.025 decides, 0.03 does not
    assert C.verdicts([0.5, 0.9], [0.5, 0.025]) == -1
    assert C.verdicts([0.5, 0.9], [0.5, 0.03]) == 0
    assert C.verdicts([0.5] * 4, [0.6, 0.6, 0.6, 0.0125]) == -1
    assert C.verdicts([0.5] * 4, [0.6, 0.6, 0.6, 0.013]) == 0
    # holds in part, another part reversed: not reproduced
    assert C.verdicts([0.01, 0.99], [0.99, 0.01]) == -1


def test_verdicts_are_vectorised_over_claims():
    p = np.array([[0.01, 0.01], [0.5, 0.5], [0.01, 0.9]])
    q = np.array([[0.99, 0.99], [0.5, 0.5], [0.99, 0.02]])
    assert C.verdicts(p, q).tolist() == [1, 0, -1]


def test_verdicts_need_one_p_value_each_way_per_part():
    with pytest.raises(ValueError, match="one p-value each way"):
        C.verdicts([0.1, 0.2], [0.1])
    with pytest.raises(ValueError, match="one p-value each way"):
        C.verdicts(np.zeros((3, 0)), np.zeros((3, 0)))


@given(st.lists(st.floats(0, 1), min_size=1, max_size=8), st.sampled_from([0.05, 0.1]))
def test_holm_is_the_step_down_procedure(p, level):
    got = C.holm(p, level)
    # the definition: reject the i-th smallest while every smaller rank passed
    order = sorted(range(len(p)), key=lambda i: (p[i], i))
    expect, going = [False] * len(p), True
    for rank, i in enumerate(order):
        going = going and p[i] <= level / (len(p) - rank)
        expect[i] = going
    assert got == expect
    assert any(got) == (min(p) <= level / len(p))


def _part(
    p,
    p_against,
    label="",
    estimate=-1.0,
    design=C.TWO_ARMS,
    direction="less",
    unit_se=1.0,
    n=5,
):
    return C.Part(
        label=label,
        design=design,
        direction=direction,
        values=((0.0,) * n, (0.0,) * n),
        estimate=estimate,
        low=-2.0,
        high=0.5,
        coverage=0.9,
        p=p,
        p_against=p_against,
        size=252,
        unit_se=unit_se,
    )


def test_a_decision_names_each_path_in_its_reason():
    held = C.decision([_part(0.01, 0.99, "L = 2"), _part(0.02, 0.98, "L = 6")])
    assert held.verdict == C.REPRODUCED and held.reason() == "every part holds"
    assert C.decision(_part(0.01, 0.99)).reason() == "the test decides for it"
    part_only = C.decision(
        [_part(0.01, 0.99, "L = 2"), _part(0.99, 0.01, "L = 6", estimate=1.0)]
    )
    assert part_only.verdict == C.NOT_REPRODUCED
    assert part_only.reason().startswith("holds only in part: L = 6 goes the other way")
    assert part_only.reversed == (part_only.parts[1],) and part_only.holding == (
        part_only.parts[0],
    )
    against = C.decision(_part(0.99, 0.01, "β", estimate=1.0))
    assert against.reason() == "β goes the other way"
    some = C.decision([_part(0.01, 0.99, "L = 2"), _part(0.3, 0.7, "L = 6")])
    assert some.verdict == C.INCONCLUSIVE
    assert some.reason().startswith(
        "L = 2 holds, the rest is not resolved; it would take about"
    )
    none = C.decision(_part(0.3, 0.7))
    assert none.reason().startswith("not resolved either way; it would take about")


def test_a_measure_at_its_floor_is_inconclusive_whatever_the_tests():
    d = C.decision(
        _part(0.001, 0.999), measurable=False, why_not_measurable="every run fits"
    )
    assert d.verdict == C.INCONCLUSIVE and d.code == 0
    assert d.reason() == "the measure cannot show the effect: every run fits"
    assert "every run fits" in d.it_would_take()
    with pytest.raises(ValueError, match="why_not_measurable"):
        C.decision(_part(0.5, 0.5), measurable=False)


def test_a_decision_needs_parts_at_its_own_level():
    with pytest.raises(ValueError, match="at least one part"):
        C.Decision(())
    a = C.comparison([1, 2, 3], [4, 5, 6], direction="less")
    b = C.comparison([1, 2, 3], [4, 5, 6], direction="less", level=0.1)
    with pytest.raises(ValueError, match="levels"):
        C.decision([a, b])
    with pytest.raises(ValueError, match="levels"):
        C.decision(a, level=0.1)
    assert C.decision(b).level == 0.1 and C.decision(b).verdict == C.REPRODUCED


def test_a_decision_shows_one_line_of_evidence():
    a = C.comparison(
        [1.0, 2, 3, 4, 5], [3.0, 4, 5, 6, 7], direction="less", label="w − wo"
    )
    line = C.decision(a).line()
    p_less = oracle(C.TWO_ARMS, a.values)[0]
    assert line.startswith("w − wo: −2 [−4, 0], ") and f"p = {p_less:.2g}" in line
    assert line.endswith("(90.48 % interval; 5 seeds per arm)")
    b = C.comparison([1.0, 2, 3], [3.0, 4, 5], direction="less", paired=True, label="x")
    two = C.decision(
        [a, C.comparison([1.0, 2, 3, 4, 5], [3.0, 4, 5, 6, 7], direction="less")]
    )
    assert "; " in two.line() and "intervals" in two.line()
    assert "3 paired seeds" in C.decision(b).line()
    assert (
        "at least 90.04 %"
        in C.decision(
            [
                a,
                C.comparison(
                    [1, 2, 3, 4, 5, 6.0], [3, 4, 5, 6, 7, 8.0], direction="less"
                ),
            ]
        ).line()
    )


def test_the_rule_in_words_names_its_test():
    a = C.comparison([1.0, 2, 3, 4, 5], [3.0, 4, 5, 6, 7], direction="less")
    assert "exact over 252 rearrangements" in C.decision(a).rule()
    assert (
        "2 parts" in C.decision([a, a]).rule()
        and "0.05/2 (Holm)" in C.decision([a, a]).rule()
    )
    t = C.ordered_trend(
        [1, 2, 3], [[1.0] * 5, [2.0] * 5, [3.0] * 5], direction="greater"
    )
    assert "random rearrangements" in C.decision(t).rule()


def _extreme(n, k, paired, way):
    """A claim of ``k`` parts "a below b" whose data go as far as they can ``way``
    ("for" or "against") with ``n`` seeds per arm."""
    low, high = list(range(n)), list(range(10, 10 + n))
    a, b = (low, high) if way == "for" else (high, low)
    part = C.comparison(a, b, direction="less", paired=paired)
    return C.decision([part] * k)


@pytest.mark.parametrize(
    "n, k, paired, reach",
    [
        (5, 1, True, {"for", "against"}),
        (5, 2, True, {"for"}),  # 1/32 is above 0.05/2
        (4, 1, True, set()),  # 1/16 is above 0.05
        (4, 2, True, set()),  # 1/16 is above 0.05 and 0.05/2
        (3, 2, False, {"for"}),  # 1/20: at 0.05, not at 0.025
        (3, 1, False, {"for", "against"}),  # 1/20: at the level itself
        (2, 1, False, set()),  # 1/6
        (4, 2, False, {"for", "against"}),  # 1/70
    ],
)
def test_the_rule_says_which_verdicts_its_seeds_can_reach(n, k, paired, reach):
    """The limits the rule states are the verdicts no data can give it."""
    for way, verdict in (("for", C.REPRODUCED), ("against", C.NOT_REPRODUCED)):
        got = _extreme(n, k, paired, way)
        assert (got.verdict == verdict) == (way in reach), (way, got.verdict)
    limits = _extreme(n, k, paired, "for").limits()
    rule = _extreme(n, k, paired, "for").rule()
    size = C.group_size(C.PAIRED if paired else C.TWO_ARMS, [n, n])
    if reach == {"for", "against"}:
        assert limits == "" and "with these seeds" not in rule
        assert rule.endswith(", else inconclusive" if k == 1 else "; else inconclusive")
    else:
        assert rule.endswith("; " + limits) and f"1/{size:,}," in limits
        named = {"for": "for the claim", "against": "against the claim"}
        if not reach:
            assert "neither verdict" in limits
        else:
            (missing,) = {"for", "against"} - reach
            assert f"cannot decide {named[missing]}" in limits
    assert "above 0.05" in limits or not limits
    # the level against the claim is Holm's level/k
    if "cannot decide against" in limits:
        assert limits.endswith(f"is above 0.05/{k})" if k > 1 else "is above 0.05)")
    if not reach:
        assert limits.endswith(
            "is above 0.05 and 0.05/2)" if k > 1 else "is above 0.05)"
        )


def test_the_rule_counts_the_random_rearrangements_it_drew():
    rng = np.random.default_rng(8)
    a, b = rng.normal(size=10), rng.normal(size=10)
    drawn = C.comparison(a, b, direction="less", resamples=99)
    exact = C.comparison([1.0, 2, 3, 4, 5], [3.0, 4, 5, 6, 7], direction="less")
    rule = C.decision([drawn, exact]).rule()
    assert "exact over 252 rearrangements; 99 random rearrangements" in rule


def test_seeds_per_part_are_shown_by_design():
    assert _part(0.1, 0.9).seeds() == "5 seeds per arm"
    assert C.comparison([1, 2], [3, 4, 5], direction="less").seeds() == "2 + 3 seeds"
    assert (
        C.comparison([1, 2, 3], [3, 4, 5], direction="less", paired=True).seeds()
        == "3 paired seeds"
    )
    assert (
        C.ordered_trend([1, 2], [[1, 2], [3, 4]], direction="less").seeds()
        == "2 seeds per level"
    )
    assert (
        C.ordered_trend([1, 2], [[1, 2], [3, 4]], direction="less", paired=True).seeds()
        == "2 seeds per level, paired"
    )


# ---------------------------------------------------------------- what it would take
def test_the_seeds_it_would_take_reach_the_power_and_no_fewer_do():
    p = _part(0.3, 0.7, estimate=-0.5, unit_se=math.sqrt(2))  # effect 0.5 s.d.
    d = C.decision(p)
    n = d.seeds_needed()
    assert C.power(p, n, LEVEL) >= C.POWER > C.power(p, n - 1, LEVEL)
    # the normal formula's neighbourhood: 2 (1.645 + 0.842)^2 / 0.25 = 49.5
    assert 48 <= n <= 53
    assert d.it_would_take().startswith(f"about {n:,} seeds per arm")
    assert "(for the claim)" in d.it_would_take()


def test_an_effect_against_the_claim_is_resolved_at_the_holm_level():
    p1 = _part(0.9, 0.1, estimate=0.5, unit_se=math.sqrt(2))
    p2 = _part(0.5, 0.5, estimate=0.0, unit_se=math.sqrt(2))
    d = C.decision([p1, p2])
    n = d.seeds_needed()
    assert C.power(p1, n, LEVEL / 2) >= C.POWER > C.power(p1, n - 1, LEVEL / 2)
    assert "(against the claim)" in d.it_would_take()


def test_every_part_must_reach_the_power_together():
    parts = [_part(0.3, 0.7, estimate=-0.5, unit_se=math.sqrt(2)) for _ in range(3)]
    n = C.decision(parts).seeds_needed()
    assert (
        C.power(parts[0], n, LEVEL) ** 3
        >= C.POWER
        > C.power(parts[0], n - 1, LEVEL) ** 3
    )


def test_what_no_number_of_seeds_resolves():
    zero = C.decision(_part(0.5, 0.5, estimate=0.0))
    assert zero.seeds_needed() is None and "effect is zero" in zero.it_would_take()
    one_seed = C.decision(_part(0.5, 0.5, unit_se=math.nan))
    assert one_seed.seeds_needed() is None
    tiny = C.decision(_part(0.5, 0.5, estimate=-1e-4, unit_se=1.0))
    assert tiny.seeds_needed() == C.MOST_SEEDS + 1
    assert tiny.it_would_take() == f"more than {C.MOST_SEEDS:,} seeds per arm"
    trend = C.decision(_part(0.5, 0.5, estimate=-1e-4, design=C.TREND))
    assert "per level" in trend.it_would_take()


def test_power_is_zero_where_the_permutation_test_cannot_reach_the_level():
    p = _part(0.3, 0.7, design=C.PAIRED, estimate=-10.0)
    assert C.power(p, 4, LEVEL) == 0.0 and C.power(p, 5, LEVEL) > 0.99
    flat = _part(0.3, 0.7, estimate=-1.0, unit_se=0.0)
    assert C.power(flat, 5, LEVEL) == 1.0
    assert C.power(_part(0.3, 0.7, estimate=0.0, unit_se=0.0), 5, LEVEL) == 0.0
    assert C.decision(flat).seeds_needed() == 3  # 3 + 3: p = 1/20 at the level


@pytest.mark.slow
def test_the_power_calculation_matches_the_rule_by_simulation():
    """At the seeds it would take, the rule itself (the permutation test) resolves an
    effect like the observed one about as often as promised."""
    rng = np.random.default_rng(11)
    a, b = rng.normal(0, 1, 5), rng.normal(0.9, 1, 5)
    part = C.comparison(a, b, direction="less")
    n = C.decision(part).seeds_needed()
    sd = part.unit_se / math.sqrt(2)
    effect = part.estimate
    reps = 600
    sim = C.permutation_tests(
        C.TWO_ARMS,
        [rng.normal(effect, sd, (reps, n)), rng.normal(0, sd, (reps, n))],
        resamples=199,
        exact_limit=0,
        seed=1,
    )
    power = (sim["p_less"] <= LEVEL).mean()
    assert power == pytest.approx(C.POWER, abs=0.06)


# ---------------------------------------------------------------- exact checks
def test_an_exact_check_reproduces_only_when_every_check_passes():
    assert C.check_verdict(True) == C.REPRODUCED
    assert C.check_verdict(np.bool_(False)) == C.NOT_REPRODUCED
    assert C.check_verdict([True, True]) == C.REPRODUCED
    assert C.check_verdict([True, False]) == C.NOT_REPRODUCED
    assert C.check_verdict({"β = 0": False, "β = 1": True}) == C.NOT_REPRODUCED
    with pytest.raises(ValueError, match="at least one check"):
        C.check_verdict([])


def test_a_check_the_measure_cannot_make_leaves_the_claim_inconclusive():
    assert C.check_verdict({"β = 0": None, "β = 1": True}) == C.INCONCLUSIVE
    assert C.check_verdict([None, False]) == C.NOT_REPRODUCED
    assert C.check_verdict(None) == C.INCONCLUSIVE


def test_the_failures_of_an_exact_check_name_every_failing_part_in_order():
    parts = {"the bound": True, "the collapse": False, "β = 1": np.bool_(False)}
    assert C.failures(parts) == "fails: the collapse; β = 1"
    assert C.failures({"the bound": True}) == ""
    assert (C.failures({"the bound": True}) or "it holds") == "it holds"


# ---------------------------------------------------------------- setting and row
def test_a_setting_is_stated_or_a_reconstruction_with_its_differences():
    assert C.STATED.kind == C.AS_STATED and C.STATED.text() == "as the paper states it"
    s = C.reconstruction("τ = d_QK", "constants derived here")
    assert s.kind == C.RECONSTRUCTION
    assert s.text() == "the book's reconstruction: τ = d_QK; constants derived here"
    with pytest.raises(ValueError, match="at least one difference"):
        C.reconstruction()
    with pytest.raises(TypeError, match="tuple"):
        C.Setting("τ = d_QK")
    with pytest.raises(ValueError, match="non-empty"):
        C.Setting(("",))


def _claim(**kw):
    base = dict(
        key="k",
        claim="c",
        paper="p",
        book="1.0",
        verdict=C.REPRODUCED,
        reason="r",
        setting=C.STATED,
    )
    return C.Claim(**{**base, **kw})


def test_a_row_has_a_verdict_and_a_setting():
    row = _claim(setting=C.reconstruction("width 64"))
    assert (row.verdict, row.setting_kind, row.mark) == (
        C.REPRODUCED,
        C.RECONSTRUCTION,
        "✓",
    )
    assert row.setting_text.endswith("width 64") and row.evidence == "1.0"
    stated = _claim(verdict=C.NOT_REPRODUCED, setting=C.STATED)
    assert stated.setting_kind == C.AS_STATED and stated.mark == "✗"
    assert stated.setting_text == "as the paper states it"
    with pytest.raises(ValueError, match="verdict must be one of"):
        _claim(verdict="reproduced with a stated deviation")
    with pytest.raises(TypeError, match="Setting"):
        _claim(setting="as stated")
    with pytest.raises(TypeError, match="setting=STATED"):
        _claim(setting=None)


def test_a_row_decided_by_a_test_reads_the_tests_verdict_and_line():
    d = C.decision(
        C.comparison([1.0, 2, 3, 4, 5], [6.0, 7, 8, 9, 10], direction="less")
    )
    row = _claim(verdict=d.verdict, decision=d, setting=C.STATED)
    assert row.evidence == d.line() and row.verdict == C.REPRODUCED
    with pytest.raises(ValueError, match="not its rule's"):
        _claim(verdict=C.INCONCLUSIVE, decision=d)
    assert row.to_dict()["decision"]["parts"][0]["p"] == pytest.approx(1 / 252)


def test_an_inconclusive_row_says_what_would_resolve_it():
    open_row = _claim(
        verdict=C.INCONCLUSIVE, setting=C.STATED, would_take="runs of 1e5 steps"
    )
    assert open_row.takes == "runs of 1e5 steps"
    with pytest.raises(ValueError, match="would_take"):
        _claim(verdict=C.INCONCLUSIVE, setting=C.STATED)
    with pytest.raises(ValueError, match="would_take"):
        _claim(verdict=C.INCONCLUSIVE, setting=C.STATED, would_take="  ")
    with pytest.raises(ValueError, match="would_take"):  # a decided row needs none
        _claim(verdict=C.REPRODUCED, setting=C.STATED, would_take="more runs")
    tested = C.decision(_part(0.3, 0.7))
    row = _claim(verdict=tested.verdict, decision=tested, setting=C.STATED)
    assert row.takes == tested.it_would_take() and row.takes.startswith("about ")
    with pytest.raises(ValueError, match="would_take"):  # the test says it
        _claim(
            verdict=tested.verdict,
            decision=tested,
            setting=C.STATED,
            would_take="more runs",
        )
    held = C.decision(_part(0.01, 0.99))
    assert _claim(verdict=held.verdict, decision=held).takes == ""
    assert _claim(setting=C.STATED).takes == ""
    # copied with dataclasses.replace, a row keeps what would resolve it
    assert replace(open_row, chapter="x").takes == "runs of 1e5 steps"


def test_a_decision_lists_the_design_and_seeds_of_each_part():
    a = C.comparison([1.0, 2, 3], [4.0, 5, 6], direction="less", paired=True)
    b = C.comparison([1.0, 2], [4.0, 5, 6], direction="less")
    t = C.ordered_trend([1, 2, 3], [[1.0, 2], [3.0, 4], [5.0, 6]], direction="less")
    assert C.decision([a, b, t]).structure == (
        (C.PAIRED, (3, 3)),
        (C.TWO_ARMS, (2, 3)),
        (C.TREND, (2, 2, 2)),
    )


def test_the_definitions_name_every_term_once():
    assert list(C.DEFINITIONS)[:3] == [C.REPRODUCED, C.NOT_REPRODUCED, C.INCONCLUSIVE]
    for term in (
        C.AS_STATED,
        C.RECONSTRUCTION,
        "part",
        "test",
        "trend",
        "interval",
        "seeds it would take",
        "family",
    ):
        assert term in C.DEFINITIONS
    text = C.DEFINITIONS[C.NOT_REPRODUCED]
    assert "holds only in part" in text and "Holm" in text
    assert "exchangeability" in C.DEFINITIONS["test"]
    assert (
        "90.48 %" in C.DEFINITIONS["interval"]
        and "93.75 %" in C.DEFINITIONS["interval"]
    )
    assert C.coverage(252) == pytest.approx(0.9048, abs=5e-5)


def test_numbers_are_shown_with_a_true_minus_and_infinity():
    assert C.num(-0.0312) == "−0.0312" and C.num(1234.5) == "1.23e+03"
    assert (
        C.num(math.inf) == "∞" and C.num(-math.inf) == "−∞" and C.num(math.nan) == "n/a"
    )
    assert C.num(0.0) == "0" and C.num(2e-5) == "2.00e−05"
    assert C.num(-0.5) == "−0.5" and C.num(123456.0) == "1.23e+05"
    assert C.fmt(*C.mean_se([1.0, 3.0])) == "2 ± 1" and C.fmt(2.0, math.nan) == "2"
    with pytest.raises(ValueError, match="no values"):
        C.mean_se([])


# ---------------------------------------------------------------- under no effect
#: Simulated claims per structure; the Monte Carlo error of a rate of 0.05 is 0.005.
REPS = 2000
#: Random rearrangements of a simulated trend: the p-value (b + 1) / (R + 1) is exact
#: for any R, so a small R keeps the level and the simulation fast.
SIM_RESAMPLES = 199


def noise(kind, rng, shape):
    """Seed values under no effect: every arm draws from one distribution."""
    if kind == "normal":
        return rng.normal(0.0, 1.0, shape)
    if kind == "skewed":  # a loss that is sometimes far off: lognormal, sigma = 1
        return rng.lognormal(0.0, 1.0, shape)
    if kind == "discrete":  # error counts of 512 sentences: ties within and across arms
        return rng.binomial(512, 0.1, shape) / 512
    raise ValueError(kind)


def simulated_tests(design, samples, chunk=100, **kw):
    """The tests of a batch of simulated claims. Random rearrangements are drawn anew
    for every ``chunk`` claims: the level holds over the draws, and one draw shared by
    every claim would make their verdicts depend on it together."""
    kw.setdefault("resamples", SIM_RESAMPLES)
    samples = [np.asarray(x) for x in samples]
    reps = samples[0].shape[0]
    parts = [
        C.permutation_tests(design, [x[i : i + chunk] for x in samples], seed=i, **kw)
        for i in range(0, reps, chunk)
    ]
    out = {
        k: np.concatenate([p[k] for p in parts])
        for k in ("p_less", "p_greater", "low", "high", "estimate")
    }
    out.update(size=parts[0]["size"], exact=parts[0]["exact"])
    return out


@dataclass(frozen=True)
class Structure:
    """A claim's structure as its rule sees it: each part's design and seeds per arm
    (:attr:`rcutil.claims.Decision.structure`), and how the parts depend on each other:
    ``groups`` parts in a row share their second arm (every beta > 0 against one beta =
    0), and with ``spreads`` the parts' values differ in scale by a factor 3,000 (depth
    2 tight, depth 10 wide). The rule's error control holds under any dependence
    between the parts (an intersection-union test for "reproduced", Holm's procedure
    for "not reproduced"); the shared arm shows it on the dependence the book has."""

    parts: tuple[tuple[str, tuple[int, ...]], ...]
    group: int = 1
    spreads: bool = False

    @property
    def k(self) -> int:
        return len(self.parts)


def _seeds(parts, n):
    return tuple(parts for _ in range(n))


#: Rearrangements listed in the simulations up to this many (the book lists up to
#: 20,000); beyond, SIM_RESAMPLES random ones, a test of the same level.
SIM_EXACT_LIMIT = 1_000


@functools.cache
def rank_collapse_structure(profile: str) -> Structure:
    """The structure of the claim on GD from the collapse, as its own rule builds it
    (``gd_decision``) at the profile's training seeds."""
    from types import SimpleNamespace

    from rcutil.experiments import rank_collapse
    from rcutil.experiments.rank_collapse import verdicts
    from rcutil.profiles import settings_for

    n = len(settings_for(rank_collapse.SETTINGS, profile).train_seeds)
    rng = np.random.default_rng(0)
    runs = [
        SimpleNamespace(beta=b, loss=np.exp(rng.normal(size=(n, 2)))) for b in (0, 1)
    ]
    fake = SimpleNamespace(training=runs, training_floor=[0.5] * n)
    return Structure(verdicts.gd_decision(fake).structure)


PAIRED_5 = (C.PAIRED, (5, 5))
#: Every structure of a claim decided by tests in the book, with its seed counts. The
#: rank-collapse claim on GD is read from its rule at each profile's seeds; the Jena
#: and SST-2 claims at the book profile's 5 seeds per arm (level): the order under
#: both step rules (two paired trends over 5 betas), beta = 0 against every beta > 0
#: under both rules (two groups of four paired parts that share beta = 0), the ratio
#: of every beta > 0 to beta = 0 (four such parts), lower at every depth (three paired
#: parts of different spreads), deeper lower (one paired trend over 3 depths), and
#: without residuals near the majority error at depths 6 and 10 (two paired parts); at
#: the paper profile's 3 seeds a paired part cannot reach the level at all.
BOOK_STRUCTURES = {
    **{
        f"GD from the collapse, {p} ({rank_collapse_structure(p).parts[0][1][0]} "
        "paired seeds)": rank_collapse_structure(p)
        for p in ("ci", "book", "paper")
    },
    "order under two step rules (2 paired trends, 5 levels)": Structure(
        _seeds((C.PAIRED_TREND, (5,) * 5), 2)
    ),
    "stall under two step rules (8 paired parts, 2 shared arms)": Structure(
        _seeds(PAIRED_5, 8), group=4
    ),
    "ratio above a margin (4 paired parts, 1 shared arm)": Structure(
        _seeds(PAIRED_5, 4), group=4
    ),
    "lower at every depth (3 paired parts, unequal spreads)": Structure(
        _seeds(PAIRED_5, 3), spreads=True
    ),
    "deeper lower (1 paired trend, 3 levels)": Structure(((C.PAIRED_TREND, (5,) * 3),)),
    "near the majority error (2 paired parts)": Structure(_seeds(PAIRED_5, 2)),
    "at the paper profile's 3 seeds (3 paired parts)": Structure(
        _seeds((C.PAIRED, (3, 3)), 3)
    ),
    "two arms, unpaired (5 + 5 seeds)": Structure(((C.TWO_ARMS, (5, 5)),)),
    "ordered trend, unpaired (3 levels)": Structure(((C.TREND, (5,) * 3),)),
}


def p_values(structure: Structure, kind: str, rng, effect: float = 0.0, reps=REPS):
    """The one-sided p-values for and against each part of ``reps`` simulated claims
    (each ``(reps, k)``): under no effect, or with every part but the first moved
    ``effect`` seed standard deviations the claimed way (the first stays at no
    effect: the least favourable case for a wrong "reproduced")."""
    p, q = [], []
    shared = None
    for j, (design, sizes) in enumerate(structure.parts):
        scale = (0.01, 1.0, 30.0)[j % 3] if structure.spreads else 1.0
        paired = design in (C.PAIRED, C.PAIRED_TREND)
        if j % structure.group == 0:  # a new arm b (and seed effect) for its group
            seed = 3.0 * rng.normal(size=(reps, sizes[0])) if paired else 0.0
            shared = seed + noise(kind, rng, (reps, sizes[-1]))
        move = effect if j > 0 else 0.0  # in seed standard deviations, claimed "less"
        if design in (C.TWO_ARMS, C.PAIRED):
            a = seed + noise(kind, rng, (reps, sizes[0])) - move * np.std(shared)
            samples = [a, shared]
        else:
            c = _scores(sizes, paired)
            samples = [
                seed + noise(kind, rng, (reps, m)) - move * cj * np.std(shared)
                for m, cj in zip(sizes, c)
            ]
        out = simulated_tests(
            design, [scale * x for x in samples], exact_limit=SIM_EXACT_LIMIT
        )
        p.append(out["p_less"])
        q.append(out["p_greater"])
    return np.stack(p, -1), np.stack(q, -1)


def wrong_verdicts(name, kind, seed=0, reps=REPS):
    """The shares of "reproduced" and "not reproduced" of a structure of
    :data:`BOOK_STRUCTURES` under no effect."""
    codes = C.verdicts(*p_values(BOOK_STRUCTURES[name], kind, rng(seed), reps=reps))
    return (codes == 1).mean(), (codes == -1).mean()


def least_favourable(name, kind, seed=0, reps=REPS):
    """The share of "reproduced" when one part has no effect and every other part a
    large one (the case where a wrong "reproduced" is likeliest)."""
    structure = BOOK_STRUCTURES[name]
    p, q = p_values(structure, kind, rng(seed), effect=8.0, reps=reps)
    return (C.verdicts(p, q) == 1).mean()


def rng(seed):
    return np.random.default_rng(seed)


def at_most_the_level(rate, reps=REPS, level=LEVEL):
    return rate <= level + 3 * math.sqrt(level * (1 - level) / reps)


#: The kinds of seed values each structure is simulated with in the unit tests (the
#: normal kind too in scripts/null_rates.py): a skewed loss and error counts with ties.
KINDS = ("skewed", "discrete")


@pytest.mark.parametrize("name", BOOK_STRUCTURES)
def test_no_effect_gives_either_wrong_verdict_at_most_at_the_level(name):
    for i, kind in enumerate(KINDS):
        reproduced, not_reproduced = wrong_verdicts(name, kind, seed=i)
        assert at_most_the_level(reproduced), (name, kind, reproduced)
        assert at_most_the_level(not_reproduced), (name, kind, not_reproduced)


@pytest.mark.parametrize(
    "name", [n for n, s in BOOK_STRUCTURES.items() if s.k > 1 and "paper" not in n]
)
def test_one_part_without_effect_keeps_a_wrong_reproduced_at_most_at_the_level(name):
    """Every other part holds by far: the claim is still false, and the rule says
    "reproduced" only as often as the one null part's test holds by chance."""
    rate = least_favourable(name, "skewed", seed=5)
    assert at_most_the_level(rate), (name, rate)
    assert rate > LEVEL / 3, (name, rate)  # the case is the least favourable one


def test_the_structures_are_the_rules_own():
    """The rank-collapse claim's structure comes from its rule; every profile's seeds
    are simulated, and a structure the rule does not build would not be."""
    assert [s.parts for n, s in BOOK_STRUCTURES.items() if "collapse" in n] == [
        ((C.PAIRED, (n, n)),) for n in (4, 8, 16)
    ]
    assert C.group_size(C.PAIRED, [16]) > C.EXACT_LIMIT  # the paper's: random


@pytest.mark.slow
def test_the_exact_paired_trend_over_3_levels_keeps_the_level():
    """The book's paired 3-level trend is exact over 6^5 rearrangements."""
    rng = np.random.default_rng(4)
    reps = 200
    seed = rng.normal(size=(reps, 5))
    values = [seed + noise("skewed", rng, (reps, 5)) for _ in range(3)]
    out = C.permutation_tests(C.PAIRED_TREND, values)
    assert out["exact"] and out["size"] == 6**5
    codes = C.verdicts(out["p_less"][:, None], out["p_greater"][:, None])
    assert at_most_the_level((codes == 1).mean(), reps)
    assert at_most_the_level((codes == -1).mean(), reps)


def test_the_first_rules_failed_both_ways_where_these_hold():
    """Every neighbouring step holding, or any reversed: over 5 levels the old reading
    says "not reproduced" far more often than the level under no effect."""
    rng = np.random.default_rng(2)
    values = [noise("skewed", rng, (REPS, 5)) for _ in range(5)]
    steps = [simulated_tests(C.TWO_ARMS, [values[j + 1], values[j]]) for j in range(4)]
    ends = simulated_tests(C.TWO_ARMS, [values[-1], values[0]])
    reversed_any = np.any([s["p_greater"] <= LEVEL for s in steps], axis=0) | (
        ends["p_greater"] <= LEVEL
    )
    assert not at_most_the_level(
        reversed_any.mean()
    )  # what the one trend test replaces


def test_equal_means_with_different_shapes_is_outside_the_tests_null():
    """The definitions say so: with equal means, a skewed arm against a narrow one, the
    test decides for the arm whose bulk is lower more often than the level."""
    rng = np.random.default_rng(6)
    skewed = rng.lognormal(0, 1, (REPS, 5)) - math.exp(0.5)  # mean 0, bulk below 0
    narrow = rng.normal(0, 0.2, (REPS, 5))
    out = C.permutation_tests(C.TWO_ARMS, [skewed, narrow])
    bulk_lower = (out["p_less"] <= LEVEL).mean()
    assert bulk_lower > 2 * LEVEL
    assert "not a test of means" in C.DEFINITIONS["test"]


# ---------------------------------------------------------------- coverage
def covers(out, theta):
    """Whether each interval covers ``theta``, up to float64 round-off: with ties, an
    end can equal ``theta`` in exact arithmetic, and the shift by ``theta`` rounds."""
    tol = 1e-9 * (1 + abs(theta))
    return (out["low"] <= theta + tol) & (theta - tol <= out["high"])


COVERAGE_CASES = {
    C.TWO_ARMS: (2, False),
    C.PAIRED: (2, True),
    C.TREND: (3, False),
    C.PAIRED_TREND: (5, True),
}


@pytest.mark.parametrize("design", C.DESIGNS)
@pytest.mark.parametrize("kind", ["skewed", "discrete"])
def test_the_interval_covers_the_effect_as_often_as_it_states(design, kind):
    """Under a shift model (the effect 0.7 added to one arm, or 0.7 per level step):
    the share of intervals that cover 0.7 is the stated coverage, or more with ties."""
    rng = np.random.default_rng(9)
    arms, paired = COVERAGE_CASES[design]
    theta = 0.7
    seed = rng.normal(size=(REPS, 5)) if paired else 0.0
    base = [seed + noise(kind, rng, (REPS, 5)) for _ in range(arms)]
    if design in (C.TWO_ARMS, C.PAIRED):
        samples = [base[0] + theta, base[1]]
    else:
        c = _scores([5] * arms, paired)
        samples = [x + theta * cj for x, cj in zip(base, c)]
    out = simulated_tests(
        design, samples, exact_limit=10_000 if design != C.PAIRED_TREND else 0
    )
    covered = covers(out, theta).mean()
    stated = C.coverage(int(out["size"]))
    se = math.sqrt(stated * (1 - stated) / REPS)
    assert covered >= stated - 3 * se, (design, kind, covered, stated)
    if kind != "discrete":  # continuous data attain it
        assert covered <= stated + 3 * se, (design, kind, covered, stated)


@pytest.mark.parametrize(
    "design, samples",
    [
        (C.TWO_ARMS, [[0.3], [1.0, -0.5, 2.0, 0.1]]),
        (C.TWO_ARMS, [[1.5, 0.2, -0.7], [0.4]]),
        (C.PAIRED, [[0.3], [1.0]]),
        (C.TREND, [[0.1, 0.5], [0.7], [1.2, 0.9, 2.0]]),
        (C.PAIRED_TREND, [[0.1], [0.9], [0.4]]),
    ],
)
def test_an_arm_of_one_seed_is_tested_over_its_few_rearrangements(design, samples):
    """scipy's test needs two seeds per arm; the rearrangements are listed instead."""
    for shift in (0.0, 0.4) if design in (C.TWO_ARMS, C.PAIRED) else (0.0,):
        out = C.permutation_tests(design, samples, shift=shift)
        p_less, p_greater = oracle(design, samples, shift)
        assert out["exact"] and out["size"] == C.group_size(
            design, [len(s) for s in samples]
        )
        assert out["p_less"] == pytest.approx(p_less, abs=1e-12)
        assert out["p_greater"] == pytest.approx(p_greater, abs=1e-12)
    # too few rearrangements to reach the level: no bound on either side
    if out["size"] * LEVEL < 1:
        assert out["low"] == -np.inf and out["high"] == np.inf
    else:
        assert out["low"] <= out["estimate"] <= out["high"]
    batch = C.permutation_tests(
        design, [np.stack([s, s]) for s in map(np.array, samples)]
    )
    single = C.permutation_tests(design, samples)
    assert batch["p_less"].shape == (2,)
    for key in ("p_less", "p_greater", "low", "high", "estimate"):
        assert batch[key].tolist() == [single[key]] * 2, key


def test_one_seed_against_nineteen_can_reach_the_level():
    """20 splits: the single seed below all nineteen others gives p = 1/20."""
    out = C.permutation_tests(C.TWO_ARMS, [[-5.0], list(np.arange(19.0))])
    assert out["p_less"] == pytest.approx(1 / 20) and out["high"] < 0
    assert out["p_greater"] == 1.0 and out["low"] <= out["estimate"] < out["high"]
    assert C.coverage(int(out["size"])) == pytest.approx(0.9)


# ---------------------------------------------------------------- spread and power
def test_the_spread_is_the_standard_error_of_each_estimate():
    """unit_se / sqrt(n) is the usual standard error of the design's estimate."""
    rng = np.random.default_rng(21)
    a, b = rng.normal(0, 1, 6), rng.normal(0, 2, 6)
    two = C.comparison(a, b, direction="less")
    pooled = np.sqrt((np.var(a, ddof=1) + np.var(b, ddof=1)) / 2)
    assert two.unit_se / np.sqrt(6) == pytest.approx(pooled * np.sqrt(2 / 6))
    paired = C.comparison(a, b, direction="less", paired=True)
    t = stats.ttest_rel(a, b)
    assert paired.unit_se / np.sqrt(6) == pytest.approx((a - b).mean() / t.statistic)
    levels = [rng.normal(j, 1 + j, 4) for j in range(3)]
    trend = C.ordered_trend([1, 2, 3], levels, direction="greater")
    within = np.sqrt(sum(((x - x.mean()) ** 2).sum() for x in levels) / (3 * 3))
    assert trend.unit_se / np.sqrt(4) == pytest.approx(within / np.sqrt(4 * 2))
    per_seed = [np.polyfit([0, 1, 2], [x[i] for x in levels], 1)[0] for i in range(4)]
    paired_trend = C.ordered_trend([1, 2, 3], levels, direction="greater", paired=True)
    t = stats.ttest_1samp(per_seed, 0.0)
    assert paired_trend.unit_se / np.sqrt(4) == pytest.approx(
        np.mean(per_seed) / t.statistic
    )
    assert paired_trend.estimate == pytest.approx(np.mean(per_seed))
    one = C.comparison([1.0], [2.0, 3.0], direction="less")
    assert math.isnan(one.unit_se)


@pytest.mark.parametrize(
    "design, df",
    [(C.TWO_ARMS, 2 * 7), (C.PAIRED, 7), (C.TREND, 3 * 7), (C.PAIRED_TREND, 7)],
)
def test_power_is_the_noncentral_t_of_the_design(design, df):
    arms = 3 if design in (C.TREND, C.PAIRED_TREND) else 2
    p = C.Part(
        label="",
        design=design,
        direction="less",
        values=((0.0,) * 5,) * arms,
        estimate=-0.4,
        low=-1,
        high=0,
        coverage=0.9,
        p=0.3,
        p_against=0.7,
        shift=0.1,
        unit_se=1.3,
    )
    ncp = 0.5 / (1.3 / np.sqrt(8))  # |estimate - shift| over the standard error
    expect = stats.nct.sf(stats.t.ppf(1 - 0.05, df), df, ncp)
    assert C.power(p, 8, 0.05) == pytest.approx(expect)
    assert C.power(p, 8, 0.05, effect=-1.0) == pytest.approx(
        stats.nct.sf(stats.t.ppf(0.95, df), df, 1.0 / (1.3 / np.sqrt(8)))
    )
    assert C.power(p, 8, 0.01) < C.power(p, 8, 0.05) < C.power(p, 9, 0.05)


def _trend_of_two_seeds_at_five_levels() -> C.Part:
    """A falling trend of 2 seeds at each of 5 levels, past the enumeration."""
    return C.Part(
        label="",
        design=C.TREND,
        direction="less",
        values=((0.0,) * 2,) * 5,
        estimate=-5.0,
        low=-6,
        high=-4,
        coverage=0.9,
        p=0.001,
        p_against=1.0,
        unit_se=0.01,
    )


def test_power_counts_the_random_rearrangements_beyond_the_enumeration():
    """Past the enumeration the smallest p-value is 1/(R + 1): 2 seeds at each of 5
    levels (113,400 rearrangements) can reach a level of 0.001."""
    p = _trend_of_two_seeds_at_five_levels()
    assert C.group_size(C.TREND, [2] * 5) > C.EXACT_LIMIT
    assert C.power(p, 2, 0.001) == pytest.approx(1.0)
    assert C.power(p, 2, 1 / (C.RESAMPLES + 1) / 2) == 0.0
    assert C.decision(p).seeds_needed() == 2


def _against(estimate, unit_se=1.0, direction="less", shift=0.0, label=""):
    return C.Part(
        label=label,
        design=C.TWO_ARMS,
        direction=direction,
        values=((0.0,) * 5, (0.0,) * 5),
        estimate=estimate,
        low=-9,
        high=9,
        coverage=0.9,
        p=0.5,
        p_against=0.5,
        shift=shift,
        unit_se=unit_se,
    )


def test_which_way_the_observed_effect_points_follows_direction_and_shift():
    assert _against(0.2).points_against and not _against(-0.2).points_against
    assert _against(-0.2, direction="greater").points_against
    assert not _against(0.2, direction="greater").points_against
    # against a margin: 0.3 above the claimed 0.5 is short of it
    assert _against(0.3, direction="greater", shift=0.5).points_against
    assert not _against(0.7, direction="greater", shift=0.5).points_against
    assert not _against(0.5, direction="greater", shift=0.5).points_against


def test_one_reversed_part_of_several_decides_what_it_would_take():
    weak, strong = _against(0.2, label="a"), _against(0.9, label="b")
    both = C.decision([weak, strong])
    alone = C.decision([_against(0.9), _against(-0.0001)])
    n = both.seeds_needed()
    # the strongest reversed part, at the Holm level: not the product of the two
    assert n == alone.seeds_needed()
    assert C.power(strong, n, 0.025) >= C.POWER > C.power(strong, n - 1, 0.025)
    assert C.power(weak, n, 0.025) < C.POWER
    assert both.it_would_take().endswith("(against the claim) with 80 % power")
    assert (
        C.decision(_against(-0.5, shift=-0.9))
        .it_would_take()
        .endswith("(against the claim) with 80 % power")
    )


def test_the_default_power_is_eighty_percent():
    d = C.decision(_against(-0.5))
    assert d.seeds_needed() == C.seeds_needed(d, 0.8) != C.seeds_needed(d, 0.9)


def test_what_it_would_take_names_arms_or_levels():
    d = C.decision(_against(-0.5))
    n = d.seeds_needed()
    assert d.it_would_take() == (
        f"about {n:,} seeds per arm to resolve the observed effect (for the claim) "
        "with 80 % power"
    )
    trend = C.Part(
        label="",
        design=C.PAIRED_TREND,
        direction="less",
        values=((0.0,) * 5,) * 3,
        estimate=-0.5,
        low=-1,
        high=0,
        coverage=0.9,
        p=0.3,
        p_against=0.7,
        unit_se=1.0,
    )
    assert " seeds per level to resolve" in C.decision(trend).it_would_take()
    floor = C.decision(_against(-0.5), measurable=False, why_not_measurable="x")
    assert floor.it_would_take() == "more than seeds: x"
    zero = C.decision(_against(0.0))
    assert (
        zero.it_would_take() == "more than seeds can give: the observed effect is zero"
    )


# ---------------------------------------------------------------- a part's arguments
def test_a_comparison_passes_its_margin_level_and_draws_on():
    a, b = [2.0, 2.5, 3.1, 2.2, 2.8], [1.0, 0.4, 1.1, 0.9, 0.3]
    margin = C.comparison(a, b, direction="greater", shift=1.0, label="x")
    plain = C.comparison(np.array(a) - 1.0, b, direction="greater")
    assert margin.p == pytest.approx(plain.p) and margin.shift == 1.0
    assert margin.estimate == pytest.approx(plain.estimate + 1.0)
    assert margin.low == pytest.approx(plain.low + 1.0)
    assert margin.p_against == pytest.approx(plain.p_against)
    assert margin.direction == "greater" and margin.label == "x"
    wide = C.comparison(a, b, direction="greater", level=0.1)
    out = C.permutation_tests(C.TWO_ARMS, [a, b], level=0.1)
    assert (wide.low, wide.high) == pytest.approx((out["low"], out["high"]))
    # beyond the enumeration: the resamples and the seed are the part's
    rng = np.random.default_rng(8)
    big_a, big_b = rng.normal(size=10), rng.normal(size=10) + 0.3
    drawn = C.comparison(big_a, big_b, direction="less", resamples=99, seed=3)
    assert drawn.size == 100 and not drawn.exact
    again = C.permutation_tests(C.TWO_ARMS, [big_a, big_b], resamples=99, seed=3)
    assert drawn.p == pytest.approx(again["p_less"])
    default = C.comparison(big_a, big_b, direction="less")
    assert default.p == pytest.approx(
        C.permutation_tests(C.TWO_ARMS, [big_a, big_b], seed=0)["p_less"]
    )
    assert default.label == "" and default.level == C.LEVEL


def test_an_ordered_trend_passes_its_label_draws_and_seed():
    rng = np.random.default_rng(12)
    levels = [rng.normal(size=5) for _ in range(3)]
    part = C.ordered_trend([1, 2, 3], levels, direction="less", resamples=99, seed=4)
    ref = C.permutation_tests(C.TREND, levels, resamples=99, seed=4)
    assert part.size == 100 and part.p == pytest.approx(ref["p_less"])
    assert part.p_against == pytest.approx(ref["p_greater"])
    default = C.ordered_trend([1, 2, 3], levels, direction="less", label="slope")
    assert default.p == pytest.approx(
        C.permutation_tests(C.TREND, levels, seed=0)["p_less"]
    )
    assert default.label == "slope"
    assert C.ordered_trend([1, 2, 3], levels, direction="less").label == ""


def test_integer_seed_values_are_values():
    ints = [[1, 2], [2, 3, 3], [5, 4, 6, 7]]
    floats = [[float(v) for v in x] for x in ints]
    for key in ("p_less", "p_greater", "low", "high", "estimate"):
        assert C.permutation_tests(C.TREND, ints)[key] == pytest.approx(
            C.permutation_tests(C.TREND, floats)[key]
        )


def test_a_part_holds_at_the_level_itself():
    p = _part(0.05, 0.95)
    assert p.holds(0.05) and not p.holds(0.049)
    assert p.against(0.95) and not p.against(0.94)


def test_holm_rejects_at_its_threshold_itself():
    assert C.holm([0.025, 0.5], 0.05) == [True, False]
    assert C.holm([0.025, 0.05], 0.05) == [True, True]


def test_lines_show_three_digits_unless_asked():
    p = C.comparison([1.0, 2, 3, 4, 5], [1.4, 2.2, 3.7, 4.1, 6.0], direction="less")
    assert p.line() == p.line(3) != p.line(2)
    d = C.decision([p, p])
    assert d.line() == d.line(3) != d.line(2)
    assert d.line(2) == f"{p.line(2)}; {p.line(2)} (90.48 % intervals; 5 seeds per arm)"
    unlabelled = _part(0.3, 0.7)
    assert unlabelled.line().startswith("−1 [")
    assert C.decision(_part(0.99, 0.01, estimate=1.0)).reason() == (
        "the comparison goes the other way"
    )


def test_the_rule_names_every_design_of_its_parts():
    a = C.comparison([1.0, 2, 3, 4, 5], [3.0, 4, 5, 6, 7], direction="less")
    b = C.comparison(
        [1.0, 2, 3, 4, 5], [3.0, 4, 5, 6, 7.5], direction="less", paired=True
    )
    rule = C.decision([a, b]).rule()
    assert rule.startswith(
        "2 parts, each a permutation test (two arms, two arms paired by seed; "
        "exact over 32, 252 rearrangements)"
    )


def test_seeds_shown_by_arm_sizes():
    p = C.comparison([1.0, 2, 3], [1.0, 2, 3], direction="less", paired=True)
    assert p.seeds() == "3 paired seeds"
    t = C.ordered_trend([1, 2], [[1.0, 2], [3.0, 4]], direction="less", paired=True)
    assert t.seeds() == "2 seeds per level, paired"
    assert (
        C.comparison([1.0, 2], [3.0, 4, 5, 6], direction="less").seeds()
        == "2 + 4 seeds"
    )


def test_number_formats_at_their_edges():
    assert C.num(0.001) == "0.001" and C.num(0.000999) == "9.99e−04"
    assert C.num(99999.0) == "1e+05" and C.num(100000.0) == "1.00e+05"
    assert C.num(2e-5, digits=2) == "2.0e−05" and C.num(2e-5, digits=1) == "2.0e−05"
    assert C.num(-2.5, digits=2) == "−2.5"


# ---------------------------------------------------------------- edges of the rules
def test_one_seed_has_a_mean_and_no_standard_error_without_a_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        mean, se = C.mean_se([3.0])
    assert mean == 3.0 and math.isnan(se)
    assert C.mean_se([1.0, 3.0]) == (2.0, pytest.approx(1.0))
    assert C.fmt(mean, se) == "3"


def test_mean_and_standard_error_show_three_digits_unless_asked():
    assert C.fmt(1.23456, 0.01234) == "1.23 ± 0.012"
    assert C.fmt(1.23456, 0.01234, digits=2) == "1.2 ± 0.012"


def test_a_part_with_values_that_are_not_finite_is_named():
    with pytest.raises(ValueError, match="β = 1: the values must be finite"):
        C.comparison([1, math.inf], [3, 4], direction="less", label="β = 1")
    with pytest.raises(ValueError, match="two arms: the values must be finite"):
        C.comparison([1, math.nan], [3, 4], direction="less")


def test_the_tests_run_without_warnings_for_every_design():
    cases = [
        (C.TWO_ARMS, [[1.0, 2, 3], [4.0, 5, 6]]),
        (C.TWO_ARMS, [[1.0], [2.0, 3]]),
        (C.PAIRED, [[1.0, 2, 3], [0.0, 0, 0]]),
        (C.PAIRED, [[1.0], [0.0]]),
        (C.TREND, [[1.0, 2], [3.0, 4], [5.0, 6]]),
        (C.PAIRED_TREND, [[1.0, 2], [3.0, 4], [5.0, 6]]),
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for design, samples in cases:
            out = C.permutation_tests(design, samples)
            assert out["low"] <= out["estimate"] <= out["high"]


def test_the_random_rearrangements_are_drawn_with_seed_zero_unless_asked():
    rng = np.random.default_rng(4)
    levels = [rng.normal(size=5) + 0.3 * j for j in range(3)]
    keys = ("p_less", "p_greater", "low", "high")
    got = C.permutation_tests(C.TREND, levels, resamples=99)
    zero = C.permutation_tests(C.TREND, levels, resamples=99, seed=0)
    one = C.permutation_tests(C.TREND, levels, resamples=99, seed=1)
    assert all(got[k] == zero[k] for k in keys)
    assert any(got[k] != one[k] for k in keys)


def test_the_enumeration_stops_at_its_limit_itself():
    a, b = [1.0, 2, 3, 4, 5], [6.0, 7, 8, 9, 10]
    at = C.permutation_tests(C.TWO_ARMS, [a, b], exact_limit=252)
    assert at["exact"] and at["size"] == 252 and at["p_less"] == pytest.approx(1 / 252)
    below = C.permutation_tests(C.TWO_ARMS, [a, b], exact_limit=251, resamples=99)
    assert not below["exact"] and below["size"] == 100
    assert 1 / 100 <= below["p_less"] <= LEVEL  # (b + 1) / (R + 1)


def test_two_seeds_per_level_beyond_the_enumeration_are_drawn_at_random():
    """2 seeds at each of 5 levels: 113,400 rearrangements, more than the enumeration;
    two seeds per arm are scipy's test, which draws them."""
    levels = [[j, j + 0.5] for j in range(5)]
    out = C.permutation_tests(C.TREND, levels, resamples=99)
    assert not out["exact"] and out["size"] == 100
    assert out["p_greater"] == pytest.approx(1 / 100)


def test_an_observed_effect_of_exactly_zero_has_the_interval_of_its_test():
    """The observed split ties with itself at zero tolerance: it counts on both sides
    of the interval, as in the p-values."""
    for design, samples in [
        (C.TWO_ARMS, [[0.0, 1.0, 2.0, 4.0], [2.0, 0.0, 1.0, 4.0]]),
        (C.PAIRED, [[1.0, -1.0, 2.0, -2.0, 3.0, -3.0], [0.0] * 6]),
    ]:
        out = C.permutation_tests(design, samples)
        assert out["estimate"] == 0.0
        assert (out["p_less"], out["p_greater"]) == pytest.approx(
            oracle(design, samples), abs=1e-12
        )
        assert math.isfinite(out["low"]) and math.isfinite(out["high"])
        assert_interval_inverts_the_test(design, samples, out)


def test_two_seeds_per_arm_have_a_spread():
    two = C.comparison([1.0, 3.0], [2.0, 6.0], direction="less")
    assert two.unit_se == pytest.approx(math.sqrt(10))  # pooled sqrt(5), times sqrt(2)
    paired = C.comparison([1.0, 3.0], [2.0, 6.0], direction="less", paired=True)
    assert paired.unit_se == pytest.approx(math.sqrt(2))  # the differences -1, -3


def test_power_at_the_smallest_p_value_of_the_random_rearrangements():
    p = _trend_of_two_seeds_at_five_levels()
    smallest = 1 / (C.RESAMPLES + 1)
    assert C.power(p, 2, smallest) == pytest.approx(1.0)
    assert C.power(p, 2, smallest * (1 - 1e-6)) == 0.0


def test_no_power_without_an_effect_or_a_spread():
    assert C.power(_part(0.5, 0.5, estimate=0.0, unit_se=1.0), 5, LEVEL) == 0.0
    assert C.power(_part(0.5, 0.5, unit_se=math.nan), 5, LEVEL) == 0.0


def test_a_line_shows_every_number_to_the_digits_asked():
    p = replace(
        _part(0.0042, 0.99, label="x"), estimate=-1.23456, low=-2.34567, high=-0.123456
    )
    for digits in (2, 4):
        assert p.line(digits) == (
            f"x: {C.num(-1.23456, digits)} [{C.num(-2.34567, digits)}, "
            f"{C.num(-0.123456, digits)}], p = 0.0042"
        )
    assert p.line(2) == "x: −1.2 [−2.3, −0.12], p = 0.0042"


def test_the_method_and_the_function_give_the_seeds_at_any_power():
    d = C.decision(_against(-0.5))
    assert d.seeds_needed(0.9) == C.seeds_needed(d, 0.9) > d.seeds_needed()


def test_a_line_lists_each_kind_of_seeds_once():
    a = C.comparison([1.0, 2, 3, 4, 5], [3.0, 4, 5, 6, 7], direction="less")
    b = C.comparison(
        [1.0, 2, 3, 4, 5], [3.0, 4, 5, 6, 7.5], direction="less", paired=True
    )
    assert (
        C.decision([a, b, a])
        .line()
        .endswith("(at least 90.48 % intervals; 5 paired seeds, 5 seeds per arm)")
    )


def test_the_rule_lists_each_number_of_random_rearrangements():
    rng = np.random.default_rng(8)
    a, b = rng.normal(size=10), rng.normal(size=10)
    parts = [
        C.comparison(a, b, direction="less", resamples=99),
        C.comparison(a, b, direction="less", resamples=199),
    ]
    assert "(two arms; 99, 199 random rearrangements)" in C.decision(parts).rule()


def test_the_limits_name_the_part_that_keeps_each_verdict_out_of_reach():
    few = _extreme(2, 1, False, "for").parts[0]  # 6 splits: 1/6 above 0.05
    enough = _extreme(5, 1, False, "for").parts[0]  # 252 splits
    paired4 = _extreme(4, 1, True, "for").parts[0]  # 16 sign changes
    assert C.decision([few, enough]).limits() == (
        "with these seeds it cannot decide for the claim (the smallest p-value, 1/6, "
        "is above 0.05)"
    )
    neither = C.decision([paired4, few]).limits()
    assert "neither verdict" in neither
    assert neither.endswith("1/6, is above 0.05 and 0.05/2)")


def test_the_reason_names_every_part_that_holds():
    d = C.decision(
        [
            _part(0.01, 0.99, "L = 2"),
            _part(0.01, 0.99, "L = 4"),
            _part(0.3, 0.7, "L = 6"),
        ]
    )
    assert d.reason().startswith("L = 2, L = 4 holds, the rest is not resolved")


def _needing(n, power_=C.POWER):
    """A part whose observed effect takes about ``n`` seeds per arm to resolve."""
    from scipy.optimize import brentq

    delta = brentq(
        lambda e: C.power(_against(-e), n, LEVEL) - power_, 1e-6, 1.0, xtol=1e-15
    )
    while C.power(_against(-delta), n, LEVEL) < power_:
        delta = math.nextafter(delta, 1.0)
    return C.decision(_against(-delta))


def test_the_seeds_it_would_take_are_named_up_to_the_most_and_no_further():
    at_most = _needing(C.MOST_SEEDS)
    assert at_most.seeds_needed() == C.MOST_SEEDS
    assert at_most.it_would_take().startswith(f"about {C.MOST_SEEDS:,} seeds per arm")
    beyond = _needing(12_000)  # found by doubling to 16,384, then bisection
    assert beyond.seeds_needed() == C.MOST_SEEDS + 1
    assert beyond.it_would_take() == f"more than {C.MOST_SEEDS:,} seeds per arm"


def test_a_certain_effect_is_resolved_at_the_first_seeds_that_reach_the_level():
    flat = C.decision(_part(0.3, 0.7, estimate=-1.0, unit_se=0.0))
    assert C.seeds_needed(flat, 1.0) == 3  # power 1 from 3 + 3 seeds (p = 1/20)


def test_a_tiny_observed_effect_ties_only_with_equal_rearrangements():
    """Ties are judged relative to the observed statistic: one of 1e-13 ties with no
    other split of these values, which lie 1/30 apart and more."""
    samples = [[0.0, 0.1, 0.2], [0.0, 0.1, 0.2 - 3e-13]]
    out = C.permutation_tests(C.TWO_ARMS, samples)
    assert 0 < out["estimate"] < 1e-12
    # the p-values in exact arithmetic, every split's difference of means as a fraction
    v = [Fraction(x) for x in samples[0] + samples[1]]
    diffs = [
        (sum(v[i] for i in s) - sum(v[i] for i in range(6) if i not in s)) / 3
        for s in itertools.combinations(range(6), 3)
    ]
    t0 = diffs[0]  # the observed split comes first
    assert out["p_less"] == pytest.approx(sum(d <= t0 for d in diffs) / 20)
    assert out["p_greater"] == pytest.approx(sum(d >= t0 for d in diffs) / 20)


def test_a_tie_that_rounding_splits_counts_as_in_scipys_p_values():
    """0.5 + 0.3 + 0.6 and its rearrangements differ in the last bit only: ties, on
    both sides, within scipy's tolerance of 100 epsilons of the observed difference."""
    a, b = [0.5, 0.3, 0.6], [0.5, 0.2, 0.3]
    out = C.permutation_tests(C.TWO_ARMS, [a, b])
    for side in ("less", "greater"):
        ref = stats.permutation_test(
            (np.array(a), np.array(b)),
            lambda x, y, axis: x.mean(axis) - y.mean(axis),
            permutation_type="independent",
            vectorized=True,
            n_resamples=np.inf,
            alternative=side,
        )
        assert out[f"p_{side}"] == pytest.approx(ref.pvalue, abs=1e-12), side
    # in decimal arithmetic, 19 of the 20 splits lie at or below the observed one
    assert out["p_less"] == pytest.approx(19 / 20)
