"""rcutil.model: the equations of the paper's Transformer by value, the stack and its
outputs, the seeded initialisation, and the arguments it refuses."""

import math

import pytest
import torch

from rcutil import validate
from rcutil.activations import GELU, TANH
from rcutil.model import (
    BLOCK_NAMES,
    ModelOutput,
    OutputMap,
    Transformer,
    TransformerBlock,
    attention,
    attention_scores,
    attention_weights,
    beta_key,
    block,
    block_shapes,
    ffn,
    squared_loss,
)


def small(**kw):
    return Transformer(6, 3, 10, 2, **kw)


def draw(*shape, seed=0):
    return torch.randn(
        *shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64
    )


# --------------------------------------------------------------------------- equations
def test_equations_by_value():
    g = torch.Generator().manual_seed(2)
    X = torch.randn(2, 3, 4, generator=g, dtype=torch.float64)
    W_Q, W_K, W_V = (
        torch.randn(4, k, generator=g, dtype=torch.float64) for k in (2, 2, 4)
    )
    W_1 = torch.randn(4, 5, generator=g, dtype=torch.float64)
    W_2 = torch.randn(5, 4, generator=g, dtype=torch.float64)
    S = torch.einsum("nik,njk->nij", X @ W_Q, X @ W_K) / 0.7
    torch.testing.assert_close(attention_scores(X, W_Q, W_K, 0.7), S)
    P = torch.exp(S) / torch.exp(S).sum(dim=2, keepdim=True)
    torch.testing.assert_close(attention_weights(X, W_Q, W_K, 0.7), P)
    torch.testing.assert_close(P.sum(-1), torch.ones(2, 3, dtype=torch.float64))
    torch.testing.assert_close(attention(X, W_Q, W_K, W_V, 0.7), P @ X @ W_V)
    torch.testing.assert_close(ffn(X, W_1, W_2), torch.tanh(X @ W_1) @ W_2)
    torch.testing.assert_close(ffn(X, W_1, W_2, torch.relu), torch.relu(X @ W_1) @ W_2)
    H, Z = block(X, W_Q, W_K, W_V, W_1, W_2, beta=0.3, tau=0.7, activation=torch.sin)
    torch.testing.assert_close(Z, P @ X @ W_V + 0.3 * X)
    torch.testing.assert_close(H, torch.sin(Z @ W_1) @ W_2 + 0.3 * Z)
    F, Y = torch.tensor([[1.0, 2.0]]), torch.tensor([[0.0, 4.0]])
    assert squared_loss(F, Y).item() == 0.5 * (1 + 4)


def test_beta_variant_is_the_plain_model_at_one_and_drops_residuals_at_zero():
    X = draw(2, 5, 6)
    m = small(seed=3)
    b = m.blocks[0]
    A = attention(X, b.W_Q, b.W_K, b.W_V, m.tau)
    plain = (ffn(A + X, b.W_1, b.W_2) + A + X) @ m.W_U
    torch.testing.assert_close(m(X, beta=1.0), plain, rtol=0, atol=1e-13)
    none = ffn(A, b.W_1, b.W_2) @ m.W_U
    torch.testing.assert_close(m(X, beta=0.0), none, rtol=0, atol=1e-13)


def test_the_stack_applies_its_blocks_in_order_and_returns_every_Z():
    m = Transformer(
        4, 2, 3, 2, n_layers=2, beta=0.5, tau=1.5, activation=torch.sin, seed=1
    )
    X = draw(3, 2, 4)
    H, Zs = X, []
    for b in m.blocks:
        H, Z = block(
            H,
            b.W_Q,
            b.W_K,
            b.W_V,
            b.W_1,
            b.W_2,
            beta=0.5,
            tau=1.5,
            activation=torch.sin,
        )
        Zs.append(Z)
    out = m(X, return_all=True)
    assert isinstance(out, ModelOutput) and len(out.Z) == 2
    torch.testing.assert_close(out.output, H @ m.W_U)
    torch.testing.assert_close(out.features, H)
    for a, b in zip(out.Z, Zs):
        torch.testing.assert_close(a, b)
    torch.testing.assert_close(m(X), H @ m.W_U)
    torch.testing.assert_close(m(X[0]), m(X[:1]))  # (n, d): one sample
    Y = torch.ones(3, 2, 2, dtype=torch.float64)
    torch.testing.assert_close(m.loss(X, Y), 0.5 * ((H @ m.W_U - Y) ** 2).sum())
    H0 = X
    for b in m.blocks:  # beta given to forward wins
        H0, _ = block(
            H0,
            b.W_Q,
            b.W_K,
            b.W_V,
            b.W_1,
            b.W_2,
            beta=0.0,
            tau=1.5,
            activation=torch.sin,
        )
    torch.testing.assert_close(m(X, beta=0.0), H0 @ m.W_U)


