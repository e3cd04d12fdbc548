"""Files the package writes: whole or not at all, one writer at a time, and no litter.

Both the results store (:mod:`rcutil.store`) and the data layer (:mod:`rcutil.data`)
write through these three helpers:

* :func:`locked`: an exclusive lock (the ``filelock`` library) on the hidden file
  ``.<name>.lock`` beside the target, so that two processes never write, download or
  compute the same file at once: the second waits, then finds what the first wrote. A
  lock whose holder has ended is free at once (the system releases it). A wait
  longer than :data:`LOCK_SPEAK_S` says so on stderr, once, naming the lock file and
  its holder; a wait longer than ``$RCUTIL_LOCK_TIMEOUT`` seconds (default six hours)
  ends with a ``TimeoutError`` in one line.
* :func:`staged`: a temporary file ``.<name>.<random>.tmp`` beside the target, renamed
  onto it only when the block that fills it ends without an error (readable by all,
  0644); otherwise removed. A reader never sees half a file.
* :func:`remove_leftovers`: removes the temporary files that a killed writer left
  (``kill -9`` runs no clean-up); called under the lock, where no other writer of that
  file is at work.

A write that fails for want of space or permission raises :class:`WriteError` (an
``OSError``) in one line that names the path and the fix.
"""

from __future__ import annotations

import contextlib
import errno
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from . import env

LOCK_TIMEOUT_ENV = "RCUTIL_LOCK_TIMEOUT"
#: Seconds a process waits for another's lock before it says so.
LOCK_SPEAK_S = 5.0
#: The default limit of a wait for a lock: six hours (a long run holds its lock).
LOCK_LIMIT_S = 6 * 3600


class WriteError(OSError):
    """A file could not be written (full disk, read-only folder, ...); the message
    names the path and the fix."""

    def __str__(self) -> str:
        return str(self.strerror)


def write_failed(path: Path, exc: OSError, fix: str | None = None) -> WriteError:
    """``exc``, raised while writing ``path``, as a :class:`WriteError` of one line."""
    if fix is None:
        fix = (
            "free some space there or choose another folder"
            if exc.errno in (errno.ENOSPC, errno.EDQUOT)
            else "choose a folder this user can write to"
        )
    return WriteError(exc.errno, f"cannot write {path} ({exc.strerror or exc}): {fix}")


def lock_timeout() -> int:
    """The longest wait for a lock, in seconds: ``$RCUTIL_LOCK_TIMEOUT``, else
    :data:`LOCK_LIMIT_S`; a value that is not a whole number of seconds is an
    :class:`rcutil.env.EnvError` naming the variable."""
    return env.count(
        LOCK_TIMEOUT_ENV, LOCK_LIMIT_S, what="seconds to wait for a lock", high=10**7
    )


def lock_path(target: Path) -> Path:
    """The lock file of ``target``: ``.<name>.lock`` beside it."""
    return target.with_name(f".{target.name}.lock")


def holder(lock: Path) -> str:
    """Who holds ``lock``: ``pid N`` (and whether it is stopped), from the pid the
    holder wrote into it; ``another process`` when it cannot be read."""
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
def locked(target: Path, *, fix: str | None = None) -> Iterator[None]:
    """Hold the exclusive lock of ``target`` for the block (see the module docstring).
    ``fix`` says what to do when the lock file cannot be written (default: free some
    space, or choose a writable folder)."""
    import filelock

    target = Path(target)
    limit = lock_timeout()
    lock = lock_path(target)
    try:
        lock.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise write_failed(lock.parent, exc, fix) from None
    file_lock = filelock.FileLock(str(lock))
    start = time.monotonic()
    try:
        try:
            file_lock.acquire(timeout=min(LOCK_SPEAK_S, limit))
        except filelock.Timeout:
            print(
                f"rcutil: waiting for {lock}, held by {holder(lock)} "
                f"(limit {limit} s, {LOCK_TIMEOUT_ENV})",
                file=sys.stderr,
                flush=True,
            )
            try:
                file_lock.acquire(timeout=max(0.0, limit - (time.monotonic() - start)))
            except filelock.Timeout:
                raise TimeoutError(
                    f"waited {time.monotonic() - start:.0f} s for {lock}, held by "
                    f"{holder(lock)}: end that process, or raise {LOCK_TIMEOUT_ENV}"
                ) from None
    except TimeoutError:
        raise
    except OSError as exc:  # the lock file cannot be created
        raise write_failed(lock, exc, fix) from None
    try:
        try:
            with open(lock, "w") as f:  # who holds it, for a process that waits
                f.write(f"{os.getpid()}\n")
        except OSError as exc:  # a full disk is found here, before any work
            raise write_failed(lock, exc, fix) from None
        yield
    finally:
        file_lock.release()


def leftovers(target: Path) -> list[Path]:
    """The temporary files of writes of ``target`` beside it
    (``.<name>.<random>.tmp``)."""
    return sorted(Path(target).parent.glob(f".{Path(target).name}.*.tmp"))


def remove_leftovers(target: Path) -> None:
    """Remove what killed writes of ``target`` left (call it under :func:`locked`)."""
    for tmp in leftovers(target):
        with contextlib.suppress(OSError):
            tmp.unlink()


def temporary(target: Path, *, fix: str | None = None) -> Path:
    """A new, empty temporary file beside ``target``, named as :func:`leftovers`
    finds it."""
    target = Path(target)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(
            dir=target.parent, prefix=f".{target.name}.", suffix=".tmp"
        )
    except OSError as exc:
        raise write_failed(target, exc, fix) from None
    os.close(fd)
    return Path(tmp)


@contextlib.contextmanager
def staged(
    target: Path, *, mode: int = 0o644, fix: str | None = None
) -> Iterator[Path]:
    """Yield a temporary file beside ``target`` for the block to fill; when the block
    ends without an error (a ``return`` from it too: decide before entering whether to
    write), the file gets ``mode`` and is renamed onto ``target`` (one atomic step); in
    every case the temporary file is gone afterwards. An ``OSError``
    of the chmod or the rename is a :class:`WriteError` naming ``target``."""
    target = Path(target)
    tmp = temporary(target, fix=fix)
    try:
        yield tmp
        try:
            os.chmod(tmp, mode)
            os.replace(tmp, target)
        except OSError as exc:
            raise write_failed(target, exc, fix) from None
    finally:
        tmp.unlink(missing_ok=True)


def write_text(target: Path, text: str, *, fix: str | None = None) -> Path:
    """Write ``text`` to ``target`` through :func:`staged`; return ``target``."""
    with staged(target, fix=fix) as tmp:
        try:
            tmp.write_text(text)
        except OSError as exc:
            raise write_failed(target, exc, fix) from None
    return Path(target)
