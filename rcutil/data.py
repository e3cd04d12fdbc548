"""Find the book's data files: a data folder, else a user cache, else a download.

Every file is named by its path relative to a data root (``sst2/train.tsv``,
``gpt2_tokenizer/vocab.json``, ...) and described by an :class:`Asset` of the registry
:data:`ASSETS`. This module is the generic fetcher and knows no data set: the module
that reads a file registers it (:func:`register`) when it is imported, with its checks
(:mod:`rcutil.sst2_data`: SST-2 and the GPT-2 tokenizer; :mod:`rcutil.jena_data`: the
Jena Climate file and its excerpt; :mod:`rcutil.gpt2`: GPT-2 small's weights).
:func:`find` looks

1. in the folder named by ``$RCUTIL_DATA_DIR`` (when set, it must exist);
2. in the user cache, ``$RCUTIL_CACHE_DIR`` or ``~/.cache/rcutil``;
3. on the network, at the asset's canonical URL: the download goes to a temporary folder
   beside the cached file, is checked (sha256, or the asset's own structure check where
   no checksum is known) and only then renamed into the cache, so an interrupted
   download never leaves a broken file. A connection that stalls for :data:`TIMEOUT_S`
   seconds is dropped; a failed attempt is retried :data:`ATTEMPTS` times in all, with a
   growing pause; one process downloads a file while any other waits for it, and the
   temporary files a killed download left behind are removed by the next one of that
   file (the lock, the staged write and the clean-up of :mod:`rcutil.files`).

A file that is present but does not match its checksum is never used: :class:`DataError`
names the file, the checksum expected and found, and how to fix it. So does a folder or
a broken link where a file should be.

**Pinned and recorded checksums.** A checksum written in the registry (an asset's
``sha256``, or the digest its ``validate`` function pins) is the authority: nothing
beside a file can override it. An asset without one (the full Jena file, whose
publisher gives no checksum) is checked by its structure; in the user cache, the
package then records the checksum of that verified copy beside it (``<name>.sha256``)
and enforces it from then on, so the slow structure check runs once. A record is written
and trusted only in the user cache, where the package writes it: a ``.sha256`` file in
the data folder is ignored, and a file there is always checked by its pin or its
structure.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import os
import shutil
import time
import urllib.error
import urllib.request
import zipfile
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from . import env, files
from .progress import tqdm

DATA_DIR_ENV = "RCUTIL_DATA_DIR"
CACHE_DIR_ENV = "RCUTIL_CACHE_DIR"
#: Seconds a download may wait to connect, and then for each block of bytes.
TIMEOUT_S = 30.0
#: Download attempts in all (the first and the retries), and the pause before retry k
#: (k times this many seconds).
ATTEMPTS = 3
BACKOFF_S = 2.0
#: What to do when the cache cannot be written.
_CACHE_FIX = (
    f"free some space there, or set {CACHE_DIR_ENV} to a folder you can write to"
)


class DataError(RuntimeError):
    """A data file is missing, corrupt or malformed; the message says how to fix it."""


@dataclass(frozen=True)
class Asset:
    """A data file: where it lives relative to a data root and how to get and check it.

    ``url`` is the canonical download; if it is a zip archive, ``member`` names the file
    in it. ``sha256`` is the pinned checksum of the file itself (not of the archive).
    ``validate`` (a function of the path that raises :class:`DataError`) checks a file
    that has no pinned ``sha256``: with ``pinned=True`` it compares a digest the code
    pins (of the parsed values, say) and runs on every use; otherwise it checks the
    structure, and with ``record=True`` the checksum of the first verified copy in the
    user cache is recorded beside it (``<name>.sha256``) and enforced from then on (see
    the module docstring). ``size`` (bytes), when known, is checked before the checksum
    (a cheap first test of a large file) and against the server's Content-Length before
    a download.
    """

    relpath: str
    url: str | None
    sha256: str | None = None
    member: str | None = None
    validate: Callable[[Path], None] | None = None
    size: int | None = None
    #: A derived asset has no URL: it is made from the asset ``source`` (its relative
    #: path) by ``derive(source_path, out_path)``, then checked like a download.
    source: str | None = None
    derive: Callable[[Path, Path], None] | None = None
    #: ``validate`` checks a digest pinned in the code: no record ever replaces it.
    pinned: bool = False
    #: Record the checksum of the first verified copy in the user cache.
    record: bool = False


#: The registry: relative path -> asset, filled by the modules that read the files.
ASSETS: dict[str, Asset] = {}


def register(asset: Asset) -> Asset:
    """Add (or replace) an asset in the registry and return it."""
    ASSETS[asset.relpath] = asset
    return asset


# --------------------------------------------------------------------------- helpers
def sha256sum(path: Path, chunk: int = 1 << 20) -> str:
    """The sha256 hex digest of a file."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def cache_dir() -> Path:
    """The user cache: ``$RCUTIL_CACHE_DIR``, else ``$XDG_CACHE_HOME/rcutil``, else
    ``~/.cache/rcutil``. It need not exist yet (it is created on the first download),
    but it must not be a file."""
    value = env.raw(CACHE_DIR_ENV)
    if value is not None:
        path, source = Path(value).expanduser(), CACHE_DIR_ENV
    else:
        base = env.raw("XDG_CACHE_HOME") or Path.home() / ".cache"
        path, source = Path(base) / "rcutil", "the default cache"
    if path.exists() and not path.is_dir():
        raise DataError(
            f"{source} {path} is a file, not a folder: set {CACHE_DIR_ENV} to a folder "
            "(it is created when missing), or move the file away."
        )
    return path


