"""The convergence experiment: its JSON (trajectory and tightness at every depth), its
estimate, and the theorems' checks on the stored numbers."""
import math

import numpy as np
import pytest
import torch

import rcutil  # noqa: F401  (thread policy before numpy)
from rcutil import experiments, settings_for
from rcutil.certificate import best_certificate, certificate
from rcutil.experiments import convergence

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def ci_result():
    # the store the chapter reads (RCUTIL_RESULTS_DIR): computed once for the unit tests and the book
    return experiments.cached("convergence", "ci", progress=False)


def depths(result):
    return {"1": result, **result["multilayer"]}


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
            "rate_check_factor", "final_over_initial_loss")
    assert set(ci_result["multilayer"]) == {"2", "4"}
    for res in depths(ci_result).values():
        for k in keys:
            assert k in res, k
        assert math.isclose(res["predicted_rate"], 1 - res["mu"] * res["alpha"])
        loss = np.array(res["loss_history"])
        assert math.isclose(res["max_measured_rate"], float((loss[1:] / loss[:-1]).max()))
        assert res["max_measured_rate"] <= res["predicted_rate"]
        assert math.isclose(res["rate_check_factor"], (1 - res["max_measured_rate"]) / (res["mu"] * res["alpha"]))
        assert res["final_over_initial_loss"] < 1e-10


def test_trajectory_stays_where_the_certificate_says(ci_result):
    assert set(ci_result["trajectory"]) == set(ci_result["tightness"]) == {"1", "2", "4"}
    for L, res in depths(ci_result).items():
        path, cert = ci_result["trajectory"][L], res["certificate"]
        n = path["steps_run"] + 1
        assert len(path["distance"]) == len(path["sigma_min_H"]) == len(path["local_pl"]) == n
        assert n >= len(res["loss_history"]) and path["distance"][0] == 0.0
        assert path["max_distance"] == max(path["distance"]) > 0
        assert path["max_distance"] <= cert["path_bound"] <= cert["r"]
        assert math.isclose(path["sigma_min_H"][0], cert["s0"], rel_tol=1e-9)
        assert path["min_sigma_min_H"] == min(path["sigma_min_H"]) >= cert["s0"] - cert["G_H"] * cert["r"]
        assert path["min_local_pl"] == min(path["local_pl"]) >= cert["alpha"]
        np.testing.assert_allclose(path["local_pl"][:len(res["local_pl"])], res["local_pl"], rtol=1e-12)


def test_tightness_is_measured_and_no_true_value_exceeds_its_bound(ci_result):
    for L, res in depths(ci_result).items():
        cert = res["certificate"]
        for point in ("theta0", "last"):
            t = ci_result["tightness"][L][point]
            assert set(t) == {"G_H", "K_H", "C"}
            for key, v in t.items():
                assert v["bound"] == cert[key] and math.isclose(v["ratio"], v["true"] / v["bound"])
                assert 0 < v["ratio"] <= 1, (L, point, key, v)
            assert t["K_H"]["true"] >= t["K_H"]["along_top_direction"]
            assert math.isclose(t["C"]["true"], abs(t["C"]["eigenvalue"]))
    # the Hessian bound C is close to tight at one layer: the measurement is not vacuous
    assert ci_result["tightness"]["1"]["theta0"]["C"]["ratio"] > 0.9


def test_every_profile_measures_trajectory_and_tightness():
    for profile, settings in convergence.SETTINGS.items():
        assert settings["layers"] == [1, 2, 4], profile
        assert settings["power_iterations"] >= 30, profile


def test_cli_writes_json(tmp_path, ci_result, monkeypatch):
    from rcutil.__main__ import main
    from rcutil.results import read_json

    monkeypatch.setattr(convergence, "run", lambda settings, **kw: ci_result)
    monkeypatch.setenv("RCUTIL_RESULTS_DIR", str(tmp_path / "store"))
    assert main(["convergence", "--profile", "ci", "--out", str(tmp_path), "--no-progress"]) == 0
    data = read_json(tmp_path / "convergence.json")["result"]
    assert data["trajectory"]["4"]["max_distance"] == ci_result["trajectory"]["4"]["max_distance"]

