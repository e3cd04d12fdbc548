"""The paper's Transformer: softmax attention, an FFN, residual strength beta, and W_U.

Equation labels refer to the chapter :ref:`model` of the book.

Single layer, single head, no LayerNorm, input ``X`` of ``n`` tokens by ``d`` features,
parameters used as ``X @ W``:

* attention (eq. ``attn``):   ``Attn(X) = softmax(X W_Q W_K^T X^T / tau) X W_V``, row-wise softmax;
* attention-layer output (eq. ``z``): ``Z = Attn(X) + beta X``;
* feed-forward (eq. ``ffn``): ``FFN(Z) = sigma(Z W_1) W_2``;
* block output (eq. ``block``): ``B(X) = FFN(Z) + beta Z``;
* model (eq. ``model``):      ``F(X) = B_L(... B_1(X)) W_U``.

At ``beta = 1`` and ``L = 1`` this is the paper's ``(FFN(Attn(X) + X) + Attn(X) + X) W_U``;
at ``beta = 0`` every residual is gone. The functions below are the equations; the
``nn.Module`` classes hold the parameters and call them, so that ``torch.func`` can use
either form.
"""
from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Mapping
from typing import NamedTuple

import torch
from torch import nn

Activation = Callable[[torch.Tensor], torch.Tensor]

#: Parameter names of one block, in the paper's order, and their shapes as functions of
#: the sizes ``(d, d_qk, d_F)``.
BLOCK_SHAPES = {
    "W_Q": lambda d, d_qk, d_F: (d, d_qk),
    "W_K": lambda d, d_qk, d_F: (d, d_qk),
    "W_V": lambda d, d_qk, d_F: (d, d),
    "W_1": lambda d, d_qk, d_F: (d, d_F),
    "W_2": lambda d, d_qk, d_F: (d_F, d),
}
#: The names of one block's weights, in the paper's order.
BLOCK_NAMES = tuple(BLOCK_SHAPES)


def block_shapes(d: int, d_qk: int, d_F: int) -> dict[str, tuple[int, int]]:
    """Name -> shape of one block's weights for the sizes ``(d, d_QK, d_F)``."""
    return {name: shape(d, d_qk, d_F) for name, shape in BLOCK_SHAPES.items()}


def beta_key(beta: float) -> str:
    """How a residual strength names an entry of a result file: ``"%g" % beta`` (``"0"``,
    ``"0.5"``, ``"1"``), the one format every experiment uses."""
    return f"{float(beta):g}"


# --------------------------------------------------------------------------- checks
def _check_positive_int(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return value


def as_number(name: str, value, requirement: str) -> float:
    """``value`` as a float: a Python or numpy number, or a one-element tensor. Anything else
    (a string, ``None``, a bool) raises a ``ValueError`` that names ``name`` and ``requirement``."""
    if isinstance(value, torch.Tensor) and value.numel() == 1 and value.dtype != torch.bool \
            and not value.is_complex():
        return float(value.detach())
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name} must be {requirement}, got {value!r} ({type(value).__name__})")
    return float(value)


def check_positive(name: str, value) -> float:
    """``value`` as a finite positive float, or a ``ValueError`` that names ``name``."""
    value = as_number(name, value, "a finite positive number")
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be a finite positive number, got {value!r}")
    return value


#: The residual strengths the book's variant is defined for (eq. ``z``).
BETA_RANGE = (0.0, 1.0)


def check_beta(beta, name: str = "beta"):
    """Check a residual strength: a number (or one-element tensor) in ``[0, 1]``, the range on
    which the book defines the beta-variant (eq. ``z``: ``beta = 1`` is the paper's model,
    ``beta = 0`` drops every residual). Returns a number as a float and a tensor unchanged (so
    that it may carry gradients). A tensor under a ``torch.func`` transform passes unread:
    ``vmap`` batches one beta per model, whose values cannot be read there (the models of the
    batch were built, and so checked, one by one)."""
    if isinstance(beta, torch.Tensor) and torch._C._functorch.is_functorch_wrapped_tensor(beta):
        return beta
    lo, hi = BETA_RANGE
    value = as_number(name, beta, f"a number in [{lo:g}, {hi:g}] (the residual strength)")
    if not lo <= value <= hi:  # False for NaN as well
        raise ValueError(f"{name} must be in [{lo:g}, {hi:g}], the range of the beta-variant "
                         f"(1: the paper's model, 0: no residual), got {value!r}")
    return beta if isinstance(beta, torch.Tensor) else value


