"""The rank-collapse experiment: JSON keys, the acceptance condition, the bound of eq.
``rc-centred``, determinism."""
import json
import math

import numpy as np
import pytest
import torch

from rcutil.experiments import rank_collapse as rc
from rcutil.model import attention
from rcutil.profiles import PROFILES, settings_for
from rcutil.results import read_json, write_json
from rcutil.spectra import random_inputs, spectrum, uniform_deviation


@pytest.fixture(scope="module")
def result():
    return rc.run(settings_for(rc.SETTINGS, "ci"), progress=False)


def test_result_has_the_required_keys(result, tmp_path):
    assert result["collapse_scaling"] in result["scalings"]
    assert set(result["scalings"]) == {"tau=d_qk", "tau=sqrt(d_qk)", "tau=1"}
    for rows in result["scalings"].values():
        assert [r["d_qk"] for r in rows] == result["d_qk"]
        for r in rows:
            assert {"d_qk", "sigma_min_attn", "sigma_min_residual", "effective_rank_attn"} <= set(r)
    assert set(result["training"]) == {"0", "1"}
    settings = result["settings"]
    assert all(len(v) == settings["train_steps"] + 1 for v in result["training"].values())
    assert "settings" in result and result["seeds"]
    back = read_json(write_json(result, tmp_path / "rank_collapse.json"))
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
    settings = settings_for(rc.SETTINGS, "ci")
    settings.update(seeds=2, max_log2_d_qk=14, train_steps=3, depth_seeds=2)
    a, b = rc.sweep(settings), rc.sweep(settings)
    for name in a["per_seed"]:
        for q in a["per_seed"][name]:
            np.testing.assert_array_equal(a["per_seed"][name][q], b["per_seed"][name][q])
    ta, tb = rc.train(settings), rc.train(settings)
    assert all(ta[k].loss == tb[k].loss for k in ta)
    da, db = rc.depth_collapse(settings), rc.depth_collapse(settings)
    for k in da:
        np.testing.assert_array_equal(da[k], db[k])


def test_bad_profile_raises():
    with pytest.raises(ValueError, match="profile"):
        settings_for(rc.SETTINGS, "huge")


def _instances(S: int, seed: int = 0):
    """Inputs (S, N, n, d), Gaussian W_Q, W_K with scales from nearly uniform to nearly hard
    attention, and Gaussian W_V, for the bound of eq. rc-centred."""
    N, n, d = 4, 16, 8
    X = random_inputs(S, N, n, d, seed=seed)
    gen = torch.Generator().manual_seed(seed + 1)
    scale = 10.0 ** (4 * torch.rand(S, 1, 1, 1, generator=gen, dtype=torch.float64) - 3)
    W_Q = torch.randn(S, 1, d, d, generator=gen, dtype=torch.float64) * scale / math.sqrt(d)
    W_K = torch.randn(S, 1, d, d, generator=gen, dtype=torch.float64) / math.sqrt(d)
    W_V = torch.randn(S, 1, d, d, generator=gen, dtype=torch.float64) / math.sqrt(d)
    return X, W_Q, W_K, W_V


@pytest.mark.parametrize("beta", [0.0, 0.5, 1.0, 2.0])
def test_centred_bound_holds_for_any_value_matrix(beta):
    X, W_Q, W_K, W_V = _instances(400)
    tau = math.sqrt(X.shape[-1])
    delta = uniform_deviation(X, W_Q, W_K, tau)
    smin = spectrum(attention(X, W_Q, W_K, W_V, tau) + beta * X)["sigma_min"]
    for s in range(X.shape[0]):   # the bound takes one instance at a time, (1, N, n, d)
        lower = rc.centred_lower_bound(X[s:s + 1], W_V[s, 0], delta[s:s + 1], beta)
        assert lower.item() <= smin[s].item() * (1 + 1e-10), (s, beta)


def test_centred_bound_is_attained_with_uniform_attention_and_w_v_minus_beta_i():
    """With P = U and W_V = -beta I, Attn(X) + beta X = beta (X - 1 x_bar^T) exactly: the bound
    beta sigma_min(X~) is sigma_min itself, so no larger bound (such as beta sigma_min(X)) holds."""
    X = random_inputs(1, 4, 16, 8, seed=3)
    beta, d = 0.7, X.shape[-1]
    W_V = -beta * torch.eye(d, dtype=torch.float64)
    zero = torch.zeros(d, d, dtype=torch.float64)
    delta = uniform_deviation(X, zero, zero, 1.0)
    assert delta.item() < 1e-15
    smin = spectrum(attention(X, zero, zero, W_V, 1.0) + beta * X)["sigma_min"].item()
    lower = rc.centred_lower_bound(X, W_V, delta, beta).item()
    assert lower == pytest.approx(smin, rel=1e-12)
    assert beta * spectrum(X)["sigma_min"].item() > smin * (1 + 1e-3)


def test_the_sweep_stores_the_bound_and_the_claim_requires_it(result):
    check = rc.acceptance(result)
    assert check["bound_holds"] and check["centred_lower"] > 0
    inputs = result["inputs"]
    assert len(inputs["sigma_min_centred"]) == len(result["seeds"])
    broken = json.loads(json.dumps(result))
    for ps in broken["per_seed"].values():   # a bound above the measured values must be caught
        ps["centred_lower"] = (np.asarray(ps["sigma_min"]) * 1.01).tolist()
    assert not rc.acceptance(broken)["bound_holds"]
    assert rc.claims(broken)[0].status == "not reproduced"
