"""The book's thread policy, in one place. The entry points apply it
(:mod:`rcutil.entry`); importing ``rcutil`` does not.

* OpenBLAS (numpy) runs on one thread (:func:`single_threaded_blas`:
  ``OPENBLAS_NUM_THREADS=1`` before numpy is first imported), because where numpy and
  torch share a process on two cores, its idle threads slowed torch's steps many times
  over.
* torch keeps its default (one thread per core) unless ``RCUTIL_TORCH_THREADS`` is set
  (:func:`apply_environment`; a chapter's kernel gets it as ``OMP_NUM_THREADS``); the
  test command sets it to 1, since it runs two notebooks or test workers side by side.
  The value is a count from 1 to four per core (:func:`rcutil.env.count`): torch hangs
  on thousands of threads and crashes on a hundred thousand.
* Experiments made of many small operations run their loops inside
  :func:`torch_threads` with one thread: measured on two cores, a second thread made
  100 small GD steps ten times slower.
"""

from __future__ import annotations

import contextlib
import os

from . import env

ENV_VAR = "RCUTIL_TORCH_THREADS"
BLAS_VAR = "OPENBLAS_NUM_THREADS"


def single_threaded_blas() -> None:
    """OpenBLAS on one thread, unless ``$OPENBLAS_NUM_THREADS`` says otherwise. OpenBLAS
    reads the variable when numpy first loads it: call this before numpy is
    imported."""
    os.environ.setdefault(BLAS_VAR, "1")


def from_environment() -> int | None:
    """The torch thread count ``$RCUTIL_TORCH_THREADS`` asks for (``None``: unset);
    :class:`rcutil.env.EnvError` outside 1 .. 4 x cores."""
    return env.count(ENV_VAR, None, what="torch threads")


def apply_environment() -> None:
    """Set torch's thread count from ``$RCUTIL_TORCH_THREADS`` when it is given; the
    value is checked before torch loads, so a bad one fails at once."""
    n = from_environment()
    import torch

    if n is not None:
        torch.set_num_threads(n)


@contextlib.contextmanager
def torch_threads(n: int | None):
    """Run a block with ``n`` torch intra-op threads (``None``: leave as is), then
    restore the previous count."""
    import torch

    old = torch.get_num_threads()
    if n is not None:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(old)
