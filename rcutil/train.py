"""Full-batch gradient descent with a constant step, the paper's plain GD.

``theta_{t+1} = theta_t - mu grad Phi(theta_t)`` (eq. ``gd`` of the book), where
``Phi = 1/2 ||F(X) - Y||^2`` is summed over the whole training set.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field

import numpy as np
import torch

from . import validate
from .linalg import singular_values
from .progress import steps as loop


class TrainingDiverged(FloatingPointError):
    """Raised when the loss or a gradient becomes NaN or inf during training."""


@dataclass
class History:
    """What :func:`gradient_descent` records, one entry per iterate ``t = 0 .. steps``.

    ``sigma_min`` and ``sigma_max`` are those of the stacked ``(N n) x d``
    attention-layer output ``Z_t`` of the last block (for one layer, the paper's ``Z``);
    ``grad_norm`` is the Euclidean norm of the full gradient ``grad Phi(theta_t)``;
    ``observed`` holds what the ``observe`` argument of :func:`gradient_descent`
    returned, one list per name.
    """

    step_size: float
    loss: list[float] = field(default_factory=list)
    sigma_min: list[float] = field(default_factory=list)
    sigma_max: list[float] = field(default_factory=list)
    grad_norm: list[float] = field(default_factory=list)
    observed: dict[str, list[float]] = field(default_factory=dict)

    def rates(self) -> list[float]:
        """Per-step contraction factors ``Phi_{t+1} / Phi_t``."""
        return [b / a for a, b in zip(self.loss[:-1], self.loss[1:])]

    def to_dict(self) -> dict:
        return asdict(self)


def _check_targets(model, X, Y):
    if not isinstance(Y, torch.Tensor):
        raise ValueError(f"Y must be a torch.Tensor, got {type(Y).__name__}")
    if Y.dim() == 2:
        Y = Y.unsqueeze(0)
    expected = (X.shape[0], X.shape[1], model.d_out)
    if tuple(Y.shape) != expected:
        raise ValueError(
            f"Y has shape {tuple(Y.shape)}, expected {expected} (N, n, d_out)"
        )
    if Y.dtype != X.dtype or Y.device != X.device:
        raise ValueError(
            f"Y is {Y.dtype} on {Y.device} but X is {X.dtype} on {X.device}: pass "
            f"Y.to(X) so that both match the model"
        )
    if not torch.isfinite(Y).all():
        raise ValueError("Y contains NaN or inf")
    return Y


def gradient_descent(
    model,
    X: torch.Tensor,
    Y: torch.Tensor,
    *,
    mu: float,
    steps: int,
    progress: bool = False,
    desc: str = "GD",
    observe: Callable[[object], Mapping[str, float]] | None = None,
) -> History:
    """Run ``steps`` steps of full-batch GD at the constant step ``mu`` (eq. ``gd``), in
    place.

    At every iterate it records the loss, ``sigma_min(Z_t)``, ``sigma_max(Z_t)`` and
    ``||grad Phi(theta_t)||``; ``observe(out)``, if given, is called there too with the
    forward pass (a :class:`~rcutil.model.ModelOutput` at ``theta_t``) and returns name
    -> number to record in ``History.observed``. If the loss or the gradient stops being
    finite it raises :class:`TrainingDiverged`, naming the step and suggesting a smaller
    ``mu``.
    """
    from .model import squared_loss  # local: keeps the import graph flat

    mu = validate.positive("mu (the step size)", mu)
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
        raise ValueError(f"steps must be a non-negative integer, got {steps!r}")
    W_U = model.W_U
    X = validate.inputs(X, model.d, dtype=W_U.dtype, device=W_U.device)
    Y = _check_targets(model, X, Y)
    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        raise ValueError(
            "every parameter of the model is frozen (requires_grad=False), so gradient "
            "descent has nothing to train: unfreeze some, e.g. "
            "model.requires_grad_(True)"
        )
    hist = History(step_size=mu)
    for t in loop(steps + 1, desc=desc, unit="GD step", progress=progress):
        out = model(X, return_all=True)
        loss = squared_loss(out.output, Y)
        grads = torch.autograd.grad(loss, params)
        gnorm = torch.sqrt(sum((g.detach() ** 2).sum() for g in grads))
        if not (torch.isfinite(loss) and torch.isfinite(gnorm)):
            raise TrainingDiverged(
                f"gradient descent diverged at step {t}: loss = {loss.item()!r}, "
                f"gradient norm = {gnorm.item()!r} with mu = {mu:g}. "
                f"Use a smaller step (for example mu = {mu / 10:g})."
            )
        s = singular_values(out.Z[-1])
        hist.loss.append(loss.item())
        hist.sigma_min.append(s[-1].item())
        hist.sigma_max.append(s[0].item())
        hist.grad_norm.append(gnorm.item())
        if observe is not None:
            with torch.no_grad():
                for name, value in observe(out).items():
                    hist.observed.setdefault(name, []).append(float(value))
        if t == steps:
            break
        with torch.no_grad():
            for p, g in zip(params, grads):
                p.sub_(mu * g)
    return hist


# ---------------------------------------------------------------- many models at once
@dataclass
class BatchedHistory:
    """What :func:`batched_gradient_descent` records for B models, one column per
    iterate ``t = 0 .. steps``: ``loss``, ``sigma_min`` and ``sigma_max`` of each
    model's stacked ``(N n) x d`` attention-layer output ``Z_t``, (B, steps + 1) arrays;
    ``observed_at``, the iterates where ``observe`` was called, and ``observed``, name
    -> array with one column per such iterate; ``final``, the stack at the last iterate.
    """

    step_size: np.ndarray
    loss: np.ndarray
    sigma_min: np.ndarray
    sigma_max: np.ndarray
    observed_at: list[int]
    observed: dict[str, np.ndarray]
    final: object


def _batched_step(X: torch.Tensor):
    """The loss and gradient of a stack: closed form on the CPU, autograd elsewhere."""
    from .model import autograd_loss_and_gradient, loss_and_gradient

    return loss_and_gradient if X.device.type == "cpu" else autograd_loss_and_gradient


def _check_finite(loss: torch.Tensor, t: int, stack, step: str, setting: str) -> None:
    """:class:`TrainingDiverged` naming the models whose loss is not finite at step
    ``t``."""
    if not torch.isfinite(loss).all():
        bad = torch.nonzero(~torch.isfinite(loss)).flatten().tolist()
        raise TrainingDiverged(
            f"training diverged at step {t} for models {bad} (beta "
            f"{[round(x, 4) for x in stack.beta[bad].tolist()]}, {step}): lower "
            f"{setting}, for example halve it"
        )


def _steps_count(steps) -> int:
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
        raise ValueError(f"steps must be a non-negative integer, got {steps!r}")
    return steps


def batched_gradient_descent(
    stack,
    X: torch.Tensor,
    Y: torch.Tensor,
    *,
    mu,
    steps: int,
    observe: Callable[[torch.Tensor, object], Mapping] | None = None,
    observe_every: int | None = None,
    progress: bool = False,
    desc: str = "GD",
    setting: str = "mu",
) -> BatchedHistory:
    """Full-batch GD (eq. ``gd``) of the B one-layer models of ``stack`` (a
    :class:`rcutil.model.Stack`) on the samples they share, model ``b`` at its own
    constant step ``mu[b]`` (``mu``: one number, or B). On the CPU a step is the
    closed-form :func:`rcutil.model.loss_and_gradient`, elsewhere its autograd twin.

    ``observe(Z, stack)``, if given, is called with ``Z_t`` (B, N n, d) and the stack at
    ``theta_t`` every ``observe_every`` iterates and at the last, and returns name ->
    array (one value per model). The steps run in segments between those iterates, so
    that the estimate times the observations. A loss that stops being finite raises
    :class:`TrainingDiverged` naming the models and telling to lower ``setting``.
    """
    B, steps = len(stack.beta), _steps_count(steps)
    mu = torch.as_tensor(mu, dtype=stack.beta.dtype, device=stack.beta.device)
    mu = mu.expand(B) if mu.dim() == 0 else mu
    if mu.shape != (B,):
        raise ValueError(
            f"mu must be one step size or one per model ({B}), got {tuple(mu.shape)}"
        )
    for b, m in enumerate(mu.tolist()):
        validate.positive(f"mu of model {b} (its step size)", m)
    every = validate.positive_int("observe_every", observe_every or steps + 1)
    starts = sorted(set(range(0, steps + 1, every)) | {steps})
    segments = [range(a, b) for a, b in zip(starts, starts[1:] + [steps + 1])]
    step, hist = (
        _batched_step(X),
        {
            k: np.full((B, steps + 1), np.nan)
            for k in ("loss", "sigma_min", "sigma_max")
        },
    )
    observed: dict[str, list] = {}
    mu_text = f"mu {[f'{m:.3g}' for m in mu.tolist()]}"
    s = stack._replace(W={k: v.detach().clone() for k, v in stack.W.items()})
    for segment in loop(
        segments,
        desc=f"{desc}, segments",
        unit="segment",
        progress=progress and len(segments) > 1,
    ):
        for t in loop(segment, desc=desc, unit="GD step", progress=progress):
            loss, grad, Z = step(s, X, Y)
            _check_finite(loss, t, s, mu_text, setting)
            sv = torch.linalg.svdvals(torch.linalg.qr(Z, mode="r")[1])  # those of Z
            hist["loss"][:, t] = loss.cpu().numpy()
            hist["sigma_min"][:, t] = sv[:, -1].cpu().numpy()
            hist["sigma_max"][:, t] = sv[:, 0].cpu().numpy()
            if t == segment[0]:  # observed after the loop, where the estimate sees it
                first = (Z, s._replace(W={k: v.clone() for k, v in s.W.items()}))
            if t < steps:
                for k, W in s.W.items():
                    W -= mu.view(B, 1, 1) * grad[k]
        if observe is not None:
            for name, value in observe(*first).items():
                observed.setdefault(name, []).append(np.asarray(value, dtype=float))
    return BatchedHistory(
        mu.cpu().numpy(),
        hist["loss"],
        hist["sigma_min"],
        hist["sigma_max"],
        starts,
        {k: np.stack(v, axis=-1) for k, v in observed.items()},
        s,
    )


def batched_adam(
    stack,
    X: torch.Tensor,
    Y: torch.Tensor,
    *,
    lr: float,
    steps: int,
    progress: bool = False,
    desc: str = "Adam",
) -> np.ndarray:
    """Full-batch Adam (:class:`torch.optim.Adam`, its defaults, the rate ``lr`` falling
    to 0 on a cosine) of the B one-layer models of ``stack``: Adam acts entry by entry,
    so on the stacked weights it is B independent runs. Returns the loss, (B, steps +
    1)."""
    lr, steps = validate.positive("lr (the learning rate)", lr), _steps_count(steps)
    W = {k: v.detach().clone() for k, v in stack.W.items()}
    s, step = stack._replace(W=W), _batched_step(X)
    opt = torch.optim.Adam(list(W.values()), lr=lr)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(opt, max(steps, 1))
    loss = np.full((len(stack.beta), steps + 1), np.nan)
    for t in loop(steps + 1, desc=desc, unit="Adam step", progress=progress):
        value, grad, _ = step(s, X, Y)
        _check_finite(value, t, s, f"Adam at lr {lr:g}", "the learning rate")
        loss[:, t] = value.cpu().numpy()
        if t < steps:
            for k, p in W.items():
                p.grad = grad[k]
            opt.step()
            schedule.step()
    return loss
