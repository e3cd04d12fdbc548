import math

import pytest
import torch

from rcutil.model import Transformer, attention, attention_weights, block, ffn, squared_loss


def small(**kw):
    return Transformer(6, 3, 10, 2, **kw)


def test_parameter_names_and_shapes_follow_the_paper():
    m = Transformer(5, 3, 7, 2, n_layers=3)
    names = list(m.shapes())
    per_block = ["W_Q", "W_K", "W_V", "W_1", "W_2"]
    assert [n.rsplit(".", 1)[-1] for n in names] == per_block * 3 + ["W_U"]
    assert [n.split(".")[1] for n in names[:-1]] == [str(l) for l in range(3) for _ in per_block]
    assert m.shapes()["blocks.2.W_Q"] == (5, 3) and m.shapes()["blocks.0.W_V"] == (5, 5)
    assert m.shapes()["blocks.1.W_1"] == (5, 7) and m.shapes()["blocks.1.W_2"] == (7, 5)
    assert m.shapes()["output.W_U"] == (5, 2) and m.W_U.shape == (5, 2)


def test_attention_rows_are_probabilities_and_match_formula():
    g = torch.Generator().manual_seed(1)
    X = torch.randn(3, 4, 6, generator=g, dtype=torch.float64)
    m = small(seed=2)
    b = m.blocks[0]
    P = attention_weights(X, b.W_Q, b.W_K, m.tau)
    torch.testing.assert_close(P.sum(-1), torch.ones(3, 4, dtype=torch.float64))
    S = X @ b.W_Q @ b.W_K.T @ X.transpose(1, 2) / m.tau
    manual = torch.exp(S) / torch.exp(S).sum(-1, keepdim=True) @ X @ b.W_V
    torch.testing.assert_close(attention(X, b.W_Q, b.W_K, b.W_V, m.tau), manual)


def test_beta_variant_is_plain_model_at_one_and_drops_residuals_at_zero():
    X = torch.randn(2, 5, 6, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    m = small(seed=3)
    b = m.blocks[0]
    A = attention(X, b.W_Q, b.W_K, b.W_V, m.tau)
    plain = (ffn(A + X, b.W_1, b.W_2) + A + X) @ m.W_U
    torch.testing.assert_close(m(X, beta=1.0), plain, rtol=0, atol=1e-13)
    none = ffn(A, b.W_1, b.W_2) @ m.W_U
    torch.testing.assert_close(m(X, beta=0.0), none, rtol=0, atol=1e-13)


def test_stack_applies_blocks_in_order():
    X = torch.randn(2, 4, 6, dtype=torch.float64, generator=torch.Generator().manual_seed(5))
    m = small(n_layers=2, beta=0.5, seed=4)
    H = X
    for blk in m.blocks:
        H, _ = block(H, blk.W_Q, blk.W_K, blk.W_V, blk.W_1, blk.W_2, beta=0.5, tau=m.tau,
                     activation=torch.tanh)
    out = m(X, return_all=True)
    torch.testing.assert_close(out.features, H)
    torch.testing.assert_close(out.output, H @ m.W_U)
    assert len(out.Z) == 2


def test_same_seed_same_weights_in_both_dtypes():
    a, b = small(seed=7), small(seed=7, dtype=torch.float32)
    for p, q in zip(a.parameters(), b.parameters()):
        torch.testing.assert_close(p.float(), q)
    assert not torch.equal(small(seed=8).W_U, a.W_U)


def test_float32_forward_and_zero_W_U():
    m = small(dtype=torch.float32, W_U_init="zero")
    X = torch.randn(2, 3, 6)
    assert m(X).dtype == torch.float32 and torch.all(m(X) == 0)


def test_gradcheck_every_block():
    m = small(seed=1, n_layers=2)
    X = torch.randn(2, 3, 6, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    Y = torch.randn(2, 3, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    for name, p in m.named_parameters():
        def phi(W, name=name):
            params = {n: (W if n == name else q.detach()) for n, q in m.named_parameters()}
            return squared_loss(torch.func.functional_call(m, params, (X,)), Y)

        assert torch.autograd.gradcheck(phi, (p.detach().clone().requires_grad_(True),)), name


@pytest.mark.parametrize("kwargs, match", [
    (dict(d=0), "d must be a positive integer"),
    (dict(d_qk=-1), "d_qk must be a positive integer"),
    (dict(d_F=2.5), "d_F must be a positive integer"),
    (dict(n_layers=0), "n_layers must be a positive integer"),
    (dict(tau=0.0), "tau must be a finite positive"),
    (dict(tau=math.inf), "tau must be a finite positive"),
    (dict(beta=math.nan), "beta must be in \\[0, 1\\]"),
    (dict(activation="relu"), "unknown activation 'relu'"),
    (dict(W_U_init="ones"), "W_U_init"),
    # the exact messages
    (dict(n_layers=True), "^n_layers must be a positive integer, got True$"),
    (dict(d_out=0), "^d_out must be a positive integer, got 0$"),
    (dict(n_layers=-1), "^n_layers must be a positive integer, got -1$"),
    (dict(tau=-1.0), "^tau must be a finite positive number, got -1.0$"),
    (dict(tau=math.nan), "^tau must be a finite positive number, got nan$"),
    (dict(init_std=-0.5), "^init_std for W_Q must be finite and non-negative, got -0.5$"),
    (dict(init_std={"W_2": math.nan}), "^init_std for W_2 must be finite and non-negative, got nan$"),
    (dict(W_U_init="Zero"), "^W_U_init must be 'gaussian' or 'zero', got 'Zero'$"),
])
def test_bad_arguments_are_named(kwargs, match):
    args = dict(d=6, d_qk=3, d_F=10, d_out=2) | kwargs
    with pytest.raises(ValueError, match=match):
        Transformer(args.pop("d"), args.pop("d_qk"), args.pop("d_F"), args.pop("d_out"), **args)


def test_bad_inputs_are_named():
    m = small()
    with pytest.raises(ValueError, match=r"X has 5 features .* d = 6"):
        m(torch.randn(2, 3, 5, dtype=torch.float64))
    with pytest.raises(ValueError, match="X must have shape"):
        m(torch.randn(6, dtype=torch.float64))
    X = torch.randn(2, 3, 6, dtype=torch.float64)
    X[0, 0, 0] = float("nan")
    with pytest.raises(ValueError, match="X contains NaN"):
        m(X)
    with pytest.raises(ValueError, match="Y has shape"):
        squared_loss(torch.zeros(2, 3, 2), torch.zeros(2, 3, 1))
