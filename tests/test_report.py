"""The report joins the experiments' own claims; it adds and changes none."""
from rcutil import experiments, report
from rcutil.claims import DEVIATION, Claim


def test_registry_lists_every_experiment_module_in_book_order():
    names = experiments.available()
    assert names == ["model", "lipschitz", "singular-values", "convergence", "rank-collapse", "jena", "sst2"]
    for e in experiments.registry():
        module = experiments.load(e.name)
        assert module.NAME == e.name and module.CHAPTER == e.chapter and "$" not in e.title


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
