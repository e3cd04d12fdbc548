"""Time the Jena sweep's step: all (beta, seed) models as one stack, trained by
``rcutil.train.descend`` (automatic differentiation of the model's forward pass with a
leading model axis), against a Python loop of ``rcutil.train.gradient_descent`` over
the same models, and the batched step's share of the float64 matrix-multiply peak in the
same process.

    python benchmarks/jena_sweep.py --profile book
    python benchmarks/jena_sweep.py --profile book --windows 256 --seeds 3

Inputs are standard-normal tensors of the profile's shape (N, n, d) = (n_windows, n,
14): the time of a step does not depend on the values, and the data file is not needed.
``--windows`` and ``--seeds`` change the profile's N and number of seeds, so that the
step can be timed at the sizes of another version of the profile. Both variants record
what the experiment records at every step (loss, and the singular values of the stacked
attention output Z), run with the profile's torch thread setting, are warmed up first
and are timed over the same number of steps; the best of ``--repeats`` timings is kept,
as CPU time of the process (which other processes on a shared machine inflate less than
wall time).

The share of peak counts the model's matrix-product FLOPs of one step (forward, and
backward to the weights, for every model: :func:`model_flops`), not the FLOPs the
batched code happens to execute. The peak is the best float64 ``torch.mm`` rate of
square matrices of ``--peak-size`` on the same threads. The script also times one
Lanczos step of the sharpness estimate.
"""

from __future__ import annotations

import argparse
import os
import time
from dataclasses import replace

from rcutil import threads

threads.single_threaded_blas()  # the book's thread policy, before torch loads numpy

import torch  # noqa: E402

from rcutil.experiments import jena  # noqa: E402
from rcutil.profiles import PROFILES, settings_for  # noqa: E402
from rcutil.train import descend, gradient_descent  # noqa: E402

threads.apply_environment()


def model_flops(settings, d: int = 14, d_out: int = 1) -> int:
    """Matrix-product FLOPs of one GD step of all models, counted on the model's
    equations (``2 m k n`` per product): the forward pass ``Q = X W_Q``, ``K = X W_K``,
    ``Q K^T``, ``V = X W_V``, ``A V``, ``Z W_1``, ``G W_2``, ``H W_U``, and for each of
    them the products of the backward pass that lead to the weights (two where both
    factors depend on them, one where a factor is the data ``X``)."""
    n, k, f, o = settings.n, settings.d_qk, settings.d_F, d_out
    forward = 2 * (
        2 * n * d * k + n * n * k + n * d * d + n * n * d + 2 * n * d * f + n * d * o
    )
    backward = 2 * (
        2 * n * d * o
        + 4 * n * f * d
        + 2 * n * n * d
        + n * d * d
        + 2 * n * n * k
        + 2 * n * d * k
    )
    models = len(settings.betas) * len(settings.seeds)
    return (forward + backward) * settings.n_windows * models


def cpu_seconds(fn, repeats: int) -> float:
    """Best CPU time of the process over ``repeats`` calls of ``fn`` (after one
    warm-up)."""
    fn()
    best = float("inf")
    for _ in range(repeats):
        start = time.process_time()
        fn()
        best = min(best, time.process_time() - start)
    return best


def matmul_peak(size: int, repeats: int = 5) -> float:
    """Best float64 ``torch.mm`` rate (FLOP/s) on ``size`` x ``size`` matrices."""
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(size, size, generator=gen, dtype=torch.float64)
    b = torch.randn(size, size, generator=gen, dtype=torch.float64)
    return 2 * size**3 / cpu_seconds(lambda: a @ b, repeats)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", choices=PROFILES, default="book")
    parser.add_argument(
        "--windows", type=int, default=None, help="N, default the profile's"
    )
    parser.add_argument(
        "--seeds", type=int, default=None, help="seeds per beta, default the profile's"
    )
    parser.add_argument(
        "--steps", type=int, default=10, help="timed GD steps per variant"
    )
    parser.add_argument("--repeats", type=int, default=3, help="timings per variant")
    parser.add_argument(
        "--peak-size", type=int, default=1024, help="matrix size of the peak"
    )
    args = parser.parse_args(argv)
    settings = settings_for(jena.SETTINGS, args.profile)
    if args.windows:
        settings = replace(settings, n_windows=args.windows)
    if args.seeds:
        settings = replace(settings, seeds=tuple(range(args.seeds)))
    gen = torch.Generator().manual_seed(0)
    shape = (settings.n_windows, settings.n)
    X = torch.randn(*shape, 14, generator=gen, dtype=torch.float64)
    Y = torch.randn(*shape, 1, generator=gen, dtype=torch.float64)
    stack = jena.models(settings)
    B, mu = len(stack.beta), 1e-6  # any small step: only the time is measured

    def batched():
        s = stack.trainable()
        descend(lambda: s.loss(X, Y), s.W, mu=mu, steps=args.steps)

    def loop():
        for beta in settings.betas:
            for seed in settings.seeds:
                model = jena.make_model(settings, beta=beta, seed=seed)
                gradient_descent(model, X, Y, mu=mu, steps=args.steps)

    with jena.torch_threads(settings.threads):
        threads = torch.get_num_threads()
        peak = matmul_peak(args.peak_size)
        per_step = {
            name: cpu_seconds(fn, args.repeats) / (args.steps + 1)
            for name, fn in (("batched", batched), ("loop", loop))
        }
        lanczos = cpu_seconds(lambda: jena.sharpness(stack, X, Y, iterations=4), 2) / 4
        peak = max(peak, matmul_peak(args.peak_size))
    flops = model_flops(settings)
    rate = flops / per_step["batched"]
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(
        f"profile {args.profile}: {B} models (betas {list(settings.betas)} x "
        f"{len(settings.seeds)} seeds), X of shape {tuple(X.shape)}, float64, "
        f"{threads} torch thread(s), load average {load:.2f}; CPU seconds"
    )
    batched_ms, loop_ms = per_step["batched"] * 1e3, per_step["loop"] * 1e3
    print(f"  batched (autograd)       : {batched_ms:9.2f} ms per step of all")
    print(f"  loop over {B:3d} models     : {loop_ms:9.2f} ms per step of all")
    print(f"  speed-up of the batched  : {loop_ms / batched_ms:9.2f} x")
    print(f"  model FLOPs of one step  : {flops / 1e9:9.3f} GFLOP")
    print(f"  batched rate             : {rate / 1e9:9.2f} GFLOP/s")
    print(
        f"  float64 matmul peak      : {peak / 1e9:9.2f} GFLOP/s ({args.peak_size}^2)"
    )
    print(f"  share of the peak        : {rate / peak:9.1%}")
    print(
        f"  Lanczos step             : {lanczos * 1e3:9.2f} ms "
        f"(one Hessian-vector product)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
