"""Find the book's data files: a data folder, else a user cache, else a verified download.

Every file is named by its path relative to a data root, with the layout of the shared data
folder (``sst2/train.tsv``, ``gpt2_tokenizer/vocab.json``, ...). :func:`find` looks

1. in the folder named by ``$RCUTIL_DATA_DIR``;
2. in the user cache, ``$RCUTIL_CACHE_DIR`` or ``~/.cache/rcutil``;
3. on the network, at the asset's canonical URL: the download goes to a temporary file, is
   checked (sha256, or the asset's own structure check where no checksum is known) and only
   then renamed into the cache, so an interrupted download never leaves a broken file.

A file that is present but does not match its checksum is never used: :class:`DataError`
names the file, the checksum expected and found, and how to fix it.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import urllib.request
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tqdm.auto import tqdm

DATA_DIR_ENV = "RCUTIL_DATA_DIR"
CACHE_DIR_ENV = "RCUTIL_CACHE_DIR"


class DataError(RuntimeError):
    """A data file is missing, corrupt or malformed; the message says how to fix it."""


@dataclass(frozen=True)
class Asset:
    """A data file: where it lives relative to a data root and how to get and check it.

    ``url`` is the canonical download; if it is a zip archive, ``member`` names the file in
    it. ``sha256`` is the expected checksum of the file itself (not of the archive); when it
    is not known, ``validate`` (a function of the path that raises :class:`DataError`) checks
    the structure, and the checksum of the first verified download is recorded beside the
    cached file and enforced from then on.
    """

    relpath: str
    url: str | None
    sha256: str | None = None
    member: str | None = None
    validate: Callable[[Path], None] | None = None
    #: A derived asset has no URL: it is made from the asset ``source`` (its relative path) by
    #: ``derive(source_path, out_path)``, then checked like a download (see :func:`derive`).
    source: str | None = None
    derive: Callable[[Path, Path], None] | None = None


SST2_URL = "https://dl.fbaipublicfiles.com/glue/data/SST-2.zip"
GPT2_URL = "https://huggingface.co/openai-community/gpt2/resolve/main/"
JENA_URL = "https://storage.googleapis.com/tensorflow/tf-keras-datasets/jena_climate_2009_2016.csv.zip"

#: The registry: relative path -> asset. Experiment modules may register more with :func:`register`.
ASSETS: dict[str, Asset] = {}


def register(asset: Asset) -> Asset:
    """Add (or replace) an asset in the registry and return it."""
    ASSETS[asset.relpath] = asset
    return asset


for _asset in (
    Asset("sst2/train.tsv", SST2_URL,
          "48eac26399f8456935f81dd9e3a745c1430adb6c62e233ccfe22db4a0d15d1d1", "SST-2/train.tsv"),
    Asset("sst2/dev.tsv", SST2_URL,
          "54a9c12c77e402fc14d6a66a506f24d999f596b0176eb777c972cccc2f9cc4b0", "SST-2/dev.tsv"),
    Asset("gpt2_tokenizer/vocab.json", GPT2_URL + "vocab.json",
          "196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783"),
    Asset("gpt2_tokenizer/merges.txt", GPT2_URL + "merges.txt",
          "1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5"),
):
    register(_asset)


# --------------------------------------------------------------------------- helpers
def sha256sum(path: Path, chunk: int = 1 << 20) -> str:
    """The sha256 hex digest of a file."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def cache_dir() -> Path:
    """The user cache: ``$RCUTIL_CACHE_DIR``, else ``$XDG_CACHE_HOME/rcutil``, else ``~/.cache/rcutil``."""
    if os.environ.get(CACHE_DIR_ENV):
        return Path(os.environ[CACHE_DIR_ENV]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "rcutil"


def data_dir() -> Path | None:
    """The folder named by ``$RCUTIL_DATA_DIR``, or ``None`` when the variable is unset."""
    value = os.environ.get(DATA_DIR_ENV, "").strip()
    return Path(value).expanduser() if value else None


def _recorded_checksum_path(path: Path) -> Path:
    return path.with_name(path.name + ".sha256")


def verify(path: Path, asset: Asset) -> Path:
    """Check ``path`` against the asset's checksum (or structure); raise :class:`DataError` if wrong."""
    expected = asset.sha256
    if expected is None:
        recorded = _recorded_checksum_path(path)
        if recorded.exists():
            expected = recorded.read_text().split()[0]
    if expected is not None:
        actual = sha256sum(path)
        if actual != expected:
            raise DataError(
                f"{path} is corrupt: its sha256 is {actual}, expected {expected}. "
                f"Delete it and run again to download a fresh copy"
                + (f" from {asset.url}" if asset.url else "")
                + f", or point {DATA_DIR_ENV} at a folder with the correct file."
            )
    if asset.validate is not None:
        asset.validate(path)
    return path


def download(asset: Asset, dest: Path, *, progress: bool = True) -> Path:
    """Download ``asset`` to ``dest`` atomically and verify it; return ``dest``.

    The bytes go to a temporary file in the destination folder; a zip member is extracted
    to another temporary file; only a verified file is renamed to ``dest``. Where no checksum
    is known, the checksum of this verified download is recorded in ``dest.sha256``.
    """
    if asset.url is None:
        raise DataError(
            f"{asset.relpath} is missing (expected sha256 {asset.sha256}) and has no download URL. "
            f"Put it at {dest}, or set {DATA_DIR_ENV} to a folder that holds {asset.relpath}."
        )
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp_dir = Path(tempfile.mkdtemp(dir=dest.parent, prefix=".download-"))
    try:
        raw = tmp_dir / "raw"
        try:
            with urllib.request.urlopen(asset.url) as response, open(raw, "wb") as out:
                total = int(response.headers.get("Content-Length") or 0) or None
                with tqdm(total=total, unit="B", unit_scale=True, disable=not progress,
                          desc=f"download {Path(asset.url).name}") as bar:
                    while block := response.read(1 << 16):
                        out.write(block)
                        bar.update(len(block))
        except OSError as exc:  # URLError is an OSError
            raise DataError(
                f"{asset.relpath} is missing and could not be downloaded from {asset.url}: {exc}. "
                f"Expected sha256: {asset.sha256 or 'not known (the structure is checked)'}. Without network, "
                f"put the file at {dest} or set {DATA_DIR_ENV} to a folder that holds {asset.relpath}."
            ) from exc
        got = raw
        if asset.member is not None:
            try:
                with zipfile.ZipFile(raw) as zf, zf.open(asset.member) as src, \
                        open(tmp_dir / "member", "wb") as out:
                    shutil.copyfileobj(src, out)
            except (zipfile.BadZipFile, KeyError) as exc:
                raise DataError(f"the archive from {asset.url} has no readable {asset.member}: {exc}") from exc
            got = tmp_dir / "member"
        verify(got, asset)
        if asset.sha256 is None:
            _recorded_checksum_path(dest).write_text(f"{sha256sum(got)}  {dest.name}\n")
        os.replace(got, dest)
    finally:
        shutil.rmtree(tmp_dir, ignore_errors=True)
    return dest


def derive(asset: Asset, dest: Path, *, progress: bool = True, allow_download: bool = True) -> Path:
    """Make the derived ``asset`` at ``dest`` atomically from its source, found with :func:`find`
    (so downloaded when missing and ``allow_download``); verify it; return ``dest``."""
    try:
        source = find(asset.source, progress=progress, allow_download=allow_download)
    except DataError as exc:
        raise DataError(f"{asset.relpath} is made from {asset.source}, which is not available: "
                        f"{exc}") from exc
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp_dir = Path(tempfile.mkdtemp(dir=dest.parent, prefix=".derive-"))
    try:
        made = tmp_dir / dest.name
        asset.derive(source, made)
        verify(made, asset)
        os.replace(made, dest)
    finally:
        shutil.rmtree(tmp_dir, ignore_errors=True)
    return dest


def find(relpath: str, *, progress: bool = True, allow_download: bool = True) -> Path:
    """The path of data file ``relpath``: data folder, else cache, else download (see module doc)."""
    if relpath not in ASSETS:
        raise ValueError(f"unknown data file {relpath!r}: known files are {', '.join(sorted(ASSETS))}")
    asset = ASSETS[relpath]
    root = data_dir()
    if root is not None and (root / relpath).is_file():
        return verify(root / relpath, asset)
    cached = cache_dir() / relpath
    if cached.is_file():
        return verify(cached, asset)
    if asset.derive is not None:
        return derive(asset, cached, progress=progress, allow_download=allow_download)
    if not allow_download:
        where = f"{root / relpath} or {cached}" if root else str(cached)
        raise DataError(f"{relpath} is missing: looked in {where}; downloads are switched off.")
    return download(asset, cached, progress=progress)
