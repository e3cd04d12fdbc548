"""scripts/mutate.py: which part of an experiment module is mutated, and which survivors
form the class of a row's text (mutmut itself is not run here; ``make mutate`` does)."""

import ast
import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("mutate", ROOT / "scripts" / "mutate.py")
mutate = importlib.util.module_from_spec(spec)
sys.modules["mutate"] = mutate
spec.loader.exec_module(mutate)

SOURCE = '''import math

LIMIT = 1.0


def run(x):
    return x + 1


@staticmethod
def claims(r):
    return [Check("a b", r.x, "<=", 1), Claim("key", "name", f"v {r.x}")]


def helper(r):
    return r.x * 2
'''


def test_only_the_named_definitions_are_left_to_mutate():
    out = mutate.only_definitions(SOURCE, ["claims"])
    assert ast.dump(ast.parse(out)) == ast.dump(ast.parse(SOURCE))
    lines = out.splitlines()
    start, end = "# pragma: no mutate start", "# pragma: no mutate end"
    assert lines[0] == start and lines.count(start) == lines.count(end) == 2
    inside, shielded = False, set()
    for line in lines:
        inside = (inside or line == start) and line != end
        if inside:
            shielded.add(line)
    assert "    return x + 1" in shielded and "    return r.x * 2" in shielded
    assert not any("Check(" in line or "@staticmethod" in line for line in shielded)


def test_a_name_the_module_lacks_is_refused():
    with pytest.raises(SystemExit, match="missing"):
        mutate.only_definitions(SOURCE, ["missing"])


def _def(body: str) -> ast.AST:
    return ast.parse(f"def claims(r):\n    return {body}").body[0]


ORIGINAL = '[Check("a b", r.x, "<=", 1), Claim("key", "name", f"v {r.x}")]'


@pytest.mark.parametrize(
    "body, text_only",
    [
        ('[Check(None, r.x, "<=", 1), Claim("key", "name", f"v {r.x}")]', True),
        ('[Check("XXa bXX", r.x, "<=", 1), Claim("key", "NAME", f"v {r.x}")]', True),
        ('[Check("a b", r.x, "<=", 1), Claim("key", "name", f"XXv {r.x}")]', True),
        ('[Check("a b", r.x, "<=", 1), Claim("key", "name", None)]', True),
        ('[Check("a b", r.y, "<=", 1), Claim("key", "name", f"v {r.x}")]', False),
        ('[Check("a b", r.x, "<=", 2), Claim("key", "name", f"v {r.x}")]', False),
        ('[Check("a b", r.x, "<=", 1), Claim("XXkeyXX", "name", f"v {r.x}")]', False),
        (ORIGINAL, False),
    ],
)
def test_a_survivor_that_changes_only_a_rows_text_is_of_that_class(body, text_only):
    assert mutate.only_row_text(_def(ORIGINAL), _def(body)) is text_only


def test_every_module_and_definition_the_configuration_names_exists():
    """``[tool.mutmut.modules]`` names files of rcutil with existing tests, each mutated
    in a work folder of its own; ``[tool.mutmut.functions]`` names definitions each
    module has."""
    cfg = mutate.config()
    modules = cfg["modules"]
    for module, tests in modules.items():
        assert (ROOT / module).is_file(), module
        assert all((ROOT / t).is_file() for t in tests), (module, tests)
    assert len({mutate.work_folder(m) for m in modules}) == len(modules)
    for module, names in cfg.get("functions", {}).items():
        assert module in modules, module
        mutate.only_definitions((ROOT / module).read_text(), names)  # all defined


def test_work_folders_are_named_by_the_module_path():
    assert mutate.work_folder("rcutil/bounds.py").name == "bounds"
    assert (
        mutate.work_folder("rcutil/experiments/jena/verdicts.py").name
        == "experiments.jena.verdicts"
    )


def test_a_module_whose_test_file_is_missing_is_an_error(monkeypatch, capsys):
    modules = {
        "rcutil/claims.py": ["tests/test_claims.py", "tests/test_nothing_here.py"]
    }
    monkeypatch.setattr(mutate, "config", lambda: {"modules": modules})
    ran = []
    monkeypatch.setattr(mutate, "mutmut", lambda *a, **k: ran.append(a) or "")
    assert mutate.main(["--modules", "rcutil/claims.py"]) == 2
    err = capsys.readouterr().err
    assert "rcutil/claims.py" in err and "tests/test_nothing_here.py" in err
    assert "[tool.mutmut.modules]" in err and not ran


