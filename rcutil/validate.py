"""Argument checks shared by the model, the trainer and the experiments.

Each check returns the value in the form its caller uses, or raises a ``ValueError``
whose message names the argument, the value it got and what to pass instead.
"""

from __future__ import annotations

import math
import numbers

import torch

#: The residual strengths the book's variant is defined for (eq. ``model-z``).
BETA_RANGE = (0.0, 1.0)
#: The device types the book runs on.
DEVICE_TYPES = ("cpu", "cuda", "mps")


def positive_int(name: str, value) -> int:
    """``value`` if it is a positive ``int`` (not a bool)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value <= 0:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return int(value)


def seed(value, name: str = "seed") -> int:
    """A random seed: a non-negative ``int`` (not a bool)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 0:
        raise ValueError(
            f"{name} must be a non-negative integer such as 0 or 1, got {value!r}"
        )
    return int(value)


def as_number(name: str, value, requirement: str) -> float:
    """``value`` as a float: a Python or numpy number, or a one-element real tensor.
    Anything else (a string, ``None``, a bool) names ``name`` and ``requirement``."""
    if (
        isinstance(value, torch.Tensor)
        and value.numel() == 1
        and value.dtype != torch.bool
        and not value.is_complex()
    ):
        return float(value.detach())
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(
            f"{name} must be {requirement}, got {value!r} ({type(value).__name__})"
        )
    return float(value)


def positive(name: str, value) -> float:
    """``value`` as a finite positive float."""
    value = as_number(name, value, "a finite positive number")
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be a finite positive number, got {value!r}")
    return value


def beta(value, name: str = "beta"):
    """A residual strength in ``[0, 1]``, the range on which the book defines the
    beta-variant (eq. ``model-z``: 1 is the paper's model, 0 drops every residual). A
    number comes back as a float, a one-element tensor unchanged (it may carry
    gradients). A tensor whose value cannot be read (inside a ``torch.func`` transform,
    which batches one beta per model) passes: the models of such a batch are built, and
    so checked, one by one."""
    lo, hi = BETA_RANGE
    if isinstance(value, torch.Tensor):
        try:
            number = as_number(name, value, f"a number in [{lo:g}, {hi:g}]")
        except (
            RuntimeError
        ):  # a batched tensor of a transform: its value cannot be read here
            return value
    else:
        number = as_number(
            name, value, f"a number in [{lo:g}, {hi:g}] (the residual strength)"
        )
    if not lo <= number <= hi:  # False for NaN as well
        raise ValueError(
            f"{name} must be in [{lo:g}, {hi:g}], the range of the beta-variant "
            f"(1: the paper's model, 0: no residual), got {number!r}"
        )
    return value if isinstance(value, torch.Tensor) else number


def device(value) -> torch.device:
    """``value`` as a ``torch.device`` of a type the book runs on (cpu, cuda, mps) that
    this machine has."""
    use = "use cpu, cuda, cuda:1 or mps"
    try:
        dev = torch.device(value)
    except (RuntimeError, TypeError):
        lower = value.lower() if isinstance(value, str) else value
        hint = f" (device names are lower case: {lower!r})" if lower != value else ""
        raise ValueError(
            f"device {value!r} is not a torch device{hint}: {use}"
        ) from None
    if dev.type not in DEVICE_TYPES:
        raise ValueError(f"device {value!r} is not one the book runs on: {use}")
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(
                f"device {value!r} asked for, but this torch has no usable CUDA "
                f"device (torch {torch.__version__}, CUDA build: "
                f"{torch.version.cuda or 'no'}): use cpu, or install a CUDA build "
                f"of torch on a machine with a GPU"
            )
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            n = torch.cuda.device_count()
            raise ValueError(
                f"device {value!r} asked for, but this machine has {n} CUDA "
                f"device(s): use cuda:0 .. cuda:{n - 1}"
            )
    if dev.type == "mps" and not torch.backends.mps.is_available():
        raise ValueError(
            f"device {value!r} asked for, but MPS is not available here: use cpu"
        )
    return dev


