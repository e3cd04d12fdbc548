"""Execute every chapter once, two at a time, and store the outputs for the book build.

    python scripts/execute_chapters.py --cache _build/ci/_build/.jupyter_cache
    [book/*.md]

Each MyST chapter is read with MyST-NB's own reader, executed in a fresh kernel (in its
own folder, as the build would), and its executed notebook is stored in the
jupyter-cache that ``jupyter-book build`` (``execute_notebooks: cache``) reads: the
build then renders the stored outputs and executes nothing again. A cell that raises
fails this command, with the chapter, the cell and the traceback; that is the test that
every chapter runs and its assertions hold.

Chapters that gather every experiment's result (``report.gather``: the landing page and
the report) run after all the others, so that they find each result stored and compute
none again. The longest chapters start first (the seconds of the last run, kept beside
the cache; in a first build, those of the published build,
``benchmarks/chapter_seconds.json``). The seconds per chapter are printed and written to
``chapter_seconds.json`` beside the cache.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
#: Seconds per chapter of the last published ``book`` build, to order a first build.
TYPICAL_SECONDS = ROOT / "benchmarks" / "chapter_seconds.json"
GATHERS = "report.gather("
PROG = "scripts/execute_chapters.py"


def _env():
    """:mod:`rcutil.env`, loaded alone: importing the package would load torch."""
    path = ROOT / "rcutil" / "env.py"
    spec = importlib.util.spec_from_file_location("_rcutil_env", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def read_chapter(path: Path):
    """The chapter as MyST-NB reads it in the build (so the cache keys agree)."""
    from myst_nb.core.read import read_myst_markdown_notebook

    return read_myst_markdown_notebook(
        path.read_text("utf8"), add_source_map=True, path=str(path)
    )


def default_timeout() -> int:
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    return int(config.get("execute", {}).get("timeout", 1800))


def execute(path: str, timeout: int) -> tuple[str, dict | None, float, str | None]:
    """Run one chapter in a fresh kernel; returns (path, executed notebook, seconds,
    error)."""
    from jupyter_cache.executors.utils import single_nb_execution

    nb = read_chapter(Path(path))
    timeout = int(nb.metadata.get("mystnb", {}).get("execution_timeout", timeout))
    # the kernel's own log only warns that it talks to this process over local TCP; a
    # chapter's errors and warnings reach the notebook, not that log
    result = single_nb_execution(
        nb,
        cwd=str(Path(path).parent),
        timeout=timeout,
        allow_errors=False,
        meta_override=True,
        extra_arguments=["--IPKernelApp.log_level=ERROR"],
    )
    error = None if result.err is None else (result.exc_string or repr(result.err))
    return path, (nb if error is None else None), result.time, error


def _shown(path: str) -> str:
    path = Path(path)
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def main(argv: list[str] | None = None) -> int:
    env = _env()
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

    from jupyter_cache import get_cache
    from jupyter_cache.base import CacheBundleIn

    chapters = args.chapters or sorted((ROOT / "book").glob("*.md"))
    chapters = [
        p.resolve()
        for p in chapters
        if "format_name: myst" in p.read_text("utf8")[:500]
    ]
    if not chapters:
        print("no MyST notebook chapters to execute", file=sys.stderr)
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
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        for wave in (first, later):
            futures = [pool.submit(execute, str(p), timeout) for p in wave]
            for future in as_completed(futures):
                path, nb, took, error = future.result()
                name = Path(path).stem
                seconds[name] = round(took, 1)
                if error is not None:
                    failed.append(name)
                    print(
                        f"FAILED {_shown(path)} after {took:.1f} s:\n{error}",
                        file=sys.stderr,
                    )
                    continue
                cache.cache_notebook_bundle(
                    CacheBundleIn(nb, path, data={"execution_seconds": took}),
                    check_validity=False,
                    overwrite=True,
                )
                print(f"executed {_shown(path)} in {took:.1f} s", flush=True)
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


if __name__ == "__main__":
    sys.exit(main())