def data_dir() -> Path | None:
    """The folder named by ``$RCUTIL_DATA_DIR``, or ``None`` when the variable is unset.

    A variable that names no folder is an error, never a silent fall-back to downloads.
    """
    value = env.raw(DATA_DIR_ENV)
    if value is None:
        return None
    path = Path(value).expanduser()
    if not path.is_dir():
        problem = "is a file, not a folder" if path.exists() else "does not exist"
        raise DataError(
            f"{DATA_DIR_ENV}={value} {problem}: set it to the folder that holds the "
            "data files (sst2/, gpt2_tokenizer/, jena_climate/), or unset it to use "
            f"the cache {cache_dir()} and downloads."
        )
    return path


def _present(root: Path, relpath: str) -> bool:
    """Whether the data file ``relpath`` is in the folder ``root``. Something else where
    it should be (a folder, a broken link, a file where a folder of its path should be)
    is a :class:`DataError` that says what it is, not a missing file."""
    path = root / relpath
    if path.is_file():
        return True
    here = root
    for name in Path(relpath).parts:
        here = here / name
        if here.is_symlink() and not here.exists():
            what = f"a link to {os.readlink(here)}, which does not exist"
        elif not here.exists():
            return False
        elif here == path:
            what = "a folder" if here.is_dir() else "not a regular file"
        elif not here.is_dir():
            what = "a file, not a folder"
        else:
            continue
        raise DataError(
            f"{here} is {what}, where the data file {relpath} should be "
            f"{path}: remove or replace it."
        )
    return False


def _recorded_checksum_path(path: Path) -> Path:
    return path.with_name(path.name + ".sha256")


def _recorded_checksum(path: Path) -> str | None:
    """The checksum rcutil recorded beside ``path`` (in the user cache), or ``None``."""
    record = _recorded_checksum_path(path)
    if not record.exists():
        return None
    fields = record.read_text(errors="replace").split()
    digest = fields[0].lower() if fields else ""
    if len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
        raise DataError(
            f"{record} is not a sha256 record of {path.name} (64 hex "
            f"digits, then the name): delete it; {path.name} is then "
            "checked by its structure."
        )
    return digest


def _record_checksum(path: Path, digest: str) -> None:
    """Write ``<name>.sha256`` beside ``path`` (in the user cache), whole or not at
    all."""
    files.write_text(
        _recorded_checksum_path(path), f"{digest}  {path.name}\n", fix=_CACHE_FIX
    )


