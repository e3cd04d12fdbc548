"""``python -m rcutil <experiment> --profile P --out DIR``: run one experiment.

Computes the result (or takes it from the results store, :mod:`rcutil.results`) and
writes ``DIR/<experiment>.json``: settings, profile, device, library versions, the
result, and the sha256 of the content; the chapter of the experiment draws its figures
from the same stored result. Everything a user can get wrong (the profile, the device
and whether torch can compute on it, the output folder, its free space and whether the
result file can be replaced, the data files) is checked before the run starts; an error
is one line on stderr and a non-zero exit (``--debug`` shows the traceback), and Ctrl-C
exits with 130 and one line (see :func:`rcutil.entry.exit_on_interrupt`).
"""

from __future__ import annotations

import sys

from . import entry

PROG = "python -m rcutil"
if __name__ == "__main__" and "--debug" not in sys.argv:
    # the policy of this entry point, before numpy or torch load
    entry.set_up(PROG)

import argparse  # noqa: E402
import contextlib  # noqa: E402
import errno  # noqa: E402
import os  # noqa: E402
import shutil  # noqa: E402
import signal  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

from . import experiments, files, threads  # noqa: E402
from .profiles import PROFILES, active_profile, settings_for  # noqa: E402
from .store import read_json, write_json  # noqa: E402

#: Free space a run needs in its output folder, checked before it starts: the largest
#: result file (Jena, profile paper) and the figures take a few tens of MiB.
MIN_FREE_BYTES = 64 * 2**20


def _culprit(out: Path) -> str:
    """Why ``out`` cannot be made a folder: the first part of its path that is a file
    or a link to nothing (``mkdir`` says only "File exists")."""
    for part in reversed((out, *out.parents)):
        if part.is_symlink() and not part.exists():
            return f"{part} is a link to {os.readlink(part)}, which does not exist"
        if part.exists() and not part.is_dir():
            return f"{part} is a file, not a folder"
    return "it cannot be created"


def check_replaceable(target: Path) -> None:
    """Refuse a result file ``target`` that the run could not replace at its end
    (immutable, append-only, or another user's in a sticky folder). Replacing it is
    renaming a temporary file onto it; this renames one onto a hard link to it instead,
    so ``target`` itself is never touched. Without hard links nothing can be told."""
    if not target.is_file() or target.is_symlink():
        return
    tmp = files.temporary(target)
    link = tmp.with_name(f"{tmp.stem}.link.tmp")
    try:
        os.link(target, link)
        os.replace(tmp, link)
    except OSError as exc:
        if exc.errno in (errno.EPERM, errno.EACCES):
            raise ValueError(
                f"--out {target.parent} holds {target.name}, which cannot be replaced "
                f"({exc.strerror}; immutable? see lsattr {target}): make it writable "
                f"(chattr -i) or choose another --out"
            ) from None
    finally:
        for path in (tmp, link):
            Path(path).unlink(missing_ok=True)


def check_space(out: Path, need: int | None = None) -> None:
    """Refuse an output folder with less than ``need`` bytes free (default:
    :data:`MIN_FREE_BYTES`)."""
    need = MIN_FREE_BYTES if need is None else need
    free = shutil.disk_usage(out).free
    if free < need:
        raise ValueError(
            f"--out {out} has {free / 2**20:.1f} MiB free, a run needs at least "
            f"{need / 2**20:.0f} MiB for its result and figures: free some space or "
            f"choose another --out"
        )


def _unwritable(out: Path, exc: OSError) -> ValueError:
    return ValueError(
        f"--out {out} is not a folder this user can write to "
        f"({exc.strerror}): choose another --out"
    )


def check_out(text: str, json_name: str, created: list | None = None) -> Path:
    """The output folder ``text`` (the value of ``--out``), checked: a folder this user
    can write to (created when missing), with room for the result, and whose result
    file ``<json_name>.json`` can be replaced. The folders it creates are added to
    ``created``."""
    if not text.strip():
        raise ValueError(
            "--out is empty: name a folder for the results, e.g. --out out"
        )
    out = Path(text)
    if out.exists() and not out.is_dir():
        raise ValueError(
            f"--out {out} is a file, not a folder: choose a folder for the results"
        )
    made = [p for p in (out, *out.parents) if not p.exists() and not p.is_symlink()]
    try:
        out.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):  # a file or a broken link on the way
        raise ValueError(
            f"--out {out} cannot be made a folder ({_culprit(out)}): "
            f"choose another --out"
        ) from None
    except OSError as exc:
        raise _unwritable(out, exc) from None
    try:
        try:
            with tempfile.TemporaryFile(dir=out):
                pass
        except OSError as exc:
            raise _unwritable(out, exc) from None
        target = out / f"{json_name}.json"
        if target.is_dir():
            raise ValueError(
                f"--out {out} holds a folder {target.name}, where the "
                f"result file goes: remove it or choose another --out"
            )
        check_space(out)
        check_replaceable(target)
    except BaseException:
        remove_empty(made)  # a refused --out leaves nothing behind
        raise
    if created is not None:
        created.extend(made)
    return out


