"""Execute every chapter once, two at a time, and store the outputs for the book build.

    python scripts/execute_chapters.py --cache _build/ci/_build/.jupyter_cache
    [book/*.md]

Each MyST chapter is read with MyST-NB's own reader, executed in a fresh kernel (in its
own folder, as the build would), and its executed notebook is stored in the
jupyter-cache that ``jupyter-book build`` (``execute_notebooks: cache``) reads: the
build then renders the stored outputs and executes nothing again. A cell that raises
fails this command, with the chapter, the cell and the traceback; that is the test that
every chapter runs and its assertions hold. An error of the book's own package comes
first, in one line, before its traceback.

Before any chapter starts, every ``RCUTIL_*`` variable and the device are checked
(:func:`rcutil.entry.check_environment`): a wrong value is one line, not a traceback
from each chapter. The kernels get the book's thread policy through their environment
(:func:`rcutil.entry.kernel_environment`). Ctrl-C stops the run in one line, with exit
status 130.

Chapters that gather every experiment's result (``report.gather``: the landing page and
the report) run after all the others, so that they find each result stored and compute
none again. The longest chapters start first (the seconds of the last run, kept beside
the cache; in a first build, those of the published build,
``benchmarks/chapter_seconds.json``). The seconds per chapter are printed and written to
``chapter_seconds.json`` beside the cache.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

import yaml

from rcutil import env
from rcutil.entry import kernel_environment

ROOT = Path(__file__).resolve().parents[1]
#: Seconds per chapter of the last published ``book`` build, to order a first build.
TYPICAL_SECONDS = ROOT / "benchmarks" / "chapter_seconds.json"
GATHERS = "report.gather("
PROG = "scripts/execute_chapters.py"


def read_chapter(path: Path):
    """The chapter as MyST-NB reads it in the build (so the cache keys agree)."""
    from myst_nb.core.read import read_myst_markdown_notebook

    return read_myst_markdown_notebook(
        path.read_text("utf8"), add_source_map=True, path=str(path)
    )


def default_timeout() -> int:
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    return int(config.get("execute", {}).get("timeout", 1800))


def check_environment() -> str | None:
    """:func:`rcutil.entry.check_environment` in a process of its own (it loads torch
    to try the device; this process forks the workers, and stays without it): ``None``
    when every variable and the device are good, else the one line that says what is
    wrong."""
    code = "from rcutil.entry import check_main; raise SystemExit(check_main(%r))"
    proc = subprocess.run(
        [sys.executable, "-c", code % PROG], capture_output=True, text=True
    )
    if proc.returncode == 0:
        return None
    lines = proc.stderr.strip().splitlines()
    return lines[-1] if lines else f"{PROG}: error: the environment check failed"


_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_FRAME = re.compile(r"^\s*File (?:\"([^\"]+)\"|(\S+?))(?::\d+|, line \d+)", re.M)


def package_error(err) -> str | None:
    """The one line of a cell's error raised by the book's own package (its innermost
    frame lies in ``rcutil/``): ``Type: message``; ``None`` for any other error."""
    traceback = getattr(err, "traceback", None)
    if not isinstance(traceback, str) or not getattr(err, "ename", None):
        return None
    frames = [a or b for a, b in _FRAME.findall(_ANSI.sub("", traceback))]
    if not frames or "/rcutil/" not in os.path.expanduser(frames[-1]):
        return None
    return " ".join(f"{err.ename}: {err.evalue}".split())


def _worker() -> None:
    """A worker leaves Ctrl-C to the main process (its kernel stops the cell), and its
    kernels' own log goes nowhere: a chapter's errors and warnings reach the notebook,
    and this process reports them; the log only repeats them, or tells of sockets
    closed while an interrupted kernel shuts down."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    os.close(devnull)


def execute(path: str, timeout: int) -> tuple[str, dict | None, float, str | None]:
    """Run one chapter in a fresh kernel; returns (path, executed notebook, seconds,
    error: the package's error line first, when it is one of the package's)."""
    from jupyter_cache.executors.utils import single_nb_execution

    nb = read_chapter(Path(path))
    timeout = int(nb.metadata.get("mystnb", {}).get("execution_timeout", timeout))
    # the kernel's own log goes nowhere (see _worker)
    result = single_nb_execution(
        nb,
        cwd=str(Path(path).parent),
        timeout=timeout,
        allow_errors=False,
        meta_override=True,
        extra_arguments=["--IPKernelApp.log_level=ERROR"],
    )
    error = None if result.err is None else (result.exc_string or repr(result.err))
    if error is not None:
        error = f"{package_error(result.err) or ''}\n{error}"
    return path, (nb if error is None else None), result.time, error


