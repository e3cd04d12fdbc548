"""Time the seeds of one SST-2 arm trained as one ensemble against a loop over them.

    .venv/bin/python benchmarks/sst2_seeds.py [--profile book] [--layers L]
        [--threads 1] [--repeats R] [--steps S] [--seeds K]

For each depth of the profile, the K reported seeds of the arm with residuals
(``--seeds``, default the profile's) take optimizer steps of the experiment's recipe on
their own training batches (:class:`rcutil.sst2_train.Batches`, in the order all the
seeds share), two ways:

* **loop**: each seed's model alone, one :func:`rcutil.sst2_train.train_step` after the
  other, as the experiment trained its seeds before the ensemble;
* **ensemble**: the K models as one :class:`rcutil.sst2_train.Ensemble` (stacked
  weights, one ``vmap`` forward and backward, each member's own clipping and AdamW), as
  the experiment trains them now.

Both take the same batches in the same order. After a warm-up the two are timed in
alternating rounds (R rounds of S steps, median per-step time), so that a change in the
machine's load hits both alike; with one torch thread the clock is the process's CPU
time, with more it is wall time. It prints ms per model-step of each way and their
ratio ensemble / loop (below 1: the ensemble is faster), per depth and for one step of
each depth together (``all``, the mix of the experiment's training, where every depth
trains as many steps).
"""

from __future__ import annotations

import argparse
import time

from gpt2_step import timed  # beside this file; sets the book's thread policy

# isort: split
import torch


def settings_of(profile: str):
    from rcutil.experiments import sst2
    from rcutil.profiles import settings_for

    return settings_for(sst2.SETTINGS, profile)


def steppers(settings, data, layers: int, seeds: list[int]) -> dict:
    """The two ways to take one step of every seed: ``loop`` and ``ensemble``."""
    from rcutil import sst2_train as recipe

    depth = settings.layers.index(layers) if layers in settings.layers else 0
    lr, clip = settings.lr_grid["scratch"].start(True, depth)[1], settings.grad_clip

    def models():
        return [
            recipe.make_model(settings, "scratch", layers, True, s, data["vocabulary"])
            for s in seeds
        ]

    def batches():
        return [
            recipe.Batches(
                data["train"],
                settings.batch_size,
                s,
                order_seed=settings.data_seed,
            )
            for s in seeds
        ]

    alone = models()
    optimizers = [recipe.make_optimizer(m, settings, lr) for m in alone]
    own = batches()

    def loop():
        for m, (opt, sched), b in zip(alone, optimizers, own):
            recipe.train_step(m, opt, sched, *b.next(), grad_clip=clip)

    ensemble = recipe.Ensemble(models(), settings, [lr] * len(seeds))
    stacked = batches()

    def together():
        x, n, y = (torch.stack(t) for t in zip(*(b.next() for b in stacked)))
        ensemble.step(x, n, y)

    return {"loop": loop, "ensemble": together}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add = parser.add_argument
    add("--profile", default="book", help="the SST-2 settings row (default book)")
    add("--layers", type=int, default=None, help="blocks L (default: the profile's)")
    add("--threads", type=int, default=1, help="torch threads (default 1, as the book)")
    add("--repeats", type=int, default=5, help="alternating rounds (default 5)")
    add("--steps", type=int, default=4, help="steps per round (default 4)")
    add("--seeds", type=int, default=None, help="K seeds (default: the profile's)")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    from rcutil import sst2_train as recipe

    settings = settings_of(args.profile)
    data = recipe.prepare_data(settings)
    seeds = list(range(args.seeds)) if args.seeds else list(settings.seeds)
    clock = time.process_time if args.threads == 1 else time.perf_counter
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} thread(s); profile "
        f"{args.profile}: d={settings.d_model}, batch {settings.batch_size}, "
        f"{len(seeds)} seeds; clock: "
        f"{'process CPU time' if args.threads == 1 else 'wall time'}"
    )
    print(f"{'L':>4}  {'loop ms':>9}{'ensemble ms':>13}{'ratio':>8}   (per model-step)")
    total = {"loop": 0.0, "ensemble": 0.0}
    for layers in [args.layers] if args.layers else settings.layers:
        med = timed(
            steppers(settings, data, layers, seeds),
            repeats=args.repeats,
            steps=args.steps,
            clock=clock,
        )
        loop, ens = (1e3 * med[k] / len(seeds) for k in ("loop", "ensemble"))
        total["loop"] += loop
        total["ensemble"] += ens
        print(f"{layers:>4}  {loop:>9.1f}{ens:>13.1f}{ens / loop:>8.2f}")
    if not args.layers:
        loop, ens = total["loop"], total["ensemble"]
        print(f"{'all':>4}  {loop:>9.1f}{ens:>13.1f}{ens / loop:>8.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
