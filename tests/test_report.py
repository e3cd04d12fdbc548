"""The report joins the experiments' own claims; it adds and changes none."""

import re
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from rcutil import experiments, report
from rcutil.claims import RECONSTRUCTION, REPRODUCED, STATED, Claim, reconstruction

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
                REPRODUCED,
                "why",
                chapter=name,
                setting=reconstruction("width 64"),
            )
            made[name] = row
            return [row]

        monkeypatch.setattr(module, "claims", claims)
    results = {name: {"n": i} for i, name in enumerate(experiments.available())}
    rows = report.claims(results)
    assert rows == [made[name] for name in experiments.available()]
    assert [(r.verdict, r.setting_kind) for r in rows] == [
        (REPRODUCED, RECONSTRUCTION)
    ] * len(rows)


def test_links_to_chapters_carry_plain_text():
    row = Claim(
        "k", "c", "p", "1", REPRODUCED, "r", chapter="rank-collapse", setting=STATED
    )
    table = report.render([row], brief=True)
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


# ---------------------------------------------------------------- the one rendering
from rcutil import claims as C  # noqa: E402


def _rows():
    test = C.decision(
        C.comparison(
            [1.0, 2, 3, 4, 5], [2.0, 3, 4, 5, 6.5], direction="less", label="w − wo"
        )
    )
    return [
        C.Claim(
            "a",
            "First",
            "the paper's words",
            "1.5",
            C.REPRODUCED,
            "every check",
            rule="the check",
            chapter="model",
            setting=C.reconstruction("tanh"),
        ),
        C.Claim(
            "b",
            "Second",
            "p",
            "b",
            test.verdict,
            "why",
            rule="r",
            chapter="convergence",
            setting=C.STATED,
            decision=test,
        ),
        C.Claim(
            "c",
            "Third",
            "p",
            "2",
            C.NOT_REPRODUCED,
            "a counterexample",
            rule="r",
            chapter="singular-values",
            setting=C.STATED,
        ),
    ]


def test_counts_cross_verdict_with_setting():
    rows = _rows()
    table = report.counts(rows)
    assert table == {
        (C.REPRODUCED, C.AS_STATED): 0,
        (C.REPRODUCED, C.RECONSTRUCTION): 1,
        (C.INCONCLUSIVE, C.AS_STATED): 1,
        (C.INCONCLUSIVE, C.RECONSTRUCTION): 0,
        (C.NOT_REPRODUCED, C.AS_STATED): 1,
        (C.NOT_REPRODUCED, C.RECONSTRUCTION): 0,
    }
    lines = report.counts_table(rows).splitlines()
    assert (
        lines[0]
        == "| verdict | as the paper states it | the book's reconstruction | all |"
    )
    # the mark and its word never part on a narrow screen
    assert lines[2] == "| **✓\u00a0reproduced** | 0 | 1 | 1 |"
    assert lines[3] == "| **?\u00a0inconclusive at this scale** | 1 | 0 | 1 |"
    assert lines[4] == "| **✗\u00a0not reproduced** | 1 | 0 | 1 |"
    assert lines[5] == "| all | 2 | 1 | 3 |"


def test_a_card_shows_the_verdict_first_then_claim_evidence_and_setting():
    rows = _rows()
    text = report.render(rows)
    cards = text.split("::::{container} rc-claim ")[1:]
    assert len(cards) == 3
    first = cards[0]
    order = [
        first.index(s)
        for s in (
            "**✓ reproduced**",
            "**First**",
            "1.5",
            "*Setting:* the book's reconstruction: tanh",
            ":::{dropdown}",
            "**The paper.** the paper's words",
            "**The rule.** the check",
            "**The reason.** every check",
        )
    ]
    assert order == sorted(order)
    assert first.startswith("rc-reproduced\n")
    assert "{ref}`The model <model>`" in first
    second = cards[1]
    assert second.startswith("rc-inconclusive\n")
    assert rows[1].decision.line() in second and "*It would take* about" in second
    assert "**The test.** permutation test" in second
    assert (
        cards[2].startswith("rc-not-reproduced\n")
        and "**✗ not reproduced**" in cards[2]
    )
    assert text.startswith(":::::{container} rc-claims rc-cards\n") and text.endswith(
        ":::::"
    )


