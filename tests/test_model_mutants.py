"""rcutil.model pinned down value by value, so that a changed operator or constant fails.

Complements tests/test_model.py (structure, gradients, errors) for mutation testing
(``make mutate``): exact initial weights, exact loss, every accepted and refused argument.
"""
import math
import re

import pytest
import torch

from rcutil.activations import TANH
from rcutil.model import (
    BLOCK_NAMES,
    ModelOutput,
    OutputMap,
    Transformer,
    TransformerBlock,
    attention,
    attention_scores,
    beta_key,
    block,
    block_shapes,
    ffn,
    squared_loss,
)
from rcutil.validate import as_number
from rcutil.validate import beta as check_beta
from rcutil.validate import device as check_device
from rcutil.validate import inputs as check_input


def test_block_shapes_and_beta_key():
    assert block_shapes(5, 3, 7) == {"W_Q": (5, 3), "W_K": (5, 3), "W_V": (5, 5), "W_1": (5, 7), "W_2": (7, 5)}
    assert BLOCK_NAMES == ("W_Q", "W_K", "W_V", "W_1", "W_2")
    assert [beta_key(b) for b in (0, 0.5, 1, 0.25, 1e-3)] == ["0", "0.5", "1", "0.25", "0.001"]


def test_initial_weights_are_exactly_the_seeded_draws():
    """Every parameter, in order, is the next Gaussian draw of one float64 generator times its std."""
    m = Transformer(4, 2, 3, 2, n_layers=2, seed=11)
    gen = torch.Generator().manual_seed(11)
    for name, p in m.named_parameters():
        std = 1 / math.sqrt(4) if name.endswith("W_U") else 1 / math.sqrt(p.shape[0])
        torch.testing.assert_close(p.detach(), torch.randn(p.shape, generator=gen, dtype=torch.float64) * std,
                                   rtol=0, atol=0, msg=name)
    m = Transformer(4, 2, 3, 2, init_std={"W_V": 0.5, "W_2": 0.0}, W_U_init="zero", seed=3)
    gen = torch.Generator().manual_seed(3)
    for name, p in m.named_parameters():
        short = name.rsplit(".", 1)[-1]
        std = {"W_V": 0.5, "W_2": 0.0, "W_U": 0.0}.get(short, 1 / math.sqrt(p.shape[0]))
        torch.testing.assert_close(p.detach(), torch.randn(p.shape, generator=gen, dtype=torch.float64) * std,
                                   rtol=0, atol=0, msg=name)
    m = Transformer(4, 2, 3, 2, init_std=0.25, seed=5)
    gen = torch.Generator().manual_seed(5)
    for name, p in m.named_parameters():
        std = 1 / math.sqrt(4) if name.endswith("W_U") else 0.25
        torch.testing.assert_close(p.detach(), torch.randn(p.shape, generator=gen, dtype=torch.float64) * std,
                                   rtol=0, atol=0, msg=name)


def test_defaults_of_the_model():
    m = Transformer(9, 4, 3, 2)
    assert m.n_layers == 1 and m.tau == 2.0 and m.beta == 1.0 and m.activation is TANH
    assert (m.d, m.d_qk, m.d_F, m.d_out) == (9, 4, 3, 2)
    assert all(p.dtype == torch.float64 and p.device.type == "cpu" for p in m.parameters())
    assert Transformer(9, 4, 3, 2, tau=0.5).tau == 0.5 and Transformer(9, 4, 3, 2, beta=0).beta == 0.0
    assert torch.equal(Transformer(9, 4, 3, 2).W_U, Transformer(9, 4, 3, 2, seed=0).W_U)
    assert m.extra_repr() == "d=9, d_qk=4, d_F=3, d_out=2, n_layers=1, tau=2, beta=1, activation=tanh"
    assert m.W_U is m.output.W_U and m.shapes()["output.W_U"] == (9, 2)


def test_equations_by_value():
    g = torch.Generator().manual_seed(2)
    X = torch.randn(2, 3, 4, generator=g, dtype=torch.float64)
    W_Q, W_K, W_V = (torch.randn(4, k, generator=g, dtype=torch.float64) for k in (2, 2, 4))
    W_1, W_2 = torch.randn(4, 5, generator=g, dtype=torch.float64), torch.randn(5, 4, generator=g, dtype=torch.float64)
    S = torch.einsum("nik,njk->nij", X @ W_Q, X @ W_K) / 0.7
    torch.testing.assert_close(attention_scores(X, W_Q, W_K, 0.7), S)
    P = torch.exp(S) / torch.exp(S).sum(dim=2, keepdim=True)
    torch.testing.assert_close(attention(X, W_Q, W_K, W_V, 0.7), P @ X @ W_V)
    torch.testing.assert_close(ffn(X, W_1, W_2), torch.tanh(X @ W_1) @ W_2)
    torch.testing.assert_close(ffn(X, W_1, W_2, torch.relu), torch.relu(X @ W_1) @ W_2)
    H, Z = block(X, W_Q, W_K, W_V, W_1, W_2, beta=0.3, tau=0.7, activation=torch.sin)
    torch.testing.assert_close(Z, P @ X @ W_V + 0.3 * X)
    torch.testing.assert_close(H, torch.sin(Z @ W_1) @ W_2 + 0.3 * Z)
    F, Y = torch.tensor([[1.0, 2.0]]), torch.tensor([[0.0, 4.0]])
    assert squared_loss(F, Y).item() == 0.5 * (1 + 4)


