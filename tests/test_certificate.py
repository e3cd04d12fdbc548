"""The certificate of Theorem 1 (rcutil.certificate), checked from outside it.

* every constant of eqs. conv-s0 ... conv-ball recomputed here by its equation from
  G_H, K_H, s0, S0 and Phi_0, measured here;
* the L-layer composition recomputed block by block by code written here (each block
  with its own weights, radii and input norms at theta_0), equal to what the module
  composes;
* every block's bound, as a map of its own weights and input, against the measured
  derivatives of that map; instances where the bounds are attained (G_H of a two-layer
  stack, G_H, G and C of one layer, a block's second derivative), so that a bound made
  smaller anywhere fails;
* the radius scan, and the models the rules do not cover, which are refused.
"""

import math

import numpy as np
import pytest
import torch

from rcutil import bounds, tightness
from rcutil.certificate import (
    best_certificate,
    certificate,
    check_certifiable,
    feature_bounds,
    feature_jets,
    z_lower_bound,
)
from rcutil.model import Transformer, block

torch.set_num_threads(1)
NAMES = ("W_Q", "W_K", "W_V", "W_1", "W_2")
KAPPA = 4 / (3 * math.sqrt(3))  # sup |tanh''|; sup |tanh'| = 1; softmax: 1/2, 1


def spec(M) -> float:
    return torch.linalg.matrix_norm(torch.as_tensor(M), ord=2).item()


def instance(
    beta=1.0, *, seed=0, N=3, n=2, d=6, d_qk=3, d_F=7, scale=0.7, W_U="gaussian", L=1
):
    """A small model with d >= N n, inputs and targets that leave a non-zero Phi_0."""
    model = Transformer(
        d, d_qk, d_F, 2, n_layers=L, tau=1.3, beta=beta, W_U_init=W_U, seed=seed
    )
    g = torch.Generator().manual_seed(seed + 1)
    X = scale * torch.randn(N, n, d, generator=g, dtype=torch.float64)
    Y = 0.1 * torch.randn(N, n, 2, generator=g, dtype=torch.float64)
    return model, X, Y


def weights(blk) -> dict:
    return {k: getattr(blk, k).detach() for k in NAMES}


# ----------------------------------------------------------- eqs. conv-s0 ... conv-ball
@pytest.mark.parametrize(
    "beta, W_U, frac, scale",
    [
        (1.0, "gaussian", 1e-3, 0.7),
        (1.0, "gaussian", 0.3, 0.7),
        (0.5, "zero", 0.2, 0.7),
        (0.0, "gaussian", 0.1, 0.7),
        (1.0, "zero", 0.0, 0.7),
        (1.0, "gaussian", 0.2, 0.1),
    ],
)
def test_every_constant_recomputed_from_G_H_K_H_s0_S0(beta, W_U, frac, scale):
    model, X, Y = instance(beta, W_U=W_U, scale=scale)
    first = certificate(model, X, Y, r=0.0)
    r = frac * first.s0 / first.G_H  # a fraction of the largest radius
    c = certificate(model, X, Y, r=r)
    G_H, K_H, H_bound = feature_bounds(model, X, r)
    with torch.no_grad():
        out = model(X, return_all=True)
    sv = torch.linalg.svdvals(out.features.reshape(-1, model.d))
    # the first five measured here; every other constant from those before it, by its
    # equation, so that each step is checked on its own
    equations = {
        "s0": sv[-1].item(),
        "S0": sv[0].item(),
        "phi0": 0.5 * ((out.output - Y) ** 2).sum().item(),
        "G_H": G_H,
        "K_H": K_H,
        "R_U": spec(model.W_U) + r,  # ||W_U^0|| + r
        "H_max": min(c.S0 + c.G_H * r, H_bound),  # sup ||H|| on the ball
        "lam": c.s0 - c.G_H * r,  # Weyl + mean value theorem
        "alpha": c.lam**2,  # eq. conv-alpha
        "G": math.sqrt(c.H_max**2 + c.R_U**2 * c.G_H**2),  # eq. lip-G
        "K": c.K_H * c.R_U + c.G_H,  # eq. lip-K
        "C": c.G**2 + c.K * (math.sqrt(2 * c.phi0) + c.G * r),  # eq. lip-smooth
        "mu": 1 / c.C,
        "path_bound": 2 * math.sqrt(2 * c.phi0 / c.alpha)  # eq. conv-ball
        + c.mu * c.G * math.sqrt(2 * c.phi0),
        "kappa_inv_sq": (c.s0 / c.S0) ** 2,
    }
    for key, value in equations.items():
        assert math.isclose(getattr(c, key), value, rel_tol=1e-12), key
    assert c.phi0 > 0 and c.G_H > 0 and c.K_H > 0 and c.lam > 0
    assert (c.S0 < 1) == (scale < 0.5)  # both sides of S0 = 1
    if r > 0:  # the terms in r are really there
        assert c.H_max != c.S0 and c.R_U != spec(model.W_U)
    assert c.holds == (c.path_bound <= r)
    assert math.isclose(c.predicted_rate, 1 - c.mu * c.alpha, rel_tol=1e-15)
    assert c.to_dict()["predicted_rate"] == c.predicted_rate
    assert c.to_dict()["C"] == c.C


