"""The book's thread policy, in one place.

* OpenBLAS (numpy) runs on one thread: ``rcutil`` sets ``OPENBLAS_NUM_THREADS=1`` before numpy
  is first imported, because on two cores its idle threads slowed torch's steps many times over.
* torch keeps its default (one thread per core) unless ``RCUTIL_TORCH_THREADS`` is set; the
  test command sets it to 1, since it runs two notebooks or test workers side by side.
* Experiments made of many small operations run their loops inside :func:`torch_threads` with
  one thread: measured on two cores, a second thread made 100 small GD steps ten times slower.
"""
from __future__ import annotations

import contextlib
import os

import torch

ENV_VAR = "RCUTIL_TORCH_THREADS"


def apply_environment() -> None:
    """Set torch's thread count from ``$RCUTIL_TORCH_THREADS`` when it is given."""
    value = os.environ.get(ENV_VAR, "").strip()
    if value:
        n = int(value) if value.isdecimal() else 0
        if n < 1:
            raise ValueError(f"{ENV_VAR} must be a positive integer (torch's thread count), got "
                             f"{value!r}: set it to 1, 2, ... or unset it for torch's default")
        torch.set_num_threads(n)


@contextlib.contextmanager
def torch_threads(n: int | None):
    """Run a block with ``n`` torch intra-op threads (``None``: leave as is), then restore."""
    old = torch.get_num_threads()
    if n is not None:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(old)
