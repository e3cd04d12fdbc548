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
