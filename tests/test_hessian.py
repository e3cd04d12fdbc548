"""rcutil.hessian: the Lanczos and power iterations and the product builders, against
the dense Hessians and Jacobians of small problems (eigvalsh), problem by problem of a
batch."""

import math

import pytest
import torch

from rcutil import hessian

torch.set_num_threads(1)
B, ROWS, COLS = 4, 3, 2  # B models, each a ROWS x COLS and a COLS x 1 matrix


def batch_problem(seed=0):
    """``B`` independent two-layer least-squares problems with their weights stacked on
    a leading model axis: ``loss_b = 1/2 ||tanh(X W_b) V_b - y||^2``."""
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(5, ROWS, generator=g, dtype=torch.float64)
    y = torch.randn(5, 1, generator=g, dtype=torch.float64)
    W = torch.randn(B, ROWS, COLS, generator=g, dtype=torch.float64)
    V = torch.randn(B, COLS, 1, generator=g, dtype=torch.float64)

    def loss(W_b, V_b):
        return 0.5 * ((torch.tanh(X @ W_b) @ V_b - y) ** 2).sum()

    def dense(b):
        """The Hessian of model ``b`` in the order (W, V), flattened."""

        def flat(theta):
            k = ROWS * COLS
            return loss(theta[:k].view(ROWS, COLS), theta[k:].view(COLS, 1))

        return torch.func.hessian(flat)(torch.cat([W[b].reshape(-1), V[b].reshape(-1)]))

    return W, V, loss, dense


def batched_operator(W, V, loss):
    W, V = W.clone().requires_grad_(), V.clone().requires_grad_()
    total = sum(loss(W[b], V[b]) for b in range(B))
    return hessian.batched_hvp(total, [W, V])


