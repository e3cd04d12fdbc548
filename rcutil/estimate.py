"""Know the cost before a run: ``python -m rcutil <experiment> --profile P --estimate``.

An experiment module may define ``estimate(profile=None, *, device="cpu") -> list[Part]``. It
times a few units of the real configuration (GD steps, optimizer steps, sweep points) on the
chosen device, measures their peak memory, and says how many units the whole run has; the
projection is units times seconds per unit. Nothing is trained and nothing is stored.

Helpers: :func:`seconds_per_call` (warm-up, then the best of a few timed calls) and
:func:`peak_memory` (bytes the block allocated at its peak: CUDA's allocator statistics on a
GPU, the process's resident set on the CPU).
"""
from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Part:
    """One part of a run: ``units`` repetitions of a timed unit of work."""

    name: str                 #: e.g. "L=6 wo" or "beta sweep"
    units: int                #: how many units the whole run has (steps, models, ...)
    unit: str                 #: what a unit is, e.g. "optimizer step"
    seconds_per_unit: float   #: measured
    peak_bytes: int           #: peak memory of one unit, measured

    @property
    def seconds(self) -> float:
        return self.units * self.seconds_per_unit

    def to_dict(self) -> dict:
        return dict(asdict(self), seconds=self.seconds)


def seconds_per_call(fn: Callable[[], object], *, repeats: int = 3, warmup: int = 1,
                     sync: Callable[[], None] | None = None) -> float:
    """Seconds of one call of ``fn``: ``warmup`` untimed calls, then the best of ``repeats``.
    ``sync`` (e.g. ``torch.cuda.synchronize``) is called before each clock reading."""
    sync = sync or (lambda: None)
    for _ in range(warmup):
        fn()
    best = float("inf")
    for _ in range(max(1, repeats)):
        sync()
        start = time.perf_counter()
        fn()
        sync()
        best = min(best, time.perf_counter() - start)
    return best


class _Peak:
    bytes: int = 0


@contextlib.contextmanager
def peak_memory(device: str = "cpu") -> Iterator[_Peak]:
    """Measure the peak memory of a block: ``with peak_memory(device) as peak: ...; peak.bytes``.

    On CUDA, the allocator's peak above what was allocated before the block. On the CPU, the
    growth of the process's peak resident set (``ru_maxrss``), which only grows: a block that
    stays below an earlier peak reads 0, so measure the largest configuration first.
    """
    import torch

    peak = _Peak()
    if str(device).startswith("cuda"):
        torch.cuda.synchronize(device)
        before = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        yield peak
        torch.cuda.synchronize(device)
        peak.bytes = max(0, torch.cuda.max_memory_allocated(device) - before)
        return
    before = _max_rss()
    yield peak
    peak.bytes = max(0, _max_rss() - before)


def _max_rss() -> int:
    try:
        import resource
    except ImportError:  # Windows
        return 0
    import sys

    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss if sys.platform == "darwin" else rss * 1024   # bytes on macOS, KiB on Linux


def format_table(experiment: str, profile: str, device: str, parts: list[Part]) -> str:
    """The projection as the CLI prints it."""
    lines = [f"estimate for {experiment}, profile {profile}, on {device}:",
             f"  {'part':<28}{'units':>9}  {'unit':<18}{'s/unit':>10}{'projected':>12}{'peak MiB':>10}"]
    for p in parts:
        lines.append(f"  {p.name:<28}{p.units:>9,}  {p.unit:<18}{p.seconds_per_unit:>10.4f}"
                     f"{_hms(p.seconds):>12}{p.peak_bytes / 2**20:>10.1f}")
    total = sum(p.seconds for p in parts)
    peak = max((p.peak_bytes for p in parts), default=0)
    lines.append(f"  {'total':<28}{'':>9}  {'':<18}{'':>10}{_hms(total):>12}{peak / 2**20:>10.1f}")
    return "\n".join(lines)


def _hms(seconds: float) -> str:
    seconds = int(round(seconds))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}h{m:02d}m{s:02d}s" if h else f"{m}m{s:02d}s"