def _remedy(asset: Asset) -> str:
    """How to replace a bad copy of ``asset``, as the end of an error message."""
    if asset.url:
        fetch = f"Delete it and run again to download a fresh copy from {asset.url}"
    elif asset.derive is not None:
        fetch = f"Delete it and run again to make it anew from {asset.source}"
    else:
        fetch = "Replace it with a correct copy"
    return (
        f"{fetch}, or point {DATA_DIR_ENV} at a folder with the correct "
        f"{asset.relpath}."
    )


#: Files whose check passed in this process: (path, size, times, inode, check).
_CHECKED: set[tuple] = set()
#: A file changed this recently is checked every time: a coarse clock could hide an
#: edit of the same size within the same tick.
_SETTLED_S = 2.0


def _validate(path: Path, asset: Asset, label: str) -> None:
    """The asset's check, its messages naming ``label`` for ``path``; a file checked
    before in this process, unchanged since, is not checked again."""
    stat = path.stat()
    seen = (
        str(path),
        stat.st_size,
        stat.st_mtime_ns,
        stat.st_ctime_ns,
        stat.st_ino,
        asset.validate,
    )
    if seen in _CHECKED:
        return
    try:
        asset.validate(path)
    except DataError as exc:
        if label == str(path):
            raise
        raise type(exc)(str(exc).replace(str(path), label)) from exc
    if time.time() - max(stat.st_mtime, stat.st_ctime) > _SETTLED_S:
        _CHECKED.add(seen)


def _record_mismatch(
    path: Path, asset: Asset, actual: str, recorded: str, remedy: str
) -> DataError:
    """A cached file that does not match the checksum rcutil recorded beside it: a
    stale record when the file passes the structure check, else a corrupt file. Either
    way the record is named, and what to delete."""
    record = _recorded_checksum_path(path)
    when = "when rcutil first verified it"
    if asset.validate is not None:
        try:
            asset.validate(path)
        except DataError:
            pass
        else:
            return DataError(
                f"{path} passes the structure check but not the sha256 recorded in "
                f"{record} {when} ({recorded}; the file has {actual}): if you "
                f"replaced {path.name} on purpose, delete {record}; otherwise delete "
                "both and run again to download a fresh copy."
            )
    return DataError(
        f"{path} is corrupt: its sha256 is {actual}, expected {recorded} (recorded in "
        f"{record} {when}). {remedy} If you replaced it on purpose, delete "
        f"{record} instead."
    )


def verify(
    path: Path,
    asset: Asset,
    *,
    label: str | None = None,
    remedy: str | None = None,
    in_cache: bool = False,
) -> Path:
    """Check ``path`` against the asset's pinned checksum, else its check; raise
    :class:`DataError` if wrong, else return ``path``.

    ``in_cache`` says that ``path`` is the user cache's copy: only there is a checksum
    recorded (for an asset with ``record``) and trusted in place of the structure check.
    A pin (``sha256``, or a ``pinned`` check) is never replaced by a record. ``label``
    names the file in messages (default: its path) and ``remedy`` says what to do
    (default: :func:`_remedy`); a download passes both, since its temporary path means
    nothing to the user.
    """
    label = label or str(path)
    remedy = remedy or _remedy(asset)
    size = path.stat().st_size
    if size == 0:
        raise DataError(f"{label} is empty (0 bytes). {remedy}")
    if asset.size is not None and size != asset.size:
        raise DataError(
            f"{label} is incomplete or wrong: it has {size:,} bytes, "
            f"expected {asset.size:,}. {remedy}"
        )
    if asset.sha256 is not None:
        actual = sha256sum(path)
        if actual != asset.sha256:
            raise DataError(
                f"{label} is corrupt: its sha256 is {actual}, expected "
                f"{asset.sha256}. {remedy}"
            )
        return path
    records = in_cache and asset.record and not asset.pinned
    recorded = _recorded_checksum(path) if records else None
    if recorded is not None:
        actual = sha256sum(path)
        if actual != recorded:
            raise _record_mismatch(path, asset, actual, recorded, remedy)
        return path
    if asset.validate is not None:
        _validate(path, asset, label)
    if records:
        with contextlib.suppress(OSError):  # unwritable: checked again next time
            _record_checksum(path, sha256sum(path))
    return path