def remove_empty(folders: list[Path]) -> None:
    """Remove the folders of ``folders`` (innermost first) that are still empty."""
    for folder in folders:
        with contextlib.suppress(OSError):
            folder.rmdir()


def write_error(what: str, exc: OSError) -> OSError:
    """An ``OSError`` at write time, as one line naming the file and the fix."""
    if isinstance(exc, files.WriteError):  # it says so already
        return exc
    where = exc.filename or what
    fix = (
        "free some space there or choose another --out"
        if exc.errno in (errno.ENOSPC, errno.EDQUOT)
        else "choose another --out"
    )
    return OSError(f"cannot write {where} ({exc.strerror or exc}): {fix}")


@contextlib.contextmanager
def interrupts_raise():
    """Ctrl-C raises KeyboardInterrupt in this block, whatever the handler outside
    (:func:`rcutil.entry.exit_on_interrupt`): a write it interrupts removes its
    temporary file."""
    outside = signal.getsignal(signal.SIGINT)
    ours = entry.handles_interrupts()
    if ours:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        if ours:
            signal.signal(signal.SIGINT, outside)


def one_line(exc: BaseException) -> str:
    """The message of ``exc`` on one line; the type is named unless the message says
    it all."""
    from .data import DataError

    text = " ".join(str(exc).split()) or repr(exc)
    ours = (ValueError, DataError, FloatingPointError, OSError)
    return text if isinstance(exc, ours) else f"{type(exc).__name__}: {text}"


def run(args: argparse.Namespace) -> int:
    from . import store
    from .data import find

    profile = active_profile(args.profile)
    # every variable and the device, before anything is created
    entry.check_environment(device=args.device)
    threads.apply_environment()
    experiment = experiments.entry(args.experiment)
    module = experiments.load(args.experiment)
    settings = settings_for(module.SETTINGS, profile)
    if args.estimate:
        from .estimate import format_table, project

        projection = project(
            module,
            settings,
            device=args.device,
            say=lambda line: print(line, file=sys.stderr, flush=True),
        )
        print(format_table(args.experiment, profile, args.device, projection))
        return 0
    created: list[Path] = []
    out = check_out(args.out, experiment.stem, created)
    try:
        if hasattr(module, "data_files"):  # present, verified, or downloaded now
            for rel in module.data_files(settings):
                find(rel, progress=not args.no_progress)
        start = time.perf_counter()
        stored = store.store(
            module,
            profile,
            device=args.device,
            progress=not args.no_progress,
            refresh=args.fresh,
        )
    except BaseException:
        remove_empty(created)  # a run that fails leaves no empty --out behind
        raise
    seconds = time.perf_counter() - start
    target = out / f"{experiment.stem}.json"
    fix = "free some space there or choose another --out"
    with interrupts_raise(), files.locked(target, fix=fix):
        files.remove_leftovers(target)  # what a killed write left
        try:
            path = write_json(read_json(stored), target, fix=fix)
        except OSError as exc:
            raise write_error(str(target), exc) from exc
    print(f"wrote {path} ({seconds:.1f} s, profile {profile}; stored as {stored})")
    device = "" if args.device == "cpu" else f" RCUTIL_DEVICE={args.device}"
    print(
        f"its figures: the chapter book/{experiment.stem}.md draws them from the "
        f"stored result (make chapter NAME={experiment.stem} PROFILE={profile}{device})"
    )
    return 0


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.splitlines()[0])
    parser.add_argument("experiment", choices=experiments.available())
    parser.add_argument(
        "--profile",
        choices=PROFILES,
        default=None,
        help="run profile (default: $RCUTIL_PROFILE, else ci)",
    )
    parser.add_argument("--out", default="out", help="output folder (default: out)")
    parser.add_argument(
        "--device", default="cpu", help="torch device, e.g. cuda (default: cpu)"
    )
    parser.add_argument("--no-progress", action="store_true", help="hide progress bars")
    parser.add_argument(
        "--fresh",
        action="store_true",
        help="compute again even when the results store holds the result",
    )
    parser.add_argument(
        "--estimate",
        action="store_true",
        help="time a few steps on the device, print the projected time "
        "and peak memory of the whole run, and exit without "
        "running it",
    )
    parser.add_argument(
        "--debug", action="store_true", help="show the traceback of an error"
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    debug = "--debug" in argv
    try:
        return run(parser().parse_args(argv))
    except KeyboardInterrupt:
        if debug:
            raise
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        if debug:
            raise
        print(f"{PROG}: error: {one_line(exc)}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
