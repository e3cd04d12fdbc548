"""Experiment results: the JSON files that ``python -m rcutil`` writes and the chapters read,
and the store that lets a chapter, the report and a second build reuse a result.

A stored result is keyed by what it depends on, and by nothing else (:func:`result_key`):

* the experiment's settings for the profile, and the device;
* :func:`science_fingerprint`: the code of the experiment module and of every ``rcutil``
  module it imports, read as syntax trees without docstrings, comments, plotting functions
  (``plot``, ``plot_*``, ``_plot*``) and ``claims``. A new legend keeps a stored result; a
  changed line of the model or of the trainer invalidates it;
* the sha256 of every data file the experiment reads (its ``data_files(settings)``), so a
  replaced data file never returns a result computed from the old one.

Runs are deterministic, so a stored result is the result a new run would give.
"""
from __future__ import annotations

import ast
import contextlib
import hashlib
import json
import math
import os
import platform
import tempfile
import warnings
from pathlib import Path
from typing import Any

RESULTS_DIR_ENV = "RCUTIL_RESULTS_DIR"
RESULTS_CACHE_ENV = "RCUTIL_RESULTS_CACHE"
#: Modules that never change a number: presentation, the store itself, the report and the CLI.
NOT_SCIENCE = ("rcutil.plotting", "rcutil.results", "rcutil.report", "rcutil.claims", "rcutil.__main__")


def library_versions() -> dict[str, str]:
    """Versions of Python and of the libraries the numbers depend on."""
    import numpy
    import sympy
    import torch

    versions = {"python": platform.python_version(), "torch": torch.__version__,
                "numpy": numpy.__version__, "sympy": sympy.__version__}
    try:
        from importlib.metadata import version

        versions["rcutil"] = version("rcutil")
    except Exception:  # not installed as a distribution (e.g. run from a source tree)
        versions["rcutil"] = "source"
    return versions


def to_jsonable(obj: Any) -> Any:
    """Turn tensors, numpy values, tuples and paths into plain JSON types (NaN/inf stay floats)."""
    import numpy as np
    import torch

    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(v) for v in obj]
    if isinstance(obj, torch.Tensor):
        return to_jsonable(obj.detach().cpu().tolist())
    if isinstance(obj, np.ndarray):
        return to_jsonable(obj.tolist())
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, Path):
        return str(obj)
    if isinstance(obj, float) and math.isnan(obj):
        return obj
    if isinstance(obj, (str, int, float, bool)) or obj is None:
        return obj
    if isinstance(obj, torch.dtype):
        return str(obj)
    if callable(obj):
        return getattr(obj, "__name__", repr(obj))
    raise TypeError(f"cannot store {type(obj).__name__} in a result file: {obj!r}")


def write_json(payload: dict, path: Path) -> Path:
    """Write ``payload`` as JSON atomically (temporary file, then rename), readable by all (0644)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(to_jsonable(payload), f, indent=1)
            f.write("\n")
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


class StoredResultError(ValueError):
    """A result file cannot be read (truncated, emptied, not JSON)."""


def read_json(path: Path) -> dict:
    """Read a result file; a damaged one raises :class:`StoredResultError` naming it."""
    path = Path(path)
    try:
        with open(path) as f:
            value = json.load(f)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise StoredResultError(f"{path} is not a valid result file ({exc}): delete it and run "
                                f"the experiment again") from exc
    if not isinstance(value, dict):
        raise StoredResultError(f"{path} holds {type(value).__name__}, not a result: delete it")
    return value


# --------------------------------------------------------------------------- what a result depends on
_PRESENTATION = ("plot", "_plot", "claims")


def _science_tree(source: str) -> ast.Module:
    """The module's syntax tree without docstrings and without presentation functions."""
    tree = ast.parse(source)

    def strip(body):
        kept = [node for node in body
                if not (isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
                        and node.name.startswith(_PRESENTATION))]
        if kept and isinstance(kept[0], ast.Expr) and isinstance(getattr(kept[0], "value", None), ast.Constant) \
                and isinstance(kept[0].value.value, str):
            kept = kept[1:]
        return kept or [ast.Pass()]

    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            node.body = strip(node.body)
    return tree


