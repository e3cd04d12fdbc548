"""Time the Jena sweep: all (beta, seed) models as one batched computation against a plain
Python loop over models (``rcutil.train.gradient_descent`` per model), side by side.

    python benchmarks/jena_sweep.py --profile book --steps 5

Inputs are standard-normal tensors of the profile's shape (N, n, d) = (n_windows, n, 14): the
time of a step does not depend on the values, and the full data file is not needed. Both
variants are warmed up first (the first autograd call of a process is slow), run with the
profile's torch thread setting, and then timed over the same number of steps. The script
also times one power iteration of the sharpness estimate and prints an estimate of the
profile's whole sweep.
"""
from __future__ import annotations

import argparse
import time

import torch

import rcutil  # noqa: F401  (thread policy before numpy)
from rcutil.experiments import jena
from rcutil.profiles import PROFILES, settings_for


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", choices=PROFILES, default="ci")
    parser.add_argument("--steps", type=int, default=10, help="timed GD steps per variant")
    parser.add_argument("--repeats", type=int, default=2, help="timings per variant (best kept)")
    args = parser.parse_args(argv)
    s = settings_for(jena.SETTINGS, args.profile)
    gen = torch.Generator().manual_seed(0)
    d = len(jena.jena_data.FEATURES)
    X = torch.randn(s["n_windows"], s["n"], d, generator=gen, dtype=torch.float64)
    Y = torch.randn(s["n_windows"], s["n"], 1, generator=gen, dtype=torch.float64)
    template, params, betas, pairs = jena.stacked_models(s, d=d)
    mu = 1e-6  # any small step: only the time is measured
    B = len(pairs)

    def batched():
        jena.batched_gd(template, params, betas, X, Y, mu=mu, steps=args.steps)

    def loop():
        jena.loop_gd(s, X, Y, mu=mu, steps=args.steps)

    def power(iterations):
        jena.sharpness(template, params, betas, X, Y, iterations=iterations)

    with jena.torch_threads(s["torch_threads"]):
        threads = torch.get_num_threads()
        jena.batched_gd(template, params, betas, X, Y, mu=mu, steps=1)  # warm-up
        jena.loop_gd(s, X, Y, mu=mu, steps=1)
        power(1)
        times = {}
        for name, fn in (("batched", batched), ("loop", loop)):
            best = float("inf")
            for _ in range(args.repeats):
                t0 = time.perf_counter()
                fn()
                best = min(best, time.perf_counter() - t0)
            times[name] = best / (args.steps + 1)  # steps + 1 evaluations
        t0 = time.perf_counter()
        power(2)
        per_power = (time.perf_counter() - t0) / 2

    print(f"profile {args.profile}: {B} models (betas {list(s['betas'])} x seeds "
          f"{list(s['seeds'])}), X of shape {tuple(X.shape)}, float64, {threads} torch thread(s)")
    print(f"  batched (vmap + functional_call): {times['batched'] * 1e3:9.2f} ms per step of all models")
    print(f"  loop over {B} models             : {times['loop'] * 1e3:9.2f} ms per step of all models")
    print(f"  speed-up of the batched sweep    : {times['loop'] / times['batched']:9.2f} x")
    total = s["steps"] * times["batched"] + s["power_iterations"] * per_power
    print(f"  sharpness power iteration        : {per_power * 1e3:9.2f} ms per iteration")
    print(f"  estimate of the {args.profile} sweep ({s['steps']} steps + {s['power_iterations']} "
          f"power iterations): {total / 60:.1f} min, data loading not included")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
