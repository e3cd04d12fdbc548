"""``python -m rcutil <experiment> --profile P --out DIR``: run one experiment of the book.

Computes the result (or takes it from the results store, :mod:`rcutil.results`) and writes
``DIR/<experiment>.json``: settings, profile, device, library versions, the result, and the
sha256 of the content. The chapter of the experiment draws its figures from the same stored
result. Everything a user can get wrong (the profile, the device, the
output folder, the data files) is checked before the run starts; an error is one line on
stderr and a non-zero exit (``--debug`` shows the traceback).
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from . import experiments
from .profiles import PROFILES, active_profile, settings_for

PROG = "python -m rcutil"


def check_out(out: Path, json_name: str) -> Path:
    """Check that ``out`` is (or can become) a folder this user can write the results to."""
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {out} is a file, not a folder: choose a folder for the results")
    try:
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=out):
            pass
    except OSError as exc:
        raise ValueError(f"--out {out} is not a folder this user can write to ({exc.strerror}): "
                         f"choose another --out") from None
    target = out / f"{json_name}.json"
    if target.is_dir():
        raise ValueError(f"--out {out} holds a folder {target.name}, where the result file goes: "
                         f"remove it or choose another --out")
    return out


def one_line(exc: BaseException) -> str:
    """The message of ``exc`` on one line; the type is named unless the message says it all."""
    from .data import DataError

    text = " ".join(str(exc).split()) or repr(exc)
    ours = (ValueError, DataError, FloatingPointError, OSError)
    return text if isinstance(exc, ours) else f"{type(exc).__name__}: {text}"


def run(args: argparse.Namespace) -> int:
    from . import results
    from .data import find
    from .validate import device as check_device

    profile = active_profile(args.profile)
    check_device(args.device)
    entry = experiments.entry(args.experiment)
    module = experiments.load(args.experiment)
    settings = settings_for(module.SETTINGS, profile)
    if args.estimate:
        from .estimate import format_table, project

        projection = project(module, settings, device=args.device)
        print(format_table(args.experiment, profile, args.device, projection))
        return 0
    check_out(args.out, entry.stem)
    if hasattr(module, "data_files"):  # present, verified, or downloaded now: before the run
        for rel in module.data_files(settings):
            find(rel, progress=not args.no_progress)
    start = time.perf_counter()
    stored = results.store(module, profile, device=args.device, progress=not args.no_progress,
                           refresh=args.fresh)
    seconds = time.perf_counter() - start
    path = args.out / f"{entry.stem}.json"
    results.write_json(results.read_json(stored), path)
    print(f"wrote {path} ({seconds:.1f} s, profile {profile}; stored as {stored})")
    print(f"its figures: the chapter book/{entry.stem}.md reads this stored result "
          f"(make chapter NAME={entry.stem} PROFILE={profile}"
          f"{'' if args.device == 'cpu' else f' RCUTIL_DEVICE={args.device}'})")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.splitlines()[0])
    parser.add_argument("experiment", choices=experiments.available())
    parser.add_argument("--profile", choices=PROFILES, default=None,
                        help="run profile (default: $RCUTIL_PROFILE, else ci)")
    parser.add_argument("--out", type=Path, default=Path("out"), help="output folder (default: out)")
    parser.add_argument("--device", default="cpu", help="torch device, e.g. cuda (default: cpu)")
    parser.add_argument("--no-progress", action="store_true", help="hide progress bars")
    parser.add_argument("--fresh", action="store_true",
                        help="compute again even when the results store holds the result")
    parser.add_argument("--estimate", action="store_true",
                        help="time a few steps on the device, print the projected time and peak "
                             "memory of the whole run, and exit without running it")
    parser.add_argument("--debug", action="store_true", help="show the traceback of an error")
    args = parser.parse_args(argv)
    try:
        return run(args)
    except KeyboardInterrupt:
        if args.debug:
            raise
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        if args.debug:
            raise
        print(f"{PROG}: error: {one_line(exc)}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
