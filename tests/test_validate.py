"""rcutil.validate: each check returns the value in the form its caller uses, or refuses
it with a ValueError that names the argument, the value and what to pass instead."""

import math

import pytest
import torch

from rcutil import validate


def test_positive_int_comes_back_as_int_and_refuses_the_rest():
    assert validate.positive_int("n", 3) == 3 and validate.positive_int("n", 1) == 1
    assert type(validate.positive_int("n", torch.tensor(3).item())) is int
    for bad in (0, -2, True, 2.5, "3", None):
        with pytest.raises(ValueError, match=f"n.*positive integer.*{bad!r}"):
            validate.positive_int("n", bad)


def test_seed_is_a_non_negative_int():
    assert validate.seed(0) == 0 and validate.seed(7) == 7
    for bad in (-1, True, 1.0, "1"):
        with pytest.raises(ValueError, match="^seed .*non-negative integer"):
            validate.seed(bad)
    with pytest.raises(ValueError, match="seed_X.*non-negative"):
        validate.seed(-1, name="seed_X")


@pytest.mark.parametrize(
    "value, expected",
    [
        (0.25, 0.25),
        (3, 3.0),
        (torch.tensor(0.5), 0.5),
        (torch.tensor([2.0]), 2.0),
        (torch.tensor(7, dtype=torch.int64), 7.0),
    ],
)
def test_as_number_accepts_numbers_and_one_element_tensors(value, expected):
    got = validate.as_number("x", value, "a number")
    assert got == expected and type(got) is float


@pytest.mark.parametrize(
    "value, shown",
    [
        ("abc", "'abc' (str)"),
        (None, "None (NoneType)"),
        (True, "True (bool)"),
        (1 + 2j, "(1+2j) (complex)"),
        (torch.tensor([1.0, 2.0]), "(Tensor)"),
        (torch.tensor(True), "tensor(True) (Tensor)"),
        (torch.tensor(1 + 1j), "(Tensor)"),
    ],
)
def test_as_number_names_the_argument_its_requirement_and_the_value(value, shown):
    with pytest.raises(ValueError) as error:
        validate.as_number("mu", value, "a positive step")
    message = str(error.value)
    assert message.startswith("mu") and "a positive step" in message
    assert shown in message


@pytest.mark.parametrize("bad", [0.0, -1.0, math.inf, math.nan, "abc"])
def test_positive_refuses_what_is_not_a_finite_positive_number(bad):
    with pytest.raises(ValueError, match="tau.*finite positive"):
        validate.positive("tau", bad)
    assert validate.positive("tau", 2) == 2.0 and validate.positive("tau", 0.5) == 0.5
    assert validate.positive("tau", 1e-300) == 1e-300


def test_beta_keeps_a_tensor_and_refuses_values_outside_0_1():
    b = torch.tensor(0.5, dtype=torch.float64, requires_grad=True)
    assert validate.beta(b) is b  # unchanged, gradients and all
    assert validate.beta(0.5) == 0.5 and type(validate.beta(1)) is float
    assert validate.beta(0) == 0.0
    for bad in (
        1.5,
        -0.1,
        math.nan,
        torch.tensor(1.5),
        torch.tensor([0.5, 0.5]),
        torch.tensor(True),
    ):
        with pytest.raises(ValueError, match=r"^beta .*\[0, 1\]"):
            validate.beta(bad)
    with pytest.raises(ValueError, match=r"beta.*number in \[0, 1\].*'abc'"):
        validate.beta("abc")
    with pytest.raises(ValueError, match=r"gamma.*\[0, 1\]"):
        validate.beta(2.0, name="gamma")


def test_beta_inside_a_transform_passes_one_value_per_model():
    seen = []

    def f(beta):
        seen.append(validate.beta(beta))
        return beta * 2

    out = torch.func.vmap(f)(torch.tensor([0.0, 1.0, 0.5], dtype=torch.float64))
    torch.testing.assert_close(out, torch.tensor([0.0, 2.0, 1.0], dtype=torch.float64))
    assert len(seen) == 1 and isinstance(seen[0], torch.Tensor)


@pytest.mark.parametrize(
    "device, words",
    [
        (3.5, "3.5 is not a torch device"),
        ("CPU", "lower case: 'cpu'"),
        (None, "None is not a torch device"),
        ("meta", "'meta' is not one the book runs"),
    ],
)
def test_device_names_a_bad_name_and_the_names_to_use(device, words):
    with pytest.raises(ValueError) as error:
        validate.device(device)
    assert words in str(error.value) and "use cpu, cuda" in str(error.value)


