"""What the book's entry points set up before any work: the thread policy, Ctrl-C, and
a check of every environment variable the package reads.

``import rcutil`` does none of this: a library sets no process-wide policy. The entry
points do, each once: the command line (``python -m rcutil``), the chapter runner
(``scripts/execute_chapters.py``, which also passes the policy to every chapter's
kernel through its environment, :func:`kernel_environment`), the test configuration
(``tests/conftest.py``) and ``make lab``.

* :func:`set_up`: OpenBLAS single-threaded (:func:`rcutil.threads.single_threaded_blas`,
  before numpy loads) and Ctrl-C as one line and exit 130 (:func:`exit_on_interrupt`).
* :func:`check_environment`: every ``RCUTIL_*`` variable read through its own reader,
  and the device tried with one small computation, so that a wrong value fails in one
  line before anything runs or is created.
"""

from __future__ import annotations

import os
import signal
import sys
import warnings

from . import threads

_PROG = ["rcutil"]


def _exit_on_interrupt(signum, frame):
    """Ctrl-C: one line and exit 130 at once. A KeyboardInterrupt raised while a
    library loads (torch, numpy, at start or inside a run) can come out as another
    error, or be swallowed. Stopping at once is safe where a kill is: every file is
    staged and renamed (:mod:`rcutil.files`); a block that must see the interrupt as an
    exception restores Python's own handler for its duration."""
    os.write(2, f"{_PROG[0]}: interrupted\n".encode())
    os._exit(130)


def exit_on_interrupt(prog: str) -> None:
    """Make Ctrl-C print ``<prog>: interrupted`` and exit with 130, unless the process
    already handles SIGINT its own way."""
    _PROG[0] = prog
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _exit_on_interrupt)


def handles_interrupts() -> bool:
    """Whether Ctrl-C is :func:`exit_on_interrupt`'s."""
    return signal.getsignal(signal.SIGINT) is _exit_on_interrupt


def set_up(prog: str) -> None:
    """The policy of a command-line entry point: OpenBLAS on one thread (call this
    before numpy is imported), Ctrl-C as one line, and a warning as one line
    (``<prog>: warning: ...``, without the source line Python adds)."""
    exit_on_interrupt(prog)
    threads.single_threaded_blas()
    warnings.formatwarning = lambda message, *args, **kwargs: (
        f"{prog}: warning: {' '.join(str(message).split())}\n"
    )


def kernel_environment(environ: dict[str, str] | None = None) -> dict[str, str]:
    """The environment variables that carry the thread policy into a Jupyter kernel:
    ``OPENBLAS_NUM_THREADS=1`` unless set, and torch's thread count
    (``OMP_NUM_THREADS``, which torch reads at start) from
    ``$RCUTIL_TORCH_THREADS`` when that is set. Raises
    :class:`rcutil.env.EnvError` for a bad count."""
    environ = os.environ if environ is None else environ
    out = {"OPENBLAS_NUM_THREADS": environ.get("OPENBLAS_NUM_THREADS") or "1"}
    n = threads.from_environment()
    if n is not None:
        out["OMP_NUM_THREADS"] = str(n)
    return out


def check_environment(device: str | None = None) -> dict:
    """Read every ``RCUTIL_*`` variable the package reads, through its own reader, and
    try the device (``device``, else ``$RCUTIL_DEVICE``, else cpu) with one small
    computation. The first problem raises its one-line error (a ``ValueError``, an
    :class:`rcutil.env.EnvError` or an :class:`rcutil.data.DataError`) naming the value
    and the fix; otherwise the values are returned by name."""
    from . import data, env, files, profiles, store

    found = {
        profiles.ENV_VAR: profiles.active_profile(),
        threads.ENV_VAR: threads.from_environment(),
        files.LOCK_TIMEOUT_ENV: files.lock_timeout(),
        store.RESULTS_CACHE_ENV: env.flag(store.RESULTS_CACHE_ENV, True),
        data.DATA_DIR_ENV: data.data_dir(),
        data.CACHE_DIR_ENV: data.cache_dir(),
        store.RESULTS_DIR_ENV: store.results_dir(),
    }
    asked = store.device_default() if device is None else device
    if asked == "cpu" and "torch" not in sys.modules:
        found[store.DEVICE_ENV] = asked  # torch computes there: not loaded to know
    else:
        from . import validate

        found[store.DEVICE_ENV] = usable_device(validate.device(asked))
    return found


def usable_device(device):
    """``device`` (a ``torch.device`` the name checks accepted), after one small
    computation on it, read back: a device torch names but cannot compute on (a driver
    or a build that does not fit the hardware) is refused before a run."""
    import torch

    try:
        float((torch.ones(2, device=device) * 2).sum().item())
    except (RuntimeError, NotImplementedError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else repr(exc)
        raise ValueError(
            f"device {str(device)!r} cannot run a computation ({first}): "
            f"use cpu, or a device this torch build supports"
        ) from None
    return device


def check_main(prog: str) -> int:
    """:func:`check_environment` as a command (for the chapter runner): exit 0, or 2
    with one line on stderr."""
    try:
        check_environment()
    except (ValueError, RuntimeError, OSError) as exc:
        print(f"{prog}: error: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    return 0
