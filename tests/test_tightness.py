"""rcutil.tightness: the values the certificate's constants bound, measured at a point.

The norms of Jacobians and Hessians are exact on maps whose values are known; the search
for ``sup ||D^2 H[v, v]||`` reaches what a dense search over many starts finds, where
the value along the top direction of ``DH`` alone falls far short.
"""

import math

import pytest
import torch

from rcutil import tightness
from rcutil.model import Transformer

torch.set_num_threads(1)


def dense_second_sup(T: torch.Tensor, *, starts: int = 48, steps: int = 30) -> float:
    """``sup_v ||T[v, v]||`` over unit ``v`` for a dense ``(m, n, n)`` tensor:
    alternating maximisation with exact eigenvectors, from many seeded starts (written
    here, with dense linear algebra, apart from the module)."""
    g = torch.Generator().manual_seed(0)
    V = torch.randn(starts, T.shape[1], generator=g, dtype=torch.float64)
    V = V / V.norm(dim=-1, keepdim=True)
    best = torch.zeros(starts, dtype=torch.float64)
    for _ in range(steps):
        D = torch.einsum("mij,si,sj->sm", T, V, V)
        norm = D.norm(dim=-1)
        best = torch.maximum(best, norm)
        M = torch.einsum("sm,mij->sij", D / norm.clamp_min(1e-300)[:, None], T)
        e, Q = torch.linalg.eigh(M)
        V = Q[torch.arange(starts), :, e.abs().argmax(-1)]
    return best.max().item()


def test_jacobian_and_hessian_norms_of_known_maps():
    # f(theta) = A theta: ||Df|| = sigma_max(A); Phi = theta^T S theta / 2 has Hessian
    # S, whose eigenvalue of largest magnitude is negative here and keeps its sign
    A = torch.tensor([[3.0, 1.0, 0.0], [0.0, 1.0, 0.5]], dtype=torch.float64)
    theta = torch.tensor([0.2, -0.1, 0.4], dtype=torch.float64)
    sigma, v = tightness.jacobian_norm(lambda t: A @ t, theta, iterations=3)
    assert math.isclose(sigma, torch.linalg.matrix_norm(A, ord=2).item(), rel_tol=1e-10)
    torch.testing.assert_close((A.T @ A) @ v, sigma**2 * v)
    S = torch.diag(torch.tensor([2.0, -4.0, 1.0], dtype=torch.float64))
    lam, v = tightness.hessian_norm(lambda t: 0.5 * t @ S @ t, theta, iterations=3)
    assert math.isclose(lam, -4.0, rel_tol=1e-10)
    torch.testing.assert_close(
        v.abs(), torch.tensor([0.0, 1.0, 0.0], dtype=torch.float64)
    )
    small, _ = tightness.jacobian_norm(lambda t: 0.1 * A @ t, theta, iterations=3)
    assert math.isclose(small, 0.1 * sigma, rel_tol=1e-10)  # below 1 too


def test_second_derivative_along_a_direction():
    # f(t) = (t_0^2, t_0 t_1, sin t_2):
    # D^2 f[v, v] = (2 v_0^2, 2 v_0 v_1, -sin(t_2) v_2^2)
    theta = torch.tensor([0.3, -0.2, 0.7], dtype=torch.float64)
    v = torch.tensor([0.6, 0.0, 0.8], dtype=torch.float64)
    along = tightness.second_derivative(
        lambda t: torch.stack([t[0] ** 2, t[0] * t[1], torch.sin(t[2])]), theta
    )
    want = torch.tensor([2 * 0.36, 0.0, -math.sin(0.7) * 0.64], dtype=torch.float64)
    torch.testing.assert_close(along(v), want)


def test_the_search_leaves_a_start_without_curvature_to_the_other_starts():
    # f = (10 t_0, t_1^2 + t_2^2): the top direction of Df is e_0, where D^2 f = 0; the
    # supremum 2 lies in the directions orthogonal to it
    def f(t):
        return torch.stack([10 * t[0], t[1] ** 2 + t[2] ** 2])

    theta = torch.zeros(3, dtype=torch.float64)
    starts = torch.tensor([[1.0, 0.0, 0.0], [0.5, 0.5, -0.2]], dtype=torch.float64)
    best, first = tightness.top_second(f, theta, starts, steps=3)
    assert best[0].item() == first[0].item() == 0.0
    assert math.isclose(best[1].item(), 2.0, rel_tol=1e-12) and first[1] < best[1]
    unit = starts[1] / starts[1].norm()  # a start counts as unit
    assert math.isclose(
        first[1].item(), 2 * (unit[1] ** 2 + unit[2] ** 2).item(), rel_tol=1e-12
    )


def test_the_search_follows_curvature_of_either_sign():
    # f = t_0^2 - 3 t_1^2: D^2 f[v, v] = 2 v_0^2 - 6 v_1^2, largest in size, 6, along
    # e_1, where the second derivative is negative; the start is near e_0
    def f(t):
        return (t[0] ** 2 - 3 * t[1] ** 2).reshape(1)

    start = torch.tensor([[1.0, 0.1]], dtype=torch.float64)
    best, first = tightness.top_second(
        f, torch.zeros(2, dtype=torch.float64), start, steps=2
    )
    assert first.item() < 2 and math.isclose(best.item(), 6.0, rel_tol=1e-12)


