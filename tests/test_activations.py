"""rcutil.activations: every record's bounds are the suprema the proofs use (attained
where the text says), and ``get`` finds the record of a name, a function or a module, or
wraps any other callable as a record without bounds."""

import math

import pytest
import torch

from rcutil import activations
from rcutil.activations import ACTIVATIONS, GELU, TANH

GRID = torch.linspace(-12, 12, 240001, dtype=torch.float64)


def derivatives(fn, x):
    """``(sigma'(x), sigma''(x))`` by automatic differentiation, entrywise."""
    x = x.clone().requires_grad_()
    (d1,) = torch.autograd.grad(fn(x).sum(), x, create_graph=True)
    (d2,) = torch.autograd.grad(d1.sum(), x)
    return d1.detach(), d2


@pytest.mark.parametrize("act", list(ACTIVATIONS.values()), ids=list(ACTIVATIONS))
def test_each_record_holds_its_function(act):
    assert act.certifiable and act(torch.zeros(3)).abs().max() == 0  # sigma(0) = 0
    torch.testing.assert_close(act(GRID[::1000]), act.fn(GRID[::1000]))


@pytest.mark.parametrize(
    "act, at_first, at_second",
    [(TANH, 0.0, math.atanh(1 / math.sqrt(3))), (GELU, math.sqrt(2), 0.0)],
    ids=["tanh", "gelu"],
)
def test_bounds_are_the_suprema_and_attained_where_stated(act, at_first, at_second):
    d1, d2 = derivatives(act.fn, GRID)
    assert d1.abs().max() <= act.first_bound * (1 + 1e-12)
    assert d2.abs().max() <= act.second_bound * (1 + 1e-12)
    assert act(GRID).abs().max() <= act.value_bound
    x = torch.tensor([at_first, at_second], dtype=torch.float64)
    d1, d2 = derivatives(act.fn, x)
    assert math.isclose(abs(d1[0].item()), act.first_bound, rel_tol=1e-12)
    assert math.isclose(abs(d2[1].item()), act.second_bound, rel_tol=1e-12)
    # |sigma(x)| <= sup|sigma'| |x|, which the value rule uses with sigma(0) = 0
    assert (act(GRID).abs() <= act.first_bound * GRID.abs() + 1e-15).all()


def test_tanh_approaches_its_value_bound_and_gelu_has_none():
    assert TANH.value_bound == 1.0 and TANH(torch.tensor(20.0)).item() == 1.0
    assert GELU.value_bound == math.inf


@pytest.mark.parametrize(
    "given, record",
    [
        ("tanh", TANH),
        ("gelu", GELU),
        (TANH, TANH),
        (torch.tanh, TANH),
        (torch.nn.functional.tanh, TANH),
        (torch.Tensor.tanh, TANH),
        (torch.nn.Tanh(), TANH),
        (torch.nn.functional.gelu, GELU),
        (torch.nn.GELU(), GELU),
    ],
)
def test_get_finds_the_record(given, record):
    assert activations.get(given) is record


class Unhashable:
    __hash__ = None

    def __call__(self, x):
        return 2 * x


@pytest.mark.parametrize(
    "given, name",
    [
        (torch.relu, "relu"),
        (lambda x: 3 * torch.tanh(x), "<lambda>"),
        (torch.nn.GELU(approximate="tanh"), "GELU(approximate='tanh')"),
        (Unhashable(), None),
    ],
)
def test_get_wraps_any_other_callable_without_bounds(given, name):
    record = activations.get(given)
    assert not record.certifiable and record.fn is given
    assert record.name == (name or repr(given))
    x = torch.linspace(-1, 1, 5)
    torch.testing.assert_close(record(x), given(x))


@pytest.mark.parametrize(
    "given, words",
    [
        ("relu", "unknown activation 'relu'.*tanh, gelu"),
        ("Tanh", "'Tanh'"),
        (3, "activation must be one of tanh, gelu.*got 3"),
        (None, "got None"),
    ],
)
def test_get_refuses_unknown_names_and_what_is_not_callable(given, words):
    with pytest.raises(ValueError, match=words):
        activations.get(given)


def test_a_record_without_a_bound_is_not_certifiable():
    full = dict(
        name="s",
        fn=torch.sin,
        first_bound=1.0,
        second_bound=1.0,
        value_bound=1.0,
    )
    assert activations.Activation(**full).certifiable
    for missing in ("first_bound", "second_bound", "value_bound"):
        record = activations.Activation(**(full | {missing: None}))
        assert not record.certifiable, missing
