"""Experiment results: their typed form, the JSON files that hold them, and the store
that lets a chapter, the report, the CLI and a second build reuse a result.

Every experiment's result is a dataclass derived from :class:`Result`; it reads and
writes plain JSON (:meth:`Result.to_json`, :meth:`Result.from_json`). A sweep is a list
of points, each a dataclass that holds its own axis values (``beta``, ``layers``,
``residual``) as fields, in the order of the settings; :func:`pick` finds one point by
its axis values. Values per seed are lists (or arrays) whose first axis runs over
``settings["seeds"]``.

A stored result is keyed by what it depends on, and by nothing else
(:func:`result_key`):

* the experiment's settings for the profile, and the device;
* :func:`science_fingerprint`: the code that ``run`` reaches, followed by structure
  through the experiment module and every ``rcutil`` module it uses: the definitions
  ``run`` names, and those they name, as syntax trees without docstrings or comments.
  Code ``run`` never reaches (claims, figures, prose) does not change the key, whatever
  its name; a change to anything ``run`` reaches does;
* the sha256 of every data file the experiment reads (its ``data_files(settings)``).

A stored file also records the sha256 of its own content: a file edited by hand, cut
short or emptied is reported in one line, computed again and replaced. Runs are
deterministic, so a stored result is the result a new run would give.
"""

from __future__ import annotations

import ast
import contextlib
import copy
import dataclasses
import errno
import functools
import hashlib
import json
import math
import os
import platform
import sys
import tempfile
import time
import types
import typing
import warnings
from pathlib import Path
from typing import Any, TypeVar

from . import env

RESULTS_DIR_ENV = "RCUTIL_RESULTS_DIR"
RESULTS_CACHE_ENV = "RCUTIL_RESULTS_CACHE"
LOCK_TIMEOUT_ENV = "RCUTIL_LOCK_TIMEOUT"
DEVICE_ENV = "RCUTIL_DEVICE"
#: Seconds a process waits for another's lock before it says so, and the default limit.
LOCK_SPEAK_S = 5.0
LOCK_LIMIT_S = 6 * 3600


class StoredResultError(ValueError):
    """A result file cannot be used: truncated, emptied, not JSON, edited, or of another
    form."""


class ResultWriteError(OSError):
    """A result file could not be written (full disk, read-only folder, ...)."""


# --------------------------------------------------------------------------- typed
# results
R = TypeVar("R", bound="Result")


@dataclasses.dataclass
class Result:
    """Base of every experiment's result: ``settings`` (the profile's row, with
    ``profile``) and the fields of the subclass. Fields may be numbers, strings, lists,
    dicts, numpy arrays, other dataclasses, and lists or dicts of these."""

    settings: dict

    def to_json(self) -> dict:
        """The result as plain JSON types."""
        return to_jsonable(self)

    @classmethod
    def from_json(cls: type[R], data: Any) -> R:
        """The result back from :meth:`to_json`'s form; a missing or unknown field
        raises :class:`StoredResultError` naming it."""
        return _from_json(cls, data, cls.__name__)


def _from_json(hint, value, where: str):
    """``value`` (plain JSON) as the type ``hint``."""
    import numpy as np

    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        (hint,) = [a for a in args if a is not type(None)] or [Any]
        return _from_json(hint, value, where)
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        if not isinstance(value, dict):
            raise StoredResultError(
                f"{where} should be an object, got {type(value).__name__}"
            )
        hints = typing.get_type_hints(hint)
        fields = [f.name for f in dataclasses.fields(hint) if f.init]
        missing = [f for f in fields if f not in value]
        unknown = [k for k in value if k not in fields]
        if missing or unknown:
            raise StoredResultError(f"{where} lacks {missing} or has unknown {unknown}")
        return hint(
            **{f: _from_json(hints[f], value[f], f"{where}.{f}") for f in fields}
        )
    if hint is np.ndarray:
        return np.asarray(value, dtype=float)
    if origin in (list, tuple) and args:
        if not isinstance(value, list):
            raise StoredResultError(
                f"{where} should be a list, got {type(value).__name__}"
            )
        if origin is tuple and (len(args) != 2 or args[1] is not Ellipsis):
            return tuple(
                _from_json(a, v, f"{where}[{i}]")
                for i, (a, v) in enumerate(zip(args, value))
            )
        return origin(
            _from_json(args[0], v, f"{where}[{i}]") for i, v in enumerate(value)
        )
    if origin is dict and args:
        if not isinstance(value, dict):
            raise StoredResultError(
                f"{where} should be an object, got {type(value).__name__}"
            )
        return {k: _from_json(args[1], v, f"{where}[{k!r}]") for k, v in value.items()}
    if hint is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    return value