def test_every_experiments_verdicts_are_mutated_with_its_tests():
    from rcutil import experiments

    modules = mutate.config()["modules"]
    for e in experiments.registry():
        path = "rcutil/" + e.verdicts.removeprefix("rcutil.").replace(".", "/") + ".py"
        assert path in modules, f"{path} is not in [tool.mutmut.modules]"
    assert {"rcutil/claims.py", "rcutil/report.py"} <= set(modules)


VARIABLES = '''def checks(r):
    end, b0 = "at the end", TEX[0.0]
    names = {"gain": "the gain"}
    word = "up" if r.up else "down"
    limit = 1.0
    return [
        Check(f"{b0}: x {end}, {word}", r.x, "<=", limit),
        Claim("key", "n", "p", "b", r.v, ", ".join(names[k] for k in r.failed)),
    ]
'''


@pytest.mark.parametrize(
    "old, new, text_only",
    [
        ('"at the end", TEX', "None, TEX", True),
        ("TEX[0.0]", "TEX[1.0]", True),
        ('"the gain"}', '"XXthe gainXX"}', True),
        ('"up" if', '"UP" if', True),
        ('f"{b0}: x {end}, {word}"', "None", True),  # the variables no longer read
        ('{"gain"', '{"XXgainXX"', False),  # a key is looked up
        ("if r.up", "if not r.up", False),  # which words is a reading
        ("limit = 1.0", "limit = 2.0", False),  # read as a threshold
        ("r.v, ", "r.w, ", False),  # the verdict
    ],
)
def test_a_text_held_in_a_variable_read_only_in_a_rows_words_is_row_text(
    old, new, text_only
):
    """A string, ``None`` or a table look-up (``TEX[...]``) assigned to a variable that
    only the words of ``Check`` and ``Claim`` rows read is part of those words; a key,
    a condition or a number is not."""
    assert VARIABLES.count(old) == 1
    original = ast.parse(VARIABLES).body[0]
    mutant = ast.parse(VARIABLES.replace(old, new)).body[0]
    assert mutate.only_row_text(original, mutant) is text_only


TESTED = """def claims(r):
    where = "" if r.init == "scratch" else ", from GPT-2"
    return [
        rules.Claim.tested("key", f"name{where}", f"p {r.n + 1}", "b", r.decision,
                           setting=S("s"), reason_prefix="r: "),
        Check("a b", "up", "==", r.word),
    ]
"""


@pytest.mark.parametrize(
    "old, new, text_only",
    [
        ('f"name{where}"', "None", True),  # a claim built by Claim.tested: its words
        ('", from GPT-2"', '"XX, from GPT-2XX"', True),  # a text held in a variable
        ('"scratch"', '"XXscratchXX"', False),  # the condition that picks the text
        ('f"p {r.n + 1}"', "None", True),  # an f-string dropped whole
        ('S("s")', 'S("XXsXX")', True),  # the setting's words
        ('"r: "', '"XXr: XXX"', True),  # the reason's first words
        ("{r.n + 1}", "{r.n - 1}", False),  # a number the row shows, changed
        ("{r.n + 1}", "{r.n + 2}", False),
        ('"key"', '"XXkeyXX"', False),  # the key a claim is found by
        ("r.decision", "None", False),  # the decision that sets the verdict
        ('"up"', '"XXupXX"', False),  # a value that a check compares
    ],
)
def test_the_words_of_a_row_are_its_text_and_nothing_it_shows_or_decides(
    old, new, text_only
):
    """Rows built by ``Claim.tested`` (through a module, ``rules.Claim``) have their
    words at the claim's, paper's and book's places, in the setting and the reason's
    prefix; a value formatted into an f-string, a key, a decision, a check's value and
    the condition that picks a text are not words."""
    assert TESTED.count(old) == 1
    original = ast.parse(TESTED).body[0]
    mutant = ast.parse(TESTED.replace(old, new)).body[0]
    assert mutate.only_row_text(original, mutant) is text_only