def test_ball_condition_decides_and_a_step_above_1_over_C_is_refused():
    from rcutil import settings_for
    from rcutil.experiments import convergence

    settings = settings_for(convergence.SETTINGS, "ci")
    model, X, Y = convergence.make_instance(settings, 1)
    best = best_certificate(model, X, Y, n_radii=settings.n_radii)
    assert best.holds and best.path_bound <= best.r
    assert certificate(model, X, Y, r=best.r, mu=best.mu).holds
    assert not certificate(model, X, Y, r=best.r, mu=1.01 * best.mu).holds  # mu > 1/C
    # mu alpha falls as r grows, so the best is the smallest radius of the grid that
    # holds, and the grid's next radius down does not: there the path exceeds r
    below = best.r / 10 ** (8 / (settings.n_radii - 1))
    assert not certificate(model, X, Y, r=below).holds
    big = certificate(model, X, Y, r=best.r * 1e4)  # G_H r > s0: no PL
    assert big.lam < 0 and big.alpha == 0 and big.path_bound == math.inf
    assert not big.holds


# ------------------------------------------------------------ the route through Z
@pytest.mark.parametrize("beta, L, seed", [(1.0, 1, 0), (0.3, 1, 1), (0.7, 2, 2)])
def test_the_bound_through_Z_is_beta_sigma_Nn_of_Z_minus_the_ffns_spectral_norm(
    beta, L, seed
):
    """h_Z = beta sigma_Nn(Z_0) - ||FFN(Z_0)||_2 of the last block, read here from the
    features: FFN(Z_0) = H_0 - beta Z_0; and h_Z <= s0 (Weyl, eq. conv-weyl)."""
    model, X, _ = instance(beta, seed=seed, L=L)
    z = z_lower_bound(model, X)
    with torch.no_grad():
        out = model(X, return_all=True)
    H = out.features.reshape(-1, model.d)
    Z = out.Z[-1].reshape(-1, model.d)
    sZ = torch.linalg.svdvals(Z)
    s0 = torch.linalg.svdvals(H)[-1].item()
    assert z.beta == beta
    assert math.isclose(z.sigma_min_Z, sZ[-1].item(), rel_tol=1e-12)
    assert math.isclose(z.sigma_max_Z, sZ[0].item(), rel_tol=1e-12)
    assert math.isclose(z.ffn, spec(H - beta * Z), rel_tol=1e-10)
    assert math.isclose(z.s_Z, beta * sZ[-1].item() - spec(H - beta * Z), rel_tol=1e-10)
    assert z.s_Z <= s0 * (1 + 1e-12)


@pytest.mark.parametrize("beta", [0.4, 1.0])
def test_without_the_ffn_the_bound_through_Z_is_s0_itself(beta):
    """W_2 = 0: H_0 = beta Z_0, so h_Z = s0 exactly (the bound is attained); a bound
    that forgot beta, or took sigma_max, would miss it."""
    model, X, Y = instance(beta)
    with torch.no_grad():
        model.blocks[0].W_2.zero_()
    z = z_lower_bound(model, X)
    cert = certificate(model, X, Y, r=0.0)
    assert z.ffn == 0.0
    assert math.isclose(z.s_Z, cert.s0, rel_tol=1e-12)
    through_Z = certificate(model, X, Y, r=0.0, through="Z")
    assert math.isclose(through_Z.s_lower, cert.s0, rel_tol=1e-12)