def tiny(seed):
    model = Transformer(3, 1, 2, 1, tau=1.0, seed=seed)
    X = torch.randn(
        1, 2, 3, generator=torch.Generator().manual_seed(10 + seed), dtype=torch.float64
    )
    return model, X, torch.zeros(1, 2, 1, dtype=torch.float64)


def no_curvature_on_top():
    """beta = 0, W_1 = 0: H = tanh(Z W_1) W_2, DH[delta] = Z delta_1 W_2, and along the
    top direction (pure delta_1) D^2 H = tanh''(0) (Z delta_1)^2 W_2 = 0."""
    model = Transformer(3, 2, 2, 1, tau=1.0, beta=0.0, seed=7)
    with torch.no_grad():
        model.blocks[0].W_1.zero_()
    X = torch.randn(
        1, 2, 3, generator=torch.Generator().manual_seed(8), dtype=torch.float64
    )
    return model, X, torch.zeros(1, 2, 1, dtype=torch.float64)


@pytest.mark.parametrize(
    "make",
    [lambda: tiny(0), lambda: tiny(1), no_curvature_on_top],
    ids=["tiny 0", "tiny 1", "no curvature on top"],
)
def test_measured_K_H_reaches_the_supremum_of_a_dense_search(make):
    model, X, Y = make()
    theta, H_of, _ = tightness.flat_maps(model, X, Y)
    reference = dense_second_sup(torch.func.hessian(H_of)(theta))
    K = tightness.measure(
        model, X, Y, {"G_H": 1.0, "K_H": 1.0, "C": 1.0}, iterations=30
    )["K_H"]
    assert math.isclose(K["true"], reference, rel_tol=1e-6), (K, reference)
    assert K["along_top_direction"] < 0.6 * K["true"]  # the top direction falls short


def test_measure_reports_value_bound_and_ratio():
    model, X, Y = tiny(2)
    bounds = {"G_H": 10.0, "K_H": 100.0, "C": 0.0}
    m = tightness.measure(model, X, Y, bounds, iterations=12, starts=3)
    assert set(m) == {"G_H", "K_H", "C"}
    for key in ("G_H", "K_H"):
        assert m[key]["bound"] == bounds[key]
        assert m[key]["ratio"] == m[key]["true"] / bounds[key] > 0
    assert m["C"]["ratio"] == math.inf
    assert m["C"]["true"] == abs(m["C"]["eigenvalue"]) > 0
    K = m["K_H"]
    assert len(K["per_start"]) == 3 and K["true"] == max(K["per_start"])
    assert K["along_top_direction"] <= K["per_start"][0]
    theta, H_of, Phi_of = tightness.flat_maps(model, X, Y)
    J = torch.func.jacrev(H_of)(theta)
    assert math.isclose(
        m["G_H"]["true"], torch.linalg.matrix_norm(J, ord=2).item(), rel_tol=1e-8
    )
    e = torch.linalg.eigvalsh(torch.func.hessian(Phi_of)(theta))
    assert math.isclose(m["C"]["eigenvalue"], e[e.abs().argmax()].item(), rel_tol=1e-8)
    _, v = tightness.jacobian_norm(H_of, theta, iterations=12)  # the top direction
    along = tightness.second_derivative(H_of, theta)(v).norm().item()
    assert math.isclose(K["along_top_direction"], along, rel_tol=1e-10)
    small = tightness.measure(model, X, Y, dict(bounds, C=0.5), iterations=2, starts=1)
    assert small["C"]["ratio"] == small["C"]["true"] / 0.5
    assert len(small["K_H"]["per_start"]) == 1  # the top direction alone
    for bad in (0, True, 1.5):
        with pytest.raises(ValueError, match="starts.*positive integer"):
            tightness.measure(model, X, Y, bounds, iterations=2, starts=bad)


def test_the_search_makes_a_move_per_three_lanczos_steps(monkeypatch):
    model, X, Y = tiny(2)
    moves = []
    original = tightness.top_second
    monkeypatch.setattr(
        tightness,
        "top_second",
        lambda *a, steps, **kw: moves.append(steps) or original(*a, steps=steps, **kw),
    )
    for iterations in (1, 3, 7):
        tightness.measure(
            model, X, Y, {"G_H": 1, "K_H": 1, "C": 1}, iterations=iterations, starts=2
        )
    assert moves == [math.ceil(i / tightness.SEARCH_LANCZOS_STEPS) for i in (1, 3, 7)]
    assert tightness.SEARCH_LANCZOS_STEPS == 3


def test_a_float32_model_is_measured_in_float32():
    model = Transformer(3, 1, 2, 1, tau=1.0, seed=0, dtype=torch.float32)
    X = torch.randn(1, 2, 3, generator=torch.Generator().manual_seed(10))
    m = tightness.measure(
        model, X, torch.zeros(1, 2, 1), {"G_H": 1, "K_H": 1, "C": 1}, iterations=6
    )
    model64, X64, Y64 = tiny(0)
    m64 = tightness.measure(
        model64, X64, Y64, {"G_H": 1, "K_H": 1, "C": 1}, iterations=6
    )
    for key in ("G_H", "C"):
        assert math.isclose(m[key]["true"], m64[key]["true"], rel_tol=1e-4), key
