"""The checks and claims of the experiment (see :mod:`rcutil.experiments`)."""

from . import checks, claims

__all__ = ["checks", "claims"]
