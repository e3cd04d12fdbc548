"""rcutil.spectra pinned down value by value, so that a changed operator or constant fails.

Complements the property tests of tests/test_spectra.py (the bounds hold on random instances)
for mutation testing (``make mutate``): each function against its formula on small instances,
the exact draws of the samplers, and every refused argument with its message.
"""
import math

import pytest
import torch

from rcutil import spectra
from rcutil.model import attention


def lin(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def svd(M):
    return torch.linalg.svdvals(M.reshape(-1, M.shape[-1]))


def test_temperatures():
    assert spectra.temperature("tau=d_qk", 16) == 16.0
    assert spectra.temperature("tau=sqrt(d_qk)", 16) == 4.0
    assert spectra.temperature("tau=1", 16) == 1.0
    assert spectra.temperature("tau=1", 1) == 1.0                        # d_qk = 1 is allowed
    for bad, match in ((True, "got True"), (0, "got 0"), (2.0, "got 2.0")):
        with pytest.raises(ValueError, match=f"^d_qk must be an integer >= 1, {match}$"):
            spectra.temperature("tau=1", bad)
    with pytest.raises(ValueError, match=r"^unknown scaling 'tau=2': choose one of tau=d_qk, tau=sqrt\(d_qk\), tau=1$"):
        spectra.temperature("tau=2", 4)


def test_samplers_are_exact_seeded_draws():
    X = spectra.random_inputs(2, 3, 4, 5, seed=7)
    gen = torch.Generator().manual_seed(7)
    torch.testing.assert_close(X, torch.randn(2, 3, 4, 5, generator=gen, dtype=torch.float64), rtol=0, atol=0)
    assert spectra.random_inputs(1, 1, 1, 1, seed=0, dtype=torch.float32).dtype == torch.float32
    W_Q, W_K, W_V = spectra.random_attention_weights(2, 4, 3, seed=9)
    gen = torch.Generator().manual_seed(9)
    torch.testing.assert_close(W_Q, torch.randn(2, 1, 4, 3, generator=gen, dtype=torch.float64) * 0.5, rtol=0, atol=0)
    torch.testing.assert_close(W_K, torch.randn(2, 1, 4, 3, generator=gen, dtype=torch.float64) * 0.5, rtol=0, atol=0)
    torch.testing.assert_close(W_V, torch.randn(2, 1, 4, 4, generator=gen, dtype=torch.float64) / 2, rtol=0, atol=0)
    W_Q2, _, W_V2 = spectra.random_attention_weights(2, 4, 3, seed=9, std=0.1, value="identity", dtype=torch.float32)
    gen = torch.Generator().manual_seed(9)
    torch.testing.assert_close(W_Q2, (torch.randn(2, 1, 4, 3, generator=gen, dtype=torch.float64) * 0.1).float())
    assert W_V2.dtype == torch.float32 and torch.equal(W_V2, torch.eye(4).expand(2, 1, 4, 4))
    assert all(W.dtype == torch.float32 for W in spectra.random_attention_weights(1, 4, 3, seed=9, dtype=torch.float32))
    assert spectra.random_attention_weights(1, 4, 3, seed=9, std=0.0)[0].abs().sum() == 0


@pytest.mark.parametrize("name", ["instances", "N", "n", "d"])
def test_input_sizes_are_checked_by_name(name):
    sizes = dict(instances=1, N=1, n=2, d=2) | {name: 0}
    with pytest.raises(ValueError, match=f"^{name} must be an integer >= 1, got 0$"):
        spectra.random_inputs(sizes["instances"], sizes["N"], sizes["n"], sizes["d"], seed=0)


@pytest.mark.parametrize("name", ["instances", "d", "d_qk"])
def test_weight_sizes_are_checked_by_name(name):
    sizes = dict(instances=1, d=2, d_qk=2) | {name: 0}
    with pytest.raises(ValueError, match=f"^{name} must be an integer >= 1, got 0$"):
        spectra.random_attention_weights(sizes["instances"], sizes["d"], sizes["d_qk"], seed=0)


def test_sampler_arguments_are_checked():
    for std in (-1.0, math.inf):
        with pytest.raises(ValueError, match=f"^std must be finite and non-negative, got {std}$"):
            spectra.random_attention_weights(1, 2, 2, seed=0, std=std)
    with pytest.raises(ValueError, match="^value must be 'gaussian' or 'identity', got 'ones'$"):
        spectra.random_attention_weights(1, 2, 2, seed=0, value="ones")


def test_nested_products_are_sums_of_column_blocks():
    got = spectra.nested_score_products(3, [2, 5], seed=4, chunk=3)
    gen = torch.Generator().manual_seed(4)
    Q1, K1 = (torch.randn(3, 2, generator=gen, dtype=torch.float64) / math.sqrt(3) for _ in range(2))
    Q2, K2 = (torch.randn(3, 3, generator=gen, dtype=torch.float64) / math.sqrt(3) for _ in range(2))
    torch.testing.assert_close(got[0], Q1 @ K1.T)
    torch.testing.assert_close(got[1], Q1 @ K1.T + Q2 @ K2.T)
    with_std = spectra.nested_score_products(3, [1], seed=4, std=2.0)
    gen = torch.Generator().manual_seed(4)
    Q, K = (torch.randn(3, 1, generator=gen, dtype=torch.float64) * 2.0 for _ in range(2))
    torch.testing.assert_close(with_std[0], Q @ K.T)
    # a block that ends inside a value: only the columns up to that value are drawn
    got = spectra.nested_score_products(3, [2, 4], seed=4, chunk=3)
    gen = torch.Generator().manual_seed(4)
    Q1, K1 = (torch.randn(3, 2, generator=gen, dtype=torch.float64) / math.sqrt(3) for _ in range(2))
    Q2, K2 = (torch.randn(3, 2, generator=gen, dtype=torch.float64) / math.sqrt(3) for _ in range(2))
    torch.testing.assert_close(got[1], Q1 @ K1.T + Q2 @ K2.T)
    for bad in ([3, 3], [4, 2]):
        with pytest.raises(ValueError, match="strictly increasing"):
            spectra.nested_score_products(3, bad, seed=0)
    with pytest.raises(ValueError, match="^d_qk must be an integer >= 1, got 0$"):
        spectra.nested_score_products(3, [0, 2], seed=0)
    with pytest.raises(ValueError, match="^d must be an integer >= 1, got 0$"):
        spectra.nested_score_products(0, [1], seed=0)
    with pytest.raises(ValueError, match=r"^d_qk_values must be strictly increasing and non-empty, got \[\]$"):
        spectra.nested_score_products(3, [], seed=0)


def test_attention_from_product_and_stack():
    X = lin(2, 3, 4, seed=1)
    W_Q, W_K, W_V = lin(4, 2, seed=2), lin(4, 2, seed=3), lin(4, 4, seed=4)
    torch.testing.assert_close(spectra.attention_from_product(X, W_Q, W_K, W_V, 1.7), attention(X, W_Q, W_K, W_V, 1.7))
    M = lin(5, 2, 3, 4, seed=5)
    torch.testing.assert_close(spectra.stack(M), M.reshape(5, 6, 4))
    assert spectra.stack(lin(2, 3, 4)).shape == (6, 4)


def test_spectrum_by_value():
    M = lin(2, 3, 4, 2, seed=6)                       # 2 instances of N = 3 samples, n = 4, k = 2
    out = spectra.spectrum(M, per_sample=True)
    for i in range(2):
        s = svd(M[i])
        assert math.isclose(out["sigma_min"][i].item(), s[-1].item(), rel_tol=1e-12)
        assert math.isclose(out["sigma_max"][i].item(), s[0].item(), rel_tol=1e-12)
        assert math.isclose(out["kappa"][i].item(), (s[0] / s[-1]).item(), rel_tol=1e-12)
        p = s / s.sum()
        assert math.isclose(out["effective_rank"][i].item(), math.exp(-(p * p.log()).sum().item()), rel_tol=1e-12)
        per = []
        for j in range(3):
            q = torch.linalg.svdvals(M[i, j])
            q = q / q.sum()
            per.append(math.exp(-(q * q.log()).sum().item()))
        assert math.isclose(out["effective_rank_per_sample"][i].item(), sum(per) / 3, rel_tol=1e-12)
    assert "effective_rank_per_sample" not in spectra.spectrum(M)
    assert out["sigma_min"].shape == (2,)
    one = spectra.spectrum(M[0], per_sample=True)                  # a single instance, (N, n, k)
    assert one["sigma_min"].shape == () and one["effective_rank_per_sample"].shape == ()
    assert math.isclose(one["effective_rank_per_sample"].item(), out["effective_rank_per_sample"][0].item(),
                        rel_tol=1e-12)


def test_residual_spectra_and_weyl_bounds_by_value():
    A, X = lin(3, 4, 5, seed=7), lin(3, 4, 5, seed=8)      # one instance: N = 3, n = 4, d = 5
    res = spectra.residual_spectra(A, X, [0.0, 0.5, 2.0])
    for i, b in enumerate((0.0, 0.5, 2.0)):
        s = svd(A + b * X)
        assert math.isclose(res["sigma_min"][i].item(), s[-1].item(), rel_tol=1e-12)
        assert math.isclose(res["sigma_max"][i].item(), s[0].item(), rel_tol=1e-12)
    with pytest.raises(ValueError, match="^betas must hold at least one residual strength$"):
        spectra.residual_spectra(A, X, [])
    a, x = svd(A), svd(X)
    for beta in (0.3, 2.0):
        w = spectra.weyl_bounds(A, X, beta)
        want = {"min_lower": max(beta * x[-1] - a[0], a[-1] - beta * x[0], 0.0),
                "min_upper": min(beta * x[-1] + a[0], a[-1] + beta * x[0]),
                "max_lower": abs(beta * x[0] - a[0]), "max_upper": a[0] + beta * x[0]}
        for k, v in want.items():
            assert math.isclose(w[k].item(), float(v), rel_tol=1e-12, abs_tol=1e-15), (beta, k)
    # a lower bound that is positive: A small beside beta X
    w = spectra.weyl_bounds(0.01 * A, X, 2.0)
    assert math.isclose(w["min_lower"].item(), (2.0 * x[-1] - 0.01 * a[0]).item(), rel_tol=1e-12)
    assert w["min_lower"].item() > 0
    w = spectra.weyl_bounds(A, 0.01 * X, 1.0)                  # sigma_min(A) - beta ||X|| is the larger
    assert math.isclose(w["min_lower"].item(), (a[-1] - 0.01 * x[0]).item(), rel_tol=1e-12)
    both = spectra.weyl_bounds(A.expand(2, 3, 4, 5), X.expand(2, 3, 4, 5), torch.tensor([0.3, 2.0]))
    assert both["max_upper"].shape == (2,)
    assert spectra.weyl_bounds(A, X, 0.0)["max_upper"].item() == pytest.approx(a[0].item(), rel=1e-12)
    with pytest.raises(ValueError, match=r"^beta must be finite and non-negative, got \[-1.0\]$"):
        spectra.weyl_bounds(A, X, torch.tensor([-1.0]))
    with pytest.raises(ValueError, match=r"^beta must be finite and non-negative, got nan$"):
        spectra.weyl_bounds(A, X, math.nan)


def test_deviation_collapse_and_identity_bounds_by_value():
    X = lin(2, 3, 4, seed=9)                                   # N = 2 samples, n = 3, d = 4 > N
    W_Q, W_K, W_V = lin(4, 2, seed=10), lin(4, 2, seed=11), lin(4, 4, seed=12)
    tau = 1.3
    S = (X @ W_Q) @ (X @ W_K).transpose(-1, -2) / tau
    P = torch.softmax(S, -1)
    dev = max(torch.linalg.matrix_norm(P[p] - 1 / 3, ord=2).item() for p in range(2))
    assert math.isclose(spectra.uniform_deviation(X, W_Q, W_K, tau).item(), dev, rel_tol=1e-12)
    half = max(0.5 * torch.linalg.matrix_norm(S[p]).item() for p in range(2))
    assert math.isclose(spectra.score_deviation_bound(X, W_Q, W_K, tau).item(), half, rel_tol=1e-12)
    want = dev * svd(X)[0].item() * torch.linalg.matrix_norm(W_V, ord=2).item()
    assert math.isclose(spectra.collapse_upper_bound(X, W_Q, W_K, W_V, tau).item(), want, rel_tol=1e-12)
    for beta in (0.5, 1.0):
        want = (beta - dev) * svd(X)[-1].item()
        assert math.isclose(spectra.identity_value_lower_bound(X, W_Q, W_K, tau, beta).item(), want, rel_tol=1e-12)
    # two instances at once: one value per instance, the max over its own samples
    Xs = torch.stack([X, 2 * X])
    devs = spectra.uniform_deviation(Xs, W_Q, W_K, tau)
    halves = spectra.score_deviation_bound(Xs, W_Q, W_K, tau)
    assert devs.shape == halves.shape == (2,)
    assert math.isclose(devs[0].item(), dev, rel_tol=1e-12) and math.isclose(halves[0].item(), half, rel_tol=1e-12)
    assert math.isclose(halves[1].item(), 4 * half, rel_tol=1e-12)      # scores are quadratic in X
    with pytest.raises(ValueError, match="^the collapse bound needs d > N, got d = 2, N = 2$"):
        spectra.collapse_upper_bound(lin(2, 3, 2), lin(2, 1), lin(2, 1), lin(2, 2), tau)