def _module_file(name: str) -> Path | None:
    """The source file of ``rcutil`` module ``name`` (without importing it), or ``None``."""
    parts = name.split(".")
    if parts[0] != "rcutil":
        return None
    base = Path(__file__).resolve().parent.joinpath(*parts[1:])
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def _imports(tree: ast.Module, module: str, is_package: bool) -> set[str]:
    """``rcutil`` modules named by the import statements of ``tree`` (absolute and relative)."""
    package = module if is_package else module.rpartition(".")[0]
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{base}.{node.module}" if node.module else base
            else:
                base = node.module or ""
            found.add(base)
            found.update(f"{base}.{a.name}" for a in node.names)
    return {m for m in found if m.split(".")[0] == "rcutil" and _module_file(m) is not None}


def science_modules(module: str) -> dict[str, ast.Module]:
    """The experiment module and every ``rcutil`` module it imports, transitively, as science
    syntax trees (see :func:`_science_tree`); :data:`NOT_SCIENCE` modules are left out."""
    seen: dict[str, ast.Module] = {}
    todo = [module]
    while todo:
        name = todo.pop()
        if name in seen or name in NOT_SCIENCE:
            continue
        path = _module_file(name)
        if path is None:
            continue
        tree = _science_tree(path.read_text())
        seen[name] = tree
        todo.extend(_imports(tree, name, path.name == "__init__.py"))
    return seen


def science_fingerprint(module: str) -> str:
    """sha256 over the science code of ``module`` and of what it imports (see module doc)."""
    h = hashlib.sha256()
    for name, tree in sorted(science_modules(module).items()):
        h.update(name.encode())
        h.update(ast.dump(tree).encode())
    return h.hexdigest()


def data_digests(module, settings: dict) -> dict[str, str]:
    """sha256 of every data file the experiment reads, found through :mod:`rcutil.data`."""
    if not hasattr(module, "data_files"):
        return {}
    from .data import find, sha256sum

    return {rel: sha256sum(find(rel)) for rel in module.data_files(settings)}


def result_key(name: str, settings: dict, device: str) -> str:
    """The store key of experiment ``name``: settings, device, science code and data digests."""
    from .experiments import entry, load

    module = load(name)
    payload = {"experiment": name, "settings": settings, "device": device,
               "code": science_fingerprint(entry(name).module),
               "data": data_digests(module, settings)}
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()[:16]


# --------------------------------------------------------------------------- the store
def results_dir() -> Path:
    """Where results are stored: ``$RCUTIL_RESULTS_DIR``, else ``<user cache>/results``."""
    from .data import cache_dir

    value = os.environ.get(RESULTS_DIR_ENV, "").strip()
    return Path(value).expanduser() if value else cache_dir() / "results"


@contextlib.contextmanager
def _locked(path: Path):
    """An exclusive lock on ``path`` + ``.lock`` (POSIX), so that two processes never compute
    the same result at once: the second waits and then reads what the first stored."""
    try:
        import fcntl
    except ImportError:  # no POSIX locks (Windows): compute without one
        yield
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(path.name + ".lock"), "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def stored_path(name: str, profile: str | None = None, *, device: str = "cpu") -> Path:
    """The file under :func:`results_dir` that holds (or will hold) the result."""
    from .experiments import load
    from .profiles import settings_for

    module = load(name)
    settings = settings_for(module.SETTINGS, profile)
    key = result_key(name, settings, device)
    return results_dir() / f"{module.JSON_NAME}-{settings['profile']}-{key}.json"


def cached(name: str, profile: str | None = None, *, device: str = "cpu", progress: bool = True,
           refresh: bool = False) -> dict:
    """The result of experiment ``name`` for the profile, from the store, else computed and stored.

    ``refresh=True`` or ``RCUTIL_RESULTS_CACHE=0`` forces a run. A damaged stored file is
    reported with a warning that names it, computed again and replaced. The result always
    comes back as read from JSON, so its types do not depend on the store.
    """
    import time

    from .experiments import load
    from .profiles import active_profile

    profile = active_profile(profile)
    path = stored_path(name, profile, device=device)
    use_store = not refresh and os.environ.get(RESULTS_CACHE_ENV, "1") != "0"
    with _locked(path):
        if use_store and path.is_file():
            try:
                return read_json(path)
            except StoredResultError as exc:
                warnings.warn(f"{exc}; computing it again", RuntimeWarning, stacklevel=2)
        start = time.perf_counter()
        result = load(name).run(profile, device=device, progress=progress)
        result = {**result, "wall_seconds": round(time.perf_counter() - start, 2)}
        write_json(result, path)
    return read_json(path)
