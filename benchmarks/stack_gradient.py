"""Time the loss and gradient of the Jena sweep's stack of one-layer models: automatic
differentiation of the model's own forward pass against the hand-written closed form
that trained the sweep until this was measured.

    python benchmarks/stack_gradient.py --profile book

The stack is the Jena sweep's (``rcutil.experiments.jena.models``): every (beta, seed)
model of the profile, 25 at ``book`` size (5 beta x 5 seeds), on standard-normal inputs
of the profile's shape (N, n, d) = (n_windows, n, 14) and targets (N, n, 1), float64,
with the profile's torch thread setting (one thread at ``book``). Four ways to get the
loss of every model, the gradient of every weight and the attention output ``Z``:

* ``autograd``: :meth:`rcutil.train.Stack.loss` (the model's one forward pass,
  :func:`rcutil.model.transformer`, with a leading model axis) and
  ``torch.autograd.grad``, what :func:`rcutil.train.descend` does;
* ``torch.func``: ``vmap`` over the models of ``grad_and_value`` of one model's loss;
* ``closed form``: the retired ``rcutil.model.loss_and_gradient``, the gradient of one
  layer written out by hand, kept here as it was: a forward pass of its own, written out
  with numpy's BLAS on the same memory (``_mm``), attention side by side for all models,
  samples in cache-sized chunks;
* ``closed-form backward on the model's forward``: the same backward, numpy's BLAS
  included, after the forward pass of the model's equations in torch, which is the best
  a closed form could do on top of ``rcutil.model.block`` (it keeps ``P`` and ``G``,
  which ``block`` does not return).

All four are checked to agree, then each is warmed up and timed over ``--steps`` calls,
``--repeats`` times; the best is kept, as CPU time of the process (which other jobs on a
shared machine inflate less than wall time). The script prints ms per call and the
ratios to the fastest autograd variant.
"""

from __future__ import annotations

import argparse
import os
import time

from rcutil import threads

threads.single_threaded_blas()  # the book's thread policy, before numpy loads

import numpy as np  # noqa: E402
import torch  # noqa: E402

from rcutil.experiments import jena  # noqa: E402
from rcutil.model import attention_weights, block, squared_loss  # noqa: E402
from rcutil.profiles import PROFILES, settings_for  # noqa: E402
from rcutil.threads import torch_threads  # noqa: E402
from rcutil.train import Stack  # noqa: E402

NAMES = {
    "W_Q": "blocks.0.W_Q",
    "W_K": "blocks.0.W_K",
    "W_V": "blocks.0.W_V",
    "W_1": "blocks.0.W_1",
    "W_2": "blocks.0.W_2",
    "W_U": "output.W_U",
}
#: Working set of one chunk of samples of the closed form.
CHUNK_BYTES = 6 << 20


def cpu_seconds(fn, steps: int, repeats: int) -> float:
    """Best CPU seconds per call of ``fn`` over ``repeats`` timings of ``steps`` calls,
    after ``steps`` warm-up calls."""
    for _ in range(steps):
        fn()
    best = float("inf")
    for _ in range(repeats):
        start = time.process_time()
        for _ in range(steps):
            fn()
        best = min(best, (time.process_time() - start) / steps)
    return best


# ------------------------------------------------------------------- the two autograds
def autograd(s: Stack, X, Y):
    """What :func:`rcutil.train.descend` computes at each step."""
    s = s.trainable()
    loss, out = s.loss(X, Y)
    grads = torch.autograd.grad(loss.sum(), list(s.W.values()))
    return loss.detach(), dict(zip(s.W, grads)), out.Z[0].detach()


def func_variant(s: Stack, X, Y):
    """``torch.func.vmap`` of ``grad_and_value`` of one model's loss."""

    def one(W, beta):
        H, Z = block(
            X,
            *(W[NAMES[k]] for k in ("W_Q", "W_K", "W_V", "W_1", "W_2")),
            beta=beta,
            tau=s.tau,
            activation=s.activation,
        )
        return squared_loss(H @ W["output.W_U"], Y), Z

    step = torch.func.vmap(torch.func.grad_and_value(one, has_aux=True))

    def call():
        grads, (loss, Z) = step(s.W, s.beta)
        return loss, grads, Z

    return call


# ------------------------------------------------------- the retired closed form
def _mm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``a @ b`` (batched) through numpy's BLAS on the same memory."""
    return torch.from_numpy(np.matmul(a.numpy(), b.numpy()))


