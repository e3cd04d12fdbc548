"""The book's experiments, one module each, runnable from a chapter or from the CLI.

Each module defines ``SETTINGS`` (one row per profile, see :mod:`rcutil.profiles`),
``JSON_NAME`` (the file the CLI writes), ``run(profile=None, *, device="cpu",
progress=True) -> dict`` and optionally ``plot(result, out_dir) -> list[Path]``.
"""
from __future__ import annotations

import importlib
from types import ModuleType

#: CLI name -> module, in the order of the book.
EXPERIMENTS = {
    "model": "rcutil.experiments.model",
    "convergence": "rcutil.experiments.convergence",
    "rank-collapse": "rcutil.experiments.rank_collapse",
    "jena": "rcutil.experiments.jena",
    "sst2": "rcutil.experiments.sst2",
}


def available() -> list[str]:
    """Names of the experiments whose module exists."""
    names = []
    for name, module in EXPERIMENTS.items():
        if importlib.util.find_spec(module) is not None:
            names.append(name)
    return names


def load(name: str) -> ModuleType:
    """The module of experiment ``name``; a ``ValueError`` lists the valid names."""
    if name not in EXPERIMENTS or importlib.util.find_spec(EXPERIMENTS[name]) is None:
        raise ValueError(f"unknown experiment {name!r}: choose one of {', '.join(available())}")
    return importlib.import_module(EXPERIMENTS[name])
