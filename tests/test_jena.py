"""The Jena sweep: the batched computation is the book's model, the sharpness is the top of the
Hessian's spectrum, the eight readings of the ratio are what they say, the result has the keys
the chapter and the CLI use, and the same profile gives the same numbers twice."""
import json

import numpy as np
import pytest
import torch

import rcutil
from rcutil import data
from rcutil.experiments import jena
from rcutil.model import block
from rcutil.profiles import settings_for
from rcutil.results import to_jsonable


@pytest.fixture(autouse=True)
def one_thread():
    """Small matrices: one torch thread is faster on a shared two-core machine."""
    with jena.torch_threads(1):
        yield


@pytest.fixture
def small_ci(monkeypatch):
    """The ci profile with a short training, on the excerpt when it is available."""
    try:
        data.find(jena.SETTINGS["ci"]["file"], allow_download=False)
    except data.DataError as exc:
        pytest.skip(f"the ci excerpt is not available: {exc}")
    monkeypatch.setitem(jena.SETTINGS, "ci", dict(jena.SETTINGS["ci"], steps=15, lanczos_steps=6,
                                                  spectra_every=5))
    return settings_for(jena.SETTINGS, "ci")


def synthetic(s, N=6, seed=0):
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(N, s["n"], 14, generator=g, dtype=torch.float64)
    Y = torch.randn(N, s["n"], 1, generator=g, dtype=torch.float64)
    return X, Y


@pytest.mark.parametrize("chunk_bytes", [jena.CHUNK_BYTES, 1], ids=["one-chunk", "chunk-per-sample"])
def test_batched_equals_loop_of_transformers(monkeypatch, chunk_bytes):
    monkeypatch.setattr(jena, "CHUNK_BYTES", chunk_bytes)
    s = settings_for(jena.SETTINGS, "ci")
    X, Y = synthetic(s)
    template, params, betas, pairs = jena.stacked_models(s)
    assert len(jena.Samples(X, Y, len(pairs), s["d_F"]).chunks) == (1 if chunk_bytes > 1 else 6)
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
    fro = [torch.linalg.matrix_norm(model(X, return_all=True).Z[0].reshape(-1, 14)).item()]
    np.testing.assert_allclose(hist["frobenius"][b][-1:], fro, rtol=1e-10)
    assert hist["loss"][b][-1] < hist["loss"][b][0]


def test_gradient_is_autograd_of_the_models_equations(monkeypatch):
    """eq. (jena-grad) against automatic differentiation of rcutil.model.block, over several
    chunks, and the autograd path itself (the step off the CPU) against the same."""
    monkeypatch.setattr(jena, "CHUNK_BYTES", 1)
    s = dict(settings_for(jena.SETTINGS, "ci"), seeds=(0, 3), betas=(0.0, 0.3, 1.0))
    X, Y = synthetic(s, N=5, seed=2)
    template, params, betas, _ = jena.stacked_models(s)
    W = {k: v.clone().requires_grad_() for k, v in jena._paper_weights(template, params).items()}
    out, Z = block(X, *(W[k][:, None] for k in ("W_Q", "W_K", "W_V", "W_1", "W_2")),
                   beta=betas.view(-1, 1, 1, 1), tau=template.tau, activation=torch.tanh)
    loss = 0.5 * ((out @ W["W_U"][:, None] - Y) ** 2).sum(dim=(1, 2, 3))
    ref = torch.autograd.grad(loss.sum(), list(W.values()))
    samples = jena.Samples(X, Y, len(betas), s["d_F"])
    assert len(samples.chunks) == 5
    detached = {k: v.detach() for k, v in W.items()}
    for got, grads, Zs in (jena.loss_and_grad(detached, betas, samples, tau=template.tau),
                           jena.autograd_loss_and_grad(detached, betas, X, Y, tau=template.tau)):
        np.testing.assert_allclose(got.numpy(), loss.detach().numpy(), rtol=1e-12)
        for (name, g), r in zip(grads.items(), ref):
            np.testing.assert_allclose(g.numpy(), r.numpy(), rtol=1e-10, atol=1e-12, err_msg=name)
        np.testing.assert_allclose(torch.cat(Zs, 1).numpy(), Z.detach().reshape(len(betas), -1, 14).numpy(),
                                   rtol=1e-12, atol=1e-14)


