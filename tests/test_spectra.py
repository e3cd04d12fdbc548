"""rcutil.spectra: the samplers' exact draws, every function against its formula on
small instances, the bounds of the singular-value chapter on random instances (property
tests), and the arguments it refuses."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rcutil import spectra
from rcutil.model import attention, attention_scores

RTOL = 1e-10  # float64 round-off of the SVD
EXAMPLES = 300  # instances per property


def lin(*shape, seed=0):
    return torch.randn(
        *shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64
    )


def svd(M):
    return torch.linalg.svdvals(M.reshape(-1, M.shape[-1]))


def exact(got, want):
    torch.testing.assert_close(got, want, rtol=0, atol=0)


# ----------------------------------------------------------------------------- sampling
def test_temperatures_of_the_score_scalings():
    assert spectra.temperature("tau=d_qk", 16) == 16.0
    assert spectra.temperature("tau=sqrt(d_qk)", 16) == 4.0
    assert spectra.temperature("tau=1", 16) == 1.0
    assert spectra.temperature("tau=1", 1) == 1.0  # d_qk = 1 is allowed


def test_samplers_are_exact_seeded_draws():
    X = spectra.random_inputs(2, 3, 4, 5, seed=7)
    gen = torch.Generator().manual_seed(7)
    exact(X, torch.randn(2, 3, 4, 5, generator=gen, dtype=torch.float64))
    assert (
        spectra.random_inputs(1, 1, 1, 1, seed=0, dtype=torch.float32).dtype
        == torch.float32
    )
    W_Q, W_K, W_V = spectra.random_attention_weights(2, 4, 3, seed=9)
    gen = torch.Generator().manual_seed(9)
    exact(W_Q, torch.randn(2, 1, 4, 3, generator=gen, dtype=torch.float64) * 0.5)
    exact(W_K, torch.randn(2, 1, 4, 3, generator=gen, dtype=torch.float64) * 0.5)
    exact(W_V, torch.randn(2, 1, 4, 4, generator=gen, dtype=torch.float64) / 2)
    W_Q2, _, W_V2 = spectra.random_attention_weights(
        2, 4, 3, seed=9, std=0.1, value="identity", dtype=torch.float32
    )
    gen = torch.Generator().manual_seed(9)
    want = torch.randn(2, 1, 4, 3, generator=gen, dtype=torch.float64) * 0.1
    torch.testing.assert_close(W_Q2, want.float())
    assert W_V2.dtype == torch.float32
    assert torch.equal(W_V2, torch.eye(4).expand(2, 1, 4, 4))
    assert all(
        W.dtype == torch.float32
        for W in spectra.random_attention_weights(1, 4, 3, seed=9, dtype=torch.float32)
    )
    W_Q0 = spectra.random_attention_weights(1, 4, 3, seed=9, std=0.0)[0]
    assert W_Q0.abs().sum() == 0


def _pairs(seed, widths, scale):
    """The (Q, K) column blocks that nested_score_products draws, in its order."""
    gen = torch.Generator().manual_seed(seed)
    return [
        tuple(
            torch.randn(3, w, generator=gen, dtype=torch.float64) * scale
            for _ in range(2)
        )
        for w in widths
    ]


def test_nested_score_products_are_sums_of_column_blocks():
    got = spectra.nested_score_products(3, [2, 5], seed=4, chunk=3)
    (Q1, K1), (Q2, K2) = _pairs(4, [2, 3], 1 / math.sqrt(3))
    torch.testing.assert_close(got[0], Q1 @ K1.T)
    torch.testing.assert_close(got[1], Q1 @ K1.T + Q2 @ K2.T)
    with_std = spectra.nested_score_products(3, [1], seed=4, std=2.0)
    ((Q, K),) = _pairs(4, [1], 2.0)
    torch.testing.assert_close(with_std[0], Q @ K.T)
    # a block that ends inside a value: only the columns up to that value are drawn
    got = spectra.nested_score_products(3, [2, 4], seed=4, chunk=3)
    (Q1, K1), (Q2, K2) = _pairs(4, [2, 2], 1 / math.sqrt(3))
    torch.testing.assert_close(got[1], Q1 @ K1.T + Q2 @ K2.T)


def test_nested_score_products_are_deterministic_and_nested():
    a = spectra.nested_score_products(3, [1, 2, 8, 64], seed=5, chunk=16)
    b = spectra.nested_score_products(3, [1, 2, 8, 64], seed=5, chunk=16)
    c = spectra.nested_score_products(3, [1, 2, 8], seed=5, chunk=16)
    assert a.shape == (4, 3, 3)
    exact(a, b)
    exact(a[:3], c)


# ----------------------------------------------------------------------------- spectra
def test_scores_through_the_product_equal_the_model_scores():
    X = spectra.random_inputs(2, 3, 5, 4, seed=3)
    W_Q, W_K, W_V = spectra.random_attention_weights(2, 4, 7, seed=4)
    torch.testing.assert_close(
        spectra.attention_from_product(X, W_Q, W_K, W_V, 2.0),
        attention(X, W_Q, W_K, W_V, 2.0),
    )
    assert attention_scores(X, W_Q, W_K, 2.0).shape == (2, 3, 5, 5)
    X = lin(2, 3, 4, seed=1)
    W_Q, W_K, W_V = lin(4, 2, seed=2), lin(4, 2, seed=3), lin(4, 4, seed=4)
    torch.testing.assert_close(
        spectra.attention_from_product(X, W_Q, W_K, W_V, 1.7),
        attention(X, W_Q, W_K, W_V, 1.7),
    )


def test_stack_puts_the_samples_of_an_instance_one_under_another():
    M = lin(5, 2, 3, 4, seed=5)
    torch.testing.assert_close(spectra.stack(M), M.reshape(5, 6, 4))
    assert spectra.stack(lin(2, 3, 4)).shape == (6, 4)


def test_spectrum_by_value():
    M = lin(2, 3, 4, 2, seed=6)  # 2 instances of N = 3 samples, n = 4, k = 2
    out = spectra.spectrum(M, per_sample=True)

    def entropy_rank(s):
        p = s / s.sum()
        return math.exp(-(p * p.log()).sum().item())

    for i in range(2):
        s = svd(M[i])
        assert math.isclose(out["sigma_min"][i].item(), s[-1].item(), rel_tol=1e-12)
        assert math.isclose(out["sigma_max"][i].item(), s[0].item(), rel_tol=1e-12)
        assert math.isclose(
            out["kappa"][i].item(), (s[0] / s[-1]).item(), rel_tol=1e-12
        )
        assert math.isclose(
            out["effective_rank"][i].item(), entropy_rank(s), rel_tol=1e-12
        )
        per = [entropy_rank(torch.linalg.svdvals(M[i, j])) for j in range(3)]
        assert math.isclose(
            out["effective_rank_per_sample"][i].item(), sum(per) / 3, rel_tol=1e-12
        )
    assert "effective_rank_per_sample" not in spectra.spectrum(M)
    assert out["sigma_min"].shape == (2,)
    one = spectra.spectrum(M[0], per_sample=True)  # a single instance, (N, n, k)
    assert one["sigma_min"].shape == () and one["effective_rank_per_sample"].shape == ()
    assert math.isclose(
        one["effective_rank_per_sample"].item(),
        out["effective_rank_per_sample"][0].item(),
        rel_tol=1e-12,
    )


def test_residual_spectra_by_value():
    A, X = lin(3, 4, 5, seed=7), lin(3, 4, 5, seed=8)  # one instance: N, n, d = 3, 4, 5
    res = spectra.residual_spectra(A, X, [0.0, 0.5, 2.0])
    for i, b in enumerate((0.0, 0.5, 2.0)):
        s = svd(A + b * X)
        assert math.isclose(res["sigma_min"][i].item(), s[-1].item(), rel_tol=1e-12)
        assert math.isclose(res["sigma_max"][i].item(), s[0].item(), rel_tol=1e-12)


# ------------------------------------------------------------------------------ bounds
def test_weyl_bounds_by_value():
    A, X = lin(3, 4, 5, seed=7), lin(3, 4, 5, seed=8)
    a, x = svd(A), svd(X)
    for beta in (0.3, 2.0):
        w = spectra.weyl_bounds(A, X, beta)
        want = {
            "min_lower": max(beta * x[-1] - a[0], a[-1] - beta * x[0], 0.0),
            "min_upper": min(beta * x[-1] + a[0], a[-1] + beta * x[0]),
            "max_lower": abs(beta * x[0] - a[0]),
            "max_upper": a[0] + beta * x[0],
        }
        for k, v in want.items():
            assert math.isclose(w[k].item(), float(v), rel_tol=1e-12, abs_tol=1e-15), k
    # a lower bound that is positive: A small beside beta X
    w = spectra.weyl_bounds(0.01 * A, X, 2.0)
    assert math.isclose(
        w["min_lower"].item(), (2.0 * x[-1] - 0.01 * a[0]).item(), rel_tol=1e-12
    )
    assert w["min_lower"].item() > 0
    w = spectra.weyl_bounds(A, 0.01 * X, 1.0)  # sigma_min(A) - beta ||X|| is the larger
    assert math.isclose(
        w["min_lower"].item(), (a[-1] - 0.01 * x[0]).item(), rel_tol=1e-12
    )
    both = spectra.weyl_bounds(
        A.expand(2, 3, 4, 5), X.expand(2, 3, 4, 5), torch.tensor([0.3, 2.0])
    )
    assert both["max_upper"].shape == (2,)
    assert math.isclose(
        spectra.weyl_bounds(A, X, 0.0)["max_upper"].item(), a[0].item(), rel_tol=1e-12
    )


@st.composite
def instances(draw, *, tall=True, d_gt_N=False, identity_value=False, wide=False):
    """One random (X, W_Q, W_K, W_V, tau): sizes, seeds and a log-uniform scale of W_Q
    (from nearly uniform to nearly hard arg-max attention). ``wide=None`` draws the
    regime: tall (N n >= d) or wide (d >= N n, at least two tokens)."""
    if wide is None:
        wide = draw(st.booleans())
    N = draw(st.integers(1, 3))
    if wide:
        n = draw(st.integers(2, 3))
        d = draw(st.integers(N * n, N * n + 3))
    else:
        d = draw(st.integers(N + 1 if d_gt_N else 1, 6))
        n_min = max(2, math.ceil(d / N)) if tall else 2
        n = draw(st.integers(n_min, n_min + 4))
    d_qk = draw(st.integers(1, 8))
    seed = draw(st.integers(0, 2**31 - 1))
    log_scale = draw(st.floats(-3.0, 1.5))
    X = spectra.random_inputs(1, N, n, d, seed=seed)
    W_Q, W_K, W_V = spectra.random_attention_weights(
        1, d, d_qk, seed=seed + 1, value="identity" if identity_value else "gaussian"
    )
    return X, W_Q * 10.0**log_scale, W_K, W_V, math.sqrt(d_qk)


@settings(max_examples=EXAMPLES, deadline=None)
@given(instances(wide=None), st.floats(0.0, 5.0))
def test_weyl_bounds_hold(inst, beta):
    X, W_Q, W_K, W_V, tau = inst
    A = attention(X, W_Q, W_K, W_V, tau)
    z = spectra.spectrum(A + beta * X)
    w = spectra.weyl_bounds(A, X, beta)
    tol = RTOL * (z["sigma_max"] + 1)
    assert (w["min_lower"] <= z["sigma_min"] + tol).all()
    assert (z["sigma_min"] <= w["min_upper"] + tol).all()
    assert (w["max_lower"] <= z["sigma_max"] + tol).all()
    assert (z["sigma_max"] <= w["max_upper"] + tol).all()


@settings(max_examples=EXAMPLES, deadline=None)
@given(instances())
def test_attention_norm_bound(inst):
    X, W_Q, W_K, W_V, tau = inst
    A = attention(X, W_Q, W_K, W_V, tau)
    n = X.shape[-2]
    bound = (
        math.sqrt(n)
        * spectra.spectrum(X)["sigma_max"]
        * torch.linalg.matrix_norm(W_V, ord=2).reshape(1)
    )
    assert (spectra.spectrum(A)["sigma_max"] <= bound * (1 + RTOL)).all()


@settings(max_examples=EXAMPLES, deadline=None)
@given(instances())
def test_deviation_from_uniform_attention(inst):
    X, W_Q, W_K, _, tau = inst
    bound = spectra.score_deviation_bound(X, W_Q, W_K, tau)
    deviation = spectra.uniform_deviation(X, W_Q, W_K, tau)
    assert (deviation <= bound * (1 + RTOL) + 1e-15).all()


@settings(max_examples=EXAMPLES, deadline=None)
@given(instances(d_gt_N=True, wide=None))
def test_collapse_bound(inst):
    X, W_Q, W_K, W_V, tau = inst
    sigma = spectra.spectrum(attention(X, W_Q, W_K, W_V, tau))["sigma_min"]
    bound = spectra.collapse_upper_bound(X, W_Q, W_K, W_V, tau)
    assert (sigma <= bound * (1 + RTOL) + 1e-13).all()


@settings(max_examples=EXAMPLES, deadline=None)
@given(instances(identity_value=True, wide=None), st.floats(0.0, 3.0))
def test_identity_value_lower_bound(inst, beta):
    X, W_Q, W_K, W_V, tau = inst
    Z = attention(X, W_Q, W_K, W_V, tau) + beta * X
    lower = spectra.identity_value_lower_bound(X, W_Q, W_K, tau, beta)
    assert (lower <= spectra.spectrum(Z)["sigma_min"] * (1 + RTOL) + 1e-12).all()


@settings(max_examples=EXAMPLES, deadline=None)
@given(instances(tall=False), st.floats(0.0, 3.0))
def test_uniform_attention_identity(inst, beta):
    """W_Q = 0 gives uniform attention; with W_V = I, Z = (beta I + 1 1^T / n) X (eq.
    sv-uniform) and, at beta = 1, sigma_i(X) <= sigma_i(Z) <= 2 sigma_i(X) for every
    i."""
    X, W_Q, W_K, _, tau = inst
    n, d = X.shape[-2], X.shape[-1]
    I = torch.eye(d, dtype=torch.float64)
    A = attention(X, torch.zeros_like(W_Q), W_K, I, tau)
    M = beta * torch.eye(n, dtype=torch.float64) + 1.0 / n
    torch.testing.assert_close(A + beta * X, M @ X, rtol=0, atol=1e-12)
    M1 = torch.eye(n, dtype=torch.float64) + 1.0 / n
    eig = torch.linalg.eigvalsh(M1)
    torch.testing.assert_close(
        eig, torch.tensor([1.0] * (n - 1) + [2.0], dtype=torch.float64)
    )
    s_X = torch.linalg.svdvals(spectra.stack(X))
    s_Z = torch.linalg.svdvals(spectra.stack(M1 @ X))
    assert (s_X <= s_Z * (1 + RTOL) + 1e-13).all()
    assert (s_Z <= 2 * s_X * (1 + RTOL) + 1e-13).all()


def test_deviation_collapse_and_identity_bounds_by_value():
    X = lin(2, 3, 4, seed=9)  # N = 2 samples, n = 3, d = 4 > N
    W_Q, W_K, W_V = lin(4, 2, seed=10), lin(4, 2, seed=11), lin(4, 4, seed=12)
    tau = 1.3
    S = (X @ W_Q) @ (X @ W_K).transpose(-1, -2) / tau
    P = torch.softmax(S, -1)
    dev = max(torch.linalg.matrix_norm(P[p] - 1 / 3, ord=2).item() for p in range(2))
    assert math.isclose(
        spectra.uniform_deviation(X, W_Q, W_K, tau).item(), dev, rel_tol=1e-12
    )
    half = max(0.5 * torch.linalg.matrix_norm(S[p]).item() for p in range(2))
    assert math.isclose(
        spectra.score_deviation_bound(X, W_Q, W_K, tau).item(), half, rel_tol=1e-12
    )
    want = dev * svd(X)[0].item() * torch.linalg.matrix_norm(W_V, ord=2).item()
    got = spectra.collapse_upper_bound(X, W_Q, W_K, W_V, tau).item()
    assert math.isclose(got, want, rel_tol=1e-12)
    for beta in (0.5, 1.0):
        want = (beta - dev) * svd(X)[-1].item()
        got = spectra.identity_value_lower_bound(X, W_Q, W_K, tau, beta).item()
        assert math.isclose(got, want, rel_tol=1e-12)
    # two instances at once: one value per instance, the max over its own samples
    Xs = torch.stack([X, 2 * X])
    devs = spectra.uniform_deviation(Xs, W_Q, W_K, tau)
    halves = spectra.score_deviation_bound(Xs, W_Q, W_K, tau)
    assert devs.shape == halves.shape == (2,)
    assert math.isclose(devs[0].item(), dev, rel_tol=1e-12)
    assert math.isclose(halves[0].item(), half, rel_tol=1e-12)
    assert math.isclose(halves[1].item(), 4 * half, rel_tol=1e-12)  # quadratic in X


# ---------------------------------------------------------------------------- refusals
X_ONE = lin(1, 3, 4, 2)


@pytest.mark.parametrize(
    "call, words",
    [
        (lambda: spectra.temperature("tau=2", 4), r"'tau=2'.*tau=sqrt\(d_qk\)"),
        (lambda: spectra.temperature("tau=1", 0), "d_qk.*0"),
        (lambda: spectra.temperature("tau=1", True), "d_qk.*True"),
        (lambda: spectra.temperature("tau=1", 2.0), "d_qk.*2.0"),
        (lambda: spectra.random_inputs(0, 1, 2, 2, seed=0), "instances.*0"),
        (lambda: spectra.random_inputs(1, 0, 2, 2, seed=0), "N.*0"),
        (lambda: spectra.random_inputs(1, 1, 0, 2, seed=0), "n.*0"),
        (lambda: spectra.random_inputs(1, 1, 2, 0, seed=0), "d.*0"),
        (lambda: spectra.random_attention_weights(0, 2, 2, seed=0), "instances.*0"),
        (lambda: spectra.random_attention_weights(1, 0, 2, seed=0), "d.*0"),
        (lambda: spectra.random_attention_weights(1, 2, 0, seed=0), "d_qk.*0"),
        (
            lambda: spectra.random_attention_weights(1, 2, 2, seed=0, std=-1.0),
            "std.*-1.0",
        ),
        (
            lambda: spectra.random_attention_weights(1, 2, 2, seed=0, std=math.inf),
            "std.*inf",
        ),
        (
            lambda: spectra.random_attention_weights(1, 2, 2, seed=0, value="ones"),
            "value.*'identity'.*'ones'",
        ),
        (
            lambda: spectra.nested_score_products(3, [3, 3], seed=0),
            "strictly increasing",
        ),
        (
            lambda: spectra.nested_score_products(3, [4, 2], seed=0),
            "strictly increasing",
        ),
        (lambda: spectra.nested_score_products(3, [], seed=0), r"non-empty, got \[\]"),
        (lambda: spectra.nested_score_products(3, [0, 2], seed=0), "d_qk.*0"),
        (lambda: spectra.nested_score_products(0, [1], seed=0), "d .*0"),
        (
            lambda: spectra.residual_spectra(X_ONE[0], X_ONE[0], []),
            "betas.*at least one",
        ),
        (lambda: spectra.weyl_bounds(X_ONE, X_ONE, -1.0), r"beta.*non-negative.*-1.0"),
        (
            lambda: spectra.weyl_bounds(X_ONE, X_ONE, torch.tensor([0.5, -1.0])),
            r"\[0.5, -1.0\]",
        ),
        (lambda: spectra.weyl_bounds(X_ONE, X_ONE, math.nan), "beta.*nan"),
        (
            lambda: spectra.collapse_upper_bound(
                lin(2, 3, 2), lin(2, 1), lin(2, 1), lin(2, 2), 1.0
            ),
            r"r = min\(N n, d\) > N.*N = 2, n = 3, d = 2",
        ),
        (
            lambda: spectra.collapse_upper_bound(
                lin(3, 1, 4), lin(4, 1), lin(4, 1), lin(4, 4), 1.0
            ),
            r"r = min\(N n, d\) > N.*N = 3, n = 1, d = 4",
        ),
    ],
)
def test_bad_arguments_are_named(call, words):
    with pytest.raises(ValueError, match=words):
        call()
