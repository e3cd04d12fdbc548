"""The results store (rcutil.results): reuse, and a key made of what a result depends on."""
import json
import stat
import sys
import types
from pathlib import Path

import pytest

from rcutil import data, experiments, results

ROOT = Path(__file__).resolve().parents[1]


def test_cached_results_are_reused_and_keyed_by_settings(tmp_path, monkeypatch):
    monkeypatch.setenv("RCUTIL_RESULTS_DIR", str(tmp_path))
    calls = []
    module = experiments.load("model")
    real_run = module.run
    monkeypatch.setattr(module, "run", lambda *a, **k: calls.append(a) or real_run(*a, **k))
    first = experiments.cached("model", "ci", progress=False)
    again = experiments.cached("model", "ci", progress=False)
    assert first == again and len(calls) == 1
    stored = list(tmp_path.glob("model-ci-*.json"))
    assert len(stored) == 1
    assert stat.S_IMODE(stored[0].stat().st_mode) == 0o644
    experiments.cached("model", "ci", progress=False, refresh=True)
    assert len(calls) == 2
    monkeypatch.setenv("RCUTIL_RESULTS_CACHE", "0")
    experiments.cached("model", "ci", progress=False)
    assert len(calls) == 3


# ----------------------------------------------------------------------- code fingerprint
def _tree(source: str) -> str:
    import ast

    return ast.dump(results._science_tree(source))


JENA = (ROOT / "rcutil" / "experiments" / "jena.py").read_text()


def test_plotting_docstrings_and_comments_do_not_change_the_science_code():
    assert "def plot_loss" in JENA and 'ax.set_xlabel("iteration $t$")' in JENA
    legend = JENA.replace('ax.set_xlabel("iteration $t$")', 'ax.set_xlabel("GD step $t$")')
    doc = JENA.replace('"""One model of the sweep:', '"""A model of the sweep:')
    comment = JENA.replace("def run(", "# a comment\ndef run(")
    claims = JENA.replace('"jena-stall"', '"jena-stalls"')
    for variant in (legend, doc, comment, claims):
        assert variant != JENA and _tree(variant) == _tree(JENA)


def test_a_change_to_the_science_code_changes_the_fingerprint():
    assert "mu = settings[\"mu_factor\"] / float(lam.max())" in JENA
    changed = JENA.replace('mu = settings["mu_factor"] / float(lam.max())',
                           'mu = settings["mu_factor"] / float(lam.mean())')
    assert _tree(changed) != _tree(JENA)


def test_the_fingerprint_covers_imported_science_modules_only():
    modules = results.science_modules("rcutil.experiments.jena")
    assert {"rcutil.experiments.jena", "rcutil.model", "rcutil.train", "rcutil.jena_data"} <= set(modules)
    assert not set(modules) & set(results.NOT_SCIENCE)
    assert "rcutil.gpt2" not in modules        # another experiment's code does not touch this one
    assert results.science_fingerprint("rcutil.experiments.jena") == \
        results.science_fingerprint("rcutil.experiments.jena")


# ----------------------------------------------------------------------- a fake experiment
@pytest.fixture
def fake(tmp_path, monkeypatch):
    """An experiment ``fake`` that reads one data file and counts its runs."""
    monkeypatch.setenv("RCUTIL_RESULTS_DIR", str(tmp_path / "results"))
    monkeypatch.setenv("RCUTIL_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setattr(data, "ASSETS", {})
    data.register(data.Asset("fake/numbers.txt", None))
    (tmp_path / "data" / "fake").mkdir(parents=True)
    (tmp_path / "data" / "fake" / "numbers.txt").write_text("1 2 3\n")
    module = types.ModuleType("fake_experiment")
    module.NAME, module.CHAPTER, module.TITLE, module.ORDER = "fake", "fake", "Fake", 99
    module.JSON_NAME = "fake"
    module.SETTINGS = {p: {"scale": 2} for p in ("ci", "book", "paper")}
    module.calls = 0

    def run(profile=None, *, device="cpu", progress=True):
        module.calls += 1
        numbers = [int(x) for x in data.find("fake/numbers.txt").read_text().split()]
        return {"settings": module.SETTINGS["ci"], "total": 2 * sum(numbers)}

    module.run = run
    module.claims = lambda result: []
    module.data_files = lambda settings: ["fake/numbers.txt"]
    monkeypatch.setitem(sys.modules, "fake_experiment", module)
    entry = experiments.Experiment("fake", "fake_experiment", "fake", "Fake", 99)
    real = experiments.registry()
    monkeypatch.setattr(experiments, "registry", lambda: (*real, entry))
    return module, tmp_path


def test_a_replaced_data_file_is_never_answered_from_the_store(fake):
    module, tmp_path = fake
    assert experiments.cached("fake", "ci")["total"] == 12
    assert experiments.cached("fake", "ci")["total"] == 12 and module.calls == 1
    (tmp_path / "data" / "fake" / "numbers.txt").write_text("1 2 4\n")
    assert experiments.cached("fake", "ci")["total"] == 14 and module.calls == 2


def test_a_damaged_stored_result_is_named_recomputed_and_replaced(fake):
    module, tmp_path = fake
    experiments.cached("fake", "ci")
    (path,) = (tmp_path / "results").glob("fake-ci-*.json")
    path.write_text('{"total": 1')          # truncated by a killed run
    with pytest.warns(RuntimeWarning, match=str(path)):
        assert experiments.cached("fake", "ci")["total"] == 12
    assert module.calls == 2 and json.loads(path.read_text())["total"] == 12
    path.write_text("")                     # emptied
    with pytest.warns(RuntimeWarning, match="not a valid result file"):
        experiments.cached("fake", "ci")
