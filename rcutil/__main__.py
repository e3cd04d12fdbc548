"""``python -m rcutil <experiment> --profile P --out DIR``: run one experiment of the book.

Writes ``DIR/<experiment>.json`` (settings, profile, seeds, library versions and results)
and the experiment's figures.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from . import experiments
from .profiles import PROFILES, active_profile
from .results import library_versions, write_json


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rcutil", description=__doc__.splitlines()[0])
    parser.add_argument("experiment", choices=experiments.available())
    parser.add_argument("--profile", choices=PROFILES, default=None,
                        help="run profile (default: $RCUTIL_PROFILE, else ci)")
    parser.add_argument("--out", type=Path, default=Path("out"), help="output folder (default: out)")
    parser.add_argument("--device", default="cpu", help="torch device, e.g. cuda (default: cpu)")
    parser.add_argument("--no-progress", action="store_true", help="hide progress bars")
    parser.add_argument("--no-figures", action="store_true", help="write the JSON only")
    parser.add_argument("--estimate", action="store_true",
                        help="time a few steps on the device, print the projected time and peak "
                             "memory of the whole run, and exit without running it")
    args = parser.parse_args(argv)

    profile = active_profile(args.profile)
    module = experiments.load(args.experiment)
    if args.estimate:
        from .estimate import format_table

        if not hasattr(module, "estimate"):
            parser.error(f"{args.experiment} has no estimate")
        parts = module.estimate(profile, device=args.device)
        print(format_table(args.experiment, profile, args.device, parts))
        return 0
    start = time.perf_counter()
    result = module.run(profile, device=args.device, progress=not args.no_progress)
    seconds = time.perf_counter() - start
    payload = {"experiment": args.experiment, "profile": profile, "device": args.device,
               "versions": library_versions(), "wall_seconds": round(seconds, 2), **result}
    path = write_json(payload, args.out / f"{module.JSON_NAME}.json")
    print(f"wrote {path} ({seconds:.1f} s, profile {profile})")
    if not args.no_figures and hasattr(module, "plot"):
        for fig in module.plot(result, args.out):
            print(f"wrote {fig}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
