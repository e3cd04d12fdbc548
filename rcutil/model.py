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
W_U``; at ``beta = 0`` every residual is gone. The functions below are the equations;
the ``nn.Module`` classes hold the parameters and call them, so that ``torch.func`` can
use either form.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import NamedTuple

import numpy as np
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


def squared_loss(F: torch.Tensor, Y: torch.Tensor) -> torch.Tensor:
    """``Phi = 1/2 ||F - Y||_F^2`` summed over all samples, eq. ``loss``."""
    if F.shape != Y.shape:
        raise ValueError(
            f"Y has shape {tuple(Y.shape)} but the model output has shape "
            f"{tuple(F.shape)}"
        )
    return 0.5 * ((F - Y) ** 2).sum()


# --------------------------------------------------------------------------- modules
class ModelOutput(NamedTuple):
    """What :meth:`Transformer.forward` returns with ``return_all=True``."""

    output: torch.Tensor  #: F(X), shape (N, n, d_out)
    Z: list[
        torch.Tensor
    ]  #: attention-layer outputs Z_l = Attn_l(X_l) + beta X_l, per block
    features: (
        torch.Tensor
    )  #: H, the input of W_U (the last block's output), shape (N, n, d)


class TransformerBlock(nn.Module):
    """Parameters ``W_Q, W_K, W_V, W_1, W_2`` of one block; ``forward`` is
    :func:`block`."""

    def __init__(
        self, d: int, d_qk: int, d_F: int, *, dtype=torch.float64, device="cpu"
    ):
        super().__init__()
        for name, shape in block_shapes(d, d_qk, d_F).items():
            self.register_parameter(
                name, nn.Parameter(torch.zeros(shape, dtype=dtype, device=device))
            )

    def forward(self, X, *, beta, tau, activation):
        return block(
            X,
            self.W_Q,
            self.W_K,
            self.W_V,
            self.W_1,
            self.W_2,
            beta=beta,
            tau=tau,
            activation=activation,
        )


class OutputMap(nn.Module):
    """Holds ``W_U`` (d x d_out), so that it comes after the blocks in parameter
    order."""

    def __init__(self, d: int, d_out: int, *, dtype=torch.float64, device="cpu"):
        super().__init__()
        self.W_U = nn.Parameter(torch.zeros(d, d_out, dtype=dtype, device=device))

    def forward(self, H):
        return H @ self.W_U


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
        """``F(X)`` of eq. ``model`` for a batch ``X`` of shape ``(N, n, d)``.

        With ``return_all=True`` it returns a :class:`ModelOutput` that also holds every
        block's attention-layer output ``Z`` and the features ``H`` that enter ``W_U``.
        ``beta`` overrides the model's residual strength for this call; it is checked
        like the constructor's (:func:`rcutil.validate.beta`).
        """
        W_U = self.W_U
        X = validate.inputs(X, self.d, dtype=W_U.dtype, device=W_U.device)
        beta = self.beta if beta is None else validate.beta(beta)
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
        return (
            f"d={self.d}, d_qk={self.d_qk}, d_F={self.d_F}, d_out={self.d_out}, "
            f"n_layers={self.n_layers}, tau={self.tau:g}, beta={self.beta:g}, "
            f"activation={self.activation.name}"
        )


# ------------------------------------------------------------- closed-form gradient
#: The weights of the one-layer model, in the paper's order, as the closed-form gradient
#: names them (:class:`Transformer` calls them ``blocks.0.W_Q`` ... ``output.W_U``).
WEIGHTS = (*BLOCK_NAMES, "W_U")
#: Working set of one chunk of samples in :func:`loss_and_gradient`: a chunk's
#: intermediates, for all models, stay in cache.
CHUNK_BYTES = 6 << 20


class Stack(NamedTuple):
    """B one-layer models side by side: each weight with a leading model axis, one
    ``beta`` per model, and what the models share (temperature, activation)."""

    W: dict[str, torch.Tensor]  #: name of :data:`WEIGHTS` -> (B, ., .)
    beta: torch.Tensor  #: (B,)
    tau: float
    activation: activations.Activation

    def select(self, index) -> Stack:
        """The models ``index`` (a slice or a list of model numbers), as a stack."""
        return self._replace(
            W={k: v[index] for k, v in self.W.items()}, beta=self.beta[index]
        )