def test_gradcheck_every_block():
    m = small(seed=1, n_layers=2)
    X, Y = draw(2, 3, 6), draw(2, 3, 2, seed=1)
    for name, p in m.named_parameters():

        def phi(W, name=name):
            params = {
                n: (W if n == name else q.detach()) for n, q in m.named_parameters()
            }
            return squared_loss(torch.func.functional_call(m, params, (X,)), Y)

        W = p.detach().clone().requires_grad_(True)
        assert torch.autograd.gradcheck(phi, (W,)), name


def test_a_beta_per_model_of_a_vmap_batch():
    m = Transformer(4, 2, 3, 1, beta=torch.tensor(0.25))
    assert m.beta == 0.25 and type(m.beta) is float
    X = draw(2, 3, 4)
    betas = torch.tensor([0.0, 1.0], dtype=torch.float64)
    out = torch.func.vmap(lambda beta: m(X, beta=beta))(betas)
    torch.testing.assert_close(out[0], m(X, beta=0.0))
    torch.testing.assert_close(out[1], m(X, beta=1.0))


# --------------------------------------------------------------------------- parameters
def test_parameter_names_and_shapes_follow_the_paper():
    assert BLOCK_NAMES == ("W_Q", "W_K", "W_V", "W_1", "W_2")
    assert block_shapes(5, 3, 7) == {
        "W_Q": (5, 3),
        "W_K": (5, 3),
        "W_V": (5, 5),
        "W_1": (5, 7),
        "W_2": (7, 5),
    }
    m = Transformer(5, 3, 7, 2, n_layers=3)
    names = list(m.shapes())
    assert [n.rsplit(".", 1)[-1] for n in names] == list(BLOCK_NAMES) * 3 + ["W_U"]
    assert [n.split(".")[1] for n in names[:-1]] == [
        str(l) for l in range(3) for _ in BLOCK_NAMES
    ]
    assert m.shapes()["blocks.2.W_Q"] == (5, 3) and m.shapes()["blocks.0.W_V"] == (5, 5)
    assert m.shapes()["blocks.1.W_1"] == (5, 7) and m.shapes()["blocks.1.W_2"] == (7, 5)
    assert m.shapes()["output.W_U"] == (5, 2) and m.W_U is m.output.W_U


def test_initial_weights_are_exactly_the_seeded_draws():
    """Every parameter, in order, is the next Gaussian draw of one float64 generator
    times its standard deviation."""
    for kw, std_of in [
        (dict(n_layers=2, seed=11), {}),
        (
            dict(init_std={"W_V": 0.5, "W_2": 0.0}, W_U_init="zero", seed=3),
            {"W_V": 0.5, "W_2": 0.0, "W_U": 0.0},
        ),
        (dict(init_std=0.25, seed=5), dict.fromkeys(BLOCK_NAMES, 0.25)),
    ]:
        m = Transformer(4, 2, 3, 2, **kw)
        gen = torch.Generator().manual_seed(kw["seed"])
        for name, p in m.named_parameters():
            short = name.rsplit(".", 1)[-1]
            default = 1 / math.sqrt(4) if short == "W_U" else 1 / math.sqrt(p.shape[0])
            want = torch.randn(p.shape, generator=gen, dtype=torch.float64)
            torch.testing.assert_close(
                p.detach(), want * std_of.get(short, default), rtol=0, atol=0, msg=name
            )


def test_the_same_seed_gives_the_same_weights_in_every_dtype():
    a, b = small(seed=7), small(seed=7, dtype=torch.float32)
    for p, q in zip(a.parameters(), b.parameters()):
        torch.testing.assert_close(p.float(), q)
    assert not torch.equal(small(seed=8).W_U, a.W_U)
    assert torch.equal(small().W_U, small(seed=0).W_U)  # the default seed is 0


def test_reset_parameters_draws_again_with_a_gaussian_W_U_by_default():
    m = Transformer(4, 2, 3, 2, seed=8, W_U_init="zero")
    m.reset_parameters()
    for p, q in zip(m.parameters(), Transformer(4, 2, 3, 2).parameters()):
        assert torch.equal(p, q)
    m.reset_parameters(4, W_U_init="zero")
    assert torch.all(m.W_U == 0) and m.blocks[0].W_Q.abs().sum() > 0


def test_defaults_and_edge_arguments():
    m = Transformer(9, 4, 3, 2)
    assert m.n_layers == 1 and m.tau == 2.0 and m.beta == 1.0 and m.activation is TANH
    assert (m.d, m.d_qk, m.d_F, m.d_out) == (9, 4, 3, 2)
    assert all(
        p.dtype == torch.float64 and p.device.type == "cpu" for p in m.parameters()
    )
    assert Transformer(9, 4, 3, 2, tau=0.5).tau == 0.5
    assert Transformer(9, 4, 3, 2, beta=0).beta == 0.0
    assert Transformer(9, 4, 3, 2, activation="gelu").activation is GELU
    assert Transformer(1, 1, 1, 1, init_std=0.0).blocks[0].W_Q.abs().sum() == 0
    m = small(dtype=torch.float32, W_U_init="zero")
    assert all(p.dtype == torch.float32 for p in m.parameters())
    X = torch.randn(2, 3, 6)
    assert m(X).dtype == torch.float32 and torch.all(m(X) == 0)