@pytest.mark.parametrize("frac", [0.0, 0.05, 0.3])
def test_a_certificate_through_Z_starts_from_h_Z_and_keeps_every_other_constant(frac):
    model, X, Y = instance(1.0, W_U="zero", scale=0.7, d=10)
    with torch.no_grad():
        model.blocks[0].W_2.mul_(0.05)
    h_Z = z_lower_bound(model, X).s_Z
    assert h_Z > 0
    r = frac * h_Z / feature_bounds(model, X, 0.0)[0]
    H, Z = certificate(model, X, Y, r=r), certificate(model, X, Y, r=r, through="Z")
    assert (H.through, Z.through) == ("H", "Z") and H.s_lower == H.s0
    assert math.isclose(Z.s_lower, h_Z, rel_tol=1e-12)
    assert math.isclose(Z.lam, h_Z - Z.G_H * r, rel_tol=1e-12, abs_tol=1e-15)
    assert math.isclose(Z.alpha, max(Z.lam, 0.0) ** 2, rel_tol=1e-12, abs_tol=1e-30)
    for key in ("s0", "S0", "G_H", "K_H", "H_max", "G", "K", "C", "mu", "kappa_inv_sq"):
        assert getattr(Z, key) == getattr(H, key), key
    path = 2 * math.sqrt(2 * Z.phi0 / Z.alpha) if Z.alpha > 0 else math.inf
    assert math.isclose(Z.path_bound, path + Z.mu * Z.G * math.sqrt(2 * Z.phi0))
    assert Z.holds == (Z.path_bound <= r) and Z.alpha <= H.alpha
    # the certificate uses an h_Z it is given
    given = certificate(model, X, Y, r=r, through="Z", s_Z=h_Z / 2)
    assert math.isclose(
        given.lam, h_Z / 2 - given.G_H * r, rel_tol=1e-12, abs_tol=1e-15
    )


def test_the_book_instance_is_certified_through_Z_only_with_a_small_W_2():
    """With W_2 at a hundredth of its usual scale the route through Z certifies, at a
    rate never faster than the route through H; at the usual scale h_Z < 0 and no
    radius certifies through Z."""
    from dataclasses import replace

    from rcutil import settings_for
    from rcutil.experiments import convergence

    settings = settings_for(convergence.SETTINGS, "ci")
    assert settings.W_2_scale == 0.01
    model, X, Y = convergence.make_instance(settings, 1)
    H = best_certificate(model, X, Y, n_radii=settings.n_radii)
    Z = best_certificate(model, X, Y, n_radii=settings.n_radii, through="Z")
    assert H.holds and Z.holds and 0 < Z.mu * Z.alpha <= H.mu * H.alpha
    assert 0 < Z.s_lower < Z.s0
    usual = replace(settings, W_2_scale=1.0)
    model, X, Y = convergence.make_instance(usual, 1)
    z = z_lower_bound(model, X)
    assert z.s_Z < 0 < z.sigma_min_Z
    none = best_certificate(model, X, Y, n_radii=settings.n_radii, through="Z")
    assert not none.holds and none.r == 0.0 and none.alpha == 0.0
    assert best_certificate(model, X, Y, n_radii=settings.n_radii).holds


def test_the_route_is_named_and_needs_width():
    model, X, Y = instance()
    with pytest.raises(ValueError, match="through must be one of .'H', 'Z'.*'W'"):
        certificate(model, X, Y, r=0.1, through="W")
    tall = torch.randn(4, 2, 6, dtype=torch.float64)
    with pytest.raises(ValueError, match=r"through Z needs width d >= N n.*8 > d = 6"):
        z_lower_bound(model, tall)


def test_best_certificate_picks_the_fastest_rate_of_its_grid():
    from rcutil import settings_for
    from rcutil.experiments import convergence

    settings = settings_for(convergence.SETTINGS, "ci")
    model, X, Y = convergence.make_instance(settings, 1)
    r_max = certificate(model, X, Y, r=0.0).s0 / feature_bounds(model, X, 0.0)[0]
    # r_max 1e-8 and r_max: neither holds (the path bound is infinite at r_max)
    fewest = best_certificate(model, X, Y, n_radii=2)
    assert not fewest.holds and math.isclose(fewest.r, 1e-8 * r_max)
    n = 12
    best = best_certificate(model, X, Y, n_radii=n)
    grid = [
        certificate(model, X, Y, r=float(r))
        for r in np.geomspace(r_max * 1e-8, r_max, n)
    ]
    holding = [c for c in grid if c.holds]
    assert holding and best.r in [c.r for c in grid]
    assert best.mu * best.alpha == max(c.mu * c.alpha for c in holding)
    # none holds for large targets: the one closest to holding comes back
    fallback = best_certificate(model, X, 1e3 * Y, n_radii=n)
    grid = [
        certificate(model, X, 1e3 * Y, r=float(r))
        for r in np.geomspace(r_max * 1e-8, r_max, n)
    ]
    assert not fallback.holds and not any(c.holds for c in grid)
    assert fallback.path_bound / fallback.r == min(c.path_bound / c.r for c in grid)