def check_device(device) -> torch.device:
    """``device`` as a ``torch.device`` that this machine has; a ``ValueError`` names the fix."""
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError):
        lower = device.lower() if isinstance(device, str) else device
        hint = f" (device names are lower case: {lower!r})" if lower != device else ""
        raise ValueError(f"device {device!r} is not a torch device{hint}: use cpu, cuda, cuda:1 or mps") from None
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"device {device!r} asked for, but this torch has no usable CUDA device "
                             f"(torch {torch.__version__}, CUDA build: {torch.version.cuda or 'no'}): "
                             f"use cpu, or install a CUDA build of torch on a machine with a GPU")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise ValueError(f"device {device!r} asked for, but this machine has "
                             f"{torch.cuda.device_count()} CUDA device(s): use cuda:0 .. "
                             f"cuda:{torch.cuda.device_count() - 1}")
    if dev.type == "mps" and not torch.backends.mps.is_available():
        raise ValueError(f"device {device!r} asked for, but MPS is not available here: use cpu")
    return dev


def check_input(X: torch.Tensor, d: int, name: str = "X", *, dtype: torch.dtype | None = None,
                device: torch.device | None = None) -> torch.Tensor:
    """Check that ``X`` is a finite ``(N, n, d)`` (or ``(n, d)``) tensor, of ``dtype`` and on
    ``device`` when these are given (the model's); return it as 3-D."""
    if not isinstance(X, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, got {type(X).__name__}")
    if dtype is not None and X.dtype != dtype:
        raise ValueError(f"{name} has dtype {X.dtype} but the model's parameters are {dtype}: "
                         f"pass {name}.to({dtype}), or build the model with dtype={X.dtype}")
    if device is not None and X.device != device:
        raise ValueError(f"{name} is on {X.device} but the model is on {device}: pass "
                         f"{name}.to({str(device)!r}), or move the model with model.to({str(X.device)!r})")
    if X.dim() == 2:
        X = X.unsqueeze(0)
    if X.dim() != 3:
        raise ValueError(f"{name} must have shape (N, n, d) or (n, d), got {tuple(X.shape)}")
    if X.shape[-1] != d:
        raise ValueError(
            f"{name} has {X.shape[-1]} features in its last dimension but the model has d = {d}: "
            f"shape {tuple(X.shape)}, expected (N, n, {d})"
        )
    if X.shape[0] == 0 or X.shape[1] == 0:
        raise ValueError(f"{name} is empty: shape {tuple(X.shape)}")
    if not torch.isfinite(X).all():
        raise ValueError(f"{name} contains NaN or inf; clean or normalise the input first")
    return X


# --------------------------------------------------------------------------- equations
def attention_scores(X: torch.Tensor, W_Q: torch.Tensor, W_K: torch.Tensor, tau) -> torch.Tensor:
    """Scores ``X W_Q W_K^T X^T / tau`` of eq. ``attn``, shape ``(..., n, n)``."""
    return (X @ W_Q) @ (X @ W_K).transpose(-1, -2) / tau


def attention_weights(X, W_Q, W_K, tau) -> torch.Tensor:
    """Row-wise softmax of the scores, eq. ``attn``: every row is a probability vector."""
    return torch.softmax(attention_scores(X, W_Q, W_K, tau), dim=-1)


def attention(X, W_Q, W_K, W_V, tau) -> torch.Tensor:
    """``Attn(X) = softmax(X W_Q W_K^T X^T / tau) X W_V``, eq. ``attn``."""
    return attention_weights(X, W_Q, W_K, tau) @ (X @ W_V)


def ffn(Z, W_1, W_2, activation: Activation = torch.tanh) -> torch.Tensor:
    """``FFN(Z) = sigma(Z W_1) W_2``, eq. ``ffn``."""
    return activation(Z @ W_1) @ W_2


def block(X, W_Q, W_K, W_V, W_1, W_2, *, beta, tau, activation: Activation = torch.tanh):
    """One block, eqs. ``z`` and ``block``: returns ``(FFN(Z) + beta Z, Z)``, ``Z = Attn(X) + beta X``."""
    Z = attention(X, W_Q, W_K, W_V, tau) + beta * X
    return ffn(Z, W_1, W_2, activation) + beta * Z, Z


def squared_loss(F: torch.Tensor, Y: torch.Tensor) -> torch.Tensor:
    """``Phi = 1/2 ||F - Y||_F^2`` summed over all samples, eq. ``loss``."""
    if F.shape != Y.shape:
        raise ValueError(f"Y has shape {tuple(Y.shape)} but the model output has shape {tuple(F.shape)}")
    return 0.5 * ((F - Y) ** 2).sum()


# --------------------------------------------------------------------------- modules
class ModelOutput(NamedTuple):
    """What :meth:`Transformer.forward` returns with ``return_all=True``."""

    output: torch.Tensor          #: F(X), shape (N, n, d_out)
    Z: list[torch.Tensor]         #: attention-layer outputs Z_l = Attn_l(X_l) + beta X_l, per block
    features: torch.Tensor        #: H, the input of W_U (the last block's output), shape (N, n, d)


class TransformerBlock(nn.Module):
    """Parameters ``W_Q, W_K, W_V, W_1, W_2`` of one block; ``forward`` is :func:`block`."""

    def __init__(self, d: int, d_qk: int, d_F: int, *, dtype=torch.float64, device="cpu"):
        super().__init__()
        for name, shape in block_shapes(d, d_qk, d_F).items():
            self.register_parameter(name, nn.Parameter(torch.zeros(shape, dtype=dtype, device=device)))

    def forward(self, X, *, beta, tau, activation):
        return block(X, self.W_Q, self.W_K, self.W_V, self.W_1, self.W_2,
                     beta=beta, tau=tau, activation=activation)


class OutputMap(nn.Module):
    """Holds ``W_U`` (d x d_out), so that it comes after the blocks in parameter order."""

    def __init__(self, d: int, d_out: int, *, dtype=torch.float64, device="cpu"):
        super().__init__()
        self.W_U = nn.Parameter(torch.zeros(d, d_out, dtype=dtype, device=device))

    def forward(self, H):
        return H @ self.W_U


class Transformer(nn.Module):
    """An L-layer stack of the paper's blocks followed by the output map ``W_U`` (eq. ``model``).

    Parameters are named ``blocks.<l>.W_Q`` ... ``blocks.<l>.W_2`` (block order) and
    ``output.W_U`` (reachable as ``model.W_U``),
    with the paper's shapes (``W_Q, W_K``: d x d_qk; ``W_V``: d x d; ``W_1``: d x d_F;
    ``W_2``: d_F x d; ``W_U``: d x d_out).

    Initialisation (the paper's scale is not public; this is the book's choice): every block
    matrix is i.i.d. Gaussian with standard deviation ``init_std`` (a number, or a mapping from
    parameter name to number), by default ``1/sqrt(fan_in)``; ``W_U`` is Gaussian with std
    ``1/sqrt(d)``, or zero with ``W_U_init="zero"``. The generator is seeded on the CPU in
    float64, so the same seed gives the same weights in every dtype and on every device.
    """

    def __init__(
        self,
        d: int,
        d_qk: int,
        d_F: int,
        d_out: int,
        *,
        n_layers: int = 1,
        tau: float | None = None,
        beta: float = 1.0,
        activation: Activation = torch.tanh,
        init_std: float | Mapping[str, float] | None = None,
        W_U_init: str = "gaussian",
        seed: int = 0,
        dtype: torch.dtype = torch.float64,
        device: str | torch.device = "cpu",
    ):
        super().__init__()
        self.d = _check_positive_int("d", d)
        self.d_qk = _check_positive_int("d_qk", d_qk)
        self.d_F = _check_positive_int("d_F", d_F)
        self.d_out = _check_positive_int("d_out", d_out)
        self.n_layers = _check_positive_int("n_layers", n_layers)
        self.tau = check_positive("tau", math.sqrt(d_qk) if tau is None else tau)
        beta = check_beta(beta)
        self.beta = float(beta.detach()) if isinstance(beta, torch.Tensor) else beta
        if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
            raise ValueError(f"dtype must be a floating-point torch dtype such as torch.float64, got {dtype!r}")
        device = check_device(device)
        if not callable(activation):
            raise ValueError(f"activation must be a callable such as torch.tanh, got {activation!r}")
        self.activation = activation
        if W_U_init not in ("gaussian", "zero"):
            raise ValueError(f"W_U_init must be 'gaussian' or 'zero', got {W_U_init!r}")
        self.blocks = nn.ModuleList(
            TransformerBlock(d, d_qk, d_F, dtype=dtype, device=device) for _ in range(n_layers)
        )
        self.output = OutputMap(d, d_out, dtype=dtype, device=device)
        self.reset_parameters(seed, init_std=init_std, W_U_init=W_U_init)

    # ------------------------------------------------------------------ initialisation
    def reset_parameters(self, seed: int = 0, *, init_std=None, W_U_init: str = "gaussian") -> None:
        """Draw every parameter again from the seeded Gaussian initialisation (see class doc)."""
        gen = torch.Generator().manual_seed(int(seed))
        for name, p in self.named_parameters():
            short = name.rsplit(".", 1)[-1]
            if short == "W_U":
                std = 0.0 if W_U_init == "zero" else 1.0 / math.sqrt(self.d)
            elif init_std is None:
                std = 1.0 / math.sqrt(p.shape[0])
            elif isinstance(init_std, Mapping):
                std = float(init_std.get(short, 1.0 / math.sqrt(p.shape[0])))
            else:
                std = float(init_std)
            if not math.isfinite(std) or std < 0:
                raise ValueError(f"init_std for {short} must be finite and non-negative, got {std!r}")
            draw = torch.randn(p.shape, generator=gen, dtype=torch.float64) * std
            with torch.no_grad():
                p.copy_(draw.to(dtype=p.dtype, device=p.device))

    # ------------------------------------------------------------------ forward
    def forward(self, X: torch.Tensor, *, beta: float | torch.Tensor | None = None,
                return_all: bool = False):
        """``F(X)`` of eq. ``model`` for a batch ``X`` of shape ``(N, n, d)``.

        With ``return_all=True`` it returns a :class:`ModelOutput` that also holds every
        block's attention-layer output ``Z`` and the features ``H`` that enter ``W_U``.
        ``beta`` overrides the model's residual strength for this call; it is checked like the
        constructor's (:func:`check_beta`).
        """
        W_U = self.W_U
        X = check_input(X, self.d, dtype=W_U.dtype, device=W_U.device)
        beta = self.beta if beta is None else check_beta(beta)
        Zs = []
        H = X
        for blk in self.blocks:
            H, Z = blk(H, beta=beta, tau=self.tau, activation=self.activation)
            Zs.append(Z)
        F = self.output(H)
        return ModelOutput(F, Zs, H) if return_all else F

    @property
    def W_U(self) -> nn.Parameter:
        return self.output.W_U

    def loss(self, X: torch.Tensor, Y: torch.Tensor) -> torch.Tensor:
        """``Phi(theta) = 1/2 ||F(X) - Y||^2`` (eq. ``loss``)."""
        return squared_loss(self(X), Y)

    def shapes(self) -> dict[str, tuple[int, ...]]:
        """Parameter name -> shape, in the model's order."""
        return {name: tuple(p.shape) for name, p in self.named_parameters()}

    def extra_repr(self) -> str:
        return (f"d={self.d}, d_qk={self.d_qk}, d_F={self.d_F}, d_out={self.d_out}, "
                f"n_layers={self.n_layers}, tau={self.tau:g}, beta={self.beta:g}")
