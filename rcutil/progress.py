"""The loops of a run, with a progress bar, and what :mod:`rcutil.estimate` learns from
them.

Every long loop of an experiment iterates through :func:`steps`. In a normal run it is a
tqdm progress bar. While :func:`rcutil.estimate.project` probes a run, a loop yields
only a few of its items, times them, and reports its projected cost to the probe: so
the estimate times a few units of the real run, with no hand-written model of what the
run does.

* A loop runs its first :data:`PROBE` items; the first is a warm-up, the others are
  timed, and their mean stands for every item (``spread=True`` takes the timed items
  from across the loop instead, for a loop whose items grow, such as batches sorted
  by length).
* A loop marked ``probe_once`` (one that the run enters again and again: the steps of
  every seed, the batches of every evaluation) runs one item once a probe has timed
  it: the code is warm, and one item measures this instance.
* A loop of configurations says which of its items cost alike (``shape``): the probe
  runs the first item of each shape and counts it for every item of that shape.
"""

from __future__ import annotations

import contextvars
import time
import warnings
from collections.abc import Callable, Hashable, Iterable, Iterator, Sequence
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
    ran: int = 0  #: units the probe ran

    @property
    def extrapolated(self) -> bool:
        """Whether the projection counts more units than the probe ran."""
        return self.units > self.ran


@dataclass
class Probe:
    """The state of one probed run: the open loops, and every loop seen."""

    loops: dict[str, Loop] = field(default_factory=dict)
    stack: list = field(default_factory=list)
    extra: float = 0.0  #: projected minus measured seconds of the top-level loops
    say: Callable[[str], None] | None = None  #: told of each loop as it is first probed
    start: float = field(default_factory=time.perf_counter)


_PROBE: contextvars.ContextVar[Probe | None] = contextvars.ContextVar(
    "rcutil_probe", default=None
)


def probing() -> Probe | None:
    """The probe in force, if a run is being estimated."""
    return _PROBE.get()


class _Frame:
    """One open loop of a probed run."""

    def __init__(self, desc: str, unit: str, depth: int, weight: float):
        self.desc, self.unit, self.depth, self.weight = desc, unit, depth, weight
        self.times = 1.0  # items of the loop the current item stands for
        self.nested = 0.0  # projected minus measured seconds of inner loops, this item


def same(item) -> str:
    """The ``shape`` of a loop whose items all cost alike (seeds, rates): a probe runs
    one of them."""
    return "alike"


def steps(
    items: Iterable[T] | int,
    *,
    desc: str,
    unit: str = "step",
    progress: bool = True,
    total: int | None = None,
    shape: Callable[[T], Hashable] | None = None,
    spread: bool = False,
    probe_once: bool = False,
) -> Iterator[T]:
    """Iterate over ``items`` (or ``range(items)``) with a progress bar named ``desc``,
    whose items are ``unit``\\ s; ``total`` gives the length of an iterable without
    one. Under a probe, only a few items run (see the module docstring): ``shape(item)``
    names the items that cost alike, one of which stands for all; ``spread`` takes the
    timed items from across a sequence; ``probe_once`` runs one item of a loop probed
    before."""
    if isinstance(items, int):
        items = range(items)
    n = total if total is not None else len(items)  # type: ignore[arg-type]
    probe = probing()
    if probe is None:
        yield from tqdm(
            items, desc=desc, total=n, unit=unit, disable=not progress, leave=False
        )
        return
    yield from _probed(probe, items, desc, unit, n, shape, spread, probe_once)


def _plan(items, n: int, warm: bool, shape, spread: bool) -> list[tuple[int, float]]:
    """Which items a probe runs, by index, and how many items each stands for."""
    if shape is not None:
        groups: dict = {}
        for i, item in enumerate(items):
            groups.setdefault(shape(item), []).append(i)
        return [(members[0], float(len(members))) for members in groups.values()]
    k = min(n, 1 if warm else PROBE)
    if spread and k < n and isinstance(items, Sequence):
        if k == 1:  # warm: the middle item
            return [(n // 2, float(n))]
        timed = [round(j * (n - 1) / k) for j in range(1, k)]  # at the k-quantiles
        return [(0, n / k)] + [(i, n / k) for i in timed]
    return [(i, n / k if k else 0.0) for i in range(k)]


def _plural(unit: str) -> str:
    return unit + ("es" if unit.endswith(("s", "sh", "ch", "x")) else "s")


def _probed(probe: Probe, items, desc: str, unit: str, n: int, shape, spread, once):
    parent = probe.stack[-1] if probe.stack else None
    weight = 1.0 if parent is None else parent.weight * parent.times
    seen = desc in probe.loops
    warm = once and seen
    if shape is not None:
        items = list(items)
    plan = _plan(items, n, warm, shape, spread)
    if not seen and probe.say is not None:
        probe.say(
            f"[{time.perf_counter() - probe.start:6.1f} s] probing {desc}: "
            f"{len(plan)} of {n:,} {_plural(unit)}"
            + (" (one per shape)" if shape is not None else "")
        )
    frame = _Frame(desc, unit, len(probe.stack), weight)
    probe.loops.setdefault(desc, Loop(desc, unit, frame.depth))  # in the order begun
    probe.stack.append(frame)
    costs: list[tuple[float, float]] = []  # (seconds, items it stands for)
    start, it, at = time.perf_counter(), iter(items), 0
    try:
        for index, times in plan:
            try:
                while at < index:  # skip to the planned item (an iterator is consumed)
                    next(it)
                    at += 1
                item = next(it)
                at += 1
            except StopIteration:
                break
            frame.nested, frame.times = 0.0, times
            t0 = time.perf_counter()
            try:
                yield item
            finally:  # also when the caller leaves the loop early
                costs.append((time.perf_counter() - t0 + frame.nested, times))
    finally:
        probe.stack.pop()
        _record(probe, parent, frame, n, costs, time.perf_counter() - start, shape)


def _record(probe, parent, frame: _Frame, n: int, costs, measured, shape) -> None:
    """Project a probed loop from the costs of its items and pass the difference
    between projected and measured seconds to the loop around it."""
    if shape is not None or n <= len(costs):  # each item ran counts for its own
        projected = sum(cost * times for cost, times in costs)
    else:  # the first of several is a warm-up; the mean of the others stands for all
        timed = [cost for cost, _ in costs[1:]] or [cost for cost, _ in costs]
        projected = (sum(timed) / len(timed) if timed else 0.0) * n
    loop = probe.loops[frame.desc]
    loop.units += frame.weight * n
    loop.seconds += frame.weight * projected
    loop.ran += len(costs)
    if parent is not None:
        parent.nested += projected - measured
    else:
        probe.extra += projected - measured


def run_probed(fn, say: Callable[[str], None] | None = None) -> tuple[Probe, float]:
    """Call ``fn()`` under a new probe (telling ``say`` of each loop as it is first
    probed); return the probe and the seconds the call took."""
    probe = Probe(say=say)
    token = _PROBE.set(probe)
    try:
        start = time.perf_counter()
        fn()
        return probe, time.perf_counter() - start
    finally:
        _PROBE.reset(token)
