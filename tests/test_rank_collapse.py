"""The rank-collapse experiment: JSON keys, the acceptance condition, determinism."""
import json

import numpy as np
import pytest

from rcutil.experiments import rank_collapse as rc
from rcutil.profiles import PROFILES, settings_for
from rcutil.results import read_json, write_json


@pytest.fixture(scope="module")
def result():
    return rc.run("ci", progress=False)


def test_result_has_the_required_keys(result, tmp_path):
    assert result["collapse_scaling"] in result["scalings"]
    assert set(result["scalings"]) == {"tau=d_qk", "tau=sqrt(d_qk)", "tau=1"}
    for rows in result["scalings"].values():
        assert [r["d_qk"] for r in rows] == result["d_qk"]
        for r in rows:
            assert {"d_qk", "sigma_min_attn", "sigma_min_residual", "effective_rank_attn"} <= set(r)
    assert set(result["training"]) == {"0", "1"}
    cfg = result["settings"]
    assert all(len(v) == cfg["train_steps"] + 1 for v in result["training"].values())
    assert "settings" in result and result["seeds"]
    back = read_json(write_json(result, tmp_path / f"{rc.JSON_NAME}.json"))
    assert back["collapse_scaling"] == result["collapse_scaling"]
    json.dumps(back)


def test_acceptance(result):
    check = rc.acceptance(result)
    assert result["d_qk"][-1] >= 2**14
    assert check["ratio"] < 1e-3
    assert check["falling"]
    last = result["scalings"]["tau=d_qk"][-1]
    assert last["sigma_min_attn"] < 1e-3 * last["sigma_min_residual"]


def test_training_and_depth_show_the_residual_helps(result):
    loss0, loss1 = (np.asarray(result["training"][k]) for k in ("0", "1"))
    assert loss1[-1] / loss1[0] < 0.1 < 0.5 < loss0[-1] / loss0[0]
    assert min(rc.cubic_exponents(np.asarray(result["depth"]["attention"]))) >= 2.0
    assert np.asarray(result["depth"]["attention + skip"])[:, -1].mean() > 0.05


def test_every_profile_sweeps_to_at_least_2_to_the_14():
    for profile in PROFILES:
        assert settings_for(rc.SETTINGS, profile)["max_log2_d_qk"] >= 14


def test_determinism():
    cfg = settings_for(rc.SETTINGS, "ci")
    cfg.update(seeds=2, max_log2_d_qk=14, train_steps=3, depth_seeds=2)
    a, b = rc.sweep(cfg), rc.sweep(cfg)
    for name in a["per_seed"]:
        for q in a["per_seed"][name]:
            np.testing.assert_array_equal(a["per_seed"][name][q], b["per_seed"][name][q])
    ta, tb = rc.train(cfg), rc.train(cfg)
    assert all(ta[k].loss == tb[k].loss for k in ta)
    da, db = rc.depth_collapse(cfg), rc.depth_collapse(cfg)
    for k in da:
        np.testing.assert_array_equal(da[k], db[k])


def test_bad_profile_raises():
    with pytest.raises(ValueError, match="profile"):
        rc.run("huge", progress=False)