def _shown(path: str) -> str:
    path = Path(path)
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def main(argv: list[str] | None = None) -> int:
    try:
        return run(argv)
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr, flush=True)
        return 130


def run(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.splitlines()[0])
    parser.add_argument(
        "chapters", nargs="*", type=Path, help="default: every book/*.md notebook"
    )
    parser.add_argument(
        "--cache", type=Path, required=True, help="the build's jupyter-cache folder"
    )
    parser.add_argument(
        "--jobs",
        type=int,
        default=None,
        help="chapters executed at a time (default: $RCUTIL_JOBS, else 2)",
    )
    parser.add_argument(
        "--timeout",
        type=int,
        default=None,
        help="seconds per cell (default: _config.yml)",
    )
    args = parser.parse_args(argv)
    try:
        jobs = env.count("RCUTIL_JOBS", 2, what="chapters executed at a time")
    except env.EnvError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    if args.jobs is not None:
        if not 1 <= args.jobs <= 4 * env.cores():
            print(
                f"{PROG}: error: --jobs {args.jobs} is not a number of chapters at a "
                f"time: give 1 to {4 * env.cores()}",
                file=sys.stderr,
            )
            return 2
        jobs = args.jobs
    missing = [str(p) for p in args.chapters if not p.is_file()]
    if missing:
        print(
            f"{PROG}: error: no chapter file {', '.join(missing)}: name the "
            f"chapters' .md files, e.g. book/model.md, or none for every chapter",
            file=sys.stderr,
        )
        return 2

    problem = check_environment()
    if problem is not None:
        print(problem, file=sys.stderr)
        return 2
    try:  # the thread policy, for every kernel
        os.environ.update(kernel_environment())
    except ValueError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2

    from jupyter_cache import get_cache
    from jupyter_cache.base import CacheBundleIn

    chapters = args.chapters or sorted((ROOT / "book").glob("*.md"))
    chapters = [
        p.resolve()
        for p in chapters
        if "format_name: myst" in p.read_text("utf8")[:500]
    ]
    if not chapters:
        print(
            f"{PROG}: error: no MyST notebook among the chapters named (a chapter's "
            f"front matter says format_name: myst): name chapters such as "
            f"book/model.md",
            file=sys.stderr,
        )
        return 2
    timeout = args.timeout or default_timeout()
    seconds_file = args.cache.parent / "chapter_seconds.json"
    # a first build orders by the seconds of the published build (benchmarks/)
    known = seconds_file if seconds_file.is_file() else TYPICAL_SECONDS
    last = json.loads(known.read_text()) if known.is_file() else {}
    first = [p for p in chapters if GATHERS not in p.read_text("utf8")]
    later = [p for p in chapters if p not in first]
    first.sort(key=lambda p: (-last.get(p.stem, 0.0), -p.stat().st_size))

    cache = get_cache(str(args.cache))
    seconds, failed = {}, []
    start = time.perf_counter()
    pool = ProcessPoolExecutor(max_workers=jobs, initializer=_worker)
    try:
        _run_waves(pool, cache, CacheBundleIn, (first, later), timeout, seconds, failed)
    except KeyboardInterrupt:
        # the kernels were interrupted too: their chapters end at once; a second
        # Ctrl-C while they do ends this process
        print(f"{PROG}: interrupted", file=sys.stderr, flush=True)
        signal.signal(signal.SIGINT, lambda *a: os._exit(130))
        pool.shutdown(wait=True, cancel_futures=True)
        return 130
    pool.shutdown()
    seconds_file.parent.mkdir(parents=True, exist_ok=True)
    seconds_file.write_text(
        json.dumps({**last, **seconds}, indent=1, sort_keys=True) + "\n"
    )
    print(
        f"{len(chapters) - len(failed)} of {len(chapters)} chapters executed in "
        f"{time.perf_counter() - start:.0f} s with {jobs} at a time"
    )
    if failed:
        print(f"chapters that failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


def _run_waves(pool, cache, CacheBundleIn, waves, timeout, seconds, failed) -> None:
    """Execute the chapters, wave after wave, and cache each executed notebook."""
    for wave in waves:
        futures = [pool.submit(execute, str(p), timeout) for p in wave]
        for future in as_completed(futures):
            path, nb, took, error = future.result()
            name = Path(path).stem
            seconds[name] = round(took, 1)
            if error is not None:
                failed.append(name)
                print(
                    f"FAILED {_shown(path)} after {took:.1f} s: {error}",
                    file=sys.stderr,
                )
                continue
            cache.cache_notebook_bundle(
                CacheBundleIn(nb, path, data={"execution_seconds": took}),
                check_validity=False,
                overwrite=True,
            )
            print(f"executed {_shown(path)} in {took:.1f} s", flush=True)


if __name__ == "__main__":
    sys.exit(main())
