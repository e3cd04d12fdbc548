"""Both wrong verdicts of the claim rules under no effect, per structure of the book's
claims, and the coverage of their intervals: the table of tests/test_claims.py's
simulations at a larger size.

    python scripts/null_rates.py [--reps 10000]

It prints, per structure of the book's claims (with its seeds) and kind of data, the
shares of "reproduced" and "not reproduced" when no effect exists, and of "reproduced"
when one part has no effect while every other part has a large one (each should be at
most the level, 0.05, within the Monte Carlo standard error printed), then per design
the share of intervals that cover a shifted effect against the coverage they state.
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def simulations(reps: int):
    spec = importlib.util.spec_from_file_location(
        "claims_tests", ROOT / "tests" / "test_claims.py"
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules["claims_tests"] = module
    spec.loader.exec_module(module)
    module.REPS = reps
    return module


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=10_000)
    args = parser.parse_args(argv)
    sim = simulations(args.reps)
    se = math.sqrt(0.05 * 0.95 / args.reps)
    print(f"{args.reps:,} simulated claims per cell; Monte Carlo s.e. {se:.4f} at 0.05")
    print(
        "| structure | data | false “reproduced” | false “not reproduced” | "
        "false “reproduced”, one part null, the others far |"
    )
    print("|---|---|---|---|---|")
    for name, structure in sim.BOOK_STRUCTURES.items():
        for i, kind in enumerate(("normal", "skewed", "discrete")):
            rep, rev = sim.wrong_verdicts(name, kind, seed=i, reps=args.reps)
            worst = (
                f"{sim.least_favourable(name, kind, seed=i, reps=args.reps):.4f}"
                if structure.k > 1
                else "(one part)"
            )
            print(f"| {name} | {kind} | {rep:.4f} | {rev:.4f} | {worst} |")
    print("\n| design | data | covered | stated |")
    print("|---|---|---|---|")
    for design, (arms, paired) in sim.COVERAGE_CASES.items():
        for kind in ("skewed", "discrete"):
            rng = np.random.default_rng(9)
            theta, reps = 0.7, args.reps
            seed = rng.normal(size=(reps, 5)) if paired else 0.0
            base = [seed + sim.noise(kind, rng, (reps, 5)) for _ in range(arms)]
            if arms == 2:
                samples = [base[0] + theta, base[1]]
            else:
                c = sim._scores([5] * arms, paired)
                samples = [x + theta * cj for x, cj in zip(base, c)]
            limit = 0 if design == sim.C.PAIRED_TREND else 10_000
            out = sim.simulated_tests(design, samples, exact_limit=limit)
            covered = sim.covers(out, theta).mean()
            stated = sim.C.coverage(int(out["size"]))
            print(f"| {design} | {kind} | {covered:.4f} | {stated:.4f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
