"""The book's thread policy, in one place.

* OpenBLAS (numpy) runs on one thread: ``rcutil`` sets ``OPENBLAS_NUM_THREADS=1``
  before numpy is first imported, because on two cores its idle threads slowed torch's
  steps many times over.
* torch keeps its default (one thread per core) unless ``RCUTIL_TORCH_THREADS`` is set;
  the test command sets it to 1, since it runs two notebooks or test workers side by
  side. The value is a count from 1 to four per core (:func:`rcutil.env.count`): torch
  hangs on thousands of threads and crashes on a hundred thousand.
* Experiments made of many small operations run their loops inside
  :func:`torch_threads` with one thread: measured on two cores, a second thread made
  100 small GD steps ten times slower.
"""

from __future__ import annotations

import contextlib

from . import env

ENV_VAR = "RCUTIL_TORCH_THREADS"


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
