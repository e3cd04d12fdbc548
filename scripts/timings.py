"""Print the seconds per chapter (this build's execution) and per experiment (its stored
run).

    python scripts/timings.py --profile ci --chapters
    _build/ci/_build/chapter_seconds.json

A chapter that reuses a stored experiment result takes seconds although its experiment
took minutes once; the two columns say which is which. An experiment whose result was
stored by an earlier build shows that run's seconds, marked "stored".
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", required=True)
    parser.add_argument(
        "--chapters",
        type=Path,
        required=True,
        help="chapter_seconds.json of the executor",
    )
    args = parser.parse_args(argv)

    from rcutil import experiments
    from rcutil.store import read_json, stored_path

    chapters = json.loads(args.chapters.read_text()) if args.chapters.is_file() else {}
    print(f"\nseconds per chapter and experiment, profile {args.profile}")
    print(f"{'chapter':<18}{'chapter s':>10}   {'experiment':<17}{'experiment s':>13}")
    by_chapter = {e.stem: e for e in experiments.registry()}
    for name in sorted(chapters, key=lambda k: -chapters[k]):
        e = by_chapter.get(name)
        exp, secs = "", ""
        if e is not None:
            path = stored_path(experiments.load(e.name), args.profile)
            exp = e.name
            secs = (
                f"{read_json(path).get('wall_seconds', float('nan')):.1f}"
                if path.is_file()
                else "not run"
            )
        print(f"{name:<18}{chapters[name]:>10.1f}   {exp:<17}{secs:>13}")
    print(f"{'total':<18}{sum(chapters.values()):>10.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
