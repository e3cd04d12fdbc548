"""Time the Jena sweep: all (beta, seed) models as one batched computation against a plain
Python loop over models (``rcutil.train.gradient_descent`` per model), side by side, and the
batched step's share of the float64 matrix-multiply peak measured in the same process.

    python benchmarks/jena_sweep.py --profile book

Inputs are standard-normal tensors of the profile's shape (N, n, d) = (n_windows, n, 14): the
time of a step does not depend on the values, and the data file is not needed. Both variants
record what the experiment records at every step (loss, and the singular values of the
stacked attention output Z), run with the profile's torch thread setting, are warmed up first
(the first autograd call of a process is slow) and are timed over the same number of steps;
the best of ``--repeats`` timings is kept.

The share of peak counts the model's matrix-product FLOPs of one step (forward, and backward
to the weights, for every model: see :func:`model_flops`), not the FLOPs the batched code
happens to execute, so a formulation that does more arithmetic cannot score better. The peak
is the best float64 ``torch.mm`` rate of square matrices of ``--peak-size`` on the same
threads. The script also times one Lanczos step of the sharpness estimate and projects the
profile's whole sweep.
"""
from __future__ import annotations

import argparse
import os

import torch

import rcutil  # noqa: F401  (thread policy before numpy)
from rcutil.estimate import seconds_per_call
from rcutil.experiments import jena
from rcutil.profiles import PROFILES, settings_for


def model_flops(settings: dict, d: int = 14, d_out: int = 1) -> int:
    """Matrix-product FLOPs of one GD step of all models, counted on the model's equations
    (``2 m k n`` per product): the forward pass ``Q = X W_Q``, ``K = X W_K``, ``Q K^T``,
    ``V = X W_V``, ``A V``, ``Z W_1``, ``G W_2``, ``H W_U``, and for each of them the products
    of the backward pass that lead to the weights (two where both factors depend on them, one
    where a factor is the data ``X``)."""
    n, k, f, o = settings["n"], settings["d_qk"], settings["d_F"], d_out
    forward = 2 * (2 * n * d * k + n * n * k + n * d * d + n * n * d + 2 * n * d * f + n * d * o)
    backward = 2 * (2 * n * d * o + 4 * n * f * d + 2 * n * n * d + n * d * d + 2 * n * n * k
                    + 2 * n * d * k)
    models = len(settings["betas"]) * len(settings["seeds"])
    return (forward + backward) * settings["n_windows"] * models


def matmul_peak(size: int, repeats: int = 5) -> float:
    """Best float64 ``torch.mm`` rate (FLOP/s) on ``size`` x ``size`` matrices."""
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(size, size, generator=gen, dtype=torch.float64)
    b = torch.randn(size, size, generator=gen, dtype=torch.float64)
    return 2 * size**3 / seconds_per_call(lambda: a @ b, repeats=repeats)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", choices=PROFILES, default="book")
    parser.add_argument("--steps", type=int, default=10, help="timed GD steps per variant")
    parser.add_argument("--repeats", type=int, default=3, help="timings per variant (best kept)")
    parser.add_argument("--peak-size", type=int, default=1024, help="matrix size of the peak")
    args = parser.parse_args(argv)
    settings = settings_for(jena.SETTINGS, args.profile)
    gen = torch.Generator().manual_seed(0)
    d = len(jena.jena_data.FEATURES)
    X = torch.randn(settings["n_windows"], settings["n"], d, generator=gen, dtype=torch.float64)
    Y = torch.randn(settings["n_windows"], settings["n"], 1, generator=gen, dtype=torch.float64)
    template, params, betas, pairs = jena.stacked_models(settings, d=d)
    mu = 1e-6  # any small step: only the time is measured
    B = len(pairs)

    def batched(steps):
        jena.batched_gd(template, params, betas, X, Y, mu=mu, steps=steps)

    def loop(steps):
        jena.loop_gd(settings, X, Y, mu=mu, steps=steps)

    with jena.torch_threads(settings["threads"]):
        threads = torch.get_num_threads()
        peak = matmul_peak(args.peak_size)
        batched(1)  # warm-up
        loop(1)
        per_step = {name: seconds_per_call(lambda fn=fn: fn(args.steps), repeats=args.repeats,
                                           warmup=0) / (args.steps + 1)
                    for name, fn in (("batched", batched), ("loop", loop))}
        lanczos = seconds_per_call(lambda: jena.sharpness(template, params, betas, X, Y, iterations=4),
                                   repeats=2) / 4
        peak_after = matmul_peak(args.peak_size)
    peak = max(peak, peak_after)
    flops = model_flops(settings, d)
    rate = flops / per_step["batched"]
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"profile {args.profile}: {B} models (betas {list(settings['betas'])} x seeds "
          f"{list(settings['seeds'])}), X of shape {tuple(X.shape)}, float64, {threads} torch "
          f"thread(s), load average {load:.2f}")
    print(f"  batched (bmm over model and sample): {per_step['batched'] * 1e3:9.2f} ms per step of all models")
    print(f"  loop over {B} models                : {per_step['loop'] * 1e3:9.2f} ms per step of all models")
    print(f"  speed-up of the batched sweep       : {per_step['loop'] / per_step['batched']:9.2f} x")
    print(f"  model FLOPs of one step             : {flops / 1e9:9.3f} GFLOP")
    print(f"  batched rate                        : {rate / 1e9:9.2f} GFLOP/s")
    print(f"  float64 matmul peak ({args.peak_size}^2, same threads): {peak / 1e9:9.2f} GFLOP/s")
    print(f"  share of the peak                   : {rate / peak:9.1%}")
    sweep = settings["steps"] * per_step["batched"]
    sharp = settings["lanczos_steps"] * lanczos
    print(f"  Lanczos step (Hessian-vector product): {lanczos * 1e3:8.2f} ms; "
          f"{settings['lanczos_steps']} steps = {sharp:.1f} s, {sharp / sweep:.1%} of the GD steps")
    print(f"  projected sweep ({settings['steps']} steps + sharpness): {(sweep + sharp) / 60:.1f} min, "
          f"without data loading and the readings of the ratio")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
