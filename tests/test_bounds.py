"""Property tests of rcutil.bounds: every rule on its own, near its worst case, then
composed.

Hypothesis runs derandomised (tests/conftest.py); ``@example`` pins the known extremal
points.
"""

import math

import numpy as np
import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st

from rcutil import bounds
from rcutil.model import attention, ffn

torch.set_num_threads(1)
MANY = settings()  # the profile's count (tests/conftest.py)
SOME = settings(max_examples=max(10, settings.default.max_examples // 8))
finite = st.floats(-6, 6, allow_nan=False)


def _path_derivatives(f, x0, v):
    """Exact first and second derivative of t -> f(x0 + t v) at t = 0 (nested forward
    mode)."""

    def first(x):
        return torch.func.jvp(f, (x,), (v,))[1]

    d1 = first(x0)
    d2 = torch.func.jvp(first, (x0,), (v,))[1]
    return d1, d2


# ----------------------------------------------------------------------- softmax
# Jacobian
@MANY
@given(st.lists(finite, min_size=2, max_size=7))
@example([0.0, 0.0])
@example([3.0, 3.0, -6.0, -6.0])
def test_softmax_jacobian_formula_and_bound(s):
    s = torch.tensor(s, dtype=torch.float64)
    p = torch.softmax(s, 0)
    J = bounds.softmax_jacobian(p)
    torch.testing.assert_close(
        J, torch.autograd.functional.jacobian(lambda x: torch.softmax(x, 0), s)
    )
    assert torch.linalg.matrix_norm(J, ord=2) <= bounds.softmax_jacobian_bound() + 1e-12


def test_softmax_jacobian_bound_is_attained():
    J = bounds.softmax_jacobian(torch.tensor([0.5, 0.5, 0.0], dtype=torch.float64))
    assert math.isclose(
        torch.linalg.matrix_norm(J, ord=2).item(),
        bounds.SOFTMAX_JACOBIAN_BOUND,
        rel_tol=1e-12,
    )
    # and nearly attained by the map itself: small opposite scores with n = 2
    s = torch.tensor([0.3, -0.3], dtype=torch.float64)
    change = torch.linalg.vector_norm(torch.softmax(s, 0) - 0.5)
    gap = change / (bounds.SOFTMAX_JACOBIAN_BOUND * torch.linalg.vector_norm(s))
    assert 0.9 < gap.item() <= 1.0


# ----------------------------------------------------------------------- softmax second
# derivative
#: the supremum of ||D^2 softmax[u, u]|| / ||u||^2 at n = 2: p_1 = (1 - 1/sqrt 3) / 2, u
#: = (1, -1)
P_STAR = (1 - 3**-0.5) / 2
S_STAR = math.log(P_STAR / (1 - P_STAR))


@MANY
@given(st.lists(st.tuples(finite, finite), min_size=2, max_size=6))
@example([(0.0, 1.0), (0.0, -1.0)])
@example([(S_STAR, 1.0), (0.0, -1.0)])
@example([(-S_STAR, 0.5), (0.0, -0.5)])
@example([(S_STAR, 1.0), (0.0, -1.0), (-30.0, 0.0)])
def test_softmax_second_derivative_formula_and_bound(su):
    s = torch.tensor([a for a, _ in su], dtype=torch.float64)
    u = torch.tensor([b for _, b in su], dtype=torch.float64)
    if u.norm() < 1e-3:
        u = u + 1.0 / len(u) ** 0.5 * torch.arange(len(u), dtype=torch.float64)
    _, d2 = _path_derivatives(lambda x: torch.softmax(x, 0), s, u)
    p = torch.softmax(s, 0)
    torch.testing.assert_close(d2, bounds.softmax_second_derivative(p, u))
    assert d2.norm() <= bounds.softmax_second_bound() * u.norm() ** 2 + 1e-12


def test_softmax_second_derivative_supremum_at_two_tokens():
    # ||D^2 p[u, u]|| = sqrt(2) p (1 - p) |1 - 2p| (u_1 - u_2)^2 at n = 2; its sup over
    # p, with ||u||^2 = (u_1 - u_2)^2 / 2 at best, is sqrt(2) / (3 sqrt 3), reached at p
    # = P_STAR
    s = torch.tensor([S_STAR, 0.0], dtype=torch.float64)
    u = torch.tensor([1.0, -1.0], dtype=torch.float64)
    ratio = (
        bounds.softmax_second_derivative(torch.softmax(s, 0), u).norm() / u.norm() ** 2
    )
    assert math.isclose(ratio.item(), 2**0.5 / (3 * 3**0.5), rel_tol=1e-12)
    assert math.isclose(
        bounds.SOFTMAX_SECOND_SUPREMUM_N2, 2**0.5 / (3 * 3**0.5), rel_tol=1e-15
    )
    for shift in (-1e-3, 1e-3):  # a maximum in p
        other = torch.softmax(
            torch.tensor([S_STAR + shift, 0.0], dtype=torch.float64), 0
        )
        assert bounds.softmax_second_derivative(other, u).norm() / u.norm() ** 2 < ratio
    assert ratio < bounds.softmax_second_bound() == 1.0


# ----------------------------------------------------------------------- tanh
@MANY
@given(st.floats(-20, 20, allow_nan=False))
@example(0.0)
@example(math.atanh(1 / math.sqrt(3)))
@example(-math.atanh(1 / math.sqrt(3)))
def test_tanh_bounds(x):
    x = torch.tensor(x, dtype=torch.float64)
    d1, d2 = _path_derivatives(torch.tanh, x, torch.ones_like(x))
    assert abs(d1) <= bounds.tanh_first_bound() + 1e-15
    assert abs(d2) <= bounds.tanh_second_bound() + 1e-15


def test_tanh_bounds_are_attained():
    d1, d2 = _path_derivatives(
        torch.tanh,
        torch.tensor(math.atanh(3**-0.5), dtype=torch.float64),
        torch.tensor(1.0, dtype=torch.float64),
    )
    assert math.isclose(abs(d2.item()), bounds.TANH_SECOND_BOUND, rel_tol=1e-12)
    zero, one = (
        torch.tensor(0.0, dtype=torch.float64),
        torch.tensor(1.0, dtype=torch.float64),
    )
    d1, _ = _path_derivatives(torch.tanh, zero, one)
    assert math.isclose(d1.item(), bounds.TANH_FIRST_BOUND, rel_tol=1e-15)


# ----------------------------------------------------------------------- Lipschitz
# constants
def _sampler(seed, scale=1.0):
    """``r(*shape)``: float64 standard normals times ``scale``, from a generator seeded
    ``seed``."""
    g = torch.Generator().manual_seed(seed)
    return lambda *shape: torch.randn(*shape, generator=g, dtype=torch.float64) * scale


def _draw(seed, n, d, d_qk, d_F, scale):
    r = _sampler(seed)
    return dict(
        X=r(n, d) * scale,
        W_Q=r(d, d_qk),
        W_K=r(d, d_qk),
        W_V=r(d, d) / d**0.5,
        W_1=r(d, d_F) / d**0.5,
        W_2=r(d_F, d) / d_F**0.5,
        dir=r(64, 64),
    )


inst = st.tuples(
    st.integers(0, 10**6),
    st.integers(2, 5),
    st.integers(2, 6),
    st.integers(1, 3),
    st.integers(1, 6),
    st.sampled_from([0.05, 0.3, 1.0, 3.0]),
    st.sampled_from([0.5, 1.0, 2.0]),
)


def spec(W):
    return torch.linalg.matrix_norm(W, ord=2).item()


@MANY
@given(inst)
def test_attention_lipschitz_constants(args):
    seed, n, d, d_qk, d_F, scale, tau = args
    w = _draw(seed, n, d, d_qk, d_F, scale)
    X = w["X"]
    xn, xrow = spec(X), X.norm(dim=1).max().item()
    for name, L in (
        ("W_Q", bounds.attention_lipschitz_WQ(xn, spec(w["W_K"]), spec(w["W_V"]), tau)),
        ("W_K", bounds.attention_lipschitz_WK(xn, spec(w["W_Q"]), spec(w["W_V"]), tau)),
        ("W_V", bounds.attention_lipschitz_WV(n, xrow)),
    ):
        v = w["dir"][: w[name].shape[0], : w[name].shape[1]]
        v = v / v.norm()

        def f(W, name=name):
            args_ = {k: w[k] for k in ("W_Q", "W_K", "W_V")}
            args_[name] = W
            return attention(X, args_["W_Q"], args_["W_K"], args_["W_V"], tau)

        d1 = torch.func.jvp(f, (w[name],), (v,))[1]
        assert d1.norm() <= L * (1 + 1e-10) + 1e-14, name


@MANY
@given(inst)
def test_ffn_and_output_lipschitz_constants(args):
    seed, n, d, d_qk, d_F, scale, _ = args
    w = _draw(seed, n, d, d_qk, d_F, scale)
    Z, W_1, W_2 = w["X"], w["W_1"], w["W_2"]
    checks = (
        (
            "W_1",
            W_1,
            lambda W: ffn(Z, W, W_2),
            bounds.ffn_lipschitz_W1(spec(Z), spec(W_2)),
        ),
        (
            "W_2",
            W_2,
            lambda W: ffn(Z, W_1, W),
            bounds.ffn_lipschitz_W2(Z.norm().item(), spec(W_1), n * d_F),
        ),
        (
            "Z",
            Z,
            lambda M: ffn(M, W_1, W_2),
            bounds.ffn_lipschitz_Z(spec(W_1), spec(W_2)),
        ),
        ("W_U", W_1, lambda W: Z @ W, bounds.output_lipschitz_WU(spec(Z))),
        ("H", Z, lambda M: M @ W_1, bounds.output_lipschitz_H(spec(W_1))),
    )
    for name, x0, f, L in checks:
        v = w["dir"][: x0.shape[0], : x0.shape[1]]
        v = v / v.norm()
        assert torch.func.jvp(f, (x0,), (v,))[1].norm() <= L * (1 + 1e-10) + 1e-14, name


def test_ffn_W1_constant_is_attained_for_linear_regime():
    # tanh'(0) = 1: near Z W_1 = 0 the W_1-constant ||Z||_2 ||W_2||_2 is reached along
    # the top singular pair
    Z = torch.diag(torch.tensor([2.0, 1.0], dtype=torch.float64))
    W_1 = torch.zeros(2, 2, dtype=torch.float64)
    W_2 = torch.diag(torch.tensor([3.0, 1.0], dtype=torch.float64))
    v = torch.zeros(2, 2, dtype=torch.float64)
    v[0, 0] = 1.0
    d1 = torch.func.jvp(lambda W: ffn(Z, W, W_2), (W_1,), (v,))[1]
    assert math.isclose(
        d1.norm().item(), bounds.ffn_lipschitz_W1(spec(Z), spec(W_2)), rel_tol=1e-12
    )


# ----------------------------------------------------------------------- jet rules,
# each on its own
def _jet_of(A0, A1, A2, n_params=1):
    """A path A(t) = A0 + t A1 + t^2/2 A2 seen as a jet in one parameter, with exact
    bounds at t = 0."""
    return bounds.Jet(
        spec(A0),
        np.array([A1.norm().item()]),
        np.array([[A2.norm().item()]]),
        tuple(A0.shape),
    )


mats = st.tuples(
    st.integers(0, 10**6),
    st.integers(1, 5),
    st.integers(1, 5),
    st.integers(1, 5),
    st.sampled_from([0.1, 1.0, 5.0]),
)


@MANY
@given(mats)
def test_jet_matmul_rule(args):
    seed, a, b, c, scale = args
    r = _sampler(seed, scale)
    A, B = [r(a, b) for _ in range(3)], [r(b, c) for _ in range(3)]
    jet = bounds.jet_matmul(_jet_of(*A), _jet_of(*B))
    # exact derivatives at t = 0 of (A0 + t A1 + t^2/2 A2)(B0 + t B1 + t^2/2 B2)
    d1 = A[1] @ B[0] + A[0] @ B[1]
    d2 = A[2] @ B[0] + 2 * A[1] @ B[1] + A[0] @ B[2]
    assert spec(A[0] @ B[0]) <= jet.value * (1 + 1e-12)
    assert d1.norm() <= jet.first * (1 + 1e-12)
    assert d2.norm() <= jet.second * (1 + 1e-12) + 1e-12


@MANY
@given(mats, st.booleans())
def test_jet_softmax_rule(args, tie):
    seed, a, _, c, scale = args
    c = max(c, 2)
    r = _sampler(seed, scale)
    S = [r(a, c) for _ in range(3)]
    if (
        tie
    ):  # two equal leading scores per row: the Jacobian bound 1/2 is (nearly) attained
        S[0] = torch.full((a, c), -30.0, dtype=torch.float64)
        S[0][:, :2] = 0.0
        S[1] = torch.zeros(a, c, dtype=torch.float64)
        S[1][:, 0], S[1][:, 1] = 1.0, -1.0
    jet = bounds.jet_softmax(_jet_of(*S))
    half = S[2] / 2
    path = lambda t: torch.softmax(S[0] + t * S[1] + (t * t) * half, -1)  # noqa: E731
    t0 = torch.tensor(0.0, dtype=torch.float64)
    d1, d2 = _path_derivatives(path, t0, torch.ones_like(t0))
    assert spec(path(t0)) <= jet.value * (1 + 1e-12)
    assert d1.norm() <= jet.first * (1 + 1e-12) + 1e-14
    assert d2.norm() <= jet.second * (1 + 1e-12) + 1e-14
    if tie:
        assert d1.norm() >= 0.99 * jet.first  # the rule is tight here


@MANY
@given(mats)
def test_jet_tanh_rule(args):
    seed, a, b, _, scale = args
    r = _sampler(seed, scale)
    A = [r(a, b) for _ in range(3)]
    jet = bounds.jet_activation(_jet_of(*A))
    # exact derivatives at t = 0 of tanh(A0 + t A1 + t^2/2 A2) (chain rule; tanh' = 1 -
    # tanh^2)
    th = torch.tanh(A[0])
    d1 = (1 - th**2) * A[1]
    d2 = -2 * th * (1 - th**2) * A[1] ** 2 + (1 - th**2) * A[2]
    assert spec(th) <= jet.value * (1 + 1e-12)
    assert d1.norm() <= jet.first * (1 + 1e-12) + 1e-14
    assert d2.norm() <= jet.second * (1 + 1e-12) + 1e-14


# ----------------------------------------------------------------------- jet rules over
# two parameter blocks
def _two_block_paths(seed, a, b, c, scale, angle):
    """``A(t)`` moves with block 0 only, ``B(t)`` with block 1 only, along a unit
    direction of block sizes ``w = (|cos angle|, |sin angle|)``; returns the paths,
    their jets and ``w``."""
    r = _sampler(seed, scale)
    w = np.array([abs(math.cos(angle)), abs(math.sin(angle))])
    A, B = [r(a, b) for _ in range(3)], [r(b, c) for _ in range(3)]

    # A(t) = A_0 + t w_0 A_1 + t^2/2 w_0^2 A_2, with the coefficients formed once
    A1, A2, B1, B2 = (
        w[0] * A[1],
        w[0] ** 2 / 2 * A[2],
        w[1] * B[1],
        w[1] ** 2 / 2 * B[2],
    )

    def path_A(t):
        return A[0] + t * A1 + (t * t) * A2

    def path_B(t):
        return B[0] + t * B1 + (t * t) * B2

    jA = bounds.Jet(
        spec(A[0]),
        np.array([A[1].norm().item(), 0.0]),
        np.diag([A[2].norm().item(), 0.0]),
        (a, b),
    )
    jB = bounds.Jet(
        spec(B[0]),
        np.array([0.0, B[1].norm().item()]),
        np.diag([0.0, B[2].norm().item()]),
        (b, c),
    )
    return path_A, path_B, jA, jB, w


two_blocks = st.tuples(
    st.integers(0, 10**6),
    st.integers(1, 4),
    st.integers(1, 4),
    st.integers(2, 4),
    st.sampled_from([0.1, 1.0, 3.0]),
    st.floats(0, 2 * math.pi),
)


@settings(max_examples=max(10, settings.default.max_examples // 5))
@given(two_blocks)
def test_jet_rules_with_two_parameter_blocks(args):
    """Products, sums, scaling, transposes, softmax and tanh of maps of two different
    weight blocks: the exact derivatives along the direction never exceed g . w and w^T
    Hq w."""
    seed, a, b, c, scale, angle = args
    path_A, path_B, jA, jB, w = _two_block_paths(seed, a, b, c, scale, angle)
    AB = bounds.jet_matmul(jA, jB)
    BtAt = bounds.jet_matmul(bounds.jet_transpose(jB), bounds.jet_transpose(jA))
    cases = {
        "AB": (lambda t: path_A(t) @ path_B(t), AB),
        "B^T A^T": (lambda t: path_B(t).T @ path_A(t).T, BtAt),
        "AB + 2 AB": (
            lambda t: 3 * path_A(t) @ path_B(t),
            bounds.jet_add(AB, bounds.jet_scale(AB, -2.0)),
        ),
        "softmax(AB)": (
            lambda t: torch.softmax(path_A(t) @ path_B(t), -1),
            bounds.jet_softmax(AB),
        ),
        "tanh(AB)": (
            lambda t: torch.tanh(path_A(t) @ path_B(t)),
            bounds.jet_activation(AB),
        ),
        "tanh(AB) B^T": (
            lambda t: torch.tanh(path_A(t) @ path_B(t)) @ path_B(t).T,
            bounds.jet_matmul(bounds.jet_activation(AB), bounds.jet_transpose(jB)),
        ),
    }
    t0 = torch.tensor(0.0, dtype=torch.float64)
    for name, (path, jet) in cases.items():
        d1, d2 = _path_derivatives(path, t0, torch.ones_like(t0))
        assert spec(path(t0)) <= jet.value * (1 + 1e-12) + 1e-14, name
        assert d1.norm() <= jet.g @ w * (1 + 1e-12) + 1e-14, name
        assert d2.norm() <= w @ jet.Hq @ w * (1 + 1e-12) + 1e-14, name
        assert jet.g @ w <= jet.first * (1 + 1e-12) and w @ jet.Hq @ w <= jet.second * (
            1 + 1e-12
        ), name


def test_cross_term_of_two_blocks_is_attained():
    # A(t) = t w_0 u v^T, B(t) = t w_1 v z^T: (AB)'' = 2 w_0 w_1 (u.u)(v.v)... = the
    # rule's w^T Hq w exactly
    u, v, z = (
        torch.tensor(x, dtype=torch.float64)
        for x in ([1.0, 2.0], [0.0, 3.0, 4.0], [2.0])
    )
    A1, B1 = torch.outer(u, v), torch.outer(v, z)
    jA = bounds.Jet(0.0, np.array([A1.norm().item(), 0.0]), np.zeros((2, 2)), (2, 3))
    jB = bounds.Jet(0.0, np.array([0.0, B1.norm().item()]), np.zeros((2, 2)), (3, 1))
    jet = bounds.jet_matmul(jA, jB)
    w = np.array([0.6, 0.8])
    exact = (2 * w[0] * w[1] * A1 @ B1).norm().item()
    assert math.isclose(w @ jet.Hq @ w, exact, rel_tol=1e-12)
    # the sup over unit w is lambda_max(Hq) = ||A1|| ||B1||, at w = (1, 1) / sqrt 2
    assert math.isclose(jet.second, A1.norm().item() * B1.norm().item(), rel_tol=1e-12)
    assert math.isclose(jet.first, 0.0, abs_tol=0.0) and jet.value == 0.0
    np.testing.assert_array_equal(jet.Hq, jet.Hq.T)


def test_jet_sup_over_directions_and_weights():
    jet = bounds.Jet(
        2.0, np.array([3.0, 4.0]), np.array([[1.0, 2.0], [2.0, 1.0]]), (2, 2)
    )
    assert jet.first == 5.0 and math.isclose(jet.second, 3.0, rel_tol=1e-12)
    assert bounds.Jet(1.0, np.zeros(0), np.zeros((0, 0)), (1, 1)).second == 0.0
    W = bounds.jet_weight(2.5, 1, (3, 4), 3)
    assert W.value == 2.5 and W.shape == (3, 4)
    np.testing.assert_array_equal(W.g, [0.0, 1.0, 0.0])
    np.testing.assert_array_equal(W.Hq, np.zeros((3, 3)))
    X = bounds.jet_const(1.5, (2, 3), 3)
    assert X.value == 1.5 and X.shape == (2, 3) and X.first == 0.0 and X.second == 0.0
    assert bounds.jet_transpose(W).shape == (4, 3)
    scaled = bounds.jet_scale(W, -2.0)
    assert scaled.value == 5.0 and scaled.g[1] == 2.0 and scaled.shape == (3, 4)
    product = bounds.jet_matmul(
        bounds.jet_weight(1.0, 0, (3, 2), 2), bounds.jet_weight(2.0, 1, (2, 5), 2)
    )
    S = bounds.jet_softmax(product)
    assert S.value == math.sqrt(3) and S.shape == (3, 5)  # sqrt(#rows)
    np.testing.assert_allclose(S.g, [1.0, 0.5])
    np.testing.assert_allclose(
        S.Hq, [[4.0, 2.5], [2.5, 1.0]]
    )  # Hq / 2 + g g^T, g = (2, 1)
    T = bounds.jet_activation(product)
    assert T.value == math.sqrt(3) * 2.0 and T.shape == (
        3,
        5,
    )  # min(sqrt(min(3, 5)) ||A||, sqrt(15))
    assert bounds.jet_activation(bounds.jet_scale(T, 10.0)).value == math.sqrt(15)
    np.testing.assert_allclose(
        T.Hq,
        [
            [4 / (3 * 3**0.5) * 4, 1 + 4 / (3 * 3**0.5) * 2],
            [1 + 4 / (3 * 3**0.5) * 2, 4 / (3 * 3**0.5)],
        ],
    )


def test_jet_tighten_uses_the_norm_at_theta0_plus_r_times_the_slope():
    jet = bounds.Jet(10.0, np.array([3.0, 4.0]), np.eye(2), (2, 2))
    assert bounds.jet_tighten(jet, 2.0, 0.5).value == 2.0 + 0.5 * 5.0  # tighter than 10
    assert bounds.jet_tighten(jet, 2.0, 3.0).value == 10.0  # 2 + 15 is not
    tight = bounds.jet_tighten(jet, 2.0, 0.0)
    assert (
        tight.value == 2.0
        and tight.g is jet.g
        and tight.Hq is jet.Hq
        and tight.shape == (2, 2)
    )


def test_jet_block_places_each_block_at_its_offset_and_tightens_only_with_norms():
    from rcutil.model import Transformer

    model = Transformer(5, 2, 3, 2, tau=1.2, beta=0.7, seed=2)
    X = torch.randn(
        3, 5, generator=torch.Generator().manual_seed(1), dtype=torch.float64
    )
    W = {
        k: getattr(model.blocks[0], k).detach()
        for k in ("W_Q", "W_K", "W_V", "W_1", "W_2")
    }
    radii = {k: spec(w) + 0.1 for k, w in W.items()}
    norms0, H = bounds.block_norms0(X, W, beta=0.7, tau=1.2)
    assert set(norms0) == set(bounds.BLOCK_STEPS) and math.isclose(
        norms0["H"], spec(H), rel_tol=1e-12
    )
    assert math.isclose(
        norms0["P"],
        spec(torch.softmax(X @ W["W_Q"] @ W["W_K"].T @ X.T / 1.2, -1)),
        rel_tol=1e-12,
    )
    Z = attention(X, W["W_Q"], W["W_K"], W["W_V"], 1.2) + 0.7 * X
    for key, M in (
        ("Z", Z),
        ("ZW1", Z @ W["W_1"]),
        ("U", torch.tanh(Z @ W["W_1"])),
        ("FFN", torch.tanh(Z @ W["W_1"]) @ W["W_2"]),
        ("XK", X @ W["W_K"]),
    ):
        assert math.isclose(norms0[key], spec(M), rel_tol=1e-12), key
    x = bounds.jet_const(spec(X), (3, 5), 10)
    kw = dict(d=5, d_qk=2, d_F=3, beta=0.7, tau=1.2)
    first = bounds.jet_block(x, radii, 0, 10, norms0=norms0, r=0.1, **kw)
    second = bounds.jet_block(x, radii, 5, 10, norms0=norms0, r=0.1, **kw)
    np.testing.assert_array_equal(first.g[5:], 0.0)
    np.testing.assert_array_equal(
        second.g[5:], first.g[:5]
    )  # the same block, five places on
    np.testing.assert_array_equal(second.Hq[5:, 5:], first.Hq[:5, :5])
    assert second.value == first.value and second.shape == (3, 5)
    # without the norms at theta_0 the rules alone bound the values: as with a radius so
    # large that no tightening helps; without r the ball has radius 0
    loose = bounds.jet_block(x, radii, 0, 10, **kw)
    huge = bounds.jet_block(x, radii, 0, 10, norms0=norms0, r=1e12, **kw)
    assert loose.value == huge.value > first.value and np.array_equal(loose.g, huge.g)
    at0 = bounds.jet_block(x, radii, 0, 10, norms0=norms0, **kw)
    assert (
        at0.value
        == bounds.jet_block(x, radii, 0, 10, norms0=norms0, r=0.0, **kw).value
        == norms0["H"]
    )


@MANY
@given(
    st.floats(0, 10),
    st.floats(0, 10),
    st.floats(0, 10),
    st.floats(0, 1),
    st.floats(0, 1),
)
def test_output_second_bound_sos(G_H, K_H, R_U, a, b):
    # K_H R_U a^2 + 2 G_H a b <= K_H R_U + G_H whenever a^2 + b^2 <= 1
    nrm = math.hypot(a, b)
    if nrm > 1:
        a, b = a / nrm, b / nrm
    assert (
        K_H * R_U * a * a + 2 * G_H * a * b
        <= bounds.output_second_bound(G_H, K_H, R_U) * (1 + 1e-12) + 1e-12
    )


def test_constants_match_their_formulas():
    # literal values of eqs. lip-attn, lip-ffn, lip-out, lip-G, lip-K, lip-smooth
    assert bounds.attention_lipschitz_WQ(2.0, 3.0, 5.0, 7.0) == 0.5 * 8 * 3 * 5 / 7
    assert bounds.attention_lipschitz_WK(2.0, 3.0, 5.0, 7.0) == 0.5 * 8 * 3 * 5 / 7
    assert bounds.attention_lipschitz_WV(4, 3.0) == 6.0
    assert (
        bounds.ffn_lipschitz_W1(2.0, 3.0) == 6.0
        and bounds.ffn_lipschitz_W1(2.0, 3.0, act_first=0.5) == 3.0
    )
    assert bounds.ffn_lipschitz_W2(0.5, 3.0, 9) == 1.5  # L ||Z||_F R_1 < sqrt(n d_F)
    assert bounds.ffn_lipschitz_W2(5.0, 3.0, 9) == 3.0  # sqrt(n d_F) = 3 is smaller
    assert bounds.ffn_lipschitz_W2(5.0, 3.0, 9, act_sup=2.0) == 6.0
    assert bounds.ffn_lipschitz_W2(0.5, 3.0, 9, act_first=0.5) == 0.75
    assert (
        bounds.ffn_lipschitz_Z(2.0, 3.0) == 6.0
        and bounds.ffn_lipschitz_Z(2.0, 3.0, act_first=0.5) == 3.0
    )
    assert (
        bounds.output_lipschitz_WU(2.5) == 2.5 and bounds.output_lipschitz_H(3.5) == 3.5
    )
    assert bounds.output_gradient_bound(3.0, 2.0, 2.0) == 5.0  # sqrt(9 + 4 * 4)
    assert bounds.output_second_bound(2.0, 3.0, 5.0) == 17.0  # K_H R_U + G_H
    assert bounds.smoothness_constant(2.0, 3.0, 8.0, 0.5) == 4 + 3 * (4 + 1)
    assert bounds.row_stochastic_norm_bound(9) == 3.0
    assert (bounds.softmax_jacobian_bound(), bounds.softmax_second_bound()) == (
        0.5,
        1.0,
    )
    assert (bounds.tanh_first_bound(), bounds.tanh_second_bound()) == (
        1.0,
        4 / (3 * 3**0.5),
    )


def test_bad_inputs_are_named():
    with pytest.raises(ValueError, match="tau.*positive.*0.0"):
        bounds.attention_lipschitz_WQ(1.0, 1.0, 1.0, 0.0)
    with pytest.raises(ValueError, match=r"p .*1-D.*\(2, 2\)"):
        bounds.softmax_jacobian(torch.ones(2, 2))
    with pytest.raises(ValueError, match=r"same length.*\(2,\) and \(3,\)"):
        bounds.softmax_second_derivative(torch.ones(2), torch.ones(3))
    with pytest.raises(ValueError, match="same length"):
        bounds.softmax_second_derivative(torch.ones(2, 2), torch.ones(2, 2))
    with pytest.raises(ValueError, match="n must be a positive integer.*0"):
        bounds.row_stochastic_norm_bound(0)
    for bad in (math.nan, math.inf, -1e-9, "1"):
        with pytest.raises(ValueError, match="x_row_max.*non-negative"):
            bounds.attention_lipschitz_WV(2, bad)
    jet = bounds.jet_const(1.0, (2, 2), 1)
    for call, name in (
        (lambda: bounds.attention_lipschitz_WQ(-1.0, 1.0, 1.0, 1.0), "x_norm"),
        (lambda: bounds.attention_lipschitz_WQ(1.0, -1.0, 1.0, 1.0), "R_K"),
        (lambda: bounds.attention_lipschitz_WQ(1.0, 1.0, -1.0, 1.0), "R_V"),
        (lambda: bounds.ffn_lipschitz_W1(-1.0, 1.0), "z_norm"),
        (lambda: bounds.ffn_lipschitz_W1(1.0, -1.0), "R_2"),
        (lambda: bounds.ffn_lipschitz_W1(1.0, 1.0, act_first=-1.0), "act_first"),
        (lambda: bounds.ffn_lipschitz_W2(-1.0, 1.0, 4), "z_fro"),
        (lambda: bounds.ffn_lipschitz_W2(1.0, -1.0, 4), "R_1"),
        (lambda: bounds.ffn_lipschitz_Z(-1.0, 1.0), "R_1"),
        (lambda: bounds.ffn_lipschitz_Z(1.0, -1.0), "R_2"),
        (lambda: bounds.output_lipschitz_WU(-1.0), "h_norm"),
        (lambda: bounds.output_lipschitz_H(-1.0), "R_U"),
        (lambda: bounds.output_gradient_bound(-1.0, 1.0, 1.0), "H_max"),
        (lambda: bounds.output_gradient_bound(1.0, -1.0, 1.0), "G_H"),
        (lambda: bounds.output_gradient_bound(1.0, 1.0, -1.0), "R_U"),
        (lambda: bounds.output_second_bound(-1.0, 1.0, 1.0), "G_H"),
        (lambda: bounds.output_second_bound(1.0, -1.0, 1.0), "K_H"),
        (lambda: bounds.output_second_bound(1.0, 1.0, -1.0), "R_U"),
        (lambda: bounds.smoothness_constant(-1.0, 1.0, 1.0, 1.0), "G"),
        (lambda: bounds.smoothness_constant(1.0, -1.0, 1.0, 1.0), "K"),
        (lambda: bounds.smoothness_constant(1.0, 1.0, -1.0, 1.0), "phi0"),
        (lambda: bounds.smoothness_constant(1.0, 1.0, 1.0, -1.0), "r"),
        (lambda: bounds.jet_tighten(jet, -1.0, 0.1), "norm0"),
        (lambda: bounds.jet_tighten(jet, 1.0, -0.1), "r"),
    ):
        with pytest.raises(ValueError, match=f"^{name} .*non-negative"):
            call()
    a, b = bounds.jet_const(1.0, (2, 3), 1), bounds.jet_const(1.0, (2, 3), 1)
    with pytest.raises(ValueError, match=r"\(2, 3\) and \(2, 3\) do not chain"):
        bounds.jet_matmul(a, b)
    with pytest.raises(ValueError, match=r"\(2, 3\) and \(3, 2\) differ"):
        bounds.jet_add(a, bounds.jet_transpose(b))


# ----------------------------------------------------------------------- composed: H
# and Phi on the ball
@SOME
@given(
    st.integers(0, 10**6),
    st.integers(1, 2),
    st.sampled_from([0.0, 0.5, 1.0]),
    st.sampled_from([0.01, 0.1, 0.5]),
)
def test_composed_feature_and_smoothness_bounds(seed, L, beta, r):
    from rcutil.certificate import certificate, feature_bounds
    from rcutil.model import Transformer

    model = Transformer(6, 2, 5, 2, n_layers=L, tau=1.0, beta=beta, seed=seed % 1000)
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(2, 3, 6, generator=g, dtype=torch.float64) * 0.5
    Y = torch.randn(2, 3, 2, generator=g, dtype=torch.float64) * 0.1
    G_H, K_H, _ = feature_bounds(model, X, r)
    cert = certificate(model, X, Y, r=r)
    names = [k for k, _ in model.named_parameters()]
    theta0 = {k: p.detach().clone() for k, p in model.named_parameters()}
    # a random point of the ball and a random unit direction
    u = {
        k: torch.randn(p.shape, generator=g, dtype=torch.float64)
        for k, p in theta0.items()
    }
    un = math.sqrt(sum((t**2).sum().item() for t in u.values()))
    frac = torch.rand(1, generator=g).item()
    point = {k: theta0[k] + r * frac * u[k] / un for k in names}
    v = {
        k: torch.randn(p.shape, generator=g, dtype=torch.float64)
        for k, p in theta0.items()
    }
    vn = math.sqrt(sum((t**2).sum().item() for t in v.values()))
    v = {k: t / vn for k, t in v.items()}

    def H_and_F(params):
        out = torch.func.functional_call(model, params, (X,), {"return_all": True})
        return out.features, out.output

    (d1, dF), (d2, ddF) = _path_derivatives(H_and_F, point, v)
    assert d1.norm() <= G_H * (1 + 1e-10)
    assert d2.norm() <= K_H * (1 + 1e-10) + 1e-12
    # v^T Hess(Phi) v for Phi = ||F - Y||^2 / 2: ||F'||^2 + <F - Y, F''>
    F = H_and_F(point)[1]
    h = (dF**2).sum() + ((F - Y) * ddF).sum()
    assert abs(h.item()) <= cert.C * (1 + 1e-10)
