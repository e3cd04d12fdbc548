"""L-BFGS for a stack of independent one-layer models: each model its own curvature
memory and its own step length, all models evaluated as one computation.

:class:`torch.optim.LBFGS` on the stacked weights would minimise the sum of the
models' losses with one line search and one memory for all of them, which couples
models that share nothing; per model, one evaluation of a stack costs about as much as
one evaluation of a single model. Here every model follows the standard algorithm
(Nocedal & Wright, *Numerical Optimization*, 2nd ed., Alg. 7.4 and 7.5): the two-loop
recursion over its last ``memory`` pairs ``(s, y)``, the initial Hessian
``(s^T y / y^T y) I``, a backtracking (Armijo) line search from step 1 by quadratic
interpolation, and a pair kept only when ``s^T y > 0``; the evaluations of all models
are one forward pass of the stack (:meth:`rcutil.train.Stack.loss`) and its automatic
differentiation.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from . import validate
from .progress import steps as loop
from .train import Stack

#: Armijo's sufficient-decrease constant.
ARMIJO = 1e-4
#: Trial steps of a line search before a model's iteration gives up: it then restarts
#: its memory, and after two such iterations in a row it stops where it is (no step
#: along its direction lowers the loss at working precision).
TRIALS = 40


@dataclass
class LBFGSHistory:
    """What :func:`batched_lbfgs` records: ``loss`` (B, iterations + 1), each model's
    loss at every iterate; ``grad_norm`` (B, iterations + 1); ``evaluations``, the
    evaluations of the whole stack; ``final``, the stack at the last iterate."""

    loss: np.ndarray
    grad_norm: np.ndarray
    evaluations: int
    final: Stack


def _flat(s: Stack) -> torch.Tensor:
    return torch.cat([w.detach().reshape(len(s.beta), -1) for w in s.W.values()], 1)


def _unflat(x: torch.Tensor, like: Stack) -> Stack:
    W, at = {}, 0
    for k in like.W:
        shape = like.W[k].shape
        size = int(np.prod(shape[1:]))
        W[k] = x[:, at : at + size].reshape(shape)
        at += size
    return like._replace(W=W)


def batched_lbfgs(
    stack: Stack,
    X: torch.Tensor,
    Y: torch.Tensor,
    *,
    iterations: int,
    memory: int = 20,
    gtol: float = 1e-12,
    progress: bool = False,
    desc: str = "L-BFGS",
) -> LBFGSHistory:
    """Minimise the loss (eq. ``model-loss``) of every model of ``stack`` by L-BFGS for
    ``iterations`` iterations from its weights, each model on its own (see the module's
    text). A model stops where it is once its gradient norm is at most ``gtol`` times
    its first one, or when no step lowers its loss (see :data:`TRIALS`)."""
    iterations = validate.positive_int("iterations", iterations)
    memory = validate.positive_int("memory", memory)
    B = len(stack.beta)

    def f(x):
        s = _unflat(x, stack).trainable()
        loss, _ = s.loss(X, Y)
        grads = torch.autograd.grad(loss.sum(), list(s.W.values()))
        return loss.detach(), torch.cat([g.reshape(B, -1) for g in grads], 1)

    x = _flat(stack).clone()
    fx, g = f(x)
    evaluations = 1
    P = x.shape[1]
    S, Yd = x.new_zeros(B, memory, P), x.new_zeros(B, memory, P)
    rho = x.new_zeros(B, memory)  # 0: an empty or rejected slot
    gamma = x.new_zeros(B)  # 0: no pair yet, first step along -g / ||g||
    loss = np.full((B, iterations + 1), np.nan)
    gnorm = np.full((B, iterations + 1), np.nan)
    loss[:, 0], gnorm[:, 0] = fx.cpu().numpy(), g.norm(dim=1).cpu().numpy()
    order = []  # slots from oldest to newest
    failed = torch.zeros(B, dtype=torch.long, device=x.device)  # searches in a row
    small = gtol * g.norm(dim=1)
    for it in loop(range(iterations), desc=desc, unit="iteration", progress=progress):
        # two-loop recursion (Alg. 7.4), every model at once
        q, alpha = g.clone(), {}
        for i in reversed(order):
            alpha[i] = rho[:, i] * (S[:, i] * q).sum(1)
            q -= alpha[i][:, None] * Yd[:, i]
        fresh = gamma == 0
        r = torch.where(
            fresh[:, None], q / q.norm(dim=1, keepdim=True), gamma[:, None] * q
        )
        for i in order:
            beta = rho[:, i] * (Yd[:, i] * r).sum(1)
            r += (alpha[i] - beta)[:, None] * S[:, i]
        d = -r
        slope = (g * d).sum(1)
        uphill = slope >= 0  # not a descent direction: restart along -g
        if uphill.any():
            d[uphill] = -g[uphill] / g[uphill].norm(dim=1, keepdim=True)
            slope = (g * d).sum(1)
            rho[uphill], gamma[uphill] = 0, 0
        # backtracking line search (Armijo), each model its own step
        t = torch.ones_like(fx)
        stopped = (failed >= 2) | (g.norm(dim=1) <= small)
        done = stopped.clone()
        new_x, new_f, new_g = x.clone(), fx.clone(), g.clone()
        for _ in range(TRIALS):
            trial = x + t[:, None] * d
            ft, gt = f(trial)
            evaluations += 1
            ok = ~done & torch.isfinite(ft) & (ft <= fx + ARMIJO * t * slope)
            new_x[ok], new_f[ok], new_g[ok] = trial[ok], ft[ok], gt[ok]
            done |= ok
            if done.all():
                break
            # the minimum of the quadratic through f, the slope and f(t) (Nocedal &
            # Wright eq. 3.58), kept within [t/10, t/2]
            quad = -slope * t**2 / (2 * (ft - fx - slope * t))
            quad = torch.where(torch.isfinite(quad), quad, t / 10)
            t = torch.where(done, t, torch.minimum(torch.maximum(quad, t / 10), t / 2))
        stuck = ~done  # no decrease found: stay, forget the memory
        rho[stuck], gamma[stuck] = 0, 0
        failed = torch.where(stuck | stopped, failed + 1, torch.zeros_like(failed))
        done &= ~stopped
        s, y = new_x - x, new_g - g
        sy = (s * y).sum(1)
        slot = it % memory
        if slot in order:
            order.remove(slot)
        order.append(slot)
        keep = (sy > 1e-12 * s.norm(dim=1) * y.norm(dim=1)) & done
        S[:, slot], Yd[:, slot] = s, y
        rho[:, slot] = torch.where(keep, 1 / sy.clamp_min(1e-300), torch.zeros_like(sy))
        gamma = torch.where(keep, sy / (y * y).sum(1).clamp_min(1e-300), gamma)
        x, fx, g = new_x, new_f, new_g
        loss[:, it + 1] = fx.cpu().numpy()
        gnorm[:, it + 1] = g.norm(dim=1).cpu().numpy()
    return LBFGSHistory(loss, gnorm, evaluations, _unflat(x, stack))