def inputs(
    X,
    d: int,
    name: str = "X",
    *,
    dtype: torch.dtype | None = None,
    device: torch.device | None = None,
) -> torch.Tensor:
    """``X`` as a finite ``(N, n, d)`` tensor (an ``(n, d)`` one gets ``N = 1``), of
    ``dtype`` and on ``device`` when these are given (the model's)."""
    if not isinstance(X, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, got {type(X).__name__}")
    if dtype is not None and X.dtype != dtype:
        fix = (
            f"pass {name}.to({dtype})"
            if not X.dtype.is_floating_point
            else f"pass {name}.to({dtype}), or build the model with dtype={X.dtype}"
        )
        raise ValueError(
            f"{name} has dtype {X.dtype} but the model's parameters are {dtype}: {fix}"
        )
    if device is not None and X.device != device:
        raise ValueError(
            f"{name} is on {X.device} but the model is on {device}: pass "
            f"{name}.to({str(device)!r}), or move the model with "
            f"model.to({str(X.device)!r})"
        )
    if X.dim() == 2:
        X = X.unsqueeze(0)
    if X.dim() != 3:
        raise ValueError(
            f"{name} must have shape (N, n, d) or (n, d), got {tuple(X.shape)}"
        )
    if X.shape[-1] != d:
        raise ValueError(
            f"{name} has {X.shape[-1]} features in its last dimension but the "
            f"model has d = {d}: shape {tuple(X.shape)}, expected (N, n, {d})"
        )
    if X.shape[0] == 0 or X.shape[1] == 0:
        raise ValueError(f"{name} is empty: shape {tuple(X.shape)}")
    if not _all_finite(X):
        raise ValueError(
            f"{name} contains NaN or inf; clean or normalise the input first"
        )
    return X


def _all_finite(value: torch.Tensor) -> bool:
    """Whether every entry is finite; ``True`` where the value cannot be read (inside a
    ``torch.func`` transform, or on the meta device), so that such calls pass. A finite
    sum has no NaN or inf: that one reduction is the whole cost when all is well."""
    try:
        if math.isfinite(value.sum().item()):
            return True
        return bool(torch.isfinite(value).all())  # finite entries whose sum overflowed
    except RuntimeError:
        return True


def finite(name: str, value: torch.Tensor, what: str) -> None:
    """Refuse a tensor with a NaN or an infinite entry, naming the first one."""
    if _all_finite(value):
        return
    index = tuple((~torch.isfinite(value)).nonzero()[0].tolist())
    raise ValueError(
        f"{name} ({what}) contains {value[index].item()} at index {index}: clean it "
        f"first (drop or fill the missing values)"
    )


def finite_output(F: torch.Tensor, X: torch.Tensor, weights) -> None:
    """Refuse a model output ``F`` with a NaN or an infinite entry for a finite input
    ``X``: the input or the weights (``(name, tensor)`` pairs) are too large for the
    dtype. Names the largest entry of each and the fix."""
    if _all_finite(F):
        return
    name, w = max(
        ((k, p.detach().abs().max().item()) for k, p in weights), key=lambda kw: kw[1]
    )
    raise ValueError(
        f"the model's output is not finite although X is: the largest |entry| of X "
        f"is {X.abs().max().item():.3g} and of a weight {w:.3g} ({name}), too large "
        f"for {F.dtype}; normalise X (for example to unit variance) or draw smaller "
        f"weights (a smaller init_std)"
    )


def finite_loss(loss: torch.Tensor, F: torch.Tensor, Y: torch.Tensor) -> None:
    """Refuse a loss that is not finite for a finite model output ``F``: name the first
    NaN or inf of the targets ``Y``, or else the largest ``|F - Y|``, too large for the
    dtype."""
    if _all_finite(loss):
        return
    finite("Y", Y, "the targets")
    raise ValueError(
        f"the loss is {loss.item()} although the output and the targets are finite: "
        f"the largest |F - Y| is {(F - Y).abs().max().item():.3g}, too large for "
        f"{loss.dtype}; normalise the targets Y and the inputs X"
    )
