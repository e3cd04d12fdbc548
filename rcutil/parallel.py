"""Independent pieces of a run side by side, in worker processes.

An experiment whose work splits into independent pieces (the training runs of the
SST-2 experiment) hands them to :func:`parallel_map`, which runs them on ``workers``
processes and returns their results in order. Each worker is a fresh Python process
(started by ``spawn``, the one way that works the same in a notebook, a script, Linux
and macOS) with one torch thread, so that two pieces on two cores do not slow each other
down with threads. With one worker, or while :mod:`rcutil.estimate` probes a run, the
pieces run one after the other in this process (under a probe, only those it times). A
piece that raises stops the run and raises here.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable, Hashable, Sequence
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
    shape: Callable[[T], Hashable] | None = None,
    progress: bool = False,
    desc: str = "runs",
    unit: str = "run",
) -> list[R]:
    """``[fn(x) for x in items]`` on ``workers`` processes, in the order of ``items``.

    ``fn`` must be importable by the workers (a function at the top level of a module)
    and ``items`` and results picklable. ``cost(item)``, if given, estimates each
    piece's time: the costliest start first, so that the longest piece does not start
    last. ``shape(item)``, if given, names the pieces that cost alike, of which a probe
    of :mod:`rcutil.estimate` runs one."""
    workers = validate.positive_int("workers", workers)
    items = list(items)
    if probing() is not None:
        return _probed(fn, items, shape, desc, unit)
    if workers == 1 or len(items) < 2:
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


def _probed(fn, items: list, shape, desc: str, unit: str) -> list:
    """Under a probe: the pieces the probe runs (one per ``shape``, or the first few),
    in this process; a piece it skips gets the result of the piece that stands for it
    (the same shape, or the last one run), so that the run goes on with one result per
    piece. An estimate discards the results."""
    key = (lambda i: shape(items[i])) if shape else None
    ran: dict[int, object] = {}
    for i in loop(range(len(items)), desc=desc, unit=unit, progress=False, shape=key):
        ran[i] = fn(items[i])
    results, last = [], None
    for i in range(len(items)):
        if i in ran:
            last = ran[i]
        elif shape is not None:
            last = ran[next(j for j in ran if shape(items[j]) == shape(items[i]))]
        results.append(last)
    return results