def closed_form(s: Stack, X, Y, *, chunk_bytes: int = CHUNK_BYTES):
    """The retired ``rcutil.model.loss_and_gradient``, unchanged but for the weight
    names: the loss, the gradient written out by hand, and ``Z`` of every model."""
    act = s.activation
    (N, n, d) = X.shape
    W = {k: s.W[name].contiguous() for k, name in NAMES.items()}
    B, d_F, d_out = W["W_1"].shape[0], W["W_1"].shape[2], W["W_U"].shape[-1]
    W_U_T, W_2_W_U_T = W["W_U"].mT.contiguous(), (W["W_2"] @ W["W_U"]).mT.contiguous()
    b = s.beta.view(B, 1, 1)
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
        S_T = _mm(Xc, _mm(X2, M).view(Nc, n * B, d).mT)
        P_T = torch.softmax(S_T, dim=1)
        PX = _mm(P_T.mT, Xc)
        PXm = PX.view(Nc * n, B, d).transpose(0, 1)
        Zc = _mm(PXm, W["W_V"]).addcmul_(b, X2)
        U = _mm(Zc, W["W_1"])
        G = act(U)
        H = _mm(G, W["W_2"]).addcmul_(b, Zc)
        R = _mm(H, W["W_U"]).sub_(Y[a : a + size].reshape(Nc * n, d_out))
        sums["RR"] += (R * R).sum(dim=(1, 2))
        sums["W_U"] += _mm(H.mT, R)
        sums["G^T R"] += _mm(G.mT, R)
        sigma_prime = 1 - G * G if act.name == "tanh" else act.derivative(U)
        dU = _mm(R, W_2_W_U_T).mul_(sigma_prime)
        sums["W_1"] += _mm(Zc.mT, dU)
        dZ = _mm(dU, W["W_1"].mT).add_(b * _mm(R, W_U_T))
        sums["W_V"] += _mm(PXm.mT, dZ)
        dZV = _mm(dZ, W["W_V"].mT).transpose(0, 1).reshape(Nc, n * B, d)
        dP_T = _mm(Xc, dZV.mT)
        dP_T -= (dZV * PX).sum(dim=-1).unsqueeze(1)
        dS_T = dP_T.mul_(P_T)
        sums["M"] += _mm(X2.T.contiguous(), _mm(dS_T.mT, Xc).view(Nc * n, B * d))
        Z[:, a * n : (a + Nc) * n] = Zc
    grad_M = sums["M"].view(d, B, d).permute(1, 0, 2)
    grad = {
        "W_Q": grad_M @ W["W_K"] / s.tau,
        "W_K": grad_M.mT @ W["W_Q"] / s.tau,
        "W_V": sums["W_V"],
        "W_1": sums["W_1"],
        "W_2": sums["G^T R"] @ W_U_T,
        "W_U": sums["W_U"],
    }
    return 0.5 * sums["RR"], {NAMES[k]: g for k, g in grad.items()}, Z


def closed_backward(s: Stack, X, Y):
    """The closed form's backward (numpy's BLAS) after the forward pass of the model's
    equations in torch, every model at once by broadcasting."""
    W = {k: s.W[name][:, None] for k, name in NAMES.items()}
    b, act = s.beta.view(-1, 1, 1, 1), s.activation
    P = attention_weights(X, W["W_Q"], W["W_K"], s.tau)  # eq. attn
    PX = P @ X
    Z = PX @ W["W_V"] + b * X
    U = Z @ W["W_1"]
    G = act(U)
    H = G @ W["W_2"] + b * Z
    R = H @ W["W_U"] - Y

    def flat(T):
        return T.flatten(1, 2)

    dH = _mm(R, W["W_U"].mT)
    dU = _mm(dH, W["W_2"].mT) * act.derivative(U)
    dZ = _mm(dU, W["W_1"].mT) + b * dH
    dP = _mm(_mm(dZ, W["W_V"].mT), X.mT)
    dS = P * (dP - (dP * P).sum(-1, keepdim=True))
    grad_M = _mm(_mm(X.mT, dS), X).sum(1) / s.tau
    grad = {
        "W_Q": grad_M @ s.W["blocks.0.W_K"],
        "W_K": grad_M.mT @ s.W["blocks.0.W_Q"],
        "W_V": _mm(flat(PX).mT, flat(dZ)),
        "W_1": _mm(flat(Z).mT, flat(dU)),
        "W_2": _mm(flat(G).mT, flat(dH)),
        "W_U": _mm(flat(H).mT, flat(R)),
    }
    return 0.5 * (R * R).flatten(1).sum(1), {NAMES[k]: g for k, g in grad.items()}, Z


def agree(results: dict) -> None:
    """Every variant's loss, gradient and ``Z`` equal the first's (float64
    rounding)."""
    (_, (loss0, grad0, Z0)), *rest = results.items()
    for name, (loss, grad, Z) in rest:
        torch.testing.assert_close(loss, loss0, rtol=1e-10, atol=0, msg=name)
        torch.testing.assert_close(
            Z.reshape(Z0.shape), Z0, rtol=1e-10, atol=1e-13, msg=name
        )
        for k in grad0:
            torch.testing.assert_close(
                grad[k], grad0[k], rtol=1e-8, atol=1e-11, msg=f"{name}: {k}"
            )


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", choices=PROFILES, default="book")
    parser.add_argument("--steps", type=int, default=20, help="calls per timing")
    parser.add_argument("--repeats", type=int, default=5, help="timings per variant")
    args = parser.parse_args(argv)
    settings = settings_for(jena.SETTINGS, args.profile)
    gen = torch.Generator().manual_seed(0)
    shape = (settings["n_windows"], settings["n"])
    X = torch.randn(*shape, 14, generator=gen, dtype=torch.float64)
    Y = torch.randn(*shape, 1, generator=gen, dtype=torch.float64)
    with torch_threads(settings["threads"]):
        s = jena.models(settings)
        calls = {
            "autograd (rcutil.train)": lambda: autograd(s, X, Y),
            "torch.func vmap(grad)": func_variant(s, X, Y),
            "closed form (retired)": lambda: closed_form(s, X, Y),
            "closed backward, model forward": lambda: closed_backward(s, X, Y),
        }
        agree({name: fn() for name, fn in calls.items()})
        ms = {
            name: 1e3 * cpu_seconds(fn, args.steps, args.repeats)
            for name, fn in calls.items()
        }
        threads = torch.get_num_threads()
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(
        f"profile {args.profile}: {len(s.beta)} models, X of shape {tuple(X.shape)}, "
        f"float64, {threads} torch thread(s), load average {load:.2f}; CPU ms per "
        f"loss and gradient of all models, best of {args.repeats} x {args.steps}"
    )
    best = min(list(ms)[:2], key=ms.get)
    for name, value in ms.items():
        print(f"  {name:32s}: {value:8.2f} ms   {ms[best] / value:5.2f} x")
    print(f"  (x: how many times faster than the fastest autograd, {best})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