# ------------------------------------------------------ the L-layer composition by hand
def block_by_hand(x, Xl, W, R, e, *, beta, tau, r):
    """One block's bounds, eqs. conv-GH, written out intermediate by intermediate.

    ``x = (v, g, Q)`` bounds the block's input on the ball: its spectral norm, the sizes
    of its first derivative per parameter (a vector ``g``: ``||X'|| <= g . a`` along a
    direction with component sizes ``a``) and of its second (a matrix ``Q``:
    ``||X''|| <= a^T Q a``). ``Xl`` is the input at theta_0, ``W`` the block's weights
    at theta_0, ``R`` their radii, ``e`` the unit vectors of the block's five weights.
    Every value is ``min(rule, norm at theta_0 + r ||g||)``. Literal constants: softmax
    Jacobian 1/2 and second derivative 1, tanh' 1 and tanh'' 4 / (3 sqrt 3). Returns the
    output's ``(v, g, Q)`` and its value at theta_0."""
    vx, gx, Qx = x
    eQ, eK, eV, e1, e2 = e
    n, d_F = Xl.shape[0], W["W_1"].shape[1]

    def ball(rule, at0, g):
        return min(rule, spec(at0) + r * np.linalg.norm(g))

    def sym(a, b):
        return np.outer(a, b) + np.outer(b, a)

    XQ, XK, XV = Xl @ W["W_Q"], Xl @ W["W_K"], Xl @ W["W_V"]
    P = torch.softmax(XQ @ XK.T / tau, -1)
    A = P @ XV
    Z = A + beta * Xl
    U = torch.tanh(Z @ W["W_1"])
    F = U @ W["W_2"]
    g_XQ, Q_XQ = R["W_Q"] * gx + vx * eQ, R["W_Q"] * Qx + sym(gx, eQ)
    v_XQ = ball(vx * R["W_Q"], XQ, g_XQ)
    g_XK, Q_XK = R["W_K"] * gx + vx * eK, R["W_K"] * Qx + sym(gx, eK)
    v_XK = ball(vx * R["W_K"], XK, g_XK)
    g_S = (g_XQ * v_XK + v_XQ * g_XK) / tau
    Q_S = (Q_XQ * v_XK + v_XQ * Q_XK + sym(g_XQ, g_XK)) / tau
    g_P, Q_P = 0.5 * g_S, 0.5 * Q_S + 1.0 * np.outer(g_S, g_S)
    v_P = ball(math.sqrt(n), P, g_P)
    g_V, Q_V = R["W_V"] * gx + vx * eV, R["W_V"] * Qx + sym(gx, eV)
    v_V = ball(vx * R["W_V"], XV, g_V)
    g_A, Q_A = g_P * v_V + v_P * g_V, Q_P * v_V + v_P * Q_V + sym(g_P, g_V)
    v_A = ball(v_P * v_V, A, g_A)
    g_Z, Q_Z = g_A + beta * gx, Q_A + beta * Qx
    v_Z = ball(v_A + beta * vx, Z, g_Z)
    g_ZW, Q_ZW = R["W_1"] * g_Z + v_Z * e1, R["W_1"] * Q_Z + sym(g_Z, e1)
    v_ZW = ball(v_Z * R["W_1"], Z @ W["W_1"], g_ZW)
    g_U, Q_U = 1.0 * g_ZW, 1.0 * Q_ZW + KAPPA * np.outer(g_ZW, g_ZW)
    v_U = ball(min(math.sqrt(min(n, d_F)) * v_ZW, math.sqrt(n * d_F)), U, g_U)
    g_F, Q_F = R["W_2"] * g_U + v_U * e2, R["W_2"] * Q_U + sym(g_U, e2)
    v_F = ball(v_U * R["W_2"], F, g_F)
    g_H, Q_H = g_F + beta * g_Z, Q_F + beta * Q_Z
    v_H = ball(v_F + beta * v_Z, F + beta * Z, g_H)
    return (v_H, g_H, Q_H), F + beta * Z


def stack_by_hand(model, X, r):
    """Per sample, per block ``l``: ``(v, g, Q)`` of ``theta -> H_l`` on the ball of
    radius ``r``; block ``l`` has its own weights, radii ``||W^0|| + r`` and input at
    theta_0."""
    m = 5 * model.n_layers
    out = []
    for Xp in X:
        x, Xl, per_block = (spec(Xp), np.zeros(m), np.zeros((m, m))), Xp, []
        for l, blk in enumerate(model.blocks):
            W = weights(blk)
            R = {k: spec(w) + r for k, w in W.items()}
            x, Xl = block_by_hand(
                x,
                Xl,
                W,
                R,
                np.eye(m)[5 * l : 5 * l + 5],
                beta=model.beta,
                tau=model.tau,
                r=r,
            )
            per_block.append(x)
        out.append(per_block)
    return out


