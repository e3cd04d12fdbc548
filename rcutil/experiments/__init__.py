"""The book's experiments, one module per chapter, runnable from the chapter or from the CLI.

An experiment module ``rcutil/experiments/<module>.py`` defines

* ``NAME`` (the CLI name), ``CHAPTER`` (the label of its chapter), ``TITLE`` (the chapter's
  title in plain text, for links) and ``ORDER`` (its place in the book);
* ``SETTINGS``: one row per profile (see :mod:`rcutil.profiles`), and ``JSON_NAME``, the file
  the CLI writes;
* ``run(profile=None, *, device="cpu", progress=True) -> dict``: the computation, whose result
  serialises to JSON (see :mod:`rcutil.results`);
* ``claims(result) -> list[Claim]``: the paper's claims its chapter tests (see
  :mod:`rcutil.claims`);
* optionally ``plot(result, out_dir) -> list[Path]`` and ``data_files(settings) -> list[str]``
  (the data files ``run`` reads, by their :mod:`rcutil.data` names).

The registry is discovered from the package, so adding an experiment needs no list to edit.
"""
from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass
from functools import lru_cache
from types import ModuleType


@dataclass(frozen=True)
class Experiment:
    """One entry of the registry."""

    name: str       #: CLI name, e.g. ``"rank-collapse"``
    module: str     #: dotted module path
    chapter: str    #: label of the chapter, e.g. ``"rank-collapse"``
    title: str      #: plain-text chapter title
    order: int      #: place in the book


@lru_cache(maxsize=1)
def registry() -> tuple[Experiment, ...]:
    """Every experiment of the book, in the order of the book."""
    found = []
    for info in pkgutil.iter_modules(__path__, prefix=__name__ + "."):
        module = importlib.import_module(info.name)
        missing = [k for k in ("NAME", "CHAPTER", "TITLE", "ORDER", "SETTINGS", "JSON_NAME", "run",
                               "claims") if not hasattr(module, k)]
        if missing:
            raise TypeError(f"{info.name} is in rcutil/experiments but lacks {', '.join(missing)}: "
                            f"see the docstring of rcutil.experiments")
        found.append(Experiment(module.NAME, info.name, module.CHAPTER, module.TITLE, module.ORDER))
    names = [e.name for e in found]
    if len(set(names)) != len(names):
        raise TypeError(f"two experiment modules share a NAME: {sorted(names)}")
    return tuple(sorted(found, key=lambda e: (e.order, e.name)))


def available() -> list[str]:
    """CLI names of every experiment, in the order of the book."""
    return [e.name for e in registry()]


def entry(name: str) -> Experiment:
    """The registry entry of experiment ``name``; a ``ValueError`` lists the valid names."""
    for e in registry():
        if e.name == name:
            return e
    raise ValueError(f"unknown experiment {name!r}: choose one of {', '.join(available())}")


def load(name: str) -> ModuleType:
    """The module of experiment ``name``."""
    return importlib.import_module(entry(name).module)


def cached(name: str, profile: str | None = None, **kwargs) -> dict:
    """:func:`rcutil.results.cached`: the stored result of ``name``, computed when missing."""
    from ..results import cached as _cached

    return _cached(name, profile, **kwargs)
