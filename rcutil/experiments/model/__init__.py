"""The checks of the chapter on the model, as numbers (``python -m rcutil model``).

* autograd gradients against central finite differences, per parameter block (float64);
* the residual-strength variant against the paper's formulas written out at beta = 1 and
  0;
* a short full-batch GD run at a small step, for several beta, whose loss must fall at
  every step.

Its checks and claim are in :mod:`rcutil.experiments.model.verdicts`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from ... import profiles, results
from ...model import Transformer, attention, ffn, squared_loss
from ...train import gradient_descent


@dataclass(frozen=True, kw_only=True)
class Settings(profiles.Settings):
    """The sizes of the chapter's problem and of its GD runs."""

    N: int  #: samples
    n: int  #: tokens per sample
    d: int  #: width of a token
    d_qk: int  #: width of queries and keys
    d_F: int  #: width of the FFN
    d_out: int  #: width of the output
    steps: int  #: GD steps per beta
    mu: float  #: GD step size
    betas: tuple[float, ...]  #: residual strengths of the GD runs
    seed: int
    fd_eps: float  #: step of the central differences


CI = Settings(
    N=4, n=6, d=8, d_qk=4, d_F=16, d_out=2,
    steps=60, mu=2e-3, betas=(0.0, 0.5, 1.0), seed=0, fd_eps=1e-6,
)  # fmt: skip
BOOK = replace(CI, N=8, n=8, d=16, d_qk=8, d_F=32, steps=300, mu=1e-3)
PAPER = replace(CI, N=16, n=16, d=64, d_qk=16, d_F=128, d_out=4, steps=1000, mu=2e-4)
SETTINGS = {"ci": CI, "book": BOOK, "paper": PAPER}


def make_problem(
    settings: Settings, *, beta: float = 1.0, device="cpu", dtype=torch.float64
):
    """A model and a regression problem ``(X, Y)`` of the sizes in ``settings``, all
    from its ``seed``."""
    s = settings
    gen = torch.Generator().manual_seed(s.seed)
    X = torch.randn(s.N, s.n, s.d, generator=gen, dtype=torch.float64)
    Y = torch.randn(s.N, s.n, s.d_out, generator=gen, dtype=torch.float64)
    model = Transformer(
        s.d, s.d_qk, s.d_F, s.d_out, beta=beta, seed=s.seed, dtype=dtype, device=device
    )
    return model, X.to(device=device, dtype=dtype), Y.to(device=device, dtype=dtype)


def paper_formula(model: Transformer, X: torch.Tensor, beta: float) -> torch.Tensor:
    """The paper's single-layer formula written out term by term (no shared code path).

    ``beta = 1``: ``(FFN(Attn(X) + X) + Attn(X) + X) W_U``; ``beta = 0``: ``FFN(Attn(X))
    W_U``; otherwise ``(FFN(Attn(X) + beta X) + beta (Attn(X) + beta X)) W_U``.
    """
    b = model.blocks[0]
    A = attention(X, b.W_Q, b.W_K, b.W_V, model.tau)
    if beta == 1.0:
        out = ffn(A + X, b.W_1, b.W_2, model.activation) + A + X
    elif beta == 0.0:
        out = ffn(A, b.W_1, b.W_2, model.activation)
    else:
        out = ffn(A + beta * X, b.W_1, b.W_2, model.activation) + beta * (A + beta * X)
    return out @ model.W_U


def finite_difference_errors(model: Transformer, X, Y, eps: float) -> dict[str, float]:
    """Per block: max |autograd - central difference| / max |autograd| of dPhi/dW over
    all entries."""
    loss = model.loss(X, Y)
    names = [n for n, _ in model.named_parameters()]
    grads = dict(zip(names, torch.autograd.grad(loss, list(model.parameters()))))
    errors = {}
    with torch.no_grad():
        for name, p in model.named_parameters():
            fd = torch.zeros_like(p)
            flat, fd_flat = p.view(-1), fd.view(-1)
            for i in range(flat.numel()):
                old = flat[i].item()
                flat[i] = old + eps
                up = model.loss(X, Y).item()
                flat[i] = old - eps
                down = model.loss(X, Y).item()
                flat[i] = old
                fd_flat[i] = (up - down) / (2 * eps)
            g = grads[name]
            errors[name] = (
                (g - fd).abs().max() / g.abs().max().clamp_min(1e-300)
            ).item()
    return errors


def gradcheck_blocks(model: Transformer, X, Y, names=None) -> dict[str, bool]:
    """``torch.autograd.gradcheck`` of Phi as a function of each parameter block alone
    (of the blocks in ``names``, default all)."""
    out = {}
    for name, p in model.named_parameters():
        if names is not None and name not in names:
            continue

        def phi(W, name=name):
            params = {
                n: (W if n == name else q.detach()) for n, q in model.named_parameters()
            }
            return squared_loss(torch.func.functional_call(model, params, (X,)), Y)

        out[name] = bool(
            torch.autograd.gradcheck(phi, (p.detach().clone().requires_grad_(True),))
        )
    return out


@dataclass
class GDRun:
    """Full-batch GD at one residual strength: per iterate, the loss, the extreme
    singular values of the stacked attention-layer output ``Z_t`` and the gradient
    norm."""

    beta: float
    loss: list[results.Finite]  #: GD stops on a loss that is not (TrainingDiverged)
    sigma_min: list[float]
    sigma_max: list[float]
    grad_norm: list[float]

    @property
    def max_rate(self) -> float:
        """The largest one-step ratio ``Phi(theta_{t+1}) / Phi(theta_t)``."""
        return max(b / a for a, b in zip(self.loss, self.loss[1:]))


@dataclass
class Variant:
    """The model at one ``beta`` against :func:`paper_formula`: largest absolute
    difference."""

    beta: float
    max_abs_diff: float


@dataclass
class Result(results.Result):
    """The chapter's numbers: gradient checks per parameter block (by name), the
    residual-strength variant per ``beta``, and GD per ``beta``."""

    settings: Settings
    shapes: dict[str, list[int]]
    finite_difference_rel_error: dict[str, float]
    gradcheck: dict[str, bool]
    variants: list[Variant]
    gd: list[GDRun]


def run(settings: Settings, *, device: str = "cpu", progress: bool = True) -> Result:
    """Every check of the model chapter for the profile's sizes."""
    model, X, Y = make_problem(settings, device=device)
    with torch.no_grad():
        variants = [
            Variant(
                beta,
                (model(X, beta=beta) - paper_formula(model, X, beta))
                .abs()
                .max()
                .item(),
            )
            for beta in (0.0, 0.5, 1.0)
        ]
    gd = []
    for beta in settings.betas:
        m, X_, Y_ = make_problem(settings, beta=beta, device=device)
        h = gradient_descent(
            m,
            X_,
            Y_,
            mu=settings.mu,
            steps=settings.steps,
            progress=progress,
            desc=f"GD beta={beta:g}",
        )
        gd.append(GDRun(beta, h.loss, h.sigma_min, h.sigma_max, h.grad_norm))
    return Result(
        settings=settings,
        shapes={k: list(v) for k, v in model.shapes().items()},
        finite_difference_rel_error=finite_difference_errors(
            model, X, Y, settings.fd_eps
        ),
        gradcheck=gradcheck_blocks(model, X, Y),
        variants=variants,
        gd=gd,
    )
