"""The report joins the experiments' own claims; it adds and changes none."""

import re
import sys
from pathlib import Path

import pytest

from rcutil import experiments, report
from rcutil.claims import DEVIATION, Claim

ROOT = Path(__file__).resolve().parents[1]


def test_registry_lists_every_experiment_package_in_book_order():
    folder = Path(experiments.__file__).parent
    files = sorted(p.parent.name for p in folder.glob("*/__init__.py"))
    entries = experiments.registry()
    assert sorted(e.module.rsplit(".", 1)[-1] for e in entries) == files
    assert {
        "model",
        "lipschitz",
        "singular-values",
        "convergence",
        "rank-collapse",
        "jena",
        "sst2",
    } <= {e.name for e in entries}
    assert [e.order for e in entries] == sorted(e.order for e in entries)
    for e in entries:
        assert e.name == e.stem.replace("_", "-") == e.chapter
        assert not re.search(r"[$\\{}]", e.title), (
            f"{e.name}: a title is link text, plain text only: {e.title!r}"
        )


def test_report_statuses_are_the_chapters_own_claims(monkeypatch):
    made = {}
    for e in experiments.registry():
        module = experiments.verdicts(e.name)

        def claims(result, name=e.name):
            row = Claim(
                f"{name}-row",
                name,
                "paper",
                f"{result['n']}",
                DEVIATION,
                "why",
                chapter=name,
            )
            made[name] = row
            return [row]

        monkeypatch.setattr(module, "claims", claims)
    results = {name: {"n": i} for i, name in enumerate(experiments.available())}
    rows = report.claims(results)
    assert rows == [made[name] for name in experiments.available()]
    assert [r.status for r in rows] == [DEVIATION] * len(rows)


def test_links_to_chapters_carry_plain_text():
    row = Claim("k", "c", "p", "1", DEVIATION, "r", chapter="rank-collapse")
    table = report.table([row], short=True).markdown()
    title = experiments.entry("rank-collapse").title
    assert f"{{ref}}`{title} <rank-collapse>`" in table and not re.search(
        r"[$\\{}]", title
    )


@pytest.mark.parametrize(
    "files, words",
    [
        ({"loose.py": "SETTINGS = {}"}, "is a package"),
        ({"bare/__init__.py": "SETTINGS = Result = run = None"}, "verdicts.py"),
        (
            {
                "half/__init__.py": "SETTINGS = Result = run = None",
                "half/verdicts.py": "def claims(result): return []",
            },
            "verdicts.checks",
        ),
    ],
    ids=["module", "package-without-verdicts", "verdicts-without-checks"],
)
def test_an_experiment_that_is_not_science_and_verdicts_is_refused(
    files, words, tmp_path, monkeypatch
):
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    monkeypatch.setattr(experiments, "__path__", [str(tmp_path)])
    experiments.registry.cache_clear()
    try:
        with pytest.raises(TypeError, match=words):
            experiments.registry()
    finally:
        experiments.registry.cache_clear()
        made = {
            f"rcutil.experiments.{Path(rel).parts[0].removesuffix('.py')}"
            for rel in files
        }
        for name in [m for m in sys.modules if m.startswith(tuple(made))]:
            del sys.modules[name]


def test_a_chapter_title_with_math_is_refused(tmp_path):
    (tmp_path / "book").mkdir()
    (tmp_path / "book" / "x.md").write_text(
        "(x)=\n# Collapse as $d_{QK} \\to \\infty$\n"
    )
    with pytest.raises(TypeError, match="plain text"):
        experiments.chapter_title("x", tmp_path)


def test_the_registry_takes_order_and_title_from_the_book():
    entries = experiments.registry()
    files = [Path(f).name for f in experiments.toc_files()]
    assert [e.stem for e in entries] == [
        f for f in files if f in {e.stem for e in entries}
    ]
    for e in entries:
        heading = re.search(
            r"^# (.+)$", (ROOT / "book" / f"{e.stem}.md").read_text(), re.M
        )[1]
        assert e.title == heading
