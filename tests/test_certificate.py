"""The certificate of Theorem 1 checked from outside rcutil.certificate.

* every constant of eqs. conv-s0 ... conv-ball recomputed here from G_H, K_H, s0 and S0;
* feature_bounds at L = 1 against its closed form, written out below with literal constants;
* a tight instance, where G_H, G and C are attained, so that a weaker bound fails;
* the models the rules do not cover are refused.
"""
import math

import numpy as np
import pytest
import torch

import rcutil  # noqa: F401  (thread policy before numpy)
from rcutil import tightness
from rcutil.certificate import best_certificate, certificate, check_certifiable, feature_bounds
from rcutil.model import Transformer

torch.set_num_threads(1)


def spec(M) -> float:
    return torch.linalg.matrix_norm(M, ord=2).item()


def instance(beta=1.0, *, seed=0, N=3, n=2, d=6, d_qk=3, d_F=7, scale=0.7, W_U="gaussian", L=1):
    """A small model with d >= N n, inputs and targets that leave a non-zero Phi_0."""
    model = Transformer(d, d_qk, d_F, 2, n_layers=L, tau=1.3, beta=beta, W_U_init=W_U, seed=seed)
    g = torch.Generator().manual_seed(seed + 1)
    X = scale * torch.randn(N, n, d, generator=g, dtype=torch.float64)
    Y = 0.1 * torch.randn(N, n, 2, generator=g, dtype=torch.float64)
    return model, X, Y


# ----------------------------------------------------------------------- eqs. conv-s0 ... conv-ball
@pytest.mark.parametrize("beta, W_U, frac, scale", [(1.0, "gaussian", 1e-3, 0.7), (1.0, "gaussian", 0.3, 0.7),
                                                    (0.5, "zero", 0.2, 0.7), (0.0, "gaussian", 0.1, 0.7),
                                                    (1.0, "zero", 0.0, 0.7), (1.0, "gaussian", 0.2, 0.1)])
def test_every_constant_recomputed_from_G_H_K_H_s0_S0(beta, W_U, frac, scale):
    model, X, Y = instance(beta, W_U=W_U, scale=scale)
    first = certificate(model, X, Y, r=0.0)
    r = frac * first.s0 / first.G_H                            # a fraction of the largest radius
    cert = certificate(model, X, Y, r=r)
    G_H, K_H, H_bound = feature_bounds(model, X, r)
    with torch.no_grad():
        out = model(X, return_all=True)
    sv = torch.linalg.svdvals(out.features.reshape(-1, model.d))
    s0, S0 = sv[-1].item(), sv[0].item()
    phi0 = 0.5 * ((out.output - Y) ** 2).sum().item()
    R_U = spec(model.W_U) + r                                  # ||W_U^0|| + r
    H_max = min(S0 + G_H * r, H_bound)                         # sup ||H|| on the ball
    lam = s0 - G_H * r                                         # Weyl + mean value theorem
    alpha = lam**2                                             # eq. conv-alpha
    G = math.sqrt(H_max**2 + R_U**2 * G_H**2)                  # eq. lip-G
    K = K_H * R_U + G_H                                        # eq. lip-K
    C = G**2 + K * (math.sqrt(2 * phi0) + G * r)               # eq. lip-smooth
    mu = 1 / C
    path = 2 * math.sqrt(2 * phi0 / alpha) + mu * G * math.sqrt(2 * phi0)   # eq. conv-ball
    assert phi0 > 0 and G_H > 0 and K_H > 0 and lam > 0
    assert (S0 < 1) == (scale < 0.5)                                # both sides of S0 = 1
    if r > 0:                                                  # the terms in r are really there
        assert H_max != S0 and R_U != spec(model.W_U)
    expected = dict(s0=s0, S0=S0, phi0=phi0, G_H=G_H, K_H=K_H, H_max=H_max, R_U=R_U, lam=lam, alpha=alpha,
                    G=G, K=K, C=C, mu=mu, path_bound=path, kappa_inv_sq=(s0 / S0) ** 2)
    for key, value in expected.items():
        assert math.isclose(getattr(cert, key), value, rel_tol=1e-12), key
    assert cert.holds == (path <= r)
    assert math.isclose(cert.predicted_rate, 1 - mu * alpha, rel_tol=1e-15)
    assert cert.to_dict()["predicted_rate"] == cert.predicted_rate and cert.to_dict()["C"] == cert.C


