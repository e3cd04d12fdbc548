"""scripts/weaken.py: every listed error still applies to the code it names, found by
syntax tree, so that reformatting the code does not break an entry (the test suites are
not run here; ``make weaken`` does that)."""

import ast
import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("weaken", ROOT / "scripts" / "weaken.py")
weaken = importlib.util.module_from_spec(spec)
sys.modules["weaken"] = weaken
spec.loader.exec_module(weaken)
Change, DoesNotApply = weaken.Change, weaken.DoesNotApply


@pytest.mark.parametrize("name", list(weaken.CHANGES))
def test_every_entry_applies_once_and_changes_the_code(name):
    change = weaken.CHANGES[name]
    source = (ROOT / change.file).read_text()
    changed = change.apply(source)
    assert ast.dump(ast.parse(changed)) != ast.dump(ast.parse(source))
    for test in change.tests:
        assert (ROOT / test).is_file(), test


@pytest.mark.parametrize("name", list(weaken.CHANGES))
def test_every_entry_applies_the_same_to_the_code_reformatted(name):
    """``ast.unparse`` rewrites a whole file with other line breaks, parentheses and
    quotes and without comments: the entry finds its place there and makes the same
    change."""
    change = weaken.CHANGES[name]
    source = (ROOT / change.file).read_text()
    reformatted = ast.unparse(ast.parse(source))
    assert reformatted != source
    assert ast.dump(ast.parse(change.apply(reformatted))) == ast.dump(
        ast.parse(change.apply(source))
    )


SOURCE = '''
LIMIT = 1.0


def bound(a, b):
    x = min(a, b + 2 * a)   # a comment
    if x > LIMIT:
        return x
    return (a +
            b)


class Rule:
    def value(self, a):
        def inner(t):
            return t * 2
        return inner(a) + a
'''


def test_expressions_statements_and_insertions():
    def apply(**kw):
        return Change("m.py", **kw).apply(SOURCE)

    assert "x = (min(a, b))" in apply(
        function="bound", old="min(a, b+2*a)", new="min(a, b)"
    )
    assert "    return a - b\n" in apply(
        function="bound", old="return a + b", new="return a - b"
    )
    changed = apply(function="bound", old="b + 2 * a", after="y = 0")
    assert "    x = min(a, b + 2 * a)   # a comment\n    y = 0\n" in changed
    changed = apply(function="bound", old="return x", before="x = -x")
    assert "    if x > LIMIT:\n        x = -x\n        return x\n" in changed
    changed = apply(
        function="bound",
        old="""
        if x > LIMIT:
            return x
        return a + b""",
        new="return 0",
    )
    assert "    return 0\n" in changed and "LIMIT:" not in changed.split("def bound")[1]
    assert "LIMIT = 2.0" in apply(function=None, old="LIMIT = 1.0", new="LIMIT = 2.0")
    assert "return (t * 3)" in apply(
        function="Rule.value.inner", old="t * 2", new="t * 3"
    )


@pytest.mark.parametrize(
    "kw, words",
    [
        (dict(function="bound", old="a * 3", new="a"), "0 times"),
        (dict(function="bound", old="a", new="b"), "times"),  # a name used often
        (dict(function="missing", old="a", new="b"), "missing"),
        (dict(function="Rule.other", old="a", new="b"), "other"),
        (
            dict(function="bound", old="return x", new="return x  # the same"),
            "as it was",
        ),
        (dict(function="bound", old="return x", new="return (x"), "does not parse"),
        (dict(function="bound", old="return x"), "either new"),
        (dict(function="bound", old="x = = 1", new="x = 2"), "neither"),
    ],
)
def test_an_entry_that_does_not_fit_says_why(kw, words):
    with pytest.raises(DoesNotApply, match=words):
        Change("m.py", **kw).apply(SOURCE)


def test_a_change_after_non_ascii_text_on_its_line_lands_on_its_code():
    """The syntax tree counts columns in UTF-8 bytes: a target after "β − 1" on the
    same line is still found at its characters."""
    source = 'def f(b):\n    return [f"β − {x}" for x in b if x > 0]\n'
    change = weaken.Change("f.py", "f", "x > 0", new="x > 1")
    assert change.apply(source) == (
        'def f(b):\n    return [f"β − {x}" for x in b if (x > 1)]\n'
    )
