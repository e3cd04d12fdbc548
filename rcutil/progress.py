"""The loops of a run, with a progress bar, and what :mod:`rcutil.estimate` learns from
them.

Every long loop of an experiment iterates through :func:`steps`. In a normal run it is a
tqdm progress bar. While :func:`rcutil.estimate.project` probes a run, it yields only
the first :data:`PROBE` items of a loop, times them (the first is a warm-up), and
reports the loop's projected cost to the probe: so the estimate times a few units of the
real run, with no hand-written model of what the run does.
"""

from __future__ import annotations

import contextvars
import time
import warnings
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import TypeVar

from tqdm.auto import tqdm

# Without ipywidgets, tqdm.auto falls back to text bars in Jupyter; it need not say so.
warnings.filterwarnings("ignore", message="IProgress not found")

T = TypeVar("T")

#: Items of each loop a probe runs: one warm-up, then the timed ones.
PROBE = 3


@dataclass
class Loop:
    """What a probe learned of one loop (or of every loop with the same description)."""

    desc: str
    unit: str
    depth: int
    units: float = 0.0  #: units the whole run does, counting repeats of outer loops
    seconds: float = 0.0  #: projected seconds of those units, inner loops included


@dataclass
class Probe:
    """The state of one probed run: the open loops, and every loop seen."""

    loops: dict[str, Loop] = field(default_factory=dict)
    stack: list = field(default_factory=list)
    extra: float = 0.0  #: projected minus measured seconds of the top-level loops


_PROBE: contextvars.ContextVar[Probe | None] = contextvars.ContextVar(
    "rcutil_probe", default=None
)


def probing() -> Probe | None:
    """The probe in force, if a run is being estimated."""
    return _PROBE.get()


class _Frame:
    """One open loop of a probed run."""

    def __init__(self, desc: str, unit: str, n: int, weight: float, depth: int):
        self.desc, self.unit, self.n, self.weight, self.depth = (
            desc,
            unit,
            n,
            weight,
            depth,
        )
        self.nested = 0.0  # projected minus measured seconds of inner loops, this item


def steps(
    items: Iterable[T] | int,
    *,
    desc: str,
    unit: str = "step",
    progress: bool = True,
    total: int | None = None,
) -> Iterator[T]:
    """Iterate over ``items`` (or ``range(items)``) with a progress bar named ``desc``,
    whose items are ``unit``\\ s. Under a probe, only the first :data:`PROBE` items run
    (see module doc); ``total`` gives the length of an iterable without one."""
    if isinstance(items, int):
        items = range(items)
    n = total if total is not None else len(items)  # type: ignore[arg-type]
    probe = probing()
    if probe is None:
        yield from tqdm(
            items, desc=desc, total=n, unit=unit, disable=not progress, leave=False
        )
        return
    yield from _probed(probe, items, desc, unit, n)


def _probed(probe: Probe, items, desc: str, unit: str, n: int):
    parent = probe.stack[-1] if probe.stack else None
    weight = 1.0 if parent is None else parent.weight * parent.n / min(parent.n, PROBE)
    frame = _Frame(desc, unit, n, weight, len(probe.stack))
    probe.stack.append(frame)
    costs, start, it = [], time.perf_counter(), iter(items)
    try:
        for _ in range(min(n, PROBE)):
            try:
                item = next(it)
            except StopIteration:
                break
            frame.nested = 0.0
            t0 = time.perf_counter()
            try:
                yield item
            finally:  # also when the caller leaves the loop early
                costs.append(time.perf_counter() - t0 + frame.nested)
    finally:
        probe.stack.pop()
        _record(probe, parent, frame, costs, time.perf_counter() - start)


def _record(probe: Probe, parent, frame: _Frame, costs: list, measured: float) -> None:
    """Project a probed loop from the costs of its items (the first a warm-up) and pass
    the difference between projected and measured seconds to the loop around it."""
    if frame.n <= len(costs):  # the whole loop ran
        projected = sum(costs)
    else:
        timed = costs[1:] or costs
        projected = (sum(timed) / len(timed) if timed else 0.0) * frame.n
    loop = probe.loops.setdefault(frame.desc, Loop(frame.desc, frame.unit, frame.depth))
    loop.units += frame.weight * frame.n
    loop.seconds += frame.weight * projected
    if parent is not None:
        parent.nested += projected - measured
    else:
        probe.extra += projected - measured


def run_probed(fn) -> tuple[Probe, float]:
    """Call ``fn()`` under a new probe; return the probe and the seconds the call
    took."""
    probe = Probe()
    token = _PROBE.set(probe)
    try:
        start = time.perf_counter()
        fn()
        return probe, time.perf_counter() - start
    finally:
        _PROBE.reset(token)