def pick(points, **axes):
    """The one point of a sweep whose fields equal ``axes`` (e.g. ``pick(runs,
    beta=0.5)``); a ``KeyError`` names the values that match none or several."""
    found = [p for p in points if all(getattr(p, k) == v for k, v in axes.items())]
    if len(found) != 1:
        raise KeyError(
            f"{len(found)} points of the sweep have {axes}, expected exactly one"
        )
    return found[0]


# --------------------------------------------------------------------------- JSON files
def library_versions() -> dict[str, str]:
    """Versions of Python and of the libraries the numbers depend on."""
    import numpy
    import sympy
    import torch

    versions = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "numpy": numpy.__version__,
        "sympy": sympy.__version__,
    }
    try:
        from importlib.metadata import version

        versions["rcutil"] = version("rcutil")
    except Exception:  # not installed as a distribution (e.g. run from a source tree)
        versions["rcutil"] = "source"
    return versions


def to_jsonable(obj: Any) -> Any:
    """Turn results, tensors, numpy values, tuples and paths into plain JSON types (NaN
    and inf stay floats)."""
    import numpy as np
    import torch

    if isinstance(obj, Result):
        return {
            f.name: to_jsonable(getattr(obj, f.name)) for f in dataclasses.fields(obj)
        }
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {
            f.name: to_jsonable(getattr(obj, f.name)) for f in dataclasses.fields(obj)
        }
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


def _write_failed(path: Path, exc: OSError) -> ResultWriteError:
    fix = (
        "free some space or choose another folder"
        if exc.errno == errno.ENOSPC
        else "choose a folder this user can write to"
    )
    return ResultWriteError(
        exc.errno, f"cannot write {path}: {exc.strerror or exc}: {fix}"
    )


