"""rcutil.linalg: singular values of one matrix, of a batch stacked into the theory's
(N n) x k matrix, or per matrix, and the quantities made of them."""

import math

import torch

from rcutil.linalg import (
    condition_number,
    effective_rank,
    sigma_max,
    sigma_min,
    singular_values,
    stable_rank,
    stacked_rows,
)


def test_known_matrices():
    M = torch.diag(torch.tensor([3.0, 2.0, 1.0], dtype=torch.float64))
    assert sigma_max(M) == 3 and sigma_min(M) == 1 and condition_number(M) == 3
    assert math.isclose(stable_rank(M).item(), 14 / 9, rel_tol=1e-12)
    assert math.isclose(
        effective_rank(torch.eye(4, dtype=torch.float64)).item(), 4, rel_tol=1e-12
    )
    rank_one = torch.outer(torch.arange(1.0, 4.0), torch.ones(3)).double()
    assert math.isclose(effective_rank(rank_one).item(), 1, abs_tol=1e-6)
    s = torch.tensor([4.0, 1.0], dtype=torch.float64)
    p = s / s.sum()
    want = math.exp(-(p * p.log()).sum().item())
    assert math.isclose(effective_rank(torch.diag(s)).item(), want, rel_tol=1e-12)
    assert math.isclose(condition_number(torch.diag(s)).item(), 4.0, rel_tol=1e-12)


def test_a_batch_is_stacked_or_taken_matrix_by_matrix():
    M = torch.diag(torch.tensor([3.0, 2.0, 1.0], dtype=torch.float64))
    batch = torch.stack([M, 2 * M])
    torch.testing.assert_close(stacked_rows(batch), torch.cat([M, 2 * M]))
    assert sigma_max(batch, stacked=False).tolist() == [3, 6]
    assert sigma_min(batch, stacked=False).tolist() == [1, 2]
    assert math.isclose(sigma_max(batch).item(), 45**0.5, rel_tol=1e-12)  # [M; 2M]
    assert math.isclose(sigma_min(batch).item(), 5**0.5, rel_tol=1e-12)
    assert singular_values(batch, stacked=False).shape == (2, 3)
    assert condition_number(batch, stacked=False).tolist() == [3, 3]
    per = stable_rank(batch, stacked=False)
    torch.testing.assert_close(per, torch.full((2,), 14 / 9, dtype=torch.float64))
    assert singular_values(M.requires_grad_()).requires_grad is False  # detached
