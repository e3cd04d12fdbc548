"""``estimate`` of the model, singular-value and rank-collapse experiments: the projection
counts the units that ``run`` does, from timed units of the real configuration."""
import pytest

from rcutil import experiments
from rcutil.__main__ import main
from rcutil.estimate import Part
from rcutil.profiles import settings_for


def units_of_run(name: str, settings: dict) -> dict[str, int]:
    """Part name -> units, counted from the settings the way run() loops over them."""
    if name == "model":
        d, d_qk, d_F, d_out = (settings[k] for k in ("d", "d_qk", "d_F", "d_out"))
        entries = 2 * d * d_qk + d * d + 2 * d * d_F + d * d_out
        return {"finite differences": entries, "gradcheck": entries,
                "gradient descent": len(settings["betas"]) * (settings["steps"] + 1)}
    if name == "singular-values":
        return {"tau=d_qk, collapsed": 1, "tau=sqrt(d_qk)": 1}
    return {"d_QK sweep": settings["seeds"], "training, beta = 0 and 1": 2 * (settings["train_steps"] + 1),
            "depth": 1}


@pytest.mark.parametrize("name", ["model", "singular-values", "rank-collapse"])
def test_estimate_counts_the_units_of_the_run(name):
    module = experiments.load(name)
    parts = module.estimate("ci")
    assert all(isinstance(p, Part) for p in parts)
    assert {p.name: p.units for p in parts} == units_of_run(name, settings_for(module.SETTINGS, "ci"))
    assert all(p.seconds_per_unit > 0 and p.peak_bytes >= 0 for p in parts)


def test_estimate_on_another_device_says_where_it_computes():
    parts = experiments.load("rank-collapse").estimate("ci", device="cuda")   # runs on the CPU anyway
    assert all(p.name.endswith("(on the cpu)") for p in parts)


def test_cli_prints_the_projection(capsys):
    assert main(["model", "--profile", "ci", "--estimate"]) == 0
    out = capsys.readouterr().out
    assert "estimate for model, profile ci, on cpu" in out and "gradient descent" in out and "total" in out
