import dataclasses

import pytest

from rcutil import profiles


def test_default_profile_is_ci(monkeypatch):
    monkeypatch.delenv("RCUTIL_PROFILE", raising=False)
    assert profiles.active_profile() == "ci"


def test_environment_variable_and_override(monkeypatch):
    monkeypatch.setenv("RCUTIL_PROFILE", "book")
    assert profiles.active_profile() == "book"
    assert profiles.active_profile("paper") == "paper"


def test_unknown_profile_is_named(monkeypatch):
    monkeypatch.setenv("RCUTIL_PROFILE", "huge")
    with pytest.raises(ValueError, match="'huge'.*ci, book, paper"):
        profiles.active_profile()


def test_settings_rows_must_share_keys():
    table = {"ci": {"a": 1}, "book": {"a": 2}, "paper": {"a": 3, "b": 4}}
    with pytest.raises(ValueError, match="differ in their keys"):
        profiles.settings_for(table, "ci")
    good = {"ci": {"a": 1}, "book": {"a": 2}, "paper": {"a": 3}}
    assert profiles.settings_for(good, "book") == {"a": 2, "profile": "book"}
    with pytest.raises(ValueError, match="no row"):
        profiles.settings_for({"ci": {"a": 1}}, "ci")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Sizes(profiles.Settings):
    steps: int
    seeds: tuple[int, ...]


@dataclasses.dataclass(frozen=True, kw_only=True)
class Other(profiles.Settings):
    steps: int


def test_a_typed_row_is_served_with_its_profile():
    ci = Sizes(steps=10, seeds=(0, 1))
    table = {"ci": ci, "book": dataclasses.replace(ci, steps=100), "paper": ci}
    row = profiles.settings_for(table, "book")
    assert row == Sizes(steps=100, seeds=(0, 1), profile="book")
    assert row.profile == profiles.profile_of(row) == "book" and row.steps == 100
    assert profiles.profile_of({"profile": "ci", "steps": 3}) == "ci"
    assert table["book"].profile == ""  # the table itself is left as written
    with pytest.raises(dataclasses.FrozenInstanceError):
        row.steps = 5


def test_typed_rows_of_different_classes_or_kinds_are_refused():
    ci = Sizes(steps=10, seeds=(0,))
    with pytest.raises(TypeError, match="different classes"):
        profiles.settings_for({"ci": ci, "book": ci, "paper": Other(steps=1)}, "ci")
    with pytest.raises(TypeError, match="rcutil.profiles.Settings"):
        profiles.settings_for({"ci": ci, "book": ci, "paper": {"steps": 1}}, "ci")


def test_a_typed_row_shows_one_field_per_line():
    from IPython.lib.pretty import pretty

    shown = pretty(Sizes(steps=10, seeds=(0, 1), profile="ci")).splitlines()
    assert shown == [
        "Sizes(",
        "    profile='ci',",
        "    steps=10,",
        "    seeds=(0, 1),",
        ")",
    ]
