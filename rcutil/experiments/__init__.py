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
    "lipschitz": "rcutil.experiments.lipschitz",
    "singular-values": "rcutil.experiments.singular_values",
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


def results_dir():
    """Where :func:`cached` keeps results: ``$RCUTIL_RESULTS_DIR``, else ``<user cache>/results``."""
    import os
    from pathlib import Path

    from ..data import cache_dir

    value = os.environ.get("RCUTIL_RESULTS_DIR", "").strip()
    return Path(value).expanduser() if value else cache_dir() / "results"


def code_fingerprint() -> str:
    """sha256 over the source of every ``rcutil`` module: a change in the code changes it."""
    import hashlib
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    h = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        h.update(str(path.relative_to(root)).encode())
        h.update(path.read_bytes())
    return h.hexdigest()


def cached(name: str, profile: str | None = None, *, device: str = "cpu", progress: bool = True,
           refresh: bool = False) -> dict:
    """``run`` of experiment ``name``, stored as JSON and reused while nothing it depends on changes.

    The key is the experiment, its settings for the profile, the device and the
    :func:`code_fingerprint` of ``rcutil``; runs are deterministic, so a stored result is the
    result a new run would give. The report chapter uses this to gather every experiment
    without running each twice. ``refresh=True`` or ``RCUTIL_RESULTS_CACHE=0`` forces a run.
    The result always comes back as read from JSON, so its types do not depend on the cache.
    """
    import hashlib
    import json
    import os

    from ..profiles import settings_for
    from ..results import read_json, write_json

    module = load(name)
    settings = settings_for(module.SETTINGS, profile)
    key = hashlib.sha256(json.dumps({"experiment": name, "settings": settings, "device": device,
                                     "code": code_fingerprint()}, sort_keys=True,
                                    default=str).encode()).hexdigest()[:16]
    path = results_dir() / f"{module.JSON_NAME}-{settings['profile']}-{key}.json"
    use_cache = not refresh and os.environ.get("RCUTIL_RESULTS_CACHE", "1") != "0"
    if use_cache and path.is_file():
        return read_json(path)
    write_json(module.run(settings["profile"], device=device, progress=progress), path)
    return read_json(path)