def test_device_lower_case_hint_only_when_the_case_differs():
    messages = {}
    for name in ("gpu", 3.5, "GPU"):
        with pytest.raises(ValueError) as error:
            validate.device(name)
        messages[name] = str(error.value).replace(repr(name), "NAME")
    assert messages["gpu"] == messages[3.5]
    assert "torch device: use" in messages["gpu"]  # nothing between the two
    assert "lower case: 'gpu'" in messages["GPU"] and messages["GPU"] != messages["gpu"]


def test_device_without_cuda_or_mps(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.version, "cuda", None)
    with pytest.raises(ValueError, match="no usable CUDA.*CUDA build: no.*use cpu"):
        validate.device("cuda:0")
    monkeypatch.setattr(torch.version, "cuda", "12.8")
    with pytest.raises(ValueError, match=r"CUDA build: 12\.8"):
        validate.device("cuda")
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    with pytest.raises(ValueError, match="MPS is not available.*use cpu"):
        validate.device("mps")
    assert validate.device("cpu") == torch.device("cpu")


def test_device_with_two_gpus(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert validate.device("cuda") == torch.device("cuda")
    assert validate.device("cuda:1") == torch.device("cuda:1")
    with pytest.raises(ValueError, match="'cuda:2'.*2 CUDA device.*cuda:0 .. cuda:1"):
        validate.device("cuda:2")
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)
    assert validate.device("mps") == torch.device("mps")


def test_inputs_take_one_sample_or_a_batch():
    X = torch.ones(3, 4, dtype=torch.float64)
    assert validate.inputs(X, 4).shape == (1, 3, 4)
    Y = torch.ones(2, 3, 4)
    assert validate.inputs(Y, 4) is Y
    assert validate.inputs(Y, 4, dtype=torch.float32, device=torch.device("cpu")) is Y


@pytest.mark.parametrize(
    "X, kw, words",
    [
        ([1.0], dict(name="Y"), "^Y must be a torch.Tensor, got list"),
        (torch.ones(4), {}, r"^X .*\(N, n, d\).*\(4,\)"),
        (torch.ones(3, 4), dict(d=5), r"4 features.*d = 5"),
        (torch.ones(0, 3, 4), {}, "empty"),
        (torch.ones(2, 0, 4), {}, "empty"),
        (torch.full((1, 2, 4), math.inf), {}, "NaN or inf"),
        (
            torch.ones(1, 2, 4),
            dict(dtype=torch.float64),
            r"float32.*X.to\(torch.float64\), or build .* dtype=torch.float32",
        ),
        (
            torch.ones(1, 2, 4, device="meta"),
            dict(device=torch.device("cpu")),
            r"on meta.*X.to\('cpu'\).*model.to\('meta'\)",
        ),
    ],
)
def test_inputs_refuse_with_the_fix(X, kw, words):
    kw = dict(d=4) | kw
    with pytest.raises(ValueError, match=words):
        validate.inputs(X, kw.pop("d"), **kw)


def test_an_integer_input_is_not_offered_an_integer_model():
    with pytest.raises(ValueError) as error:
        validate.inputs(torch.ones(1, 2, 4, dtype=torch.int64), 4, dtype=torch.float64)
    assert "X.to(torch.float64)" in str(error.value)
    assert "build the model" not in str(error.value)


def test_finite_entries_whose_sum_overflows_pass_and_a_nan_does_not():
    big = torch.tensor([1e308, 1e308, -1e308, 1e308], dtype=torch.float64)
    validate.finite("Y", big, "the targets")  # the sum overflows, no entry does
    big[2] = float("nan")
    with pytest.raises(ValueError, match=r"Y \(the targets\) contains nan at index"):
        validate.finite("Y", big, "the targets")


def test_a_loss_that_overflowed_names_the_largest_residual():
    F = torch.tensor([1e300, 0.0], dtype=torch.float64)
    Y = torch.tensor([-1e300, 1.0], dtype=torch.float64)
    with pytest.raises(ValueError, match="the loss is inf") as err:
        validate.finite_loss(torch.tensor(math.inf), F, Y)
    assert "largest |F - Y| is 2e+300" in str(err.value)
    validate.finite_loss(torch.tensor(1.0), F, Y)  # a finite loss passes