def test_ball_condition_decides_and_a_step_above_1_over_C_is_refused():
    from rcutil import settings_for
    from rcutil.experiments import convergence

    settings = settings_for(convergence.SETTINGS, "ci")
    model, X, Y = convergence.make_instance(settings, 1)
    best = best_certificate(model, X, Y, n_radii=settings["n_radii"])
    assert best.holds and best.path_bound <= best.r
    assert certificate(model, X, Y, r=best.r, mu=best.mu).holds
    assert not certificate(model, X, Y, r=best.r, mu=1.01 * best.mu).holds        # mu > 1/C
    assert not certificate(model, X, Y, r=best.r * 0.9).holds                      # path bound > r
    big = certificate(model, X, Y, r=best.r * 1e4)                                 # G_H r > s0: no PL
    assert big.lam < 0 and big.alpha == 0 and big.path_bound == math.inf and not big.holds


def test_best_certificate_picks_the_fastest_rate_of_its_grid():
    from rcutil import settings_for
    from rcutil.experiments import convergence

    settings = settings_for(convergence.SETTINGS, "ci")
    model, X, Y = convergence.make_instance(settings, 1)
    r_max = certificate(model, X, Y, r=0.0).s0 / feature_bounds(model, X, 0.0)[0]
    fewest = best_certificate(model, X, Y, n_radii=2)          # r_max * 1e-8 and r_max: neither holds,
    assert not fewest.holds and math.isclose(fewest.r, 1e-8 * r_max)   # and at r_max the path bound is inf
    n = 12
    best = best_certificate(model, X, Y, n_radii=n)
    grid = [certificate(model, X, Y, r=float(r)) for r in np.geomspace(r_max * 1e-8, r_max, n)]
    holding = [c for c in grid if c.holds]
    assert holding and best.r in [c.r for c in grid]
    assert best.mu * best.alpha == max(c.mu * c.alpha for c in holding)
    # none holds for large targets: the one closest to holding comes back
    fallback = best_certificate(model, X, 1e3 * Y, n_radii=n)
    grid = [certificate(model, X, 1e3 * Y, r=float(r)) for r in np.geomspace(r_max * 1e-8, r_max, n)]
    assert not fallback.holds and not any(c.holds for c in grid)
    assert fallback.path_bound / fallback.r == min(c.path_bound / c.r for c in grid)


# ----------------------------------------------------------------------- feature_bounds at L = 1, closed form
def closed_form_L1(model, X, r):
    """``(G_H, K_H, H_bound)`` of one block, eq. conv-GH, written out entry by entry.

    Parameter order Q, K, V, 1, 2. For every intermediate, ``g`` bounds the first derivative per
    weight block, ``Q`` the second, ``v`` the spectral norm on the ball: ``min(rule,
    norm at theta_0 + r ||g||)``. Literal constants: softmax Jacobian 1/2, softmax second
    derivative 1, tanh' 1, tanh'' 4 / (3 sqrt 3)."""
    b = model.blocks[0]
    W = {k: getattr(b, k).detach() for k in ("W_Q", "W_K", "W_V", "W_1", "W_2")}
    R_Q, R_K, R_V, R_1, R_2 = (spec(W[k]) + r for k in ("W_Q", "W_K", "W_V", "W_1", "W_2"))
    beta, tau, d_F = model.beta, model.tau, model.d_F
    e = np.eye(5)
    eQ, eK, eV, e1, e2 = e

    def ball(rule, norm0, g):
        return min(rule, norm0 + r * np.linalg.norm(g))

    gs, Ks, vs = [], [], []
    for Xp in X:
        n = Xp.shape[0]
        S = Xp @ W["W_Q"] @ W["W_K"].T @ Xp.T / tau
        P = torch.softmax(S, -1)
        A = P @ Xp @ W["W_V"]
        Z = A + beta * Xp
        U = torch.tanh(Z @ W["W_1"])
        F = U @ W["W_2"]
        x = spec(Xp)
        v_XQ = ball(x * R_Q, spec(Xp @ W["W_Q"]), x * eQ)
        v_XK = ball(x * R_K, spec(Xp @ W["W_K"]), x * eK)
        g_S = (x * v_XK * eQ + x * v_XQ * eK) / tau
        Q_S = x * x / tau * (np.outer(eQ, eK) + np.outer(eK, eQ))
        # (the value bound of S enters nothing: the softmax rules do not use it)
        g_P = 0.5 * g_S
        Q_P = 0.5 * Q_S + 1.0 * np.outer(g_S, g_S)
        v_P = ball(math.sqrt(n), spec(P), g_P)
        v_V = ball(x * R_V, spec(Xp @ W["W_V"]), x * eV)
        g_A = v_V * g_P + v_P * x * eV
        Q_A = v_V * Q_P + x * (np.outer(g_P, eV) + np.outer(eV, g_P))
        v_A = ball(v_P * v_V, spec(A), g_A)
        v_Z = ball(v_A + beta * x, spec(Z), g_A)              # Z' = A', Z'' = A''
        g_ZW = R_1 * g_A + v_Z * e1
        Q_ZW = R_1 * Q_A + np.outer(g_A, e1) + np.outer(e1, g_A)
        v_ZW = ball(v_Z * R_1, spec(Z @ W["W_1"]), g_ZW)
        g_U = 1.0 * g_ZW
        Q_U = 1.0 * Q_ZW + 4 / (3 * math.sqrt(3)) * np.outer(g_ZW, g_ZW)
        v_U = ball(min(math.sqrt(min(n, d_F)) * v_ZW, math.sqrt(n * d_F)), spec(U), g_U)
        g_F = R_2 * g_U + v_U * e2
        Q_F = R_2 * Q_U + np.outer(g_U, e2) + np.outer(e2, g_U)
        v_F = ball(v_U * R_2, spec(F), g_F)
        g_H = g_F + beta * g_A
        Q_H = Q_F + beta * Q_A
        v_H = ball(v_F + beta * v_Z, spec(F + beta * Z), g_H)
        gs.append(g_H)
        Ks.append(np.linalg.eigvalsh(Q_H)[-1])
        vs.append(v_H)
    G_H = math.sqrt(np.linalg.eigvalsh(sum(np.outer(g, g) for g in gs))[-1])
    return G_H, math.sqrt(sum(k * k for k in Ks)), math.sqrt(sum(v * v for v in vs))