def test_a_line_per_claim_for_the_introduction():
    text = report.render(_rows(), brief=True)
    lines = [ln for ln in text.splitlines() if ln.startswith("**")]
    assert lines[0] == (
        "**✓ reproduced** · First · *the book's reconstruction* · "
        "{ref}`The model <model>`"
    )
    assert lines[2].startswith(
        "**✗ not reproduced** · Third · *as the paper states it*"
    )
    assert "rc-brief" in text and ":::{container} rc-line rc-not-reproduced" in text
    without = report.render(_rows(), brief=True, links=False)
    lines = [ln for ln in without.splitlines() if ln.startswith("**")]
    # without links a line ends with the kind of setting
    assert lines[0] == "**✓ reproduced** · First · *the book's reconstruction*"
    assert "{ref}" not in without


def test_a_card_keeps_its_text_on_one_line_and_refuses_no_rows():
    row = C.Claim("k", "Two\nlines", "p", "x\n y", C.REPRODUCED, "r", setting=C.STATED)
    text = report.render([row], links=False)
    assert "**Two lines**" in text and "\nx y\n" in text
    with pytest.raises(ValueError, match="no claims"):
        report.render([])


def test_the_family_of_tests_is_stated():
    text = report.family(_rows())
    assert text.startswith("Of the 3 claims, 1 is decided by tests over seeds")
    assert "and 2 by exact checks" in text and "probability up to 0.05" in text
    assert "is at most 0.05" in text
    many = _rows() + [_rows()[1]] * 6
    assert "7 are decided" in report.family(many)
    assert f"up to {1 - 0.95**7:.2f}" in report.family(many)
    assert "exact checks, which chance does not decide" in report.family(_rows()[:1])


def test_the_definitions_render_every_term_with_the_verdicts_marks():
    text = report.definitions()
    assert text.startswith("**✓ reproduced**\n: the rule decides for the claim")
    for term in C.DEFINITIONS:
        name = report.verdict_text(term) if term in C.MARKS else term
        assert f"**{name}**\n: " in text


def test_a_card_is_exactly_this_markup():
    row = C.Claim(
        "k",
        "The claim",
        "the paper",
        "the book",
        C.REPRODUCED,
        "the reason",
        rule="the rule",
        chapter="model",
        setting=C.reconstruction("τ = 1"),
    )
    assert report.render([row]).splitlines() == [
        ":::::{container} rc-claims rc-cards",
        "::::{container} rc-claim rc-reproduced",
        ":::{container} rc-verdict",
        "**✓ reproduced**",
        ":::",
        ":::{container} rc-what",
        "**The claim** · {ref}`The model <model>`",
        "",
        "the book",
        ":::",
        ":::{container} rc-setting",
        "*Setting:* the book's reconstruction: τ = 1",
        ":::",
        ":::{dropdown} The paper, the rule and the reason",
        "**The paper.** the paper",
        "",
        "**The book.** the book",
        "",
        "**The rule.** the rule",
        "",
        "**The reason.** the reason",
        ":::",
        "::::",
        ":::::",
    ]
    bare = replace(row, rule="", chapter="")
    lines = report.render([bare]).splitlines()
    assert "**The claim**" in lines and not any("The rule." in ln for ln in lines)
    assert lines.count("") == 3  # after the claim, between paper, book and reason
    line = report.render([row], brief=True).splitlines()
    assert line == [
        ":::::{container} rc-claims rc-brief",
        ":::{container} rc-line rc-reproduced",
        "**✓ reproduced** · The claim · *the book's reconstruction* · "
        "{ref}`The model <model>`",
        ":::",
        ":::::",
    ]
    assert "{ref}" not in report.render([replace(row, chapter="")], brief=True)
    assert "{ref}" not in report.render([row], links=False)