def test_forward_output_and_loss():
    m = Transformer(4, 2, 3, 2, n_layers=2, beta=0.5, tau=1.5, activation=torch.sin, seed=1)
    X = torch.randn(3, 2, 4, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    H, Zs = X, []
    for b in m.blocks:
        H, Z = block(H, b.W_Q, b.W_K, b.W_V, b.W_1, b.W_2, beta=0.5, tau=1.5, activation=torch.sin)
        Zs.append(Z)
    out = m(X, return_all=True)
    assert isinstance(out, ModelOutput)
    torch.testing.assert_close(out.output, H @ m.W_U)
    torch.testing.assert_close(out.features, H)
    for a, b in zip(out.Z, Zs):
        torch.testing.assert_close(a, b)
    torch.testing.assert_close(m(X), H @ m.W_U)
    torch.testing.assert_close(m(X[0]), m(X[:1]))                      # (n, d) is one sample
    Y = torch.ones(3, 2, 2, dtype=torch.float64)
    torch.testing.assert_close(m.loss(X, Y), 0.5 * ((H @ m.W_U - Y) ** 2).sum())
    H0 = X
    for b in m.blocks:
        H0, _ = block(H0, b.W_Q, b.W_K, b.W_V, b.W_1, b.W_2, beta=0.0, tau=1.5, activation=torch.sin)
    torch.testing.assert_close(m(X, beta=0.0), H0 @ m.W_U)


def test_check_input_accepts_and_refuses():
    X = torch.ones(3, 4, dtype=torch.float64)
    assert check_input(X, 4).shape == (1, 3, 4)
    Y = torch.ones(2, 3, 4)
    assert check_input(Y, 4) is Y
    with pytest.raises(ValueError, match="^Y must be a torch.Tensor, got list$"):
        check_input([1.0], 4, name="Y")
    with pytest.raises(ValueError, match=r"^X must have shape \(N, n, d\) or \(n, d\), got \(4,\)$"):
        check_input(torch.ones(4), 4)
    with pytest.raises(ValueError, match=r"^X has 4 features .* d = 5: shape \(3, 4\)|^X has 4 features"):
        check_input(X, 5)
    with pytest.raises(ValueError, match=r"^X is empty: shape \(0, 3, 4\)$"):
        check_input(torch.ones(0, 3, 4), 4)
    with pytest.raises(ValueError, match=r"^X is empty: shape \(2, 0, 4\)$"):
        check_input(torch.ones(2, 0, 4), 4)
    with pytest.raises(ValueError, match="^X contains NaN or inf"):
        check_input(torch.full((1, 2, 4), math.inf), 4)


def test_modules_build_on_their_device_in_their_dtype():
    b, o = TransformerBlock(4, 2, 3), OutputMap(4, 2)                  # defaults: float64 zeros on the CPU
    assert all(p.dtype == torch.float64 and p.device.type == "cpu" and not p.any() for p in (*b.parameters(), o.W_U))
    assert b.W_Q.shape == (4, 2) and b.W_2.shape == (3, 4) and o.W_U.shape == (4, 2)
    assert TransformerBlock(4, 2, 3, device="meta").W_1.device.type == "meta"   # the blocks take any device
    assert OutputMap(4, 2, dtype=torch.float32, device="meta").W_U.dtype == torch.float32
    with pytest.raises(ValueError, match="'meta' is not one the book runs on"):
        Transformer(4, 2, 3, 2, n_layers=2, device="meta")


def test_reset_parameters_defaults_to_seed_0_and_a_gaussian_W_U():
    m = Transformer(4, 2, 3, 2, seed=8, W_U_init="zero")
    m.reset_parameters()
    for p, q in zip(m.parameters(), Transformer(4, 2, 3, 2).parameters()):
        assert torch.equal(p, q)


def test_accepted_edge_arguments():
    assert Transformer(1, 1, 1, 1, init_std=0.0).blocks[0].W_Q.abs().sum() == 0
    m = Transformer(4, 2, 3, 2, dtype=torch.float32)
    assert all(p.dtype == torch.float32 for p in m.parameters())
    m.reset_parameters(4, W_U_init="zero")
    assert torch.all(m.W_U == 0) and m.blocks[0].W_Q.abs().sum() > 0


# --------------------------------------------------------------------------- validation, message by message
@pytest.mark.parametrize("value, expected", [
    (0.25, 0.25), (3, 3.0), (torch.tensor(0.5), 0.5), (torch.tensor([2.0]), 2.0),
    (torch.tensor(7, dtype=torch.int64), 7.0),
])
def test_as_number_accepts_numbers_and_one_element_tensors(value, expected):
    got = as_number("x", value, "a number")
    assert got == expected and type(got) is float


@pytest.mark.parametrize("value, shown", [
    ("abc", "'abc' (str)"), (None, "None (NoneType)"), (True, "True (bool)"), (1 + 2j, "(1+2j) (complex)"),
    (torch.tensor([1.0, 2.0]), "tensor([1., 2.]) (Tensor)"), (torch.tensor(True), "tensor(True) (Tensor)"),
    (torch.tensor(1 + 1j), "tensor(1.+1.j) (Tensor)"),
])
def test_as_number_refuses_the_rest_with_name_and_requirement(value, shown):
    with pytest.raises(ValueError, match=f"^mu must be a positive step, got {re.escape(shown)}$"):
        as_number("mu", value, "a positive step")


@pytest.mark.parametrize("kwargs, match", [
    (dict(tau="abc"), "^tau must be a finite positive number, got 'abc' \\(str\\)$"),
    (dict(beta="abc"), "^beta must be a number in \\[0, 1\\] \\(the residual strength\\), got 'abc' \\(str\\)$"),
    (dict(dtype=torch.int64), "^dtype must be a floating-point torch dtype such as torch.float64, got torch.int64$"),
    (dict(dtype="float64"), "^dtype must be a floating-point torch dtype such as torch.float64, got 'float64'$"),
])
def test_refused_types_with_their_message(kwargs, match):
    with pytest.raises(ValueError, match=match):
        Transformer(4, 2, 3, 1, **kwargs)


def test_beta_as_a_tensor():
    m = Transformer(4, 2, 3, 1, beta=torch.tensor(0.25))
    assert m.beta == 0.25 and type(m.beta) is float
    b = torch.tensor(0.5, dtype=torch.float64, requires_grad=True)
    assert check_beta(b) is b                              # a tensor passes unchanged, gradients and all
    assert check_beta(0.5) == 0.5 and type(check_beta(1)) is float
    with pytest.raises(ValueError, match=r"^beta must be in \[0, 1\], the range of the beta-variant \(1: the "
                                         r"paper's model, 0: no residual\), got 1.5$"):
        check_beta(torch.tensor(1.5))
    X = torch.randn(2, 3, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    out = torch.func.vmap(lambda beta: m(X, beta=beta))(torch.tensor([0.0, 1.0], dtype=torch.float64))
    torch.testing.assert_close(out[1], m(X, beta=1.0))


@pytest.mark.parametrize("device, match", [
    (3.5, "^device 3.5 is not a torch device: use cpu, cuda, cuda:1 or mps$"),
    ("CPU", "^device 'CPU' is not a torch device \\(device names are lower case: 'cpu'\\): "
            "use cpu, cuda, cuda:1 or mps$"),
    (None, "^device None is not a torch device: use cpu, cuda, cuda:1 or mps$"),
])
def test_check_device_names_a_bad_name(device, match):
    with pytest.raises(ValueError, match=match):
        check_device(device)


def test_check_device_without_cuda_or_mps(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.version, "cuda", None)
    with pytest.raises(ValueError, match=rf"^device 'cuda:0' asked for, but this torch has no usable CUDA device "
                                         rf"\(torch {re.escape(torch.__version__)}, CUDA build: no\): use cpu, or "
                                         rf"install a CUDA build of torch on a machine with a GPU$"):
        check_device("cuda:0")
    monkeypatch.setattr(torch.version, "cuda", "12.8")
    with pytest.raises(ValueError, match=r"CUDA build: 12\.8\)"):
        check_device("cuda")
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    with pytest.raises(ValueError, match="^device 'mps' asked for, but MPS is not available here: use cpu$"):
        check_device("mps")
    assert check_device("cpu") == torch.device("cpu")


def test_check_device_with_two_gpus(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert check_device("cuda") == torch.device("cuda")
    assert check_device("cuda:1") == torch.device("cuda:1")
    with pytest.raises(ValueError, match=r"^device 'cuda:2' asked for, but this machine has 2 CUDA device\(s\): "
                                         r"use cuda:0 .. cuda:1$"):
        check_device("cuda:2")
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)
    assert check_device("mps") == torch.device("mps")


def test_forward_checks_the_dtype_and_device_of_its_input():
    m = Transformer(4, 2, 3, 1)
    with pytest.raises(ValueError, match=r"^X has dtype torch.float32 but the model's parameters are torch.float64: "
                                         r"pass X.to\(torch.float64\), or build the model with dtype=torch.float32$"):
        m(torch.ones(2, 3, 4, dtype=torch.float32))
    with pytest.raises(ValueError, match=r"^X is on meta but the model is on cpu: pass X.to\('cpu'\), or move the "
                                         r"model with model.to\('meta'\)$"):
        m(torch.ones(2, 3, 4, dtype=torch.float64, device="meta"))
