"""Full-batch gradient descent with a constant step, the paper's plain GD.

``theta_{t+1} = theta_t - mu grad Phi(theta_t)`` (eq. ``gd`` of the book), where
``Phi = 1/2 ||F(X) - Y||^2`` is summed over the whole training set.

:func:`descend` is the one training loop. It trains B models side by side, every weight
with a leading model axis, model ``b`` at its own step ``mu_b``; the gradient is
automatic differentiation of the models' forward pass. :func:`gradient_descent` is its
B = 1 case for one :class:`~rcutil.model.Transformer`; a :class:`Stack` holds B
Transformers of the same sizes as one (:func:`stack`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import NamedTuple

import numpy as np
import torch

from . import activations, validate
from .model import ModelOutput, Transformer, squared_loss, transformer
from .progress import steps as loop


class TrainingDiverged(FloatingPointError):
    """Raised when the loss or a gradient becomes NaN or inf during training."""


# ---------------------------------------------------------------------- B models as one
class Stack(NamedTuple):
    """B Transformers of the same sizes side by side: each parameter, by its name in
    :class:`~rcutil.model.Transformer`, with a leading model axis; one ``beta`` per
    model; and what the models share (temperature, activation)."""

    W: dict[str, torch.Tensor]  #: parameter name -> (B, ., .)
    beta: torch.Tensor  #: (B,)
    tau: float
    activation: activations.Activation

    def forward(self, X: torch.Tensor) -> ModelOutput:
        """Eq. ``model`` of every model (:func:`rcutil.model.transformer`), on the
        samples ``X`` (N, n, d) that they share or on their own (B, N, n, d)."""
        return transformer(
            X,
            {name: w[:, None] for name, w in self.W.items()},
            beta=self.beta.view(-1, 1, 1, 1),
            tau=self.tau,
            activation=self.activation,
        )

    def loss(self, X: torch.Tensor, Y: torch.Tensor):
        """``(Phi, out)``: eq. ``loss`` of every model, shape (B,), and the forward
        pass; targets ``Y`` (N, n, d_out), or (B, N, n, d_out) one set per model."""
        out = self.forward(X)
        return 0.5 * ((out.output - Y) ** 2).flatten(1).sum(1), out

    def trainable(self) -> Stack:
        """A copy whose weights are new tensors that require gradients, for
        :func:`descend` to train in place."""
        return self._replace(
            W={k: w.detach().clone().requires_grad_() for k, w in self.W.items()}
        )

    def select(self, index) -> Stack:
        """The models ``index`` (a slice or a list of model numbers), as a stack."""
        return self._replace(
            W={k: v[index] for k, v in self.W.items()}, beta=self.beta[index]
        )


def stack(models) -> Stack:
    """The :class:`~rcutil.model.Transformer` ``models`` as one :class:`Stack`
    (weights detached and copied). They must agree in sizes, depth, ``tau``,
    activation, dtype and device."""
    models = list(models)
    if not models:
        raise ValueError("no models to stack: pass at least one Transformer")
    first = models[0]
    for m in models:
        if (m.shapes(), m.tau, m.activation, m.W_U.dtype, m.W_U.device) != (
            first.shapes(),
            first.tau,
            first.activation,
            first.W_U.dtype,
            first.W_U.device,
        ):
            raise ValueError(
                "stacked models must share sizes, depth, tau, activation, dtype "
                "and device: build them from the same settings"
            )
    W = {
        name: torch.stack([m.get_parameter(name).detach() for m in models]).clone()
        for name in first.shapes()
    }
    beta = torch.tensor(
        [m.beta for m in models], dtype=first.W_U.dtype, device=first.W_U.device
    )
    return Stack(W, beta, first.tau, first.activation)


# --------------------------------------------------------------------- the one loop
@dataclass
class BatchedHistory:
    """What :func:`descend` records for B models, one column per iterate ``t = 0 ..
    T`` (``T``: the last iterate run): ``loss``, ``grad_norm`` (``||grad
    Phi(theta_t)||``), ``sigma_min`` and ``sigma_max`` of each model's stacked ``(N n)
    x d`` attention-layer output ``Z_t`` of the last block, (B, T + 1) arrays;
    ``observed_at``, the iterates where ``observe`` was called, and ``observed``, name
    -> array with one column per such iterate."""

    step_size: np.ndarray | None
    loss: np.ndarray
    grad_norm: np.ndarray
    sigma_min: np.ndarray
    sigma_max: np.ndarray
    observed_at: list[int]
    observed: dict[str, np.ndarray]


def _steps_count(steps) -> int:
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
        raise ValueError(f"steps must be a non-negative integer, got {steps!r}")
    return steps


def _step_sizes(mu, B: int, like: torch.Tensor) -> torch.Tensor:
    """``mu`` (one number, or one per model) as a (B,) tensor of positive steps."""
    mu = torch.as_tensor(mu, dtype=like.dtype, device=like.device)
    mu = mu.expand(B) if mu.dim() == 0 else mu
    if mu.shape != (B,):
        raise ValueError(
            f"mu must be one step size or one per model ({B}), got {tuple(mu.shape)}"
        )
    for b, m in enumerate(mu.tolist()):
        validate.positive(f"mu of model {b} (its step size)" if B > 1 else "mu", m)
    return mu


class _Record:
    """What :func:`descend` writes at each iterate, for :class:`BatchedHistory`."""

    def __init__(self, B: int, steps: int, spectra: bool, step: str, setting: str):
        self.arrays = {
            k: np.full((B, steps + 1), np.nan)
            for k in ("loss", "grad_norm", "sigma_min", "sigma_max")
        }
        self.spectra, self.step, self.setting = spectra, step, setting
        self.observed_at: list[int] = []
        self.observed: dict[str, list] = {}

    def add(self, t: int, loss: torch.Tensor, grads: dict, out: ModelOutput) -> None:
        """Record iterate ``t``; :class:`TrainingDiverged` if a loss or a gradient is
        not finite, naming the models, their loss, the step they took and the setting
        to lower."""
        norm = sum(g.flatten(1).square().sum(1) for g in grads.values()).sqrt()
        ok = torch.isfinite(loss) & torch.isfinite(norm)
        if not ok.all():
            bad = torch.nonzero(~ok).flatten().tolist()
            which = f" for models {bad}" if len(loss) > 1 else ""
            raise TrainingDiverged(
                f"training diverged at step {t}{which}: loss "
                f"{[float(x) for x in loss[bad]]} with {self.step}. Take a smaller "
                f"step: lower {self.setting}, for example halve it"
            )
        self.arrays["loss"][:, t] = loss.cpu().numpy()
        self.arrays["grad_norm"][:, t] = norm.cpu().numpy()
        if self.spectra:
            Z = out.Z[-1]
            s = torch.linalg.svdvals(Z.reshape(len(loss), -1, Z.shape[-1]))
            self.arrays["sigma_min"][:, t] = s[:, -1].cpu().numpy()
            self.arrays["sigma_max"][:, t] = s[:, 0].cpu().numpy()

    def observe(self, t: int, values: Mapping) -> None:
        """Record what ``observe`` returned at iterate ``t``."""
        self.observed_at.append(t)
        for name, value in values.items():
            if isinstance(value, torch.Tensor):
                value = value.detach().cpu()
            self.observed.setdefault(name, []).append(np.asarray(value, dtype=float))

    def stops(self, t: int, tol: float | None, every: int) -> bool:
        """The stopping rule at iterate ``t``: with ``tol`` given and ``t`` a multiple
        of ``every``, whether every model has had ``Phi <= tol Phi_0`` by then."""
        if tol is None or t % every:
            return False
        loss = self.arrays["loss"][:, : t + 1]
        return bool((loss.min(1) <= tol * loss[:, 0]).all())

    def history(self, last: int, mu: torch.Tensor | None) -> BatchedHistory:
        return BatchedHistory(
            None if mu is None else mu.cpu().numpy(),
            *(a[:, : last + 1] for a in self.arrays.values()),
            self.observed_at,
            {k: np.stack(v, axis=-1) for k, v in self.observed.items()},
        )


def descend(
    loss: Callable[[], tuple[torch.Tensor, ModelOutput]],
    W: Mapping[str, torch.Tensor],
    *,
    steps: int,
    mu=None,
    update: Callable[[dict], None] | None = None,
    observe: Callable[[ModelOutput, Mapping], Mapping] | None = None,
    observe_every: int = 1,
    tol: float | None = None,
    check_every: int = 1,
    spectra: bool = True,
    progress: bool = False,
    desc: str = "GD",
    unit: str = "GD step",
    setting: str = "mu",
    step: str | None = None,
) -> BatchedHistory:
    """Full-batch GD (eq. ``gd``) of B models at once, in place: the one training loop.

    ``W`` maps names to the weights being trained, tensors with a leading model axis
    that require gradients; ``loss()`` returns ``(Phi, out)`` at the current ``W``: the
    loss of every model, shape (B,), and the forward pass (a
    :class:`~rcutil.model.ModelOutput` with the model axis). The models share no
    weight, so the gradient of ``Phi.sum()`` is each model's own. Each step is
    ``W <- W - mu_b grad Phi_b`` (``mu``: one step size, or B), or ``update(grads)``
    where given (an optimizer's step, say).

    At every iterate ``t = 0 .. steps`` it records what :class:`BatchedHistory` holds
    (with ``spectra=False`` no singular values). ``observe(out, W)``, if given, is
    called every ``observe_every`` iterates and at the last, before the step, and
    returns name -> one value per model. With ``tol``, the run stops at the first
    iterate ``t`` that is a multiple of ``check_every`` where every model has reached
    ``Phi <= tol Phi_0``. A loss or gradient that is not finite raises
    :class:`TrainingDiverged`, naming the models, the ``step`` they took (default: the
    step sizes) and the ``setting`` to lower.
    """
    W = dict(W)
    steps = _steps_count(steps)
    observe_every = validate.positive_int("observe_every", observe_every)
    check_every = validate.positive_int("check_every", check_every)
    first = next(iter(W.values()))
    if (mu is None) == (update is None):
        raise ValueError("give descend either step sizes mu or an update rule")
    if update is None:
        mu = _step_sizes(mu, first.shape[0], first)
        step = step or f"mu {[f'{m:.3g}' for m in mu.tolist()]}"
    record = _Record(first.shape[0], steps, spectra, step or "its update", setting)
    last = steps
    for t in loop(steps + 1, desc=desc, unit=unit, progress=progress):
        phi, out = loss()  # Phi(theta_t) of every model, and the forward pass
        grads = dict(zip(W, torch.autograd.grad(phi.sum(), list(W.values()))))
        with torch.no_grad():
            record.add(t, phi.detach(), grads, out)
            if observe is not None and (t % observe_every == 0 or t == steps):
                record.observe(t, observe(out, W))
        if t == steps or record.stops(t, tol, check_every):
            last = t
            break
        with torch.no_grad():
            if update is not None:
                update(grads)
            else:
                for k, w in W.items():
                    w -= mu.view(-1, *[1] * (w.dim() - 1)) * grads[k]  # eq. gd
    return record.history(last, mu)


# ------------------------------------------------------------------------ one model
def _as_one(values: Mapping) -> dict:
    """An observation of one model as one of B = 1 models."""
    return {name: [float(value)] for name, value in values.items()}


@dataclass
class History:
    """What :func:`gradient_descent` records, one entry per iterate ``t = 0 .. T``.

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
    validate.finite("Y", Y, "the targets")
    return Y


def gradient_descent(
    model: Transformer,
    X: torch.Tensor,
    Y: torch.Tensor,
    *,
    mu: float,
    steps: int,
    progress: bool = False,
    desc: str = "GD",
    observe: Callable[[ModelOutput], Mapping[str, float]] | None = None,
    tol: float | None = None,
    check_every: int = 1,
) -> History:
    """Run ``steps`` steps of full-batch GD at the constant step ``mu`` (eq. ``gd``) on
    ``model``, in place: :func:`descend` with one model.

    At every iterate it records the loss, ``sigma_min(Z_t)``, ``sigma_max(Z_t)`` and
    ``||grad Phi(theta_t)||``; ``observe(out)``, if given, is called there too with the
    forward pass (a :class:`~rcutil.model.ModelOutput` at ``theta_t``, while the model
    holds ``theta_t``) and returns name -> number to record in ``History.observed``.
    With ``tol`` it stops early, at the first multiple of ``check_every`` where ``Phi_t
    <= tol Phi_0``. If the loss or the gradient stops being finite it raises
    :class:`TrainingDiverged`, naming the step and suggesting a smaller ``mu``.
    """
    mu = validate.positive("mu (the step size)", mu)
    steps = _steps_count(steps)
    W_U = model.W_U
    X = validate.inputs(X, model.d, dtype=W_U.dtype, device=W_U.device)
    Y = _check_targets(model, X, Y)
    params = dict(model.named_parameters())
    # the trained weights with a model axis of one: views, so the model trains in place
    W = {
        k: p.detach()[None].requires_grad_()
        for k, p in params.items()
        if p.requires_grad
    }
    if not W:
        raise ValueError(
            "every parameter of the model is frozen (requires_grad=False), so gradient "
            "descent has nothing to train: unfreeze some, e.g. "
            "model.requires_grad_(True)"
        )
    fixed = {k: p.detach() for k, p in params.items() if not p.requires_grad}

    def loss():
        weights = {**fixed, **{k: w[0] for k, w in W.items()}}
        F, Zs, H = transformer(
            X, weights, beta=model.beta, tau=model.tau, activation=model.activation
        )
        return squared_loss(F, Y)[None], ModelOutput(
            F[None], [Z[None] for Z in Zs], H[None]
        )

    def one(out: ModelOutput):
        return ModelOutput(out.output[0], [Z[0] for Z in out.Z], out.features[0])

    h = descend(
        loss,
        W,
        mu=mu,
        steps=steps,
        observe=None if observe is None else lambda out, W: _as_one(observe(one(out))),
        tol=tol,
        check_every=check_every,
        progress=progress,
        desc=desc,
    )
    return History(
        mu,
        h.loss[0].tolist(),
        h.sigma_min[0].tolist(),
        h.sigma_max[0].tolist(),
        h.grad_norm[0].tolist(),
        {k: v[0].tolist() for k, v in h.observed.items()},
    )