@pytest.mark.parametrize("beta", [1.0, 0.5, 0.0])
@pytest.mark.parametrize("r", [0.0, 0.03, 0.4])
def test_feature_bounds_equal_their_closed_form_at_one_layer(beta, r):
    model, X, _ = instance(beta, seed=3, scale=1.5)
    got = feature_bounds(model, X, r)
    want = closed_form_L1(model, X, r)
    np.testing.assert_allclose(got, want, rtol=1e-12)


def test_a_given_trace_is_what_the_bounds_use():
    from rcutil.certificate import _trace

    model, X, _ = instance(1.0, seed=4)
    trace = _trace(model, X)
    assert feature_bounds(model, X, 0.05, trace) == feature_bounds(model, X, 0.05)
    doubled = [[{k: 2 * v for k, v in block.items()} for block in sample] for sample in trace]
    assert feature_bounds(model, X, 0.05, doubled)[0] > feature_bounds(model, X, 0.05)[0]


def test_a_scan_traces_the_model_once(monkeypatch):
    import rcutil.certificate as module

    model, X, Y = instance(1.0, seed=4)
    calls = []
    original = module._trace
    monkeypatch.setattr(module, "_trace", lambda *a: calls.append(1) or original(*a))
    best_certificate(model, X, Y, n_radii=4)
    assert len(calls) == 1                     # the norms at theta_0 are computed once, not per radius


def test_the_samples_add_up_and_do_not_take_a_max():
    model, X, _ = instance(1.0, seed=4)
    G_H, K_H, H_bound = feature_bounds(model, X, 0.05)
    parts = [feature_bounds(model, X[p:p + 1], 0.05) for p in range(X.shape[0])]
    assert max(p[0] for p in parts) < G_H <= math.sqrt(sum(p[0] ** 2 for p in parts)) * (1 + 1e-12)
    np.testing.assert_allclose(K_H, math.sqrt(sum(p[1] ** 2 for p in parts)), rtol=1e-12)
    np.testing.assert_allclose(H_bound, math.sqrt(sum(p[2] ** 2 for p in parts)), rtol=1e-12)


def test_depth_composes_blocks_and_radii_grow_with_r():
    model, X, _ = instance(1.0, seed=5, L=2, scale=0.5)
    G0, K0, _ = feature_bounds(model, X, 0.0)
    G1, K1, _ = feature_bounds(model, X, 0.1)
    assert G1 > G0 > 0 and K1 > K0 > 0
    one = Transformer(6, 3, 7, 2, n_layers=1, tau=1.3, seed=5)
    assert G0 > feature_bounds(one, X, 0.0)[0]