def constants_by_hand(model, X, r):
    """``(G_H, K_H, H_bound)`` from the last block's bounds of every sample."""
    last = [per_block[-1] for per_block in stack_by_hand(model, X, r)]
    G_H = math.sqrt(np.linalg.eigvalsh(sum(np.outer(g, g) for _, g, _ in last))[-1])
    K_H = math.sqrt(sum(np.linalg.eigvalsh(Q)[-1] ** 2 for _, _, Q in last))
    return G_H, K_H, math.sqrt(sum(v * v for v, _, _ in last))


@pytest.mark.parametrize(
    "L, beta, r",
    [
        (1, 1.0, 0.0),
        (1, 0.5, 0.03),
        (1, 0.0, 0.4),
        (2, 1.0, 0.0),
        (2, 0.5, 0.4),
        (3, 1.0, 0.03),
        (3, 0.0, 0.03),
        (4, 0.7, 0.01),
    ],
)
def test_feature_bounds_equal_the_block_by_block_recomputation(L, beta, r):
    """Blocks drawn with different seeds have different weights, radii and input norms,
    so that a block composed with another block's quantities changes the numbers."""
    model, X, _ = instance(beta, seed=3, scale=1.5, L=L)
    np.testing.assert_allclose(
        feature_bounds(model, X, r), constants_by_hand(model, X, r), rtol=1e-12
    )
    for jets, hand in zip(feature_jets(model, X, r), stack_by_hand(model, X, r)):
        for l, (jet, (v, g, Q)) in enumerate(zip(jets, hand)):  # block by block
            assert math.isclose(jet.value, v, rel_tol=1e-12), l
            np.testing.assert_allclose(jet.g, g, rtol=1e-12, err_msg=str(l))
            np.testing.assert_allclose(jet.Hq, Q, rtol=1e-12, err_msg=str(l))


def block_map(Xl, W, *, beta, tau):
    """``(flat, f)``: the block's weights and input at theta_0 as one flat vector, and
    ``f(flat)``, the block's output as a map of both (eq. model-block)."""
    parts = [W[k] for k in NAMES] + [Xl]
    sizes = [p.numel() for p in parts]

    def f(flat):
        W_Q, W_K, W_V, W_1, W_2, X = (
            t.view(p.shape) for t, p in zip(flat.split(sizes), parts)
        )
        return block(X, W_Q, W_K, W_V, W_1, W_2, beta=beta, tau=tau)[0].reshape(-1)

    return torch.cat([p.reshape(-1) for p in parts]), f


def block_bounds(Xl, W, *, beta, tau, r):
    """One block's bounds as a map of its weights and its input on the ball of radius
    ``r`` around ``(W, Xl)``: by hand, and by :func:`rcutil.bounds.jet_block` (six
    parameters, the input the sixth)."""
    e = np.eye(6)
    R = {k: spec(w) + r for k, w in W.items()}
    x = (spec(Xl) + r, e[5], np.zeros((6, 6)))
    hand, _ = block_by_hand(x, Xl, W, R, e[:5], beta=beta, tau=tau, r=r)
    d, d_F, d_qk = Xl.shape[1], W["W_1"].shape[1], W["W_Q"].shape[1]
    norms0, _ = bounds.block_norms0(Xl, W, beta=beta, tau=tau)
    x = bounds.jet_weight(spec(Xl) + r, 5, Xl.shape, 6)
    jet = bounds.jet_block(
        x, R, 0, 6, d=d, d_qk=d_qk, d_F=d_F, beta=beta, tau=tau, norms0=norms0, r=r
    )
    return hand, jet


def measured(f, flat, *, starts=4, steps=6):
    """``(||Df||_2, sup ||D^2 f[v, v]||)`` at ``flat``: a dense Jacobian and the search
    of :mod:`rcutil.tightness` (a lower estimate)."""
    J = torch.func.jacfwd(f)(flat)
    V = torch.randn(
        starts,
        flat.numel(),
        generator=torch.Generator().manual_seed(0),
        dtype=torch.float64,
    )
    second, _ = tightness.top_second(f, flat, V, steps=steps)
    return torch.linalg.matrix_norm(J, ord=2).item(), second.max().item()


def per_block_inputs(model, X):
    """Every block's input at theta_0, sample 0."""
    with torch.no_grad():
        out, inputs = X[0], []
        for blk in model.blocks:
            inputs.append(out)
            out, _ = block(out, **weights(blk), beta=model.beta, tau=model.tau)
    return inputs


