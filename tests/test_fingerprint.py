"""The code fingerprint (rcutil.fingerprint): the code ``run`` reaches, through imports,
changes it; code ``run`` never reaches does not; the data layer is followed like any
module."""

import textwrap

import pytest

from rcutil import experiments, fingerprint

LIB = '''
"""A library."""


def step(x):
    """Docstring."""
    return helper(x) + 1


def helper(x):
    return 2 * x


def unrelated():
    return 3
'''

EXP = '''
from .fake_lib import step

SCALE = 2


def run(settings, *, device="cpu", progress=True):
    return plot_scale(step(settings["x"]))


def plot_scale(y):
    return SCALE * y


def claims(result):
    return []


def draw(result):
    return "a figure"
'''


@pytest.fixture
def fake_sources(tmp_path, monkeypatch):
    """Two modules ``rcutil.fake_exp`` and ``rcutil.fake_lib`` written to
    ``tmp_path``."""
    files = {
        "rcutil.fake_exp": tmp_path / "fake_exp.py",
        "rcutil.fake_lib": tmp_path / "fake_lib.py",
    }
    real = fingerprint._module_file.__wrapped__

    def module_file(name):
        return files.get(name) or real(name)

    monkeypatch.setattr(fingerprint, "_module_file", module_file)

    def fingerprint_of(exp=EXP, lib=LIB):
        files["rcutil.fake_exp"].write_text(textwrap.dedent(exp))
        files["rcutil.fake_lib"].write_text(textwrap.dedent(lib))
        fingerprint._parsed_module.cache_clear()
        return fingerprint.science_fingerprint("rcutil.fake_exp")

    return fingerprint_of


def test_the_key_covers_what_run_reaches_through_imports(fake_sources):
    base = fake_sources()
    code = fingerprint.science_code("rcutil.fake_exp")
    assert {
        "rcutil.fake_exp:run",
        "rcutil.fake_exp:plot_scale",
        "rcutil.fake_exp:SCALE",
        "rcutil.fake_lib:step",
        "rcutil.fake_lib:helper",
    } <= set(code)
    # a computation run uses changes the key, whatever the function is called
    assert fake_sources(lib=LIB.replace("2 * x", "3 * x")) != base
    assert fake_sources(exp=EXP.replace("SCALE = 2", "SCALE = 4")) != base
    assert fake_sources(exp=EXP.replace("return SCALE * y", "return SCALE + y")) != base


def test_code_run_never_reaches_leaves_the_key(fake_sources):
    base = fake_sources()
    assert "rcutil.fake_exp:claims" not in fingerprint.science_code("rcutil.fake_exp")
    for exp, lib in (
        (EXP.replace('"a figure"', '"another figure"'), LIB),
        (EXP.replace("return []", "return [1]"), LIB),
        (EXP, LIB.replace("return 3", "return 4")),
        (EXP, LIB.replace('"""Docstring."""', '"""Another docstring."""')),
        (EXP.replace("def run(", "# a comment\ndef run("), LIB),
    ):
        assert fake_sources(exp, lib) == base


def test_the_key_of_a_real_experiment_leaves_out_its_claims_and_other_experiments():
    code = fingerprint.science_code(experiments.load("jena"))
    assert "rcutil.experiments.jena:run" in code and "rcutil.model:block" in code
    assert "rcutil.experiments.jena:claims" not in code
    assert not any(
        k.startswith(("rcutil.gpt2", "rcutil.experiments.sst2", "rcutil.sst2_data"))
        for k in code
    )


def test_the_data_layer_is_followed_like_any_module():
    """jena's run finds its file through rcutil.data: that code is in the key (the
    file's content is keyed by its sha256, rcutil.store)."""
    code = fingerprint.science_code(experiments.load("jena"))
    assert "rcutil.data:find" in code and "rcutil.data:verify" in code
    assert "rcutil.jena_data:load" in code
