"""Run profiles: one switch that sets every size in the book, and the typed settings
that hold those sizes.

There are three profiles, and the code path is the same in all of them; only the sizes
differ.

``ci``
    Every chapter executes in minutes on two CPU cores. The test command uses it.
``book``
    The published figures (what the website shows).
``paper``
    Paper-scale settings, meant for a GPU.

The active profile comes from the ``--profile`` flag of ``python -m rcutil``, else from
the environment variable ``RCUTIL_PROFILE``, else it is ``ci``.

Each experiment declares its settings as a frozen dataclass derived from
:class:`Settings` and writes one row per profile, each a change of the one before::

    @dataclass(frozen=True, kw_only=True)
    class Settings(profiles.Settings):
        steps: int
        seeds: tuple[int, ...]

    CI = Settings(steps=40, seeds=(0, 1))
    BOOK = replace(CI, steps=300, seeds=(0, 1, 2, 3, 4))
    PAPER = replace(BOOK, steps=4200)
    SETTINGS = {"ci": CI, "book": BOOK, "paper": PAPER}

:func:`settings_for` serves the row of a profile, with its ``profile`` field set.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from typing import Any

PROFILES = ("ci", "book", "paper")
ENV_VAR = "RCUTIL_PROFILE"
DEFAULT_PROFILE = "ci"


@dataclasses.dataclass(frozen=True, kw_only=True)
class Settings:
    """Base of every experiment's settings: a frozen dataclass, one instance per
    profile. Sequences are tuples, so that a row cannot change once written."""

    profile: str = ""  #: the profile the row was served for (:func:`settings_for`)

    def __init_subclass__(cls, **kwargs):
        # IPython takes a class's own __repr__ (which @dataclass writes) before an
        # inherited _repr_pretty_: every settings class carries its own
        super().__init_subclass__(**kwargs)
        cls._repr_pretty_ = Settings._repr_pretty_

    def _repr_pretty_(self, printer, cycle: bool) -> None:
        """One field per line when a chapter shows its settings (IPython's display)."""
        fields = (
            f"    {f.name}={getattr(self, f.name)!r}," for f in dataclasses.fields(self)
        )
        printer.text("\n".join([f"{type(self).__name__}(", *fields, ")"]))


def profile_of(settings: Settings | Mapping[str, Any]) -> str:
    """The profile a row of settings was served for, typed or a plain mapping."""
    return settings["profile"] if isinstance(settings, Mapping) else settings.profile


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


def settings_for(table: Mapping[str, Any], profile: str | None = None):
    """The row of a per-profile settings ``table`` for the active (or given) profile.

    Every table defines all three profiles. Rows of an experiment are instances of one
    :class:`Settings` class, and the row comes back with its ``profile`` set. A table
    of plain mappings (a module outside the book's experiments) must give every row the
    same keys, so that switching profile changes sizes and never the set of settings;
    its row comes back as a ``dict`` with ``profile`` added.
    """
    profile = active_profile(profile)
    missing = [p for p in PROFILES if p not in table]
    if missing:
        raise ValueError(f"settings table has no row for profile(s) {missing}")
    rows = [table[p] for p in PROFILES]
    if all(isinstance(r, Settings) for r in rows):
        kinds = sorted({type(r).__qualname__ for r in rows})
        if len(kinds) > 1:
            raise TypeError(
                f"settings rows are of different classes {kinds}: write every "
                f"profile's row as the same Settings class (BOOK = replace(CI, ...))"
            )
        return dataclasses.replace(table[profile], profile=profile)
    if not all(isinstance(r, Mapping) for r in rows):
        raise TypeError(
            f"settings rows must be instances of rcutil.profiles.Settings, got "
            f"{[type(r).__name__ for r in rows]}"
        )
    keys = set(rows[0])
    for p, row in zip(PROFILES[1:], rows[1:]):
        if set(row) != keys:
            raise ValueError(
                f"settings rows differ in their keys: {PROFILES[0]!r} has "
                f"{sorted(keys)}, {p!r} has {sorted(row)}"
            )
    return dict(table[profile], profile=profile)