def stack(models) -> Stack:
    """The one-layer :class:`Transformer` ``models``, stacked (weights detached and
    copied). They must agree in sizes, ``tau``, activation, dtype and device."""
    models = list(models)
    if not models:
        raise ValueError("no models to stack: pass at least one Transformer")
    first = models[0]
    for m in models:
        if m.n_layers != 1:
            raise ValueError(
                f"the closed-form gradient is written for one layer, got "
                f"n_layers = {m.n_layers}: train deeper models with "
                f"autograd (rcutil.train.gradient_descent)"
            )
        if (m.shapes(), m.tau, m.activation, m.W_U.dtype, m.W_U.device) != (
            first.shapes(),
            first.tau,
            first.activation,
            first.W_U.dtype,
            first.W_U.device,
        ):
            raise ValueError(
                "stacked models must share sizes, tau, activation, dtype "
                "and device: build them from the same settings"
            )
    names = {"W_U": "output.W_U", **{w: f"blocks.0.{w}" for w in BLOCK_NAMES}}
    W = {
        w: torch.stack([m.get_parameter(names[w]).detach() for m in models]).clone()
        for w in WEIGHTS
    }
    beta = torch.tensor(
        [m.beta for m in models], dtype=first.W_U.dtype, device=first.W_U.device
    )
    return Stack(W, beta, first.tau, first.activation)


def batched_loss(s: Stack, X: torch.Tensor, Y: torch.Tensor):
    """``Phi`` (eq. ``model-loss``) of every model of the stack, shape (B,), and its
    attention-layer outputs ``Z`` (B, N, n, d): :func:`block` with a leading model axis
    on every weight, broadcast over the shared samples ``X`` (N, n, d). Differentiable:
    the reference of :func:`loss_and_gradient`, and the gradient off the CPU."""
    H, Z = block(
        X,
        *(s.W[k][:, None] for k in BLOCK_NAMES),
        beta=s.beta.view(-1, 1, 1, 1),
        tau=s.tau,
        activation=s.activation,
    )
    return 0.5 * ((H @ s.W["W_U"][:, None] - Y) ** 2).sum(dim=(1, 2, 3)), Z


class LossGradient(NamedTuple):
    """What :func:`loss_and_gradient` returns for a stack of B models."""

    loss: torch.Tensor  #: (B,) Phi of every model
    grad: dict[str, torch.Tensor]  #: name of :data:`WEIGHTS` -> (B, ., .)
    Z: torch.Tensor  #: (B, N n, d) the stacked attention-layer outputs


def autograd_loss_and_gradient(
    s: Stack, X: torch.Tensor, Y: torch.Tensor
) -> LossGradient:
    """:func:`batched_loss` and its gradient by automatic differentiation (any
    device)."""
    W = {k: v.detach().requires_grad_() for k, v in s.W.items()}
    loss, Z = batched_loss(s._replace(W=W), X, Y)
    grads = torch.autograd.grad(loss.sum(), list(W.values()))
    return LossGradient(
        loss.detach(),
        dict(zip(W, grads)),
        Z.detach().reshape(len(s.beta), -1, Z.shape[-1]),
    )


