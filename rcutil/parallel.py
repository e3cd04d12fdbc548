"""Independent pieces of a run side by side, in worker processes.

An experiment whose work splits into independent pieces (the training runs of the
SST-2 experiment) hands them to :func:`parallel_map`, which runs them on ``workers``
processes and returns their results in order. Each worker is a fresh Python process
(started by ``spawn``, the one way that works the same in a notebook, a script, Linux
and macOS) with one torch thread, so that two pieces on two cores do not slow each other
down with threads. With one worker, or while :mod:`rcutil.estimate` probes a run, the
pieces run one after the other in this process. A piece that raises stops the run and
raises here.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from typing import TypeVar

from . import validate
from .progress import probing
from .progress import steps as loop

T = TypeVar("T")
R = TypeVar("R")


def _start_worker() -> None:
    import torch

    torch.set_num_threads(1)


def parallel_map(
    fn: Callable[[T], R],
    items: Sequence[T],
    *,
    workers: int,
    cost: Callable[[T], float] | None = None,
    progress: bool = False,
    desc: str = "runs",
    unit: str = "run",
) -> list[R]:
    """``[fn(x) for x in items]`` on ``workers`` processes, in the order of ``items``.

    ``fn`` must be importable by the workers (a function at the top level of a module)
    and ``items`` and results picklable. ``cost(item)``, if given, estimates each
    piece's time: the costliest start first, so that the longest piece does not start
    last."""
    workers = validate.positive_int("workers", workers)
    items = list(items)
    if workers == 1 or len(items) < 2 or probing() is not None:
        return [fn(x) for x in loop(items, desc=desc, unit=unit, progress=progress)]
    order = sorted(range(len(items)), key=lambda i: -cost(items[i])) if cost else None
    order = order or list(range(len(items)))
    context = multiprocessing.get_context("spawn")
    results: list = [None] * len(items)
    pool = ProcessPoolExecutor(
        max_workers=min(workers, len(items)),
        mp_context=context,
        initializer=_start_worker,
    )
    try:
        running = {pool.submit(fn, items[i]): i for i in order}
        for _ in loop(len(items), desc=desc, unit=unit, progress=progress):
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            future = done.pop()
            results[running.pop(future)] = future.result()
    except BaseException:
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown()
    return results
