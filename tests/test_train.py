import pytest
import torch

from rcutil.model import Transformer
from rcutil.train import TrainingDiverged, gradient_descent


def problem(seed=0, beta=1.0):
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(3, 4, 6, generator=g, dtype=torch.float64)
    Y = torch.randn(3, 4, 2, generator=g, dtype=torch.float64)
    return Transformer(6, 3, 8, 2, beta=beta, seed=seed), X, Y


def test_small_steps_decrease_loss_and_record_everything():
    m, X, Y = problem()
    h = gradient_descent(m, X, Y, mu=1e-3, steps=25)
    assert len(h.loss) == len(h.sigma_min) == len(h.sigma_max) == len(h.grad_norm) == 26
    assert all(b < a for a, b in zip(h.loss, h.loss[1:]))
    assert all(r < 1 for r in h.rates())
    assert all(0 < lo <= hi for lo, hi in zip(h.sigma_min, h.sigma_max))


def test_records_match_independent_computation():
    m, X, Y = problem(1)
    h = gradient_descent(m, X, Y, mu=1e-3, steps=0)
    out = m(X, return_all=True)
    Z = out.Z[-1].reshape(-1, 6)
    s = torch.linalg.svdvals(Z)
    assert h.sigma_min[0] == pytest.approx(s[-1].item()) and h.sigma_max[
        0
    ] == pytest.approx(s[0].item())
    loss = 0.5 * ((out.output - Y) ** 2).sum()
    g = torch.autograd.grad(loss, list(m.parameters()))
    assert h.grad_norm[0] == pytest.approx(
        torch.sqrt(sum((x**2).sum() for x in g)).item()
    )


def test_one_step_is_theta_minus_mu_grad():
    m, X, Y = problem(2)
    before = [p.detach().clone() for p in m.parameters()]
    grads = torch.autograd.grad(m.loss(X, Y), list(m.parameters()))
    gradient_descent(m, X, Y, mu=0.01, steps=1)
    for p, p0, g in zip(m.parameters(), before, grads):
        torch.testing.assert_close(p.detach(), p0 - 0.01 * g)


def test_deterministic():
    a = gradient_descent(*problem(3), mu=1e-3, steps=10)
    b = gradient_descent(*problem(3), mu=1e-3, steps=10)
    assert a.loss == b.loss and a.sigma_min == b.sigma_min


def test_divergence_names_the_step_and_suggests_smaller_step():
    m, X, Y = problem()
    with pytest.raises(TrainingDiverged, match=r"diverged at step \d+.*smaller step"):
        gradient_descent(m, X, Y * 1e3, mu=1e3, steps=50)


@pytest.mark.parametrize(
    "mu, steps, match",
    [
        (0.0, 5, "mu"),
        (-1, 5, "mu"),
        (float("nan"), 5, "mu"),
        (0.1, -1, "steps"),
        (0.1, 2.0, "steps"),
    ],
)
def test_bad_arguments(mu, steps, match):
    m, X, Y = problem()
    with pytest.raises(ValueError, match=match):
        gradient_descent(m, X, Y, mu=mu, steps=steps)


def test_bad_targets():
    m, X, Y = problem()
    with pytest.raises(ValueError, match=r"Y has shape \(3, 4, 3\)"):
        gradient_descent(
            m, X, torch.zeros(3, 4, 3, dtype=torch.float64), mu=0.1, steps=1
        )
    Y[0, 0, 0] = float("inf")
    with pytest.raises(ValueError, match="Y contains NaN or inf"):
        gradient_descent(m, X, Y, mu=0.1, steps=1)
