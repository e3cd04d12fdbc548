"""The results store: one sealed JSON file per experiment, profile and key, so that a
chapter, the report, the command line and a second build reuse a result instead of
computing it again.

:func:`store` makes sure the file holds the experiment's result (computing it when it is
missing, damaged or answers another question) and :func:`cached` returns it as the
experiment's :class:`rcutil.results.Result` type. Files live in ``$RCUTIL_RESULTS_DIR``,
else in ``<user cache>/results``; one process computes a result while any other waits
for it (:func:`rcutil.files.locked`), and every file is written whole or not at all
(:func:`rcutil.files.staged`).

**What a stored result answers.** A file records what was asked: the experiment, the
profile, the settings, the device, the code fingerprint of what ``run`` reaches
(:func:`rcutil.fingerprint.science_fingerprint`) and the sha256 of every data file the
experiment reads (its ``data_files(settings)``). Its name holds a key made of the same
(:func:`result_key`). A file is served only when everything it records equals the
request: a file copied or renamed from another profile, another device or older code is
reported in one line and computed again. Runs are deterministic, so a stored result is
the result a new run would give.

**What the seal protects against.** A file also records the sha256 of its own content
(:func:`sealed`): a file cut short, emptied, damaged on disk or edited by hand is
reported in one line, computed again and replaced. The seal is a checksum, not a
signature: whoever edits a number and computes the sha256 again has a file the store
accepts. It guards against accidents, not against deliberate forgery; the store is as
trustworthy as the folder it lives in. Where the result type says a value is finite
(:data:`rcutil.results.Finite`), NaN and infinities are refused whatever the seal says.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import time
import warnings
from pathlib import Path
from typing import Any

from . import env, files
from .fingerprint import science_fingerprint
from .profiles import profile_of
from .results import StoredResultError, to_jsonable

RESULTS_DIR_ENV = "RCUTIL_RESULTS_DIR"
RESULTS_CACHE_ENV = "RCUTIL_RESULTS_CACHE"
DEVICE_ENV = "RCUTIL_DEVICE"
#: What a stored file records of the question it answers; all must equal the request.
IDENTITY = ("experiment", "profile", "settings", "device", "code", "data")
_WRITE_FIX = f"free some space there, or point {RESULTS_DIR_ENV} at another folder"


# --------------------------------------------------------------------------- sealed
# JSON files
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


def write_json(payload: Any, path: Path, *, fix: str | None = None) -> Path:
    """Write ``payload`` as JSON through :func:`rcutil.files.staged` (whole or not at
    all, readable by all). A failure (full disk, no permission) raises
    :class:`rcutil.files.WriteError` naming ``path`` and the fix, and leaves neither a
    temporary file nor a partial ``path``."""
    path = Path(path)
    with files.staged(path, fix=fix) as tmp:
        try:
            with open(tmp, "w") as f:
                json.dump(to_jsonable(payload), f, indent=1)
                f.write("\n")
        except OSError as exc:
            raise files.write_failed(path, exc, fix) from None
    return path


def read_json(path: Path) -> dict:
    """Read a JSON object; a damaged file raises
    :class:`rcutil.results.StoredResultError` naming it."""
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
    """``payload`` with ``sha256``: the :func:`digest` of the rest (a checksum against
    damage and hand edits, not a signature; see the module docstring)."""
    payload = {k: v for k, v in payload.items() if k != "sha256"}
    return {**payload, "sha256": digest(payload)}


def unsealed(path: Path) -> dict:
    """The content of a file written from :func:`sealed`, checked against its
    digest."""
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
# result answers
def data_digests(module, settings: dict) -> dict[str, str]:
    """sha256 of every data file the experiment reads, found through
    :mod:`rcutil.data`."""
    if not hasattr(module, "data_files"):
        return {}
    from .data import find, sha256sum

    return {rel: sha256sum(find(rel)) for rel in module.data_files(settings)}


def stem(module) -> str:
    """The experiment's name in file names: its module's last part."""
    return module.__name__.rsplit(".", 1)[-1]


def identity(module, settings: dict, device: str) -> dict:
    """What a result answers (:data:`IDENTITY`), as plain JSON: the experiment, the
    profile, the settings, the device, the code fingerprint and the data digests."""
    return to_jsonable(
        {
            "experiment": stem(module),
            "profile": profile_of(settings),
            "settings": settings,
            "device": str(device),
            "code": science_fingerprint(module),
            "data": data_digests(module, settings),
        }
    )


def _key(module, asked: dict) -> str:
    payload = {**asked, "module": module.__name__}
    text = json.dumps(payload, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def result_key(module, settings: dict, device: str) -> str:
    """The store key: a digest of the :func:`identity` (and of the module's full
    name)."""
    return _key(module, identity(module, settings, device))


def _file(module, asked: dict) -> Path:
    return (
        results_dir() / f"{stem(module)}-{asked['profile']}-{_key(module, asked)}.json"
    )


def mismatch(recorded: dict, asked: dict) -> str | None:
    """Why a file that records ``recorded`` does not answer ``asked`` (both
    :func:`identity` forms), in a few words; ``None`` when it does."""
    for field in IDENTITY:
        if field not in recorded:
            return f"it records no {field} (written by an older rcutil)"
        have, want = recorded[field], asked[field]
        if have == want:
            continue
        if field == "settings" and isinstance(have, dict):
            keys = sorted(k for k in {*have, *want} if have.get(k) != want.get(k))
            shown = ", ".join(
                f"{k}={have.get(k)!r} (asked {want.get(k)!r})" for k in keys[:3]
            )
            return f"it was computed with other settings: {shown}"
        if field in ("code", "data"):
            what = "code" if field == "code" else "data files"
            return f"it was computed by other {what} than those of this request"
        return f"it records {field} {have!r}, the request is for {want!r}"
    return None


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


def device_default() -> str:
    """The device a chapter computes on: ``$RCUTIL_DEVICE``, else ``cpu`` (so that a
    chapter finds the result ``python -m rcutil ... --device cuda`` stored)."""
    return env.raw(DEVICE_ENV) or "cpu"


def stored_path(module, profile: str | None = None, *, device: str = "cpu") -> Path:
    """The file under :func:`results_dir` that holds (or will hold) the module's
    result."""
    from .profiles import settings_for

    settings = settings_for(module.SETTINGS, profile)
    return _file(module, identity(module, settings, device))


def envelope(
    module, result, *, asked: dict, seconds: float, versions: dict | None = None
) -> dict:
    """The content of a result file: what was asked (:func:`identity`), with which
    libraries, how long it took, and the result."""
    return {
        **asked,
        "versions": library_versions() if versions is None else versions,
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


def _usable(module, path: Path, asked: dict) -> bool:
    """Whether the file at ``path`` answers ``asked``; a file that does not is reported
    in one line (a warning) and will be computed again."""
    try:
        payload = unsealed(path)
        why = mismatch(payload, asked)
        if why is None:
            typed(module, payload)
            return True
    except StoredResultError as exc:
        if path.is_dir():
            raise
        why = str(exc).replace(f"{path} ", "")
    warnings.warn(f"{path.name}: {why}; computing it again", RuntimeWarning, 4)
    return False


def store(
    module,
    profile: str | None = None,
    *,
    device: str | None = None,
    progress: bool = True,
    refresh: bool = False,
) -> Path:
    """Make sure the store holds the module's result for the profile (computing and
    storing it when missing, damaged, edited, or recorded for another question) and
    return the path of its file.

    ``refresh=True`` or ``RCUTIL_RESULTS_CACHE=0`` forces a run. A stored file that is
    not served is reported in one line, computed again and replaced.
    """
    from .profiles import active_profile, settings_for

    profile = active_profile(profile)
    device = device_default() if device is None else str(device)
    use_store = not refresh and env.flag(RESULTS_CACHE_ENV, True)
    settings = settings_for(module.SETTINGS, profile)
    asked = identity(module, settings, device)
    path = _file(module, asked)
    with files.locked(path, fix=_WRITE_FIX):
        files.remove_leftovers(path)
        if use_store and path.exists() and _usable(module, path, asked):
            return path
        start = time.perf_counter()
        result = module.run(settings, device=device, progress=progress)
        payload = envelope(
            module, result, asked=asked, seconds=time.perf_counter() - start
        )
        try:
            typed(module, json.loads(json.dumps(payload)))
        except StoredResultError as exc:
            raise StoredResultError(
                f"the run of {stem(module)} (profile {profile}) gave a result its "
                f"type refuses ({exc}); nothing was stored"
            ) from None
        write_json(sealed(payload), path, fix=_WRITE_FIX)
    return path


def cached(module, profile: str | None = None, **options):
    """The result of an experiment module for the profile (:func:`store`, with its
    keyword ``options``), as the module's ``Result`` type, exactly as read back from
    JSON."""
    return typed(module, unsealed(store(module, profile, **options)))