@pytest.mark.parametrize("beta, r", [(1.0, 0.0), (0.5, 0.05)])
def test_every_blocks_bound_holds_for_the_map_of_its_weights_and_input(beta, r):
    """At theta_0 and at a point of the ball, the block's measured first and second
    derivatives never exceed its bounds; the module's rules give the same bounds."""
    model, X, _ = instance(beta, seed=6, scale=1.2, L=3, d=4, d_qk=2, d_F=3, n=3, N=1)
    g = torch.Generator().manual_seed(1)
    for l, (blk, Xl) in enumerate(zip(model.blocks, per_block_inputs(model, X))):
        W = weights(blk)
        (v, gv, Q), jet = block_bounds(Xl, W, beta=beta, tau=model.tau, r=r)
        assert math.isclose(jet.value, v, rel_tol=1e-12), l
        np.testing.assert_allclose(jet.g, gv, rtol=1e-12)
        np.testing.assert_allclose(jet.Hq, Q, rtol=1e-12)
        flat, f = block_map(Xl, W, beta=beta, tau=model.tau)
        step = torch.randn(flat.shape, generator=g, dtype=torch.float64)
        for point in (flat, flat + r * step / step.norm()):
            first, second = measured(f, point)
            assert first <= np.linalg.norm(gv) * (1 + 1e-10), (l, first)
            assert second <= np.linalg.eigvalsh(Q)[-1] * (1 + 1e-10), (l, second)
            assert spec(f(point).view(Xl.shape)) <= v * (1 + 1e-10), l


# ---------------------------------------------- instances where the bounds are attained
X_ROW = torch.tensor([0.8, -0.5, 0.3, 0.6], dtype=torch.float64)


def diagonal(*entries, shape=(3, 4)):
    M = torch.zeros(shape, dtype=torch.float64)
    for i, value in enumerate(entries):
        M[i, i] = value
    return M


def stack_of(blocks, scale=1.0):
    """A stack with beta = 1 and the given ``(c, W_2)`` per block: ``W_V = c I`` and
    ``W_Q = W_K = W_1 = 0``; one sample whose three tokens are equal (rows
    ``scale * X_ROW``)."""
    model = Transformer(4, 2, 3, 2, n_layers=len(blocks), tau=1.0, beta=1.0, seed=1)
    with torch.no_grad():
        for blk, (c, W_2) in zip(model.blocks, blocks):
            for k in ("W_Q", "W_K", "W_1"):
                getattr(blk, k).zero_()
            blk.W_V.copy_(c * torch.eye(4, dtype=torch.float64))
            blk.W_2.copy_(W_2)
    return model, (scale * X_ROW).expand(1, 3, 4).clone()


def attained_G_stack():
    """Uniform attention on equal tokens passes a change of the input along the tokens'
    direction at full size, and every block's change, X delta_V and Z delta_1 W_2, can
    point the same way (all W_2 share their top right singular vector): ||DH|| = G_H
    exactly. The second block's radii and input norm are larger than the first's."""
    return stack_of([(0.5, diagonal(2.0, 1.0, 0.5)), (1.0, diagonal(3.0, 1.5, 0.5))])


def test_a_two_layer_stack_attains_G_H_in_every_block_and_weight():
    model, X = attained_G_stack()
    Y = torch.zeros(1, 3, 2, dtype=torch.float64)
    theta, H_of, _ = tightness.flat_maps(model, X, Y)
    J = torch.func.jacfwd(H_of)(theta)
    G_H = feature_bounds(model, X, 0.0)[0]
    assert math.isclose(spec(J), G_H, rel_tol=1e-12)
    g = feature_jets(model, X, 0.0)[0][-1].g
    offset = 0
    for index, (name, p) in enumerate(list(model.named_parameters())[:-1]):
        part = J[:, offset : offset + p.numel()]  # d H / d (that weight)
        assert math.isclose(spec(part), g[index], rel_tol=1e-12, abs_tol=1e-12), name
        offset += p.numel()
    assert min(g[[2, 3, 7, 8]]) > 1  # W_V and W_1 of each block
    # the second block's quantities are its own: larger than the first's
    first, second = model.blocks
    assert spec(second.W_V) > spec(first.W_V) and spec(second.W_2) > spec(first.W_2)
    inputs = per_block_inputs(model, X)
    assert spec(inputs[1]) > spec(inputs[0])
    # each block alone, as a map of its weights and input, attains its G as well
    for blk, Xl in zip(model.blocks, inputs):
        (_, gv, _), _ = block_bounds(Xl, weights(blk), beta=1.0, tau=1.0, r=0.0)
        flat, f = block_map(Xl, weights(blk), beta=1.0, tau=1.0)
        J = torch.func.jacfwd(f)(flat)
        assert math.isclose(spec(J), np.linalg.norm(gv), rel_tol=1e-12)


