"""L-BFGS for a stack of one-layer models: each model as if alone, never uphill, and
as far as scipy's L-BFGS gets."""

import numpy as np
import scipy.optimize
import torch

from rcutil.lbfgs import batched_lbfgs
from rcutil.model import Transformer
from rcutil.train import stack


def problem(B=3, N=4, n=3, d=3, seed=0):
    """A stack of ``B`` small models (other seeds, other beta) and their data."""
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(N, n, d, generator=g, dtype=torch.float64)
    Y = torch.randn(N, n, 1, generator=g, dtype=torch.float64)
    models = [
        Transformer(d, 2, 4, 1, beta=b, seed=s)
        for s, b in zip(range(B), np.linspace(0, 1, B))
    ]
    return stack(models), X, Y


def test_every_model_of_the_stack_follows_its_own_run_alone():
    """The stack's iterates are, model by model, those of each model run alone: no
    model's line search or memory depends on another's."""
    s, X, Y = problem()
    together = batched_lbfgs(s, X, Y, iterations=40)
    for b in range(len(s.beta)):
        alone = batched_lbfgs(s.select([b]), X, Y, iterations=40)
        np.testing.assert_allclose(together.loss[b], alone.loss[0], rtol=1e-9)
        for k, w in together.final.W.items():
            torch.testing.assert_close(w[b], alone.final.W[k][0])


def test_the_loss_never_rises_and_the_gradient_vanishes():
    """On small models that can fit their data, the loss falls at every iteration to
    zero at working precision, and models that get there stop asking for
    evaluations."""
    s, X, Y = problem(seed=3)
    h = batched_lbfgs(s, X, Y, iterations=150)
    assert (np.diff(h.loss, axis=1) <= 0).all()
    assert (h.grad_norm[:, -1] < 1e-9 * h.grad_norm[:, 0]).all()
    assert (h.loss[:, -1] < 1e-20).all()
    final, _ = h.final.loss(X, Y)
    np.testing.assert_allclose(final.detach().numpy(), h.loss[:, -1], rtol=1e-9)
    assert 151 <= h.evaluations < 4 * 151


def test_it_gets_as_low_as_scipys_l_bfgs_from_the_same_start():
    """From the same weights, the loss after 150 iterations is at most what scipy's
    L-BFGS-B reaches with tight tolerances, and well below the start (the model at
    beta = 0 in a problem where scipy fits every model)."""
    s, X, Y = problem(B=1, seed=3)
    shapes = {k: w.shape for k, w in s.W.items()}

    def fg(x):
        W, at = {}, 0
        for k, shape in shapes.items():
            size = int(np.prod(shape))
            W[k] = torch.from_numpy(x[at : at + size].reshape(shape))
            at += size
        one = s._replace(W=W).trainable()
        loss, _ = one.loss(X, Y)
        grads = torch.autograd.grad(loss.sum(), list(one.W.values()))
        return float(loss[0]), np.concatenate([g.numpy().ravel() for g in grads])

    x0 = np.concatenate([w.numpy().ravel() for w in s.W.values()])
    options = dict(gtol=1e-12, ftol=1e-15, maxiter=5000)
    ref = scipy.optimize.minimize(fg, x0, jac=True, method="L-BFGS-B", options=options)
    assert ref.fun < 1e-10 * fg(x0)[0]  # scipy fits it
    ours = batched_lbfgs(s, X, Y, iterations=150)
    assert ours.loss[0, -1] <= ref.fun + 1e-12
