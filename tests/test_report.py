"""The report joins the experiments' own claims; it adds and changes none."""
import re
from pathlib import Path

from rcutil import experiments, report
from rcutil.claims import DEVIATION, Claim


def test_registry_lists_every_experiment_module_in_book_order():
    folder = Path(experiments.__file__).parent
    files = sorted(p.stem for p in folder.glob("*.py") if p.stem != "__init__")
    entries = experiments.registry()
    assert sorted(e.module.rsplit(".", 1)[-1] for e in entries) == files
    assert {"model", "lipschitz", "singular-values", "convergence", "rank-collapse", "jena", "sst2"} <= {
        e.name for e in entries}
    assert [e.order for e in entries] == sorted(e.order for e in entries)
    for e in entries:
        module = experiments.load(e.name)
        assert module.NAME == e.name and module.CHAPTER == e.chapter
        assert not re.search(r"[$\\{}]", e.title), f"{e.name}: TITLE is link text, plain text only: {e.title!r}"


def test_report_statuses_are_the_chapters_own_claims(monkeypatch):
    made = {}
    for e in experiments.registry():
        module = experiments.load(e.name)

        def claims(result, name=e.name):
            row = Claim(f"{name}-row", name, "paper", f"{result['n']}", DEVIATION, "why", name)
            made[name] = row
            return [row]

        monkeypatch.setattr(module, "claims", claims)
    results = {name: {"n": i} for i, name in enumerate(experiments.available())}
    rows = report.claims(results)
    assert rows == [made[name] for name in experiments.available()]
    assert all(a is b for a, b in zip(rows, (made[n] for n in experiments.available())))


def test_links_to_chapters_carry_plain_text():
    row = Claim("k", "c", "p", "1", DEVIATION, "r", "rank-collapse")
    table = report.markdown_table([row], short=True)
    assert "{ref}`Rank collapse as d_QK grows, with and without the residual <rank-collapse>`" in table
