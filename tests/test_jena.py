"""The Jena sweep: the batched computation is the book's model, the result has the keys the
chapter and the CLI use, and the same profile gives the same numbers twice."""
import json

import numpy as np
import pytest
import torch

import rcutil
from rcutil import data
from rcutil.experiments import jena
from rcutil.profiles import settings_for
from rcutil.results import to_jsonable


@pytest.fixture(autouse=True)
def one_thread():
    """Small matrices: one torch thread is faster on a shared two-core machine."""
    with jena.torch_threads(1):
        yield


@pytest.fixture
def small_ci(monkeypatch):
    """The ci profile with a short training, on the fixture when it is available."""
    try:
        data.find(jena.SETTINGS["ci"]["file"], allow_download=False)
    except data.DataError as exc:
        pytest.skip(f"the ci fixture is not available: {exc}")
    monkeypatch.setitem(jena.SETTINGS, "ci", dict(jena.SETTINGS["ci"], steps=15, power_iterations=5))
    return settings_for(jena.SETTINGS, "ci")


def synthetic(s, seed=0):
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(6, s["n"], 14, generator=g, dtype=torch.float64)
    Y = torch.randn(6, s["n"], 1, generator=g, dtype=torch.float64)
    return X, Y


def test_batched_equals_loop_of_transformers():
    s = settings_for(jena.SETTINGS, "ci")
    X, Y = synthetic(s)
    template, params, betas, pairs = jena.stacked_models(s)
    mu, steps = 2e-3, 12
    hist = jena.batched_gd(template, params, betas, X, Y, mu=mu, steps=steps)
    # every (beta, seed) against rcutil.Transformer + rcutil.train.gradient_descent
    ref = jena.loop_gd(s, X, Y, mu=mu, steps=steps)
    for key in ("loss", "sigma_min", "sigma_max"):
        np.testing.assert_allclose(hist[key], ref[key], rtol=1e-10, atol=0)
    # and one model written out by hand, its final weights included
    b = pairs.index((0.5, 1))
    model = rcutil.Transformer(14, s["d_qk"], s["d_F"], 1, beta=0.5, seed=1)
    h = rcutil.gradient_descent(model, X, Y, mu=mu, steps=steps)
    np.testing.assert_allclose(hist["loss"][b], h.loss, rtol=1e-10, atol=0)
    np.testing.assert_allclose(hist["sigma_min"][b], h.sigma_min, rtol=1e-10, atol=0)
    for name, p in model.named_parameters():
        np.testing.assert_allclose(hist["params"][name][b].numpy(), p.detach().numpy(),
                                   rtol=1e-10, atol=1e-13)
    assert hist["loss"][b][-1] < hist["loss"][b][0]


def test_models_differ_only_by_beta_at_the_same_seed():
    s = settings_for(jena.SETTINGS, "ci")
    _, params, betas, pairs = jena.stacked_models(s)
    i, j = pairs.index((0.0, 2)), pairs.index((1.0, 2))
    for p in params.values():
        assert torch.equal(p[i], p[j])
    assert betas[i] == 0.0 and betas[j] == 1.0


def test_sharpness_matches_dense_hessian():
    s = dict(settings_for(jena.SETTINGS, "ci"), d_qk=2, d_F=3, betas=(0.0, 1.0), seeds=(0,))
    g = torch.Generator().manual_seed(1)
    X = torch.randn(3, 4, 14, generator=g, dtype=torch.float64)
    Y = torch.randn(3, 4, 1, generator=g, dtype=torch.float64)
    template, params, betas, pairs = jena.stacked_models(s)
    lam = jena.sharpness(template, params, betas, X, Y, iterations=80)
    for b, (beta, seed) in enumerate(pairs):
        model = jena.make_model(s, beta=beta, seed=seed)
        names = [n for n, _ in model.named_parameters()]
        shapes = [p.shape for _, p in model.named_parameters()]
        flat0 = torch.cat([p.detach().reshape(-1) for _, p in model.named_parameters()])

        def loss(flat, model=model, names=names, shapes=shapes, beta=beta):
            parts, k = {}, 0
            for n, sh in zip(names, shapes):
                parts[n] = flat[k:k + sh.numel()].reshape(sh)
                k += sh.numel()
            out = torch.func.functional_call(model, parts, (X,), {"beta": beta})
            return rcutil.squared_loss(out, Y)

        H = torch.autograd.functional.hessian(loss, flat0)
        ev = torch.linalg.eigvalsh(H)
        top = ev[ev.abs().argmax()].item()
        np.testing.assert_allclose(lam[b], top, rtol=1e-5)


def test_run_ci_keys(small_ci):
    r = jena.run("ci", progress=False)
    json.dumps(to_jsonable(r))  # serialisable
    for key in ("runs", "step_size", "iterations", "seeds", "data", "settings"):
        assert key in r
    assert r["iterations"] == small_ci["steps"] and r["seeds"] == list(small_ci["seeds"])
    assert {"file", "rows_used", "checksum"} <= set(r["data"])
    assert r["data"]["checksum"].startswith("sha256:")
    assert [run["beta"] for run in r["runs"]] == list(small_ci["betas"])
    for run in r["runs"]:
        for key in ("beta", "loss_history", "loss_std_history", "ratio", "sigma_min_history",
                    "norm_history"):
            assert key in run
        T = small_ci["steps"] + 1
        assert len(run["loss_history"]) == len(run["sigma_min_history"]) == len(run["norm_history"]) == T
        assert isinstance(run["loss_history"], list)
        L = np.asarray(run["loss_per_seed"])
        np.testing.assert_allclose(run["loss_history"], L.mean(0))
        np.testing.assert_allclose(run["loss_std_history"], L.std(0))
        np.testing.assert_allclose(
            run["ratio_per_seed"],
            np.min(np.asarray(run["sigma_min_per_seed"]) ** 2, 1) / np.max(run["norm_per_seed"], 1))
    assert r["step_size"] == pytest.approx(1 / max(max(v) for v in r["sharpness_at_init"]))


def test_run_is_deterministic(small_ci):
    a = to_jsonable(jena.run("ci", progress=False))
    b = to_jsonable(jena.run("ci", progress=False))
    assert a == b


def test_plot_writes_three_figures(small_ci, tmp_path):
    import matplotlib

    matplotlib.use("Agg", force=True)
    r = jena.run("ci", progress=False)
    paths = jena.plot(r, tmp_path)
    assert [p.name for p in paths] == ["jena_loss.svg", "jena_spectra.svg", "jena_ratio.svg"]
    assert all(p.stat().st_size > 1000 for p in paths)


def test_settings_rows_agree_and_data_files_are_registered():
    for profile in ("ci", "book", "paper"):
        s = settings_for(jena.SETTINGS, profile)
        assert s["file"] in data.ASSETS
        assert len(s["seeds"]) >= 3 and tuple(s["betas"]) == (0.0, 0.25, 0.5, 0.75, 1.0)
