"""The model and the trainer refuse each bad argument, naming the argument, the value
and what to pass instead."""

import pytest
import torch

from rcutil import train, validate
from rcutil.model import Transformer


@pytest.mark.parametrize(
    "beta", [float("nan"), float("inf"), -1.0, 1.5, 100.0, torch.tensor(2.0)]
)
def test_beta_outside_0_1_is_refused_by_constructor_and_forward(beta):
    with pytest.raises(ValueError, match=r"beta must be in \[0, 1\]"):
        Transformer(4, 2, 3, 1, beta=beta)
    m = Transformer(4, 2, 3, 1)
    with pytest.raises(ValueError, match=r"beta must be in \[0, 1\]"):
        m(torch.zeros(1, 2, 4, dtype=torch.float64), beta=beta)


@pytest.mark.parametrize("beta", [0.0, 0.25, 1, torch.tensor(0.5, requires_grad=True)])
def test_beta_in_0_1_is_accepted(beta):
    out = Transformer(4, 2, 3, 1)(torch.ones(1, 2, 4, dtype=torch.float64), beta=beta)
    assert torch.isfinite(out).all()


def test_the_beta_of_every_model_in_a_vmap_batch_passes_and_counts():
    """Under vmap the betas cannot be read; they still reach the equations, one per
    model."""
    m = Transformer(4, 2, 3, 1, seed=1)
    X = torch.randn(
        2, 3, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(0)
    )
    betas = torch.tensor([0.0, 0.5, 1.0], dtype=torch.float64)
    batched = torch.func.vmap(lambda b: m(X, beta=b))(betas)
    for out, b in zip(batched, betas.tolist()):
        torch.testing.assert_close(out, m(X, beta=b))


@pytest.mark.parametrize(
    "make, words",
    [
        (
            lambda: Transformer(4, 2, 3, 1, beta="abc"),
            ["beta must be a number", "'abc'"],
        ),
        (
            lambda: Transformer(4, 2, 3, 1)(
                torch.zeros(1, 2, 4, dtype=torch.float64), beta="abc"
            ),
            ["beta must be a number"],
        ),
        (lambda: Transformer(4, 2, 3, 1, tau="abc"), ["tau must be", "'abc'"]),
        (lambda: Transformer(4, 2, 3, 1, dtype=torch.int64), ["floating-point"]),
        (lambda: Transformer(4, 2, 3, 1, device="CPU"), ["device 'CPU'", "'cpu'"]),
        (lambda: validate.device("gpu"), ["device 'gpu'", "use cpu"]),
        (lambda: validate.device("xla"), ["device 'xla'", "use cpu"]),
        (lambda: validate.device("meta"), ["device 'meta'", "use cpu"]),
    ],
)
def test_bad_model_arguments_are_named(make, words):
    with pytest.raises(ValueError, match=words[0]) as err:
        make()
    assert all(word in str(err.value) for word in words)
    assert "\n" not in str(err.value)


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_cuda_without_cuda_says_so():
    with pytest.raises(ValueError, match="no usable CUDA device") as err:
        Transformer(4, 2, 3, 1, device="cuda")
    assert "use cpu" in str(err.value)


def test_a_float32_input_to_a_float64_model_names_both_dtypes():
    m = Transformer(4, 2, 3, 1)
    with pytest.raises(ValueError, match="X has dtype torch.float32") as err:
        m(torch.zeros(1, 2, 4))
    assert "X.to(torch.float64)" in str(err.value)
    with pytest.raises(ValueError, match="X has dtype torch.float32"):
        train.gradient_descent(
            m, torch.zeros(1, 2, 4), torch.zeros(1, 2, 1), mu=0.1, steps=1
        )
    with pytest.raises(ValueError, match="Y is torch.float32") as err:
        train.gradient_descent(
            m,
            torch.zeros(1, 2, 4, dtype=torch.float64),
            torch.zeros(1, 2, 1),
            mu=0.1,
            steps=1,
        )
    assert "Y.to(X)" in str(err.value)


def test_gradient_descent_names_a_bad_step_and_a_frozen_model():
    m = Transformer(4, 2, 3, 1)
    X = torch.zeros(1, 2, 4, dtype=torch.float64)
    Y = torch.zeros(1, 2, 1, dtype=torch.float64)
    with pytest.raises(ValueError, match=r"mu \(the step size\)") as err:
        train.gradient_descent(m, X, Y, mu="abc", steps=1)
    assert "'abc'" in str(err.value)
    m.requires_grad_(False)
    with pytest.raises(ValueError, match="frozen") as err:
        train.gradient_descent(m, X, Y, mu=0.1, steps=1)
    assert "requires_grad_(True)" in str(err.value)


@pytest.mark.parametrize("seed", ["abc", -1, 1.5, True])
def test_a_bad_seed_is_named(seed):
    with pytest.raises(ValueError, match="seed must be") as err:
        Transformer(4, 2, 3, 1, seed=seed)
    assert repr(seed) in str(err.value) and "invalid literal" not in str(err.value)


def test_an_integer_input_is_told_to_become_float_not_the_model():
    m = Transformer(4, 2, 3, 1)
    with pytest.raises(ValueError, match="torch.int64") as err:
        m(torch.zeros(1, 2, 4, dtype=torch.int64))
    assert "X.to(torch.float64)" in str(err.value)
    assert "dtype=torch.int64" not in str(err.value)


def test_an_input_too_large_for_the_dtype_is_named_not_returned_as_nan():
    m = Transformer(4, 2, 3, 1)
    X = torch.randn(2, 3, 4, dtype=torch.float64) * 1e200
    with pytest.raises(ValueError, match="output is not finite") as err:
        m(X)
    words = str(err.value)
    assert f"{X.abs().max().item():.3g}" in words and "normalise X" in words


def test_weights_too_large_for_the_dtype_are_named_with_init_std():
    m = Transformer(4, 2, 3, 1, init_std=1e200)
    with pytest.raises(ValueError, match="output is not finite") as err:
        m(torch.ones(2, 3, 4, dtype=torch.float64))
    assert "e+200" in str(err.value) and "init_std" in str(err.value)


def test_a_nan_target_is_named_by_the_loss():
    m = Transformer(4, 2, 3, 1)
    X, Y = torch.ones(2, 3, 4, dtype=torch.float64), torch.zeros(2, 3, 1).double()
    Y[1, 2, 0] = float("nan")
    with pytest.raises(ValueError, match=r"Y \(the targets\) contains nan") as err:
        m.loss(X, Y)
    assert "(1, 2, 0)" in str(err.value) and "clean it" in str(err.value)


def test_a_loss_that_overflows_names_the_largest_residual():
    m = Transformer(4, 2, 3, 1)
    X, Y = torch.ones(2, 3, 4, dtype=torch.float64), torch.zeros(2, 3, 1).double()
    Y[0, 0, 0] = 1e300
    with pytest.raises(ValueError, match="the loss is inf") as err:
        m.loss(X, Y)
    assert "1e+300" in str(err.value) and "normalise the targets" in str(err.value)


def test_finite_inputs_and_outputs_pass_inside_a_transform():
    m = Transformer(4, 2, 3, 1, seed=2)
    X = torch.randn(5, 2, 3, 4, dtype=torch.float64)
    out = torch.func.vmap(m)(X)  # the output cannot be read inside vmap: no check
    torch.testing.assert_close(out[1], m(X[1]))