def test_softmax_survives_scores_that_overflow_exp():
    S = torch.tensor([[[800.0, -800.0], [799.0, -801.0], [0.0, -802.0]]], dtype=torch.float64)
    np.testing.assert_allclose(jena._softmax_columns(S.clone()), torch.softmax(S, dim=1), rtol=1e-14)
    S = torch.randn(3, 5, 7, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    np.testing.assert_allclose(jena._softmax_columns(S.clone()), torch.softmax(S, dim=1), rtol=1e-14)


def test_models_differ_only_by_beta_at_the_same_seed():
    s = settings_for(jena.SETTINGS, "ci")
    _, params, betas, pairs = jena.stacked_models(s)
    i, j = pairs.index((0.0, 2)), pairs.index((1.0, 2))
    for p in params.values():
        assert torch.equal(p[i], p[j])
    assert betas[i] == 0.0 and betas[j] == 1.0


def test_sharpness_is_the_top_eigenvalue_of_the_dense_hessian():
    s = dict(settings_for(jena.SETTINGS, "ci"), d_qk=2, d_F=3, betas=(0.0, 1.0), seeds=(0,))
    g = torch.Generator().manual_seed(1)
    X = torch.randn(3, 4, 14, generator=g, dtype=torch.float64)
    Y = torch.randn(3, 4, 1, generator=g, dtype=torch.float64)
    template, params, betas, pairs = jena.stacked_models(s)
    lam = jena.sharpness(template, params, betas, X, Y, iterations=60)
    rough = jena.sharpness(template, params, betas, X, Y, iterations=3)
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

        top = torch.linalg.eigvalsh(torch.autograd.functional.hessian(loss, flat0))[-1].item()
        np.testing.assert_allclose(lam[b], top, rtol=1e-9)
        assert rough[b] < top * (1 - 1e-6)   # three Lanczos steps are not enough: the test can tell


def test_readings_are_the_spectra_they_name():
    gen = torch.Generator().manual_seed(4)
    B, N, n, d = 2, 5, 6, 4
    Z = torch.randn(B, N * n, d, generator=gen, dtype=torch.float64)
    Z[1, :n] = torch.outer(torch.randn(n, generator=gen, dtype=torch.float64),
                           torch.randn(d, generator=gen, dtype=torch.float64))  # a rank-one sample
    chunks = [Z[:, :2 * n], Z[:, 2 * n:]]
    got = jena.reading_spectra(chunks, n)
    per = torch.linalg.svdvals(Z.reshape(B, N, n, d))
    np.testing.assert_allclose(got["float64/per-sample"][0], per[..., -1].amin(1), rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(got["float64/per-sample"][1], per[..., 0].amax(1), rtol=1e-12)
    np.testing.assert_allclose(got["float64/per-sample"][2],
                               torch.linalg.matrix_norm(Z.reshape(B, N, n, d)).amax(1), rtol=1e-12)
    whole = torch.linalg.svdvals(Z)
    np.testing.assert_allclose(jena.stacked_singular_values(chunks), whole, rtol=1e-12)
    np.testing.assert_allclose(got["float64/stacked"][0], whole[:, -1], rtol=1e-12)
    np.testing.assert_allclose(got["float64/stacked"][2], torch.linalg.matrix_norm(Z), rtol=1e-12)
    np.testing.assert_allclose(got["float32/stacked"][1], whole[:, 0], rtol=1e-6)
    # the rank-one sample is singular: its sigma_min sits at each precision's floor
    for precision in jena.PRECISIONS:
        smin, spectral, _ = got[f"{precision}/per-sample"]
        units = jena.floor_units(smin[1:, None], spectral[1:, None], precision)
        assert units[0] <= jena.FLOOR_UNITS, (precision, units)
        assert jena.floor_units(smin[:1, None], spectral[:1, None], precision)[0] > 1e3


def reading_result(values, floor_units):
    """A result with only what paper_reading reads: the beta = 0 readings."""
    readings = {k: {"ratio": v, "ratio_per_seed": [v], "sigma_min": 1.0, "norm": 20.0,
                    "floor_units": u} for k, v, u in zip(jena.READINGS, values, floor_units)}
    return {"runs": [{"beta": 0.0, "readings": readings}]}


def test_paper_reading_picks_the_supported_reading():
    far = [1e-8] * 8
    # a float32 reading at its floor, with a floor above the paper's value: the floor reading
    p = jena.paper_reading(reading_result([1e-16] + far[1:], [0.05] + [1e4] * 7))
    assert p["float32_at_floor"] == [jena.READINGS[0]] and p["between"] == (jena.READINGS[0], jena.READINGS[1])
    assert p["float32_floor"] == pytest.approx(np.finfo(np.float32).eps ** 2 * 20.0)
    assert "float32 rounding floor" in jena.paper_reading_text(p)
    # a reading within an order of magnitude, above any floor
    p = jena.paper_reading(reading_result(far[:5] + [3e-13] + far[6:], [1e4] * 8))
    assert p["within_order"] == [jena.READINGS[5]] and p["closest"] == jena.READINGS[5]
    assert "within an order of magnitude" in jena.paper_reading_text(p)
    # none
    p = jena.paper_reading(reading_result(far, [1e4] * 8))
    assert p["between"] == (None, jena.READINGS[0]) and "support none" in jena.paper_reading_text(p)
    assert p["floor_norm"] == pytest.approx(jena.PAPER_RATIO_BETA0 / np.finfo(np.float32).eps ** 2)


def test_run_ci_keys(small_ci):
    r = jena.run(settings_for(jena.SETTINGS, "ci"), progress=False)
    json.dumps(to_jsonable(r))  # serialisable
    for key in ("runs", "step_size", "iterations", "seeds", "data", "settings", "readings"):
        assert key in r
    assert r["iterations"] == small_ci["steps"] and r["seeds"] == list(small_ci["seeds"])
    assert {"file", "rows_used", "checksum", "cleaning"} <= set(r["data"])
    assert r["data"]["checksum"].startswith("sha256:")
    assert r["readings"]["grid"] == [0, 5, 10, 15]
    assert [run["beta"] for run in r["runs"]] == list(small_ci["betas"])
    for run in r["runs"]:
        for key in ("beta", "loss_history", "loss_std_history", "ratio", "sigma_min_history",
                    "norm_history", "readings"):
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
        assert set(run["readings"]) == set(jena.READINGS)
        # the stacked float64 spectral reading is the headline ratio taken on the grid
        grid = r["readings"]["grid"]
        smin = np.asarray(run["sigma_min_per_seed"])[:, grid]
        norm = np.asarray(run["norm_per_seed"])[:, grid]
        np.testing.assert_allclose(run["readings"]["float64/stacked/spectral"]["ratio_per_seed"],
                                   jena.ratio(smin, norm), rtol=1e-12)
        assert run["readings"]["float64/stacked/spectral"]["ratio"] >= run["ratio"] * (1 - 1e-12)
    assert r["step_size"] == pytest.approx(1 / max(max(v) for v in r["sharpness_at_init"]))


def test_run_is_deterministic(small_ci):
    a = to_jsonable(jena.run(settings_for(jena.SETTINGS, "ci"), progress=False))
    b = to_jsonable(jena.run(settings_for(jena.SETTINGS, "ci"), progress=False))
    assert a == b


def test_plot_writes_four_figures(small_ci, tmp_path):
    import matplotlib

    matplotlib.use("Agg", force=True)
    r = jena.run(settings_for(jena.SETTINGS, "ci"), progress=False)
    paths = jena.plot(r, tmp_path)
    assert [p.name for p in paths] == ["jena_loss.svg", "jena_spectra.svg", "jena_ratio.svg",
                                       "jena_readings.svg"]
    assert all(p.stat().st_size > 1000 for p in paths)


def _count(fn):
    def wrapper(*args, **kwargs):
        wrapper.steps.append(kwargs["steps"])
        return fn(*args, **kwargs)

    wrapper.steps = []
    return wrapper


def test_settings_rows_agree_and_data_files_are_registered():
    for profile in ("ci", "book", "paper"):
        s = settings_for(jena.SETTINGS, profile)
        assert s["file"] in data.ASSETS
        assert len(s["seeds"]) >= 3 and tuple(s["betas"]) == (0.0, 0.25, 0.5, 0.75, 1.0)
        assert s["steps"] % s["spectra_every"] == 0
