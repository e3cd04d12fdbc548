"""The book's environment variables, parsed in one place.

A yes/no variable takes ``1/0``, ``true/false``, ``yes/no`` or ``on/off`` (any case,
spaces around ignored); a count is a whole number in a stated range. Anything else is
refused with an :class:`EnvError` that names the variable, the value and what to set
instead, so that a typo never silently means the default.
"""

from __future__ import annotations

import os

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


class EnvError(ValueError):
    """An environment variable holds a value its reader cannot use."""


def raw(name: str) -> str | None:
    """The variable's value with surrounding spaces removed; ``None`` when unset or
    empty."""
    value = os.environ.get(name, "").strip()
    return value or None


def flag(name: str, default: bool) -> bool:
    """A yes/no variable; ``default`` when it is unset or empty."""
    value = raw(name)
    if value is None:
        return default
    if value.lower() in _TRUE:
        return True
    if value.lower() in _FALSE:
        return False
    raise EnvError(
        f"{name}={os.environ[name]!r} is not a yes/no value: set {name} to 1 or 0 "
        f"(true/false, yes/no and on/off work too), or unset it"
    )


def cores() -> int:
    """The CPU cores this process may use."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS
        return os.cpu_count() or 1


def count(
    name: str, default: int | None, *, what: str, high: int | None = None
) -> int | None:
    """A whole-number variable in ``[1, high]`` (default ``high``: four per CPU core);
    ``default`` when it is unset. ``what`` says what the number counts, for the
    message."""
    value = raw(name)
    if value is None:
        return default
    per_core = high is None
    high = 4 * cores() if per_core else high
    if not value.isdecimal() or not 1 <= int(value) <= high:
        machine = f" (this machine has {cores()} cores)" if per_core else ""
        raise EnvError(
            f"{name}={os.environ[name]!r} is not a valid number of {what}: set it to a "
            f"whole number from 1 to {high}{machine}, or unset it"
        )
    return int(value)
