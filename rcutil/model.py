"""The paper's Transformer: softmax attention, an FFN, residual strength beta, and W_U.

Equation labels refer to the chapter :ref:`model` of the book.

Single layer, single head, no LayerNorm, input ``X`` of ``n`` tokens by ``d`` features,
parameters used as ``X @ W``:

* attention (eq. ``attn``):   ``Attn(X) = softmax(X W_Q W_K^T X^T / tau) X W_V``,
  row-wise softmax;
* attention-layer output (eq. ``z``): ``Z = Attn(X) + beta X``;
* feed-forward (eq. ``ffn``): ``FFN(Z) = sigma(Z W_1) W_2``;
* block output (eq. ``block``): ``B(X) = FFN(Z) + beta Z``;
* model (eq. ``model``):      ``F(X) = B_L(... B_1(X)) W_U``.

At ``beta = 1`` and ``L = 1`` this is the paper's ``(FFN(Attn(X) + X) + Attn(X) + X)
W_U``; at ``beta = 0`` every residual is gone. The functions below are the equations,
up to the whole forward pass (:func:`transformer`); the ``nn.Module`` classes hold the
parameters, and :class:`Transformer` checks its inputs and output around that one
forward pass. Every equation broadcasts over leading axes, so that the same function
runs B models at once when each weight carries a leading model axis
(:class:`rcutil.train.Stack`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import NamedTuple

import torch
from torch import nn

from . import activations, validate
from .activations import TANH

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
    """How a residual strength names an entry of a result file: ``"%g" % beta``
    (``"0"``, ``"0.5"``, ``"1"``), the one format every experiment uses."""
    return f"{float(beta):g}"


# --------------------------------------------------------------------------- equations
def attention_scores(
    X: torch.Tensor, W_Q: torch.Tensor, W_K: torch.Tensor, tau
) -> torch.Tensor:
    """Scores ``X W_Q W_K^T X^T / tau`` of eq. ``attn``, shape ``(..., n, n)``."""
    return (X @ W_Q) @ (X @ W_K).transpose(-1, -2) / tau


def attention_weights(X, W_Q, W_K, tau) -> torch.Tensor:
    """Row-wise softmax of the scores, eq. ``attn``: every row is a probability
    vector."""
    return torch.softmax(attention_scores(X, W_Q, W_K, tau), dim=-1)


def attention(X, W_Q, W_K, W_V, tau) -> torch.Tensor:
    """``Attn(X) = softmax(X W_Q W_K^T X^T / tau) X W_V``, eq. ``attn``."""
    return attention_weights(X, W_Q, W_K, tau) @ (X @ W_V)


def ffn(Z, W_1, W_2, activation: Activation = TANH) -> torch.Tensor:
    """``FFN(Z) = sigma(Z W_1) W_2``, eq. ``ffn``."""
    return activation(Z @ W_1) @ W_2


def block(X, W_Q, W_K, W_V, W_1, W_2, *, beta, tau, activation: Activation = TANH):
    """One block, eqs. ``z`` and ``block``: returns ``(FFN(Z) + beta Z, Z)``, ``Z =
    Attn(X) + beta X``."""
    Z = attention(X, W_Q, W_K, W_V, tau) + beta * X
    return ffn(Z, W_1, W_2, activation) + beta * Z, Z


class ModelOutput(NamedTuple):
    """What :func:`transformer` returns: ``F(X)``, shape (N, n, d_out); the
    attention-layer outputs ``Z_l = Attn_l(X_l) + beta X_l``, one per block; and the
    features ``H``, the input of ``W_U`` (the last block's output), shape (N, n, d)."""

    output: torch.Tensor
    Z: list[torch.Tensor]
    features: torch.Tensor


def transformer(
    X, W: Mapping[str, torch.Tensor], *, beta, tau, activation: Activation = TANH
) -> ModelOutput:
    """``F(X) = B_L(... B_1(X)) W_U``, eq. ``model``: the one forward pass.

    ``W`` maps the parameter names of :class:`Transformer` (``blocks.<l>.W_Q`` ...
    ``blocks.<l>.W_2``, ``output.W_U``) to the weights. With a leading model axis on
    every weight, shape (B, 1, ., .), and ``beta`` of shape (B, 1, 1, 1), it is the
    forward pass of B models at once, on shared samples ``X`` (N, n, d) or on their own
    (B, N, n, d).
    """
    H, Zs = X, []
    for layer in range(sum(name.endswith(".W_Q") for name in W)):  # one W_Q a block
        weights = (W[f"blocks.{layer}.{name}"] for name in BLOCK_NAMES)
        H, Z = block(H, *weights, beta=beta, tau=tau, activation=activation)
        Zs.append(Z)
    return ModelOutput(H @ W["output.W_U"], Zs, H)


def squared_loss(F: torch.Tensor, Y: torch.Tensor) -> torch.Tensor:
    """``Phi = 1/2 ||F - Y||_F^2`` summed over all samples, eq. ``loss``."""
    if F.shape != Y.shape:
        raise ValueError(
            f"Y has shape {tuple(Y.shape)} but the model output has shape "
            f"{tuple(F.shape)}"
        )
    return 0.5 * ((F - Y) ** 2).sum()


# --------------------------------------------------------------------------- modules
class TransformerBlock(nn.Module):
    """Holds ``W_Q, W_K, W_V, W_1, W_2`` of one block (eqs. ``attn`` to ``block``)."""

    def __init__(
        self, d: int, d_qk: int, d_F: int, *, dtype=torch.float64, device="cpu"
    ):
        super().__init__()
        for name, shape in block_shapes(d, d_qk, d_F).items():
            self.register_parameter(
                name, nn.Parameter(torch.zeros(shape, dtype=dtype, device=device))
            )


class OutputMap(nn.Module):
    """Holds ``W_U`` (d x d_out), so that it comes after the blocks in parameter
    order."""

    def __init__(self, d: int, d_out: int, *, dtype=torch.float64, device="cpu"):
        super().__init__()
        self.W_U = nn.Parameter(torch.zeros(d, d_out, dtype=dtype, device=device))


class Transformer(nn.Module):
    """An L-layer stack of the paper's blocks followed by the output map ``W_U`` (eq.
    ``model``).

    Parameters are named ``blocks.<l>.W_Q`` ... ``blocks.<l>.W_2`` (block order) and
    ``output.W_U`` (reachable as ``model.W_U``),
    with the paper's shapes (``W_Q, W_K``: d x d_qk; ``W_V``: d x d; ``W_1``: d x d_F;
    ``W_2``: d_F x d; ``W_U``: d x d_out).

    Initialisation (the paper's scale is not public; this is the book's choice): every
    block matrix is i.i.d. Gaussian with standard deviation ``init_std`` (a number, or a
    mapping from parameter name to number), by default ``1/sqrt(fan_in)``; ``W_U`` is
    Gaussian with std ``1/sqrt(d)``, or zero with ``W_U_init="zero"``. The generator is
    seeded on the CPU in float64, so the same seed gives the same weights in every dtype
    and on every device.
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
        activation: activations.Activation | str | Activation = TANH,
        init_std: float | Mapping[str, float] | None = None,
        W_U_init: str = "gaussian",
        seed: int = 0,
        dtype: torch.dtype = torch.float64,
        device: str | torch.device = "cpu",
    ):
        super().__init__()
        self.d = validate.positive_int("d", d)
        self.d_qk = validate.positive_int("d_qk", d_qk)
        self.d_F = validate.positive_int("d_F", d_F)
        self.d_out = validate.positive_int("d_out", d_out)
        self.n_layers = validate.positive_int("n_layers", n_layers)
        self.tau = validate.positive("tau", math.sqrt(d_qk) if tau is None else tau)
        beta = validate.beta(beta)
        self.beta = float(beta.detach()) if isinstance(beta, torch.Tensor) else beta
        if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
            raise ValueError(
                "dtype must be a floating-point torch dtype such as torch.float64, "
                f"got {dtype!r}"
            )
        device = validate.device(device)
        self.activation = activations.get(activation)
        if W_U_init not in ("gaussian", "zero"):
            raise ValueError(f"W_U_init must be 'gaussian' or 'zero', got {W_U_init!r}")
        self.blocks = nn.ModuleList(
            TransformerBlock(d, d_qk, d_F, dtype=dtype, device=device)
            for _ in range(n_layers)
        )
        self.output = OutputMap(d, d_out, dtype=dtype, device=device)
        self.reset_parameters(seed, init_std=init_std, W_U_init=W_U_init)

    # ------------------------------------------------------------------ initialisation
    def reset_parameters(
        self, seed: int = 0, *, init_std=None, W_U_init: str = "gaussian"
    ) -> None:
        """Draw every parameter again from the seeded Gaussian initialisation (see class
        doc)."""
        gen = torch.Generator().manual_seed(validate.seed(seed))
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
                raise ValueError(
                    f"init_std for {short} must be finite and non-negative, got {std!r}"
                )
            draw = torch.randn(p.shape, generator=gen, dtype=torch.float64) * std
            with torch.no_grad():
                p.copy_(draw.to(dtype=p.dtype, device=p.device))

    # ------------------------------------------------------------------ forward
    def forward(
        self,
        X: torch.Tensor,
        *,
        beta: float | torch.Tensor | None = None,
        return_all: bool = False,
    ):
        """``F(X)`` of eq. ``model`` (:func:`transformer`) for a batch ``X`` of shape
        ``(N, n, d)``.

        With ``return_all=True`` it returns the whole :class:`ModelOutput`: also every
        block's attention-layer output ``Z`` and the features ``H`` that enter ``W_U``.
        ``beta`` overrides the model's residual strength for this call; it is checked
        like the constructor's (:func:`rcutil.validate.beta`). A finite ``X`` whose
        output is not finite (inputs or weights too large for the dtype) is refused.
        """
        W_U = self.W_U
        X = validate.inputs(X, self.d, dtype=W_U.dtype, device=W_U.device)
        beta = self.beta if beta is None else validate.beta(beta)
        out = transformer(
            X,
            dict(self.named_parameters()),
            beta=beta,
            tau=self.tau,
            activation=self.activation,
        )
        validate.finite_output(out.output, X, self.named_parameters())
        return out if return_all else out.output

    @property
    def W_U(self) -> nn.Parameter:
        return self.output.W_U

    def loss(self, X: torch.Tensor, Y: torch.Tensor) -> torch.Tensor:
        """``Phi(theta) = 1/2 ||F(X) - Y||^2`` (eq. ``loss``); a loss that is not
        finite is refused, naming a NaN or inf in ``Y`` or the largest residual."""
        F = self(X)
        loss = squared_loss(F, Y)
        validate.finite_loss(loss, F, Y)
        return loss

    def shapes(self) -> dict[str, tuple[int, ...]]:
        """Parameter name -> shape, in the model's order."""
        return {name: tuple(p.shape) for name, p in self.named_parameters()}

    def extra_repr(self) -> str:
        return (
            f"d={self.d}, d_qk={self.d_qk}, d_F={self.d_F}, d_out={self.d_out}, "
            f"n_layers={self.n_layers}, tau={self.tau:g}, beta={self.beta:g}, "
            f"activation={self.activation.name}"
        )