def test_a_block_without_weights_attains_its_second_derivative_bound():
    """A block with W = 0 after one that scales its input by 1.5: D^2 H = 2 Z delta_1
    delta_2 with Z its own input, whose norm (above ||P|| = 1) is the block's K
    exactly."""
    model, X = stack_of(
        [
            (0.5, torch.zeros(3, 4, dtype=torch.float64)),
            (0.0, torch.zeros(3, 4, dtype=torch.float64)),
        ]
    )
    Xl = per_block_inputs(model, X)[1]
    assert math.isclose(spec(Xl), 1.5 * spec(X[0]), rel_tol=1e-12) and spec(Xl) > 1
    W = weights(model.blocks[1])
    (_, _, Q), jet = block_bounds(Xl, W, beta=1.0, tau=1.0, r=0.0)
    bound = np.linalg.eigvalsh(Q)[-1]
    assert math.isclose(bound, spec(Xl), rel_tol=1e-12)
    assert math.isclose(jet.second, bound, rel_tol=1e-12)
    flat, f = block_map(Xl, weights(model.blocks[1]), beta=1.0, tau=1.0)
    _, second = measured(f, flat)
    assert math.isclose(second, bound, rel_tol=1e-9)


def test_a_given_trace_is_what_the_bounds_use():
    from rcutil.certificate import _trace

    model, X, _ = instance(1.0, seed=4)
    trace = _trace(model, X)
    assert feature_bounds(model, X, 0.05, trace) == feature_bounds(model, X, 0.05)
    doubled = [
        [{k: 2 * v for k, v in norms.items()} for norms in sample] for sample in trace
    ]
    G_H = feature_bounds(model, X, 0.05)[0]
    assert feature_bounds(model, X, 0.05, doubled)[0] > G_H


def test_a_scan_traces_the_model_once(monkeypatch):
    import rcutil.certificate as module

    model, X, Y = instance(1.0, seed=4)
    calls = []
    original = module._trace
    monkeypatch.setattr(module, "_trace", lambda *a: calls.append(1) or original(*a))
    best_certificate(model, X, Y, n_radii=4)
    assert len(calls) == 1  # the norms at theta_0 are computed once, per scan


def test_the_samples_add_up_and_do_not_take_a_max():
    model, X, _ = instance(1.0, seed=4)
    G_H, K_H, H_bound = feature_bounds(model, X, 0.05)
    parts = [feature_bounds(model, X[p : p + 1], 0.05) for p in range(X.shape[0])]
    root_sum = [math.sqrt(sum(p[i] ** 2 for p in parts)) for i in range(3)]
    assert max(p[0] for p in parts) < G_H <= root_sum[0] * (1 + 1e-12)
    np.testing.assert_allclose([K_H, H_bound], root_sum[1:], rtol=1e-12)


def one_layer_attained():
    """beta = 0, W_1 = 0: H = tanh(Z W_1) W_2 = 0 and DH[delta] = Z delta_1 W_2, whose
    norm ||Z||_2 ||W_2||_2 is G_H exactly at r = 0; with W_U along W_2's top right
    singular vector and Y = F_0 = 0, Hess Phi = J^T J has norm (||Z|| ||W_2|| ||W_U||)^2
    = C."""
    d, d_F = 6, 4
    model = Transformer(d, 2, d_F, 2, tau=1.0, beta=0.0, seed=7)
    W_U = torch.zeros(d, 2, dtype=torch.float64)
    W_U[0, 0], W_U[1, 1] = 2.0, 0.5
    with torch.no_grad():
        model.blocks[0].W_1.zero_()
        model.blocks[0].W_2.copy_(diagonal(3.0, 1.0, 0.5, shape=(d_F, d)))
        model.W_U.copy_(W_U)
    X = torch.randn(
        1, 3, d, generator=torch.Generator().manual_seed(8), dtype=torch.float64
    )
    return model, X, torch.zeros(1, 3, 2, dtype=torch.float64)


def test_one_layer_attains_G_H_and_C():
    model, X, Y = one_layer_attained()
    cert = certificate(model, X, Y, r=0.0)
    with torch.no_grad():
        Z = model(X, return_all=True).Z[0][0]
    assert math.isclose(cert.G_H, spec(Z) * 3.0, rel_tol=1e-12)  # ||Z|| ||W_2||
    assert math.isclose(cert.C, (spec(Z) * 3.0 * 2.0) ** 2, rel_tol=1e-12)
    assert cert.s0 == cert.S0 == 0  # H_0 = 0
    assert cert.kappa_inv_sq == 0.0  # kappa is infinite
    measured = tightness.measure(model, X, Y, cert.to_dict(), iterations=20)
    for key in ("G_H", "C"):
        assert 0.999 <= measured[key]["ratio"] <= 1 + 1e-9, (key, measured[key])
    assert measured["K_H"]["ratio"] <= 1 + 1e-9


# ---------------------------------------------------------- what the rules do not cover
class WithLayerNorm(Transformer):
    def forward(self, X, **kw):
        return super().forward(torch.nn.functional.layer_norm(X, X.shape[-1:]), **kw)