@contextlib.contextmanager
def _locked(dest: Path):
    """Hold the lock of ``dest`` and remove what a killed download or derivation of it
    left (:mod:`rcutil.files`)."""
    with files.locked(dest, fix=_CACHE_FIX):
        files.remove_leftovers(dest)
        files.remove_leftovers(_recorded_checksum_path(dest))
        yield


def _retryable(exc: BaseException) -> bool:
    """Whether another attempt may succeed: not for a missing page (HTTP 4xx but 408 and
    429) nor for a local file URL."""
    if isinstance(exc, urllib.error.HTTPError):
        return exc.code >= 500 or exc.code in (408, 429)
    if isinstance(exc, urllib.error.URLError) and isinstance(
        exc.reason, (FileNotFoundError, PermissionError)
    ):
        return False
    return True


def _fetch(url: str, out: Path, *, progress: bool, size: int | None = None) -> None:
    """Copy ``url`` to the file ``out`` (one attempt); raise ``OSError`` or
    ``HTTPException``, or :class:`DataError` (not retried) when the server announces
    another length than ``size``."""
    with (
        urllib.request.urlopen(url, timeout=TIMEOUT_S) as response,
        open(out, "wb") as f,
    ):
        total = int(response.headers.get("Content-Length") or 0) or None
        if size is not None and total is not None and total != size:
            raise DataError(
                f"{url} announces {total:,} bytes, but the file has "
                f"{size:,}: the server holds a different file; nothing was "
                "downloaded"
            )
        got = 0
        with tqdm(
            total=total,
            unit="B",
            unit_scale=True,
            disable=not progress,
            desc=f"download {Path(url).name}",
        ) as bar:
            while block := response.read(1 << 16):
                f.write(block)
                got += len(block)
                bar.update(len(block))
    if total is not None and got != total:
        raise http.client.IncompleteRead(b"", total - got)


def _fetch_with_retries(asset: Asset, out: Path, dest: Path, *, progress: bool) -> None:
    for attempt in range(1, ATTEMPTS + 1):
        try:
            _fetch(asset.url, out, progress=progress, size=asset.size)
            return
        except (OSError, http.client.HTTPException) as exc:  # URLError is an OSError
            if attempt < ATTEMPTS and _retryable(exc):
                time.sleep(BACKOFF_S * attempt)
                continue
            cause = (
                exc.reason
                if isinstance(exc, urllib.error.URLError)
                and isinstance(exc.reason, BaseException)
                else exc
            )
            reason = (
                f"no answer within {TIMEOUT_S:g} s"
                if isinstance(cause, TimeoutError)
                else f"{type(exc).__name__}: {exc}"
            )
            tries = f" after {attempt} attempts" if attempt > 1 else ""
            expected = asset.sha256 or "not known (the structure is checked)"
            raise DataError(
                f"{asset.relpath} is missing and could not be downloaded from "
                f"{asset.url}{tries} ({reason}). Expected sha256: {expected}. "
                f"Without network, put the file at {dest} or set {DATA_DIR_ENV} to a "
                f"folder that holds {asset.relpath}."
            ) from exc


def _extract(asset: Asset, archive: Path, out: Path) -> None:
    """Copy member ``asset.member`` of the zip ``archive`` to ``out``; errors name the
    URL."""
    where = f"member {asset.member} of the archive downloaded from {asset.url}"
    try:
        with (
            zipfile.ZipFile(archive) as zf,
            zf.open(asset.member) as src,
            open(out, "wb") as f,
        ):
            shutil.copyfileobj(src, f)
    except KeyError:
        raise DataError(
            f"the archive downloaded from {asset.url} has no member "
            f"{asset.member}: the published archive has changed; put "
            f"{asset.relpath} in {DATA_DIR_ENV} by hand."
        ) from None
    except (zipfile.BadZipFile, zlib.error, EOFError) as exc:
        raise DataError(
            f"the {where} is damaged ({exc}); nothing was kept: run "
            f"again to download it anew, or put {asset.relpath} in "
            f"{DATA_DIR_ENV} by hand."
        ) from exc


