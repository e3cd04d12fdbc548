"""The certificate of Theorem 1 on the book's instance, and the JSON of the convergence experiment."""
import math

import numpy as np
import pytest
import torch

import rcutil  # noqa: F401  (thread policy before numpy)
from rcutil import settings_for
from rcutil.certificate import best_certificate, certificate
from rcutil.experiments import convergence

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def ci_result():
    return convergence.run("ci", progress=False)


def test_certificate_holds_on_the_instance():
    s = settings_for(convergence.SETTINGS, "ci")
    model, X, Y = convergence.make_instance(s, 1)
    c = best_certificate(model, X, Y, n_radii=s["n_radii"])
    assert c.holds and c.lam > 0 and c.path_bound <= c.r
    assert c.alpha <= c.C and math.isclose(c.mu, 1 / c.C)
    assert c.alpha / c.C <= c.kappa_inv_sq                    # alpha / C <= kappa(H_0)^-2
    # too large targets break the stay-in-the-ball condition: the check can fail
    assert not best_certificate(model, X, Y * 1e3, n_radii=s["n_radii"]).holds


def test_certificate_needs_width():
    model = rcutil.Transformer(4, 2, 4, 2, W_U_init="zero")
    X = torch.randn(3, 2, 4, dtype=torch.float64)
    with pytest.raises(ValueError, match="d >= N n"):
        certificate(model, X, torch.zeros(3, 2, 2, dtype=torch.float64), r=0.1)


def test_json_keys_and_theorem(ci_result):
    keys = ("alpha", "C", "mu", "predicted_rate", "loss_history", "max_measured_rate",
            "corollary_step", "final_over_initial_loss")
    for res in [ci_result, ci_result["multilayer"]["2"], ci_result["multilayer"]["4"]]:
        for k in keys:
            assert k in res, k
        assert isinstance(res["loss_history"], list)
        assert math.isclose(res["predicted_rate"], 1 - res["mu"] * res["alpha"])
        loss = np.array(res["loss_history"])
        assert math.isclose(res["max_measured_rate"], float((loss[1:] / loss[:-1]).max()))
        assert res["max_measured_rate"] <= res["predicted_rate"]
        assert res["final_over_initial_loss"] < 1e-10
    assert set(ci_result["multilayer"]) == {"2", "4"}


def test_cli_writes_json(tmp_path, ci_result, monkeypatch):
    from rcutil.__main__ import main
    from rcutil.results import read_json

    monkeypatch.setattr(convergence, "run", lambda profile=None, **kw: ci_result)
    assert main(["convergence", "--profile", "ci", "--out", str(tmp_path), "--no-progress"]) == 0
    data = read_json(tmp_path / "convergence.json")
    assert data["multilayer"]["4"]["corollary_step"] == ci_result["multilayer"]["4"]["corollary_step"]
    assert (tmp_path / "convergence_rates.svg").exists()
