"""rcutil.env: yes/no and count variables, parsed in one place; anything else is refused
in one line that names the variable, the value and what to set. Also the test profile
variable of tests/conftest.py."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from rcutil import env

VAR = "RCUTIL_TEST_VARIABLE"


@pytest.mark.parametrize(
    "value, expected",
    [
        ("1", True),
        ("true", True),
        ("YES", True),
        (" on ", True),
        ("True", True),
        ("0", False),
        ("false", False),
        ("No", False),
        (" 0", False),
        ("OFF", False),
    ],
)
def test_yes_no_values_in_any_case_and_spacing(monkeypatch, value, expected):
    monkeypatch.setenv(VAR, value)
    assert env.flag(VAR, not expected) is expected


@pytest.mark.parametrize("value", [None, "", "   "])
def test_an_unset_or_blank_flag_is_the_default(monkeypatch, value):
    if value is None:
        monkeypatch.delenv(VAR, raising=False)
    else:
        monkeypatch.setenv(VAR, value)
    assert env.flag(VAR, True) is True and env.flag(VAR, False) is False


@pytest.mark.parametrize("value", ["2", "maybe", "y e s", "-1", "nope"])
def test_any_other_flag_is_refused_naming_the_variable(monkeypatch, value):
    monkeypatch.setenv(VAR, value)
    with pytest.raises(env.EnvError, match=VAR) as err:
        env.flag(VAR, True)
    assert repr(value) in str(err.value) and "1 or 0" in str(err.value)
    assert isinstance(err.value, ValueError)


@pytest.mark.parametrize("value, expected", [("1", 1), (" 3 ", 3), ("8", 8)])
def test_a_count_in_range(monkeypatch, value, expected):
    monkeypatch.setenv(VAR, value)
    assert env.count(VAR, None, what="things", high=8) == expected


@pytest.mark.parametrize("value", ["0", "-1", "9", "abc", "2.0", "1e3", "+2"])
def test_a_count_out_of_range_or_not_whole_is_refused(monkeypatch, value):
    monkeypatch.setenv(VAR, value)
    with pytest.raises(env.EnvError, match=VAR) as err:
        env.count(VAR, None, what="things", high=8)
    assert repr(value) in str(err.value) and "from 1 to 8" in str(err.value)


def test_the_default_bound_of_a_count_is_four_per_core(monkeypatch):
    high = 4 * env.cores()
    monkeypatch.setenv(VAR, str(high))
    assert env.count(VAR, None, what="things") == high
    monkeypatch.setenv(VAR, str(high + 1))
    with pytest.raises(env.EnvError, match=f"from 1 to {high}"):
        env.count(VAR, None, what="things")
    monkeypatch.delenv(VAR)
    assert env.count(VAR, 2, what="things") == 2


def test_a_count_with_its_own_bound_says_nothing_of_cores(monkeypatch):
    monkeypatch.setenv(VAR, "abc")
    with pytest.raises(env.EnvError, match="from 1 to 60") as err:
        env.count(VAR, None, what="seconds to wait", high=60)
    assert "seconds to wait" in str(err.value) and "cores" not in str(err.value)
    with pytest.raises(env.EnvError, match="cores"):
        env.count(VAR, None, what="threads")


def test_an_unknown_test_profile_names_the_variable_and_the_profiles(tmp_path):
    """$RCUTIL_HYPOTHESIS_PROFILE, read by tests/conftest.py."""
    tests = Path(__file__).resolve().parent
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            str(tests / "test_tables.py"),
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "RCUTIL_HYPOTHESIS_PROFILE": "bogus"},
    )
    assert proc.returncode == 4, proc.stdout + proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "RCUTIL_HYPOTHESIS_PROFILE='bogus'" in lines[0]
    assert "deterministic, mutation" in lines[0]
