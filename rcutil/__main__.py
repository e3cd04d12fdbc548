"""``python -m rcutil <experiment> --profile P --out DIR``: run one experiment of the book.

Writes ``DIR/<experiment>.json`` (settings, profile, seeds, library versions and results)
and the experiment's figures. Everything a user can get wrong (the profile, the device, the
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
from .results import library_versions, write_json

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
    from .data import find
    from .validate import device as check_device

    profile = active_profile(args.profile)
    check_device(args.device)
    module = experiments.load(args.experiment)
    if args.estimate:
        from .estimate import format_table

        if not hasattr(module, "estimate"):
            raise ValueError(f"{args.experiment} has no estimate: run it without --estimate")
        parts = module.estimate(profile, device=args.device)
        print(format_table(args.experiment, profile, args.device, parts))
        return 0
    check_out(args.out, module.JSON_NAME)
    if hasattr(module, "data_files"):  # present, verified, or downloaded now: before the run
        for rel in module.data_files(settings_for(module.SETTINGS, profile)):
            find(rel, progress=not args.no_progress)
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.splitlines()[0])
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