def write_json(payload: Any, path: Path) -> Path:
    """Write ``payload`` as JSON atomically (temporary file beside it, then rename),
    readable by all (0644). A failure (full disk, no permission) raises
    :class:`ResultWriteError` naming ``path`` and leaves neither the temporary file nor
    a partial ``path``."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(
            dir=path.parent, prefix=f".{path.name}.", suffix=".tmp"
        )
    except OSError as exc:
        raise _write_failed(path, exc) from None
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(to_jsonable(payload), f, indent=1)
            f.write("\n")
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise _write_failed(path, exc) from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def read_json(path: Path) -> dict:
    """Read a JSON object; a damaged file raises :class:`StoredResultError` naming
    it."""
    path = Path(path)
    try:
        with open(path) as f:
            value = json.load(f)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise StoredResultError(f"{path} is not a valid result file ({exc})") from exc
    except IsADirectoryError:
        raise StoredResultError(
            f"{path} is a folder, where a result file belongs: remove it"
        ) from None
    if not isinstance(value, dict):
        raise StoredResultError(f"{path} holds {type(value).__name__}, not a result")
    return value


def digest(payload: dict) -> str:
    """sha256 of ``payload`` in a canonical JSON form (sorted keys, no spaces)."""
    text = json.dumps(to_jsonable(payload), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def sealed(payload: dict) -> dict:
    """``payload`` with ``sha256``: the :func:`digest` of the rest."""
    payload = {k: v for k, v in payload.items() if k != "sha256"}
    return {**payload, "sha256": digest(payload)}


def unsealed(path: Path) -> dict:
    """The content of a file written from :func:`sealed`, checked against its digest."""
    payload = read_json(path)
    recorded = payload.pop("sha256", None)
    if recorded is None:
        raise StoredResultError(f"{path} records no sha256 of its content")
    if recorded != digest(payload):
        raise StoredResultError(
            f"{path} does not match the sha256 it records (edited or "
            f"damaged after it was written)"
        )
    return payload


# --------------------------------------------------------------------------- what a
# result depends on
_PACKAGE = Path(__file__).resolve().parent


@functools.cache
def _module_file(name: str) -> Path | None:
    """The source file of ``rcutil`` module ``name`` (without importing it), or
    ``None``."""
    parts = name.split(".")
    if parts[0] != "rcutil":
        return None
    base = _PACKAGE.joinpath(*parts[1:])
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def _strip_docstrings(node: ast.AST) -> ast.AST:
    """``node`` without the docstrings of the functions and classes in it."""
    for sub in ast.walk(node):
        if isinstance(
            sub, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Module)
        ):
            body = sub.body
            if (
                body
                and isinstance(body[0], ast.Expr)
                and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)
            ):
                sub.body = body[1:] or [ast.Pass()]
    return node


#: Modules whose effect on a result is keyed by other means: the data layer only finds
#: files, and the sha256 of every file an experiment reads is part of its key.
KEYED_ELSEWHERE = ("rcutil.data",)


@functools.cache
def _parsed_module(name: str, path: str, mtime_ns: int, size: int) -> _Module:
    """:class:`_Module` of ``name``, parsed once per version of its file."""
    return _Module(name)


class _Module:
    """The top-level definitions of one ``rcutil`` module: name -> defining statements,
    and the names it imports (alias -> (module, symbol or None for a module import))."""

    def __init__(self, name: str):
        path = _module_file(name)
        self.name = name
        self.defs: dict[str, list[ast.stmt]] = {}
        self.imports: dict[str, tuple[str, str | None]] = {}
        self.effects: list[ast.stmt] = []  # top-level statements that define no name
        self._dumps: dict[int, str] = {}
        self._refs: dict[int, set] = {}
        tree = ast.parse(path.read_text())
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                self.defs.setdefault(node.name, []).append(node)
            elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                targets = (
                    node.targets if isinstance(node, ast.Assign) else [node.target]
                )
                for target in targets:
                    for sub in ast.walk(target):
                        if isinstance(sub, ast.Name):
                            self.defs.setdefault(sub.id, []).append(node)
            elif isinstance(node, ast.Import):
                for a in node.names:
                    self.imports[a.asname or a.name.split(".")[0]] = (
                        a.name if a.asname else a.name.split(".")[0],
                        None,
                    )
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = (
                        package.rsplit(".", node.level - 1)[0]
                        if node.level > 1
                        else package
                    )
                    base = f"{up}.{node.module}" if node.module else up
                for a in node.names:
                    full = f"{base}.{a.name}"
                    self.imports[a.asname or a.name] = (
                        (full, None) if _module_file(full) else (base, a.name)
                    )
            elif not (
                isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
            ):
                self.effects.append(node)  # e.g. a registration call at import time

    def dump(self, node: ast.AST) -> str:
        """The syntax tree of a top-level statement, without docstrings, as text."""
        if id(node) not in self._dumps:
            self._dumps[id(node)] = ast.dump(_strip_docstrings(copy.deepcopy(node)))
        return self._dumps[id(node)]

    def references(self, node: ast.AST) -> set[tuple[str, str | None]]:
        """:func:`_references` of a top-level statement."""
        if id(node) not in self._refs:
            self._refs[id(node)] = _references(node)
        return self._refs[id(node)]


def _references(node: ast.AST) -> set[tuple[str, str | None]]:
    """Names ``node`` reads: ``(name, None)``, or ``(name, attr)`` for ``name.attr``."""
    found, bases = set(), set()
    for sub in ast.walk(node):
        if isinstance(sub, ast.Attribute) and isinstance(sub.value, ast.Name):
            found.add((sub.value.id, sub.attr))
            bases.add(id(sub.value))
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name) and id(sub) not in bases:
            found.add((sub.id, None))
    return found


def science_code(module: types.ModuleType | str, entry: str = "run") -> dict[str, str]:
    """The code ``entry`` reaches: ``"module:name" -> syntax tree dump`` for every
    definition that ``entry`` of ``module`` names, and those they name, in every
    ``rcutil`` module (followed through imports; other libraries count by their
    versions, not their code)."""

    def load(name):
        path = _module_file(name)
        stat = path.stat()
        return _parsed_module(name, str(path), stat.st_mtime_ns, stat.st_size)

    start = module if isinstance(module, str) else module.__name__
    seen: dict[str, str] = {}
    todo: list[tuple[str, str | None]] = [(start, entry)]
    while todo:
        mod_name, symbol = todo.pop()
        if _module_file(mod_name) is None or mod_name in KEYED_ELSEWHERE:
            continue
        mod = load(mod_name)
        key = f"{mod_name}:{symbol or '*'}"
        if key in seen:
            continue
        if symbol is None:  # the whole module is used as a value
            nodes = [n for ns in mod.defs.values() for n in ns]
        elif symbol in mod.defs:
            nodes = mod.defs[symbol]
        elif symbol in mod.imports:  # a name the module re-exports
            todo.append(mod.imports[symbol])
            seen[key] = ""
            continue
        else:
            seen[key] = ""
            continue
        nodes = nodes + mod.effects
        seen[key] = "\n".join(mod.dump(n) for n in nodes)
        for node in nodes:
            for name, attr in mod.references(node):
                if name in mod.defs:
                    todo.append((mod_name, name))
                elif name in mod.imports:
                    target, sym = mod.imports[name]
                    if sym is not None:
                        todo.append((target, sym))
                    elif _module_file(target) is not None:
                        todo.append((target, attr))
    return {k: v for k, v in seen.items() if v}


def science_fingerprint(module: types.ModuleType | str, entry: str = "run") -> str:
    """sha256 over :func:`science_code`."""
    h = hashlib.sha256()
    for key, dump in sorted(science_code(module, entry).items()):
        h.update(key.encode())
        h.update(dump.encode())
    return h.hexdigest()


def data_digests(module, settings: dict) -> dict[str, str]:
    """sha256 of every data file the experiment reads, found through
    :mod:`rcutil.data`."""
    if not hasattr(module, "data_files"):
        return {}
    from .data import find, sha256sum

    return {rel: sha256sum(find(rel)) for rel in module.data_files(settings)}


def result_key(module, settings: dict, device: str) -> str:
    """The store key of an experiment module: settings, device, science code, data
    digests."""
    payload = {
        "experiment": module.__name__,
        "settings": settings,
        "device": str(device),
        "code": science_fingerprint(module),
        "data": data_digests(module, settings),
    }
    text = json.dumps(payload, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


# --------------------------------------------------------------------------- the store
def results_dir() -> Path:
    """Where results are stored: ``$RCUTIL_RESULTS_DIR``, else ``<user cache>/results``.
    A value that names a file, or a folder this user cannot write to, is refused naming
    the variable."""
    value = env.raw(RESULTS_DIR_ENV)
    if value is None:
        from .data import cache_dir

        return cache_dir() / "results"
    path = Path(value).expanduser()
    if path.exists() and not path.is_dir():
        raise env.EnvError(
            f"{RESULTS_DIR_ENV}={value!r} is a file, not a folder: point it at a "
            f"folder for the stored results, or unset it"
        )
    if path.is_dir() and not os.access(path, os.W_OK | os.X_OK):
        raise env.EnvError(
            f"{RESULTS_DIR_ENV}={value!r} is a folder this user cannot write to: "
            f"point it at a writable folder, or unset it"
        )
    return path


def _holder(lock: Path) -> str:
    """Who holds ``lock``: ``pid N`` (and whether it is stopped), from the pid it
    records."""
    try:
        pid = int(lock.read_text().strip())
    except (OSError, ValueError):
        return "another process"
    state = ""
    with contextlib.suppress(OSError, IndexError):
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    if state == "T":
        return (
            f"pid {pid}, which is stopped (resume it with kill -CONT {pid}, or end it)"
        )
    return f"pid {pid}"


@contextlib.contextmanager
def locked(path: Path):
    """An exclusive lock on ``path`` + ``.lock`` (POSIX ``flock``), so that two
    processes never compute the same result at once: the second waits, then reads what
    the first stored.

    A lock of a process that has ended is free at once (the system releases it). A wait
    longer than :data:`LOCK_SPEAK_S` says so on stderr, once, naming the lock file and
    its holder; a wait longer than ``$RCUTIL_LOCK_TIMEOUT`` seconds (default six hours)
    ends with a ``TimeoutError`` naming the file.
    """
    try:
        import fcntl
    except ImportError:  # no POSIX locks (Windows): compute without one
        yield
        return
    limit = env.count(
        LOCK_TIMEOUT_ENV, LOCK_LIMIT_S, what="seconds to wait for a lock", high=10**7
    )
    lock = path.with_name(path.name + ".lock")
    lock.parent.mkdir(parents=True, exist_ok=True)
    with open(lock, "a+") as f:
        start, spoke = time.monotonic(), False
        while True:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                waited = time.monotonic() - start
                if waited > limit:
                    raise TimeoutError(
                        f"waited {waited:.0f} s for {lock}, held by "
                        f"{_holder(lock)}: end that process, or raise "
                        f"{LOCK_TIMEOUT_ENV}"
                    ) from None
                if not spoke and waited > LOCK_SPEAK_S:
                    print(
                        f"rcutil: waiting for {lock}, held by {_holder(lock)} "
                        f"(limit {limit} s, {LOCK_TIMEOUT_ENV})",
                        file=sys.stderr,
                        flush=True,
                    )
                    spoke = True
                time.sleep(0.2)
        try:
            f.seek(0)
            f.truncate()
            f.write(f"{os.getpid()}\n")
            f.flush()
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def stored_path(module, profile: str | None = None, *, device: str = "cpu") -> Path:
    """The file under :func:`results_dir` that holds (or will hold) the module's
    result."""
    from .profiles import settings_for

    settings = settings_for(module.SETTINGS, profile)
    key = result_key(module, settings, device)
    stem = module.__name__.rsplit(".", 1)[-1]
    return results_dir() / f"{stem}-{settings['profile']}-{key}.json"


def envelope(module, result, *, profile: str, device: str, seconds: float) -> dict:
    """The content of a result file: what ran, where, with which libraries, and the
    result."""
    return {
        "experiment": module.__name__.rsplit(".", 1)[-1],
        "profile": profile,
        "device": str(device),
        "versions": library_versions(),
        "wall_seconds": round(seconds, 2),
        "result": to_jsonable(result),
    }


def typed(module, payload: dict):
    """The ``result`` of a file's content, as the module's ``Result`` type (a plain dict
    for a module without one)."""
    if "result" not in payload:
        raise StoredResultError("the file holds no 'result'")
    cls = getattr(module, "Result", None)
    return cls.from_json(payload["result"]) if cls is not None else payload["result"]


def _clean_leftovers(path: Path) -> None:
    """Remove the temporary files of writes of ``path`` that a killed process left
    (writes of a stored result happen under its lock, so none is in progress)."""
    for tmp in path.parent.glob(f".{path.name}.*.tmp"):
        tmp.unlink(missing_ok=True)


def device_default() -> str:
    """The device a chapter computes on: ``$RCUTIL_DEVICE``, else ``cpu`` (so that a
    chapter finds the result ``python -m rcutil ... --device cuda`` stored)."""
    return env.raw(DEVICE_ENV) or "cpu"


def store(
    module,
    profile: str | None = None,
    *,
    device: str | None = None,
    progress: bool = True,
    refresh: bool = False,
) -> Path:
    """Make sure the store holds the module's result for the profile (computing and
    storing it when missing, damaged or edited) and return the path of its file.

    ``refresh=True`` or ``RCUTIL_RESULTS_CACHE=0`` forces a run. A stored file that is
    damaged, edited (its content no longer matches the sha256 it records) or of another
    form is reported in one line, computed again and replaced.
    """
    from .profiles import active_profile, settings_for

    profile = active_profile(profile)
    device = device_default() if device is None else str(device)
    use_store = not refresh and env.flag(RESULTS_CACHE_ENV, True)
    path = stored_path(module, profile, device=device)
    with locked(path):
        _clean_leftovers(path)
        if use_store and path.exists():
            try:
                typed(module, unsealed(path))
                return path
            except StoredResultError as exc:
                if path.is_dir():
                    raise
                warnings.warn(
                    f"{path.name}: {exc}; computing it again",
                    RuntimeWarning,
                    stacklevel=3,
                )
        start = time.perf_counter()
        result = module.run(
            settings_for(module.SETTINGS, profile), device=device, progress=progress
        )
        payload = envelope(
            module,
            result,
            profile=profile,
            device=device,
            seconds=time.perf_counter() - start,
        )
        write_json(sealed(payload), path)
    return path


def cached(
    module,
    profile: str | None = None,
    *,
    device: str | None = None,
    progress: bool = True,
    refresh: bool = False,
):
    """The result of an experiment module for the profile (:func:`store`), as the
    module's ``Result`` type, exactly as read back from JSON."""
    return typed(
        module,
        unsealed(
            store(module, profile, device=device, progress=progress, refresh=refresh)
        ),
    )