def with_beta(beta):
    """A model whose residual strength was set after it was built (the constructor may
    refuse it)."""
    model = Transformer(6, 3, 5, 2)
    model.beta = beta
    return model


@pytest.mark.parametrize(
    "make, match",
    [
        (
            lambda: Transformer(6, 3, 5, 2, activation=lambda x: 3 * torch.tanh(x)),
            "'<lambda>'.*ACTIVATIONS",
        ),
        (lambda: Transformer(6, 3, 5, 2, activation=torch.relu), "'relu'.*ACTIVATIONS"),
        (lambda: Transformer(6, 3, 5, 2, activation=torch.nn.ReLU()), r"'ReLU\(\)'"),
        (lambda: with_beta(1.5), r"\[0, 1\].*beta = 1.5"),
        (lambda: with_beta(-0.5), "beta = -0.5"),
        (lambda: WithLayerNorm(6, 3, 5, 2), "WithLayerNorm.*rcutil.model.Transformer"),
        (lambda: torch.nn.Linear(6, 2), "Linear"),
    ],
    ids=[
        "3 tanh",
        "relu",
        "ReLU module",
        "beta 1.5",
        "beta -0.5",
        "layer norm",
        "Linear",
    ],
)
def test_models_outside_the_rules_are_refused(make, match):
    model = make()
    X = torch.randn(1, 3, 6, dtype=torch.float64)
    with pytest.raises(ValueError, match=match):
        check_certifiable(model)
    if isinstance(model, Transformer):
        Y = torch.zeros(1, 3, 2, dtype=torch.float64)
        for call in (
            lambda: certificate(model, X, Y, r=0.1),
            lambda: feature_bounds(model, X, 0.1),
            lambda: best_certificate(model, X, Y),
        ):
            with pytest.raises(ValueError, match=match):
                call()


def test_covered_models_pass_and_odd_layouts_are_refused():
    check_certifiable(
        Transformer(6, 3, 5, 2, activation=torch.nn.functional.tanh, beta=0.0)
    )
    check_certifiable(Transformer(6, 3, 5, 2, activation=torch.nn.Tanh(), beta=1))
    model = Transformer(6, 3, 5, 2)
    model.beta = torch.tensor(0.5)  # a tensor beta: not a constant the rules know
    with pytest.raises(ValueError, match="beta = tensor"):
        check_certifiable(model)
    model = Transformer(6, 3, 5, 2)
    model.beta = True
    with pytest.raises(ValueError, match="beta = True"):
        check_certifiable(model)
    model = Transformer(6, 3, 5, 2)
    model.blocks[0].register_parameter("b_1", torch.nn.Parameter(torch.zeros(5)))
    with pytest.raises(ValueError, match="layout.*b_1"):
        check_certifiable(model)
    model = Transformer(6, 3, 5, 2)
    model.blocks[0].__class__ = type(
        "Block", (torch.nn.Module,), {"forward": model.blocks[0].forward}
    )
    with pytest.raises(ValueError, match="layout"):
        check_certifiable(model)


def test_bad_arguments_are_named():
    model, X, Y = instance()
    with pytest.raises(ValueError, match="r .the ball radius.*-0.1"):
        feature_bounds(model, X, -0.1)
    with pytest.raises(ValueError, match="r .the ball radius.*inf"):
        certificate(model, X, Y, r=math.inf)
    with pytest.raises(ValueError, match=r"Y must be a tensor of shape \(3, 2, 2\)"):
        certificate(model, X, Y[:, :1], r=0.1)
    with pytest.raises(ValueError, match="Y must be a tensor"):
        certificate(model, X, Y.numpy(), r=0.1)
    with pytest.raises(ValueError, match="mu .the step size.*0.0"):
        certificate(model, X, Y, r=0.1, mu=0.0)
    with pytest.raises(ValueError, match="mu .the step size.*nan"):
        certificate(model, X, Y, r=0.1, mu=math.nan)
    with pytest.raises(ValueError, match="n_radii.*1"):
        best_certificate(model, X, Y, n_radii=1)
    wide = torch.randn(4, 2, 6, dtype=torch.float64)
    with pytest.raises(ValueError, match=r"d >= N n.*N n = 8 > d = 6"):
        certificate(model, wide, torch.zeros(4, 2, 2, dtype=torch.float64), r=0.1)
    with pytest.raises(ValueError, match="s0 = 0.*another initialisation"):
        best_certificate(*one_layer_attained())  # H_0 = 0
    with pytest.raises(ValueError, match="C = 0.*is X zero"):
        certificate(model, torch.zeros_like(X), Y, r=0.1)
