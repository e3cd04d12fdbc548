"""Run profiles: one switch that sets every size in the book.

There are three profiles, and the code path is the same in all of them; only the sizes
differ.

``ci``
    Every chapter executes in minutes on two CPU cores. The test command uses it.
``book``
    The published figures (what the website shows).
``paper``
    Paper-scale settings, meant for a GPU.

The active profile comes from the ``--profile`` flag of ``python -m rcutil``, else from
the environment variable ``RCUTIL_PROFILE``, else it is ``ci``. Each experiment keeps
its sizes in a module-level ``SETTINGS`` mapping ``{"ci": {...}, "book": {...}, "paper":
{...}}`` and reads its row with :func:`settings_for`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

PROFILES = ("ci", "book", "paper")
ENV_VAR = "RCUTIL_PROFILE"
DEFAULT_PROFILE = "ci"


def check_profile(profile: str) -> str:
    """Return ``profile`` if it names a profile, else raise a ``ValueError`` that lists
    them."""
    if profile not in PROFILES:
        raise ValueError(
            f"unknown profile {profile!r}: choose one of {', '.join(PROFILES)} "
            f"(set {ENV_VAR} or pass --profile)"
        )
    return profile


def active_profile(profile: str | None = None) -> str:
    """The profile in force: ``profile`` if given, else ``$RCUTIL_PROFILE``, else
    ``ci``."""
    if profile is None:
        profile = os.environ.get(ENV_VAR, "").strip() or DEFAULT_PROFILE
    return check_profile(profile)


def settings_for(
    table: Mapping[str, Mapping[str, Any]], profile: str | None = None
) -> dict:
    """The row of a per-profile settings ``table`` for the active (or given) profile.

    Every table must define all three profiles with the same keys, so that switching
    profile changes sizes and never the set of settings.
    """
    profile = active_profile(profile)
    missing = [p for p in PROFILES if p not in table]
    if missing:
        raise ValueError(f"settings table has no row for profile(s) {missing}")
    keys = set(table[PROFILES[0]])
    for p in PROFILES[1:]:
        if set(table[p]) != keys:
            raise ValueError(
                f"settings rows differ in their keys: {PROFILES[0]!r} has "
                f"{sorted(keys)}, "
                f"{p!r} has {sorted(table[p])}"
            )
    return dict(table[profile], profile=profile)