def test_a_tested_card_folds_the_test_and_shows_what_it_would_take_only_if_needed():
    rows = _rows()
    decided = C.decision(
        C.comparison([1.0, 2, 3, 4, 5], [6.0, 7, 8, 9, 10], direction="less")
    )
    held = replace(rows[1], verdict=decided.verdict, decision=decided)
    text = report.render([held])
    assert "It would take" not in text
    lines = text.splitlines()
    i = lines.index(f"**The test.** {decided.rule()}; {decided.reason()}.")
    assert (
        lines[i - 1] == ""
        and lines[i + 1] == ""
        and lines[i + 2].startswith("**The reason.**")
    )
    assert lines[lines.index("**The paper.** p") + 2] == "**The book.** b"
    failed = replace(rows[2], decision=None)
    assert "It would take" not in report.render([failed])


def test_an_open_row_checked_exactly_says_what_would_resolve_it():
    row = C.Claim(
        "k",
        "The rate",
        "p",
        "0.9 of its prediction",
        C.INCONCLUSIVE,
        "two betas are not resolved",
        setting=C.STATED,
        would_take="runs of about\n1e5 steps",
    )
    card = report.render([row], links=False).splitlines()
    assert "0.9 of its prediction. *It would take* runs of about 1e5 steps." in card
    closed = replace(row, verdict=C.REPRODUCED, would_take="")
    assert "It would take" not in report.render([closed])


def test_the_counts_table_has_one_right_aligned_column_per_kind_and_all():
    lines = report.counts_table(_rows()).splitlines()
    assert lines[1] == "|---|---:|---:|---:|"


def test_the_definitions_end_in_one_newline():
    text = report.definitions()
    assert text.endswith(".\n") and not text.endswith("\n\n")
    assert not text.startswith("\n")
    assert "\n\n**✗ not reproduced**\n: " in text


def test_the_family_says_how_many_wrong_rows_to_expect():
    rows = [_rows()[1]] * 4
    text = report.family(rows)
    assert "by chance is at most 0.2," in text
    assert text.endswith(
        "A single surprising row among them is weak evidence on its own; its interval "
        "and its p-value say how surprising it is."
    )


def test_show_gives_a_notebook_cell_the_rendered_cards():
    rows = _rows()
    shown = report.show(rows)
    assert shown.data == report.render(rows)
    assert report.show(rows, brief=True).data == report.render(rows, brief=True)
    assert report.show(rows, links=False).data == report.render(rows, links=False)


def test_gather_reads_each_experiments_stored_result(monkeypatch):
    asked = []
    monkeypatch.setattr(
        experiments,
        "cached",
        lambda name, profile, progress: asked.append((name, profile, progress)) or name,
    )
    got = report.gather("book", progress=True)
    names = [e.name for e in experiments.registry()]
    assert got == {n: n for n in names}
    assert asked == [(n, "book", True) for n in names]
    report.gather()
    assert asked[-1] == (names[-1], None, False)


def test_claims_of_names_the_chapter_unless_the_claim_does(monkeypatch):
    own = C.Claim(
        "x", "c", "p", "1", C.REPRODUCED, "r", chapter="report", setting=C.STATED
    )
    plain = C.Claim("y", "c", "p", "1", C.REPRODUCED, "r", setting=C.STATED)
    monkeypatch.setattr(
        report, "_claims_function", lambda name: lambda result: [own, plain]
    )
    rows = report.claims_of("rank-collapse", None)
    assert [r.chapter for r in rows] == ["report", "rank-collapse"]


def test_a_link_to_an_unknown_chapter_keeps_its_label():
    assert report.chapter_link("notation") == "{ref}`notation`"
    title = experiments.entry("model").title
    assert report.chapter_link("model") == f"{{ref}}`{title} <model>`"