# ----------------------------------------------------------------------- a tight instance
def tight_instance():
    """beta = 0, W_1 = 0: H = tanh(Z W_1) W_2 = 0 and DH[delta] = Z delta_1 W_2, whose norm
    ||Z||_2 ||W_2||_2 is G_H exactly at r = 0; with W_U along W_2's top right singular vector
    and Y = F_0 = 0, Hess Phi = J^T J has norm (||Z|| ||W_2|| ||W_U||)^2 = C exactly."""
    d, d_F = 6, 4
    model = Transformer(d, 2, d_F, 2, tau=1.0, beta=0.0, seed=7)
    W_2 = torch.zeros(d_F, d, dtype=torch.float64)
    W_2[0, 0], W_2[1, 1], W_2[2, 2] = 3.0, 1.0, 0.5
    W_U = torch.zeros(d, 2, dtype=torch.float64)
    W_U[0, 0], W_U[1, 1] = 2.0, 0.5
    with torch.no_grad():
        model.blocks[0].W_1.zero_()
        model.blocks[0].W_2.copy_(W_2)
        model.W_U.copy_(W_U)
    X = torch.randn(1, 3, d, generator=torch.Generator().manual_seed(8), dtype=torch.float64)
    return model, X, torch.zeros(1, 3, 2, dtype=torch.float64)


def test_tight_instance_attains_G_H_and_C():
    model, X, Y = tight_instance()
    cert = certificate(model, X, Y, r=0.0)
    with torch.no_grad():
        Z = model(X, return_all=True).Z[0][0]
    assert math.isclose(cert.G_H, spec(Z) * 3.0, rel_tol=1e-12)       # ||Z|| ||W_2||
    assert math.isclose(cert.C, (spec(Z) * 3.0 * 2.0) ** 2, rel_tol=1e-12)
    assert cert.s0 == cert.S0 == 0 and cert.kappa_inv_sq == 0.0               # H_0 = 0: kappa is infinite
    measured = tightness.measure(model, X, Y, cert.to_dict(), iterations=60)
    for key in ("G_H", "C"):
        assert 0.999 <= measured[key]["ratio"] <= 1 + 1e-9, (key, measured[key])
    assert measured["K_H"]["ratio"] <= 1 + 1e-9


def test_tightness_measures_exact_norms_of_a_linear_map():
    # f(theta) = A theta: ||Df|| = sigma_max(A), and Phi = ||A theta||^2 / 2 has Hessian A^T A
    A = torch.tensor([[3.0, 1.0, 0.0], [0.0, 1.0, 0.5]], dtype=torch.float64)
    theta = torch.tensor([0.2, -0.1, 0.4], dtype=torch.float64)
    sigma, v = tightness.top_singular(lambda t: A @ t, theta, iterations=200)
    assert math.isclose(sigma, spec(A), rel_tol=1e-10)
    lam, _ = tightness.top_eigen(lambda t: 0.5 * (A @ t).square().sum(), theta, iterations=200)
    assert math.isclose(lam, spec(A) ** 2, rel_tol=1e-10)
    # second derivative of t -> (t_0^2, t_0 t_1): D^2 f[v, v] = (2 v_0^2, 2 v_0 v_1), sup over unit v is 2
    best, first = tightness.top_second(lambda t: torch.stack([t[0] ** 2, t[0] * t[1]]), theta,
                                       torch.tensor([0.6, 0.8, 0.0], dtype=torch.float64), iterations=50)
    assert math.isclose(first, math.hypot(2 * 0.36, 2 * 0.48), rel_tol=1e-12)
    assert math.isclose(best, 2.0, rel_tol=1e-8)


# ----------------------------------------------------------------------- what the rules do not cover
class WithLayerNorm(Transformer):
    def forward(self, X, **kw):
        return super().forward(torch.nn.functional.layer_norm(X, X.shape[-1:]), **kw)


def with_beta(beta):
    """A model whose residual strength was set after it was built (the constructor may refuse it)."""
    model = Transformer(6, 3, 5, 2)
    model.beta = beta
    return model


TANH_RULES = r"the certificate's rules need the bounds .* of the activation, which "