def test_batched_products_are_each_models_own_hessian():
    W, V, loss, dense = batch_problem()
    op = batched_operator(W, V, loss)
    n = ROWS * COLS + COLS
    E = torch.randn(
        B, n, generator=torch.Generator().manual_seed(3), dtype=torch.float64
    )
    products = op(E)
    for b in range(B):
        torch.testing.assert_close(products[b], dense(b) @ E[b], rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize(
    "which, pick",
    [
        ("largest", lambda e: e[-1]),
        ("smallest", lambda e: e[0]),
        ("magnitude", lambda e: e[e.abs().argmax()]),
    ],
)
def test_lanczos_over_the_whole_space_is_exact_per_model(which, pick):
    W, V, loss, dense = batch_problem(1)
    n = ROWS * COLS + COLS
    start = hessian.random_unit((B, n), 4)
    values, vectors = hessian.lanczos(
        batched_operator(W, V, loss), start, iterations=n, which=which
    )
    for b in range(B):
        H = dense(b)
        want = pick(torch.linalg.eigvalsh(H))
        assert math.isclose(
            values[b].item(), want.item(), rel_tol=1e-9, abs_tol=1e-12
        ), b
        torch.testing.assert_close(
            H @ vectors[b], values[b] * vectors[b], rtol=0, atol=1e-8
        )
        assert math.isclose(vectors[b].norm().item(), 1.0, rel_tol=1e-12)


def test_fewer_lanczos_steps_give_lower_estimates_that_improve():
    W, V, loss, dense = batch_problem(2)
    op = batched_operator(W, V, loss)
    start = hessian.random_unit((B, ROWS * COLS + COLS), 5)
    top = torch.stack([torch.linalg.eigvalsh(dense(b))[-1] for b in range(B)])
    previous = torch.full((B,), -math.inf, dtype=torch.float64)
    for k in (1, 2, 4, 6):
        values, _ = hessian.lanczos(op, start, iterations=k)
        assert (values <= top + 1e-12).all() and (values >= previous - 1e-12).all(), k
        previous = values
    assert (top - previous <= 1e-3 * top.abs()).all()


def test_power_iteration_approaches_the_largest_magnitude_from_below():
    W, V, loss, dense = batch_problem(3)
    op = batched_operator(W, V, loss)
    start = hessian.random_unit((B, ROWS * COLS + COLS), 6)
    values, vectors = hessian.power_iteration(op, start, iterations=400)
    for b in range(B):
        e = torch.linalg.eigvalsh(dense(b))
        want = e[e.abs().argmax()]
        assert abs(values[b].item()) <= abs(want.item()) * (1 + 1e-12)
        assert math.isclose(values[b].item(), want.item(), rel_tol=1e-6), b
        assert math.isclose(vectors[b].norm().item(), 1.0, rel_tol=1e-12)


def test_flat_hessian_and_gram_products_match_dense_matrices():
    g = torch.Generator().manual_seed(7)
    A = torch.randn(4, 5, generator=g, dtype=torch.float64)
    theta = torch.randn(5, generator=g, dtype=torch.float64)

    def f(t):
        return torch.tanh(A @ t)

    def phi(t):
        return (f(t) ** 3).sum()

    H = torch.func.hessian(phi)(theta)
    J = torch.func.jacrev(f)(theta)
    E = torch.eye(5, dtype=torch.float64)
    torch.testing.assert_close(hessian.hvp(phi, theta)(E), H, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(
        hessian.gram(f, theta)(E), J.T @ J, rtol=1e-10, atol=1e-12
    )
    one = hessian.hvp(phi, theta)(E[:1])  # a single row
    torch.testing.assert_close(one, H[:1], rtol=1e-10, atol=1e-12)
    value, vector = hessian.lanczos(
        hessian.gram(f, theta), hessian.random_unit((5,), 0), iterations=5
    )
    assert vector.shape == (5,) and value.dim() == 0
    assert math.isclose(
        value.item(), torch.linalg.matrix_norm(J, ord=2).item() ** 2, rel_tol=1e-10
    )


def test_lanczos_stops_in_an_invariant_subspace():
    """Two eigenvalues, both negative, and a start inside their eigenspace: the Krylov
    space closes after two steps, and the largest Ritz value is -1, not a value of the
    closed directions (a spurious 0)."""
    D = torch.tensor([-1.0, -3.0, -2.0, -5.0], dtype=torch.float64)

    def op(V):
        return V * D

    start = torch.tensor(
        [[1.0, 1.0, 0.0, 0.0], [0.0, 0.0, 1.0, 0.0]], dtype=torch.float64
    )
    values, vectors = hessian.lanczos(op, start, iterations=4)
    torch.testing.assert_close(values, torch.tensor([-1.0, -2.0], dtype=torch.float64))
    torch.testing.assert_close(vectors.abs(), torch.eye(4, dtype=torch.float64)[[0, 2]])
    smallest, _ = hessian.lanczos(op, start, iterations=4, which="smallest")
    torch.testing.assert_close(
        smallest, torch.tensor([-3.0, -2.0], dtype=torch.float64)
    )


def test_random_starts_are_seeded_unit_rows():
    a, b = hessian.random_unit((3, 7), 11), hessian.random_unit((3, 7), 11)
    assert torch.equal(a, b) and not torch.equal(a, hessian.random_unit((3, 7), 12))
    torch.testing.assert_close(a.norm(dim=-1), torch.ones(3, dtype=torch.float64))
    like = torch.zeros(2, dtype=torch.float32)
    assert hessian.random_unit((4,), 0, like=like).dtype == torch.float32


def test_refusals_name_the_argument():
    op = hessian.hvp(lambda t: (t**2).sum(), torch.ones(3, dtype=torch.float64))
    start = torch.ones(3, dtype=torch.float64)
    with pytest.raises(ValueError, match="which.*magnitude"):
        hessian.lanczos(op, start, iterations=2, which="top")
    for bad in (0, 2.0, True):
        with pytest.raises(ValueError, match="iterations.*positive integer"):
            hessian.lanczos(op, start, iterations=bad)
        with pytest.raises(ValueError, match="iterations.*positive integer"):
            hessian.power_iteration(op, start, iterations=bad)
    with pytest.raises(ValueError, match=r"start.*\(B, n\)"):
        hessian.power_iteration(op, torch.ones(1, 1, 3), iterations=2)
    W = torch.ones(2, 3, requires_grad=True)
    V = torch.ones(3, 1, requires_grad=True)
    with pytest.raises(ValueError, match="leading model axis"):
        hessian.batched_hvp((W.sum() * V.sum()) ** 2, [W, V])


def test_a_zero_operator_leaves_the_start_and_gives_zero():
    start = torch.tensor([[3.0, 4.0], [0.0, 2.0]], dtype=torch.float64)
    values, vectors = hessian.power_iteration(torch.zeros_like, start, iterations=3)
    torch.testing.assert_close(values, torch.zeros(2, dtype=torch.float64))
    torch.testing.assert_close(
        vectors, torch.tensor([[0.6, 0.8], [0.0, 1.0]], dtype=torch.float64)
    )
    values, vectors = hessian.lanczos(torch.zeros_like, start, iterations=2)
    torch.testing.assert_close(values, torch.zeros(2, dtype=torch.float64))
    torch.testing.assert_close(
        vectors.abs(), torch.tensor([[0.6, 0.8], [0.0, 1.0]], dtype=torch.float64)
    )


def test_problems_of_very_different_scales_in_one_batch():
    """Each problem decides alone when its Krylov space closes: a problem 1e12 times
    larger than another, whose start lies in a two-dimensional eigenspace (in a rotated
    basis, so that round-off reaches every direction), stops after two steps, and the
    small one runs to the end."""
    Q, _ = torch.linalg.qr(
        torch.randn(
            4, 4, generator=torch.Generator().manual_seed(2), dtype=torch.float64
        )
    )
    big = (
        Q
        @ torch.diag(torch.tensor([-1e12, -3e12, -2e12, -5e12], dtype=torch.float64))
        @ Q.T
    )
    small = torch.diag(torch.tensor([1.0, 2.0, 3.0, 4.0], dtype=torch.float64))

    def op(V):
        return torch.stack([small @ V[0], big @ V[1]])

    start = torch.stack([torch.ones(4, dtype=torch.float64), Q[:, 0] + Q[:, 1]])
    for which, want in (("largest", [4.0, -1e12]), ("smallest", [1.0, -3e12])):
        values, _ = hessian.lanczos(op, start, iterations=4, which=which)
        torch.testing.assert_close(
            values, torch.tensor(want, dtype=torch.float64), rtol=1e-8, atol=0
        )


def test_power_iteration_on_one_vector_and_on_a_small_operator():
    D = torch.tensor([0.01, -0.03, 0.02], dtype=torch.float64)
    value, vector = hessian.power_iteration(
        lambda V: V * D, torch.ones(3, dtype=torch.float64), iterations=200
    )
    assert value.dim() == 0 and vector.shape == (3,)
    assert math.isclose(value.item(), -0.03, rel_tol=1e-9)
    assert math.isclose(vector.norm().item(), 1.0, rel_tol=1e-12)
    torch.testing.assert_close(
        vector.abs(), torch.tensor([0.0, 1.0, 0.0], dtype=torch.float64)
    )