@pytest.mark.parametrize(
    "kw",
    [
        dict(),
        dict(n_layers=3, tau=0.5, beta=0.25),
        dict(d_out=1, activation="gelu", beta=0),
    ],
)
def test_the_repr_names_every_size_and_setting_with_its_value(kw):
    m = Transformer(**(dict(d=9, d_qk=4, d_F=3, d_out=2) | kw))
    shown = dict(item.split("=") for item in m.extra_repr().split(", "))
    assert set(shown) == {
        "d",
        "d_qk",
        "d_F",
        "d_out",
        "n_layers",
        "tau",
        "beta",
        "activation",
    }
    for key in ("d", "d_qk", "d_F", "d_out", "n_layers", "tau", "beta"):
        assert float(shown[key]) == getattr(m, key), key
    assert shown["activation"] == m.activation.name


def test_beta_key_is_the_shortest_form_of_the_number():
    assert [beta_key(b) for b in (0, 0.5, 1, 0.25, 1e-3)] == [
        "0",
        "0.5",
        "1",
        "0.25",
        "0.001",
    ]


def test_modules_build_on_their_device_in_their_dtype():
    b, o = TransformerBlock(4, 2, 3), OutputMap(4, 2)  # float64 zeros on the CPU
    assert all(
        p.dtype == torch.float64 and p.device.type == "cpu" and not p.any()
        for p in (*b.parameters(), o.W_U)
    )
    assert b.W_Q.shape == (4, 2) and b.W_2.shape == (3, 4) and o.W_U.shape == (4, 2)
    assert TransformerBlock(4, 2, 3, device="meta").W_1.device.type == "meta"
    W_U = OutputMap(4, 2, dtype=torch.float32, device="meta").W_U
    assert W_U.dtype == torch.float32 and W_U.device.type == "meta"


def test_the_model_builds_every_parameter_on_its_device(monkeypatch):
    # "meta" stands for a device other than the CPU (the checks accept only real ones)
    monkeypatch.setattr(validate, "device", lambda value: torch.device(value))
    m = Transformer(4, 2, 3, 2, n_layers=2, device="meta")
    assert {p.device.type for p in m.parameters()} == {"meta"}


# --------------------------------------------------------------------------- refusals
@pytest.mark.parametrize(
    "kwargs, words",
    [
        (dict(d=0), "d must be a positive integer"),
        (dict(d_qk=-1), "d_qk must be a positive integer"),
        (dict(d_F=2.5), "d_F must be a positive integer"),
        (dict(d_out=0), "d_out must be a positive integer"),
        (dict(n_layers=0), "n_layers must be a positive integer"),
        (dict(n_layers=True), "n_layers.*True"),
        (dict(tau=0.0), "tau must be a finite positive"),
        (dict(tau=math.inf), "tau.*inf"),
        (dict(tau="abc"), "tau.*'abc'"),
        (dict(beta=math.nan), r"beta must be in \[0, 1\]"),
        (dict(beta="abc"), r"beta.*\[0, 1\].*'abc'"),
        (dict(activation="relu"), "unknown activation 'relu'"),
        (dict(W_U_init="Zero"), "W_U_init.*'Zero'"),
        (dict(init_std=-0.5), "init_std for W_Q.*-0.5"),
        (dict(init_std={"W_2": math.nan}), "init_std for W_2.*nan"),
        (dict(dtype=torch.int64), "dtype.*floating-point.*torch.int64"),
        (dict(dtype="float64"), "dtype.*'float64'"),
        (dict(device="meta"), "'meta' is not one the book runs on"),
    ],
)
def test_bad_arguments_are_named(kwargs, words):
    args = dict(d=6, d_qk=3, d_F=10, d_out=2) | kwargs
    with pytest.raises(ValueError, match=words):
        Transformer(
            args.pop("d"), args.pop("d_qk"), args.pop("d_F"), args.pop("d_out"), **args
        )


@pytest.mark.parametrize(
    "X, words",
    [
        (torch.randn(2, 3, 5, dtype=torch.float64), "5 features.*d = 6"),
        (torch.randn(6, dtype=torch.float64), "X must have shape"),
        (torch.full((2, 3, 6), math.nan, dtype=torch.float64), "NaN"),
        (torch.ones(2, 3, 6), r"float32.*X.to\(torch.float64\)"),
        (torch.ones(2, 3, 6, dtype=torch.float64, device="meta"), r"X.to\('cpu'\)"),
    ],
)
def test_bad_inputs_are_named(X, words):
    with pytest.raises(ValueError, match=words):
        small()(X)


def test_targets_of_another_shape_are_named():
    with pytest.raises(ValueError, match=r"Y has shape \(2, 3, 1\).*\(2, 3, 2\)"):
        squared_loss(torch.zeros(2, 3, 2), torch.zeros(2, 3, 1))