def download(asset: Asset, dest: Path, *, progress: bool = True) -> Path:
    """Download ``asset`` to ``dest`` (in the user cache) atomically and verify it;
    return ``dest``.

    The bytes go to a temporary file beside ``dest``; a zip member is extracted into
    another; only a verified file is renamed to ``dest``. Where the asset asks for it,
    the checksum of this verified download is recorded in ``dest.sha256``. A lock makes
    a second process wait for the first one's download and then use it.
    """
    if asset.url is None:
        raise DataError(
            f"{asset.relpath} is missing (expected sha256 {asset.sha256}) and has no "
            f"download URL. Put it at {dest}, or set {DATA_DIR_ENV} to a folder that "
            f"holds {asset.relpath}."
        )
    with _locked(dest):
        if dest.is_file():  # another process downloaded it while this one waited
            return verify(dest, asset, in_cache=True)
        _download(asset, dest, progress=progress)
    return dest


def _download(asset: Asset, dest: Path, *, progress: bool) -> None:
    """The body of :func:`download`, under its lock."""
    with files.staged(dest, fix=_CACHE_FIX) as got:
        label = f"the file downloaded from {asset.url}"
        if asset.member is None:
            _fetch_with_retries(asset, got, dest, progress=progress)
        else:
            archive = files.temporary(dest, fix=_CACHE_FIX)
            try:
                _fetch_with_retries(asset, archive, dest, progress=progress)
                _extract(asset, archive, got)
            finally:
                archive.unlink(missing_ok=True)
            label = f"the member {asset.member} of the archive from {asset.url}"
        verify(
            got,
            asset,
            label=label,
            remedy="It was not kept. Run again; if it persists, the published "
            f"file has changed: put a correct {asset.relpath} in "
            f"{DATA_DIR_ENV}.",
        )
        if asset.record and not asset.pinned and asset.sha256 is None:
            _record_checksum(dest, sha256sum(got))


def derive(
    asset: Asset, dest: Path, *, progress: bool = True, allow_download: bool = True
) -> Path:
    """Make the derived ``asset`` at ``dest`` atomically from its source, found with
    :func:`find` (so downloaded when missing and ``allow_download``); verify it; return
    ``dest``."""
    try:
        source = find(asset.source, progress=progress, allow_download=allow_download)
    except DataError as exc:
        raise DataError(
            f"{asset.relpath} is made from {asset.source}, which is not "
            f"available: {exc}"
        ) from exc
    with _locked(dest):
        if dest.is_file():  # another process made it while this one waited
            return verify(dest, asset, in_cache=True)
        with files.staged(dest, fix=_CACHE_FIX) as made:
            asset.derive(source, made)
            verify(
                made,
                asset,
                label=f"{asset.relpath} (made from {source})",
                remedy=f"{source} does not hold the expected rows: delete it and "
                f"run again to download it anew, or point {DATA_DIR_ENV} at a "
                f"folder with the correct {asset.relpath}.",
            )
    return dest


def find(relpath: str, *, progress: bool = True, allow_download: bool = True) -> Path:
    """The path of data file ``relpath``: data folder, else cache, else download (see
    the module docstring)."""
    if relpath not in ASSETS:
        raise ValueError(
            f"unknown data file {relpath!r}: known files are "
            f"{', '.join(sorted(ASSETS)) or 'none yet'} (the module that reads a file "
            "registers it when it is imported: rcutil.sst2_data, rcutil.jena_data, "
            "rcutil.gpt2)"
        )
    asset = ASSETS[relpath]
    root = data_dir()
    if root is not None and _present(root, relpath):
        return verify(root / relpath, asset)
    cache = cache_dir()
    cached = cache / relpath
    if _present(cache, relpath):
        return verify(cached, asset, in_cache=True)
    if asset.derive is not None:
        return derive(asset, cached, progress=progress, allow_download=allow_download)
    if not allow_download:
        where = f"{root / relpath} or {cached}" if root else str(cached)
        raise DataError(
            f"{relpath} is missing: looked in {where}; downloads are switched off."
        )
    return download(asset, cached, progress=progress)
