"""Know the cost before a run: ``python -m rcutil <experiment> --profile P --estimate``.

:func:`project` runs the experiment's real ``run`` with the profile's settings on the
chosen device under a probe (:mod:`rcutil.progress`): every loop of the run stops after
a few timed items, and its cost is projected to its full length, inner loops included;
a loop of configurations runs one configuration per shape. What runs outside the loops
(reading data, building models) is measured as it is. The probe says on stderr what it
probes as it goes, and the table marks every loop it extrapolated. Nothing is stored. A
module whose run needs a large download that does not change the cost (pretrained
weights) may define ``estimate_settings(settings) -> settings`` with a stand-in of the
same cost.

Helpers: :func:`seconds_per_call` (warm-up, then the best of a few timed calls; used by
the benchmarks) and :func:`peak_memory` (bytes the block allocated at its peak: CUDA's
allocator statistics on a GPU, the growth of the process's resident set on the CPU).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from .progress import Loop, run_probed


@dataclass(frozen=True)
class Projection:
    """The projected cost of a whole run."""

    loops: tuple[Loop, ...]  #: every loop of the run, in the order it first ran
    seconds: float  #: projected wall time of the whole run
    probe_seconds: float  #: what the probe itself took
    peak_bytes: int  #: peak memory of the probe


def project(
    module, settings, *, device: str = "cpu", say: Callable | None = None
) -> Projection:
    """Probe ``module.run`` with ``settings`` on ``device`` and project the whole run;
    ``say`` is told of each loop as it is first probed."""
    from .validate import device as check_device

    device = str(check_device(device))
    if hasattr(module, "estimate_settings"):
        settings = module.estimate_settings(settings)
    with peak_memory(device) as peak:
        probe, seconds = run_probed(
            lambda: module.run(settings, device=device, progress=False), say
        )
    return Projection(
        tuple(probe.loops.values()), seconds + probe.extra, seconds, peak.bytes
    )


def seconds_per_call(
    fn: Callable[[], object],
    *,
    repeats: int = 3,
    warmup: int = 1,
    sync: Callable[[], None] | None = None,
) -> float:
    """Seconds of one call of ``fn``: ``warmup`` untimed calls, then the best of
    ``repeats``. ``sync`` (e.g. ``torch.cuda.synchronize``) is called before each clock
    reading."""
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
    """Measure the peak memory of a block: ``with peak_memory(device) as peak: ...;
    peak.bytes``.

    On CUDA, the allocator's peak above what was allocated before the block. On the CPU,
    the growth of the process's peak resident set (``ru_maxrss``), which only grows: a
    block that stays below an earlier peak reads 0.
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
    return (
        rss if sys.platform == "darwin" else rss * 1024
    )  # bytes on macOS, KiB on Linux


def format_table(experiment: str, profile: str, device: str, p: Projection) -> str:
    """The projection as the CLI prints it: one row per loop (inner loops indented)."""
    lines = [
        f"estimate for {experiment}, profile {profile}, on {device} "
        f"(probed in {p.probe_seconds:.1f} s):",
        f"  {'loop':<34}{'units':>11}  {'unit':<16}{'probed':>8}{'s/unit':>11}"
        f"{'projected':>12}",
    ]
    for loop in p.loops:
        name = ("  " * loop.depth + loop.desc)[:34]
        per = loop.seconds / loop.units if loop.units else 0.0
        mark = " *" if loop.extrapolated else ""
        per_text = f"{per:.4f}" if per < 100 else _hms(per)
        lines.append(
            f"  {name:<34}{loop.units:>11,.0f}  {loop.unit[:16]:<16}{loop.ran:>8,}"
            f"{per_text:>11}{_hms(loop.seconds):>12}{mark}"
        )
    lines.append(
        f"  {'whole run':<34}{'':>11}  {'':<16}{'':>8}{'':>11}{_hms(p.seconds):>12}"
    )
    lines.append(f"  peak memory of the probe: {p.peak_bytes / 2**20:.1f} MiB")
    if any(loop.extrapolated for loop in p.loops):
        lines.append(
            "  * extrapolated from the units probed: the mean of the timed units "
            "(after a warm-up) times the units of the run, or one configuration of "
            "each shape for all of that shape; code outside the loops was timed as "
            "it ran"
        )
    return "\n".join(lines)


def _hms(seconds: float) -> str:
    seconds = int(round(seconds))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}h{m:02d}m{s:02d}s" if h else f"{m}m{s:02d}s"