def _mm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``a @ b`` (batched) through numpy's BLAS on the same memory: on the small float64
    matrices of one layer it runs several times faster than ``torch.bmm`` on the CPU."""
    return torch.from_numpy(np.matmul(a.numpy(), b.numpy()))


def loss_and_gradient(
    s: Stack, X: torch.Tensor, Y: torch.Tensor, *, chunk_bytes: int = CHUNK_BYTES
) -> LossGradient:
    """``Phi`` (eq. ``model-loss``) of every model of the stack and its gradient in
    closed form (eqs. ``model-forward`` and ``model-grad``), on the CPU, for the samples
    ``X`` (N, n, d) and targets ``Y`` (N, n, d_out) that the models share.

    The samples go in chunks of about ``chunk_bytes`` of intermediates (sums over
    samples only change order). Any ``beta`` in [0, 1], any activation with a
    ``derivative``, any ``d_out``; one layer (see :func:`stack`).
    """
    act = s.activation
    if act.derivative is None:
        raise ValueError(
            f"activation {act.name!r} has no derivative, which the "
            f"closed-form gradient needs: use autograd_loss_and_gradient, "
            f"or an activation of rcutil.activations"
        )
    if X.device.type != "cpu":
        raise ValueError(
            f"the closed-form gradient runs on the CPU, X is on "
            f"{X.device}: use autograd_loss_and_gradient there"
        )
    (N, n, d), (B, _, d_F), d_out = X.shape, s.W["W_1"].shape, s.W["W_U"].shape[-1]
    if Y.shape != (N, n, d_out):
        raise ValueError(
            f"Y has shape {tuple(Y.shape)}, expected {(N, n, d_out)} (N, n, d_out)"
        )
    W = {k: v.contiguous() for k, v in s.W.items()}
    W_U_T, W_2_W_U_T = W["W_U"].mT.contiguous(), (W["W_2"] @ W["W_U"]).mT.contiguous()
    b = s.beta.view(B, 1, 1)
    # M = W_Q W_K^T / tau of every model, side by side: (d, B d)
    M = (W["W_Q"] @ W["W_K"].mT / s.tau).permute(1, 0, 2).reshape(d, B * d)
    sums = {
        "RR": X.new_zeros(B),
        "M": torch.zeros_like(M),
        "G^T R": X.new_zeros(B, d_F, d_out),
        **{k: torch.zeros_like(W[k]) for k in ("W_V", "W_1", "W_U")},
    }
    Z = X.new_empty(B, N * n, d)
    size = max(1, chunk_bytes // (8 * B * n * (3 * n + 5 * d + 4 * d_F + d_out)))
    for a in range(0, N, size):
        Xc = X[a : a + size].contiguous()
        Nc = Xc.shape[0]
        X2 = Xc.reshape(Nc * n, d)
        # forward, eq. (model-forward). Attention is kept transposed and side by side,
        # (Nc, n, n B) with entry (j, i B + b) for key j, query i, model b, so that a
        # product with X_p is one product for all models; token-wise values are
        # (B, Nc n, .)
        S_T = _mm(Xc, _mm(X2, M).view(Nc, n * B, d).mT)  # S_p^T = X_p M^T X_p^T
        P_T = torch.softmax(S_T, dim=1)  # P_p^T: rows of P_p sum to 1
        PX = _mm(P_T.mT, Xc)  # P_p X_p, (Nc, n B, d)
        PXm = PX.view(Nc * n, B, d).transpose(0, 1)  # the same, (B, Nc n, d)
        Zc = _mm(PXm, W["W_V"]).addcmul_(b, X2)  # Z = P X W_V + beta X
        U = _mm(Zc, W["W_1"])  # U = Z W_1
        G = act(U)  # G = sigma(U)
        H = _mm(G, W["W_2"]).addcmul_(b, Zc)  # H = G W_2 + beta Z
        R = _mm(H, W["W_U"]).sub_(
            Y[a : a + size].reshape(Nc * n, d_out)
        )  # R = H W_U - Y
        # gradient, eq. (model-grad): dH = R W_U^T, so dH W_2^T = R (W_2 W_U)^T and
        # G^T dH = (G^T R) W_U^T, products over d_out columns instead of d
        sums["RR"] += (R * R).sum(dim=(1, 2))
        sums["W_U"] += _mm(H.mT, R)  # sum_p H_p^T R_p
        sums["G^T R"] += _mm(G.mT, R)
        sigma_prime = 1 - G * G if act is activations.TANH else act.derivative(U)
        dU = _mm(R, W_2_W_U_T).mul_(sigma_prime)  # dU = (dH W_2^T) o sigma'(U)
        sums["W_1"] += _mm(Zc.mT, dU)  # sum_p Z_p^T dU_p
        dZ = _mm(dU, W["W_1"].mT).add_(b * _mm(R, W_U_T))  # dZ = dU W_1^T + beta dH
        sums["W_V"] += _mm(PXm.mT, dZ)  # sum_p (P_p X_p)^T dZ_p
        dZV = _mm(dZ, W["W_V"].mT).transpose(0, 1).reshape(Nc, n * B, d)  # dZ W_V^T
        dP_T = _mm(Xc, dZV.mT)  # dP_p^T = X_p W_V dZ_p^T
        dP_T -= (dZV * PX).sum(dim=-1).unsqueeze(1)  # rowsum(P o dP) = <dZ W_V^T, P X>
        dS_T = dP_T.mul_(P_T)  # softmax backward
        sums["M"] += _mm(X2.T.contiguous(), _mm(dS_T.mT, Xc).view(Nc * n, B * d))
        Z[:, a * n : (a + Nc) * n] = Zc
    grad_M = sums["M"].view(d, B, d).permute(1, 0, 2)  # sum_p X_p^T dS_p X_p
    grad = {
        "W_Q": grad_M @ W["W_K"] / s.tau,
        "W_K": grad_M.mT @ W["W_Q"] / s.tau,
        "W_V": sums["W_V"],
        "W_1": sums["W_1"],
        "W_2": sums["G^T R"] @ W_U_T,
        "W_U": sums["W_U"],
    }
    return LossGradient(0.5 * sums["RR"], grad, Z)
