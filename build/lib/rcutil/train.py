"""Full-batch gradient descent with a constant step, the paper's plain GD.

``theta_{t+1} = theta_t - mu grad Phi(theta_t)`` (eq. ``gd`` of the book), where
``Phi = 1/2 ||F(X) - Y||^2`` is summed over the whole training set.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field

import torch

from . import validate
from .linalg import singular_values
from .progress import steps as loop


class TrainingDiverged(FloatingPointError):
    """Raised when the loss or a gradient becomes NaN or inf during training."""


@dataclass
class History:
    """What :func:`gradient_descent` records, one entry per iterate ``t = 0 .. steps``.

    ``sigma_min`` and ``sigma_max`` are those of the stacked ``(N n) x d`` attention-layer
    output ``Z_t`` of the last block (for one layer, the paper's ``Z``); ``grad_norm`` is the
    Euclidean norm of the full gradient ``grad Phi(theta_t)``; ``observed`` holds what the
    ``observe`` argument of :func:`gradient_descent` returned, one list per name.
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
        raise ValueError(f"Y has shape {tuple(Y.shape)}, expected {expected} (N, n, d_out)")
    if Y.dtype != X.dtype or Y.device != X.device:
        raise ValueError(f"Y is {Y.dtype} on {Y.device} but X is {X.dtype} on {X.device}: pass "
                         f"Y.to(X) so that both match the model")
    if not torch.isfinite(Y).all():
        raise ValueError("Y contains NaN or inf")
    return Y


def gradient_descent(model, X: torch.Tensor, Y: torch.Tensor, *, mu: float, steps: int,
                     progress: bool = False, desc: str = "GD",
                     observe: Callable[[object], Mapping[str, float]] | None = None) -> History:
    """Run ``steps`` steps of full-batch GD at the constant step ``mu`` (eq. ``gd``), in place.

    At every iterate it records the loss, ``sigma_min(Z_t)``, ``sigma_max(Z_t)`` and
    ``||grad Phi(theta_t)||``; ``observe(out)``, if given, is called there too with the forward
    pass (a :class:`~rcutil.model.ModelOutput` at ``theta_t``) and returns name -> number to
    record in ``History.observed``. If the loss or the gradient stops being finite it raises
    :class:`TrainingDiverged`, naming the step and suggesting a smaller ``mu``.
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
        raise ValueError("every parameter of the model is frozen (requires_grad=False), so gradient "
                         "descent has nothing to train: unfreeze some, e.g. model.requires_grad_(True)")
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