@pytest.mark.parametrize("make, match", [
    (lambda: Transformer(6, 3, 5, 2, activation=lambda x: 3 * torch.tanh(x)), TANH_RULES + "'<lambda>'"),
    (lambda: Transformer(6, 3, 5, 2, activation=torch.relu), TANH_RULES + "'relu' lacks: build the model "
                                                              "with an activation of rcutil.activations"),
    (lambda: Transformer(6, 3, 5, 2, activation=torch.nn.ReLU()), TANH_RULES + r"'ReLU\(\)' lacks"),
    (lambda: with_beta(1.5), r"^the certificate covers a constant residual strength beta in "
                              r"\[0, 1\], got beta = 1.5: build the model with such a beta$"),
    (lambda: with_beta(-0.5), "got beta = -0.5"),
    (lambda: WithLayerNorm(6, 3, 5, 2), r"^the certificate covers rcutil.model.Transformer only \(blocks, then "
                                        r"W_U\), got WithLayerNorm: build the model with rcutil.model.Transformer$"),
    (lambda: torch.nn.Linear(6, 2), "got Linear"),
], ids=["3 tanh", "relu", "ReLU module", "beta 1.5", "beta -0.5", "layer norm", "not a Transformer"])
def test_models_outside_the_rules_are_refused(make, match):
    model = make()
    X = torch.randn(1, 3, 6, dtype=torch.float64)
    with pytest.raises(ValueError, match=match):
        check_certifiable(model)
    if isinstance(model, Transformer):
        for call in (lambda: certificate(model, X, torch.zeros(1, 3, 2, dtype=torch.float64), r=0.1),
                     lambda: feature_bounds(model, X, 0.1),
                     lambda: best_certificate(model, X, torch.zeros(1, 3, 2, dtype=torch.float64))):
            with pytest.raises(ValueError, match=match):
                call()


def test_covered_models_pass_and_odd_layouts_are_refused():
    check_certifiable(Transformer(6, 3, 5, 2, activation=torch.nn.functional.tanh, beta=0.0))
    check_certifiable(Transformer(6, 3, 5, 2, activation=torch.nn.Tanh(), beta=1))
    model = Transformer(6, 3, 5, 2)
    model.beta = torch.tensor(0.5)                    # a tensor beta: not a constant the rules know
    with pytest.raises(ValueError, match="got beta = tensor"):
        check_certifiable(model)
    model = Transformer(6, 3, 5, 2)
    model.beta = True
    with pytest.raises(ValueError, match="got beta = True"):
        check_certifiable(model)
    model = Transformer(6, 3, 5, 2)
    model.blocks[0].register_parameter("b_1", torch.nn.Parameter(torch.zeros(5, dtype=torch.float64)))
    with pytest.raises(ValueError, match=r"layout \['blocks.0.W_Q', 'blocks.0.W_K', 'blocks.0.W_V', 'blocks.0.W_1', "
                                         r"'blocks.0.W_2'\] per block, then output.W_U; this model has .*b_1"):
        check_certifiable(model)
    model = Transformer(6, 3, 5, 2)
    model.blocks[0].__class__ = type("Block", (torch.nn.Module,), {"forward": model.blocks[0].forward})
    with pytest.raises(ValueError, match="layout"):
        check_certifiable(model)


def test_bad_arguments_are_named():
    model, X, Y = instance()
    with pytest.raises(ValueError, match="r \\(the ball radius\\) must be finite and non-negative, got -0.1"):
        feature_bounds(model, X, -0.1)
    with pytest.raises(ValueError, match="got inf"):
        certificate(model, X, Y, r=math.inf)
    with pytest.raises(ValueError, match=r"Y must be a tensor of shape \(3, 2, 2\)"):
        certificate(model, X, Y[:, :1], r=0.1)
    with pytest.raises(ValueError, match=r"Y must be a tensor"):
        certificate(model, X, Y.numpy(), r=0.1)
    with pytest.raises(ValueError, match="mu \\(the step size\\) must be a finite positive number, got 0.0"):
        certificate(model, X, Y, r=0.1, mu=0.0)
    with pytest.raises(ValueError, match="got nan"):
        certificate(model, X, Y, r=0.1, mu=math.nan)
    with pytest.raises(ValueError, match="n_radii must be at least 2, got 1"):
        best_certificate(model, X, Y, n_radii=1)
    with pytest.raises(ValueError, match=r"d >= N n .* N n = 8 > d = 6"):
        certificate(model, torch.randn(4, 2, 6, dtype=torch.float64), torch.zeros(4, 2, 2, dtype=torch.float64), r=0.1)
    with pytest.raises(ValueError, match=r"^H_0 does not have full row rank \(s0 = 0\): no radius can certify; "
                                         r"draw another initialisation or use fewer samples$"):
        best_certificate(*tight_instance())                     # H_0 = 0
    with pytest.raises(ValueError, match=r"^C = 0: the output does not depend on the parameters \(is X zero\?\); "
                                         r"nothing to certify$"):
        certificate(model, torch.zeros_like(X), Y, r=0.1)
