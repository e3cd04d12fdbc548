"""Property tests of the singular-value bounds of the chapter ``singular-values`` (rcutil.spectra)."""
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rcutil import spectra
from rcutil.model import attention, attention_scores

RTOL = 1e-10          # float64 round-off of the SVD
EXAMPLES = 300        # instances per property


@st.composite
def instances(draw, *, tall=True, d_gt_N=False, identity_value=False):
    """One random (X, W_Q, W_K, W_V, tau): sizes, seeds and a log-uniform scale of W_Q
    (from nearly uniform to nearly hard arg-max attention)."""
    N = draw(st.integers(1, 3))
    d = draw(st.integers(N + 1 if d_gt_N else 1, 6))
    n_min = max(2, math.ceil(d / N)) if tall else 2
    n = draw(st.integers(n_min, n_min + 4))
    d_qk = draw(st.integers(1, 8))
    seed = draw(st.integers(0, 2**31 - 1))
    log_scale = draw(st.floats(-3.0, 1.5))
    X = spectra.random_inputs(1, N, n, d, seed=seed)
    W_Q, W_K, W_V = spectra.random_attention_weights(
        1, d, d_qk, seed=seed + 1, value="identity" if identity_value else "gaussian")
    return X, W_Q * 10.0**log_scale, W_K, W_V, math.sqrt(d_qk)


@settings(max_examples=EXAMPLES, deadline=None)
@given(instances(), st.floats(0.0, 5.0))
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
    bound = math.sqrt(n) * spectra.spectrum(X)["sigma_max"] * torch.linalg.matrix_norm(W_V, ord=2).reshape(1)
    assert (spectra.spectrum(A)["sigma_max"] <= bound * (1 + RTOL)).all()


@settings(max_examples=EXAMPLES, deadline=None)
@given(instances())
def test_deviation_from_uniform_attention(inst):
    X, W_Q, W_K, _, tau = inst
    assert (spectra.uniform_deviation(X, W_Q, W_K, tau)
            <= spectra.score_deviation_bound(X, W_Q, W_K, tau) * (1 + RTOL) + 1e-15).all()


@settings(max_examples=EXAMPLES, deadline=None)
@given(instances(d_gt_N=True))
def test_collapse_bound(inst):
    X, W_Q, W_K, W_V, tau = inst
    sigma = spectra.spectrum(attention(X, W_Q, W_K, W_V, tau))["sigma_min"]
    assert (sigma <= spectra.collapse_upper_bound(X, W_Q, W_K, W_V, tau) * (1 + RTOL) + 1e-13).all()


@settings(max_examples=EXAMPLES, deadline=None)
@given(instances(identity_value=True), st.floats(0.0, 3.0))
def test_identity_value_lower_bound(inst, beta):
    X, W_Q, W_K, W_V, tau = inst
    Z = attention(X, W_Q, W_K, W_V, tau) + beta * X
    lower = spectra.identity_value_lower_bound(X, W_Q, W_K, tau, beta)
    assert (lower <= spectra.spectrum(Z)["sigma_min"] * (1 + RTOL) + 1e-12).all()


@settings(max_examples=EXAMPLES, deadline=None)
@given(instances(tall=False), st.floats(0.0, 3.0))
def test_uniform_attention_identity(inst, beta):
    """W_Q = 0 gives uniform attention; with W_V = I, Z = (beta I + 1 1^T / n) X (eq. sv-uniform)
    and, at beta = 1, sigma_i(X) <= sigma_i(Z) <= 2 sigma_i(X) for every i."""
    X, W_Q, W_K, _, tau = inst
    n, d = X.shape[-2], X.shape[-1]
    I = torch.eye(d, dtype=torch.float64)
    A = attention(X, torch.zeros_like(W_Q), W_K, I, tau)
    M = beta * torch.eye(n, dtype=torch.float64) + 1.0 / n
    torch.testing.assert_close(A + beta * X, M @ X, rtol=0, atol=1e-12)
    M1 = torch.eye(n, dtype=torch.float64) + 1.0 / n
    eig = torch.linalg.eigvalsh(M1)
    torch.testing.assert_close(eig, torch.tensor([1.0] * (n - 1) + [2.0], dtype=torch.float64))
    s_X = torch.linalg.svdvals(spectra.stack(X))
    s_Z = torch.linalg.svdvals(spectra.stack(M1 @ X))
    assert (s_X <= s_Z * (1 + RTOL) + 1e-13).all() and (s_Z <= 2 * s_X * (1 + RTOL) + 1e-13).all()


def test_scores_through_the_product_equal_the_model_scores():
    X = spectra.random_inputs(2, 3, 5, 4, seed=3)
    W_Q, W_K, W_V = spectra.random_attention_weights(2, 4, 7, seed=4)
    torch.testing.assert_close(spectra.attention_from_product(X, W_Q, W_K, W_V, 2.0),
                               attention(X, W_Q, W_K, W_V, 2.0))
    S = attention_scores(X, W_Q, W_K, 2.0)
    assert S.shape == (2, 3, 5, 5)


def test_nested_score_products_are_deterministic_and_nested():
    a = spectra.nested_score_products(3, [1, 2, 8, 64], seed=5, chunk=16)
    b = spectra.nested_score_products(3, [1, 2, 8, 64], seed=5, chunk=16)
    c = spectra.nested_score_products(3, [1, 2, 8], seed=5, chunk=16)
    assert a.shape == (4, 3, 3)
    torch.testing.assert_close(a, b, rtol=0, atol=0)
    torch.testing.assert_close(a[:3], c, rtol=0, atol=0)


def test_bad_arguments_raise_clear_errors():
    with pytest.raises(ValueError, match="scaling"):
        spectra.temperature("tau=d", 4)
    with pytest.raises(ValueError, match="d_qk"):
        spectra.temperature("tau=1", 0)
    with pytest.raises(ValueError, match="beta"):
        spectra.weyl_bounds(torch.ones(1, 2, 2), torch.ones(1, 2, 2), -1.0)
    with pytest.raises(ValueError, match="increasing"):
        spectra.nested_score_products(2, [4, 2], seed=0)
    X = spectra.random_inputs(1, 3, 4, 2, seed=0)
    W_Q, W_K, W_V = spectra.random_attention_weights(1, 2, 2, seed=0)
    with pytest.raises(ValueError, match="d > N"):
        spectra.collapse_upper_bound(X, W_Q, W_K, W_V, 1.0)
    with pytest.raises(ValueError, match="value"):
        spectra.random_attention_weights(1, 2, 2, seed=0, value="ones")
