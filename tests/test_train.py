import copy

import numpy as np
import pytest
import torch

from rcutil.model import Transformer
from rcutil.train import (
    TrainingDiverged,
    descend,
    gradient_descent,
    stack,
)


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
    with pytest.raises(ValueError, match=r"Y \(the targets\) contains inf") as err:
        gradient_descent(m, X, Y, mu=0.1, steps=1)
    assert "(0, 0, 0)" in str(err.value) and "clean it" in str(err.value)


def test_a_partly_frozen_model_trains_only_what_requires_gradients():
    m, X, Y = problem(4)
    m.output.W_U.requires_grad_(False)
    W_U, before = m.W_U.detach().clone(), m.blocks[0].W_1.detach().clone()
    free = [p for p in m.parameters() if p.requires_grad]
    grads = torch.autograd.grad(m.loss(X, Y), free)
    h = gradient_descent(m, X, Y, mu=0.01, steps=1)
    assert torch.equal(m.W_U, W_U)
    torch.testing.assert_close(m.blocks[0].W_1.detach(), before - 0.01 * grads[3])
    norm = torch.sqrt(sum((g**2).sum() for g in grads))
    assert h.grad_norm[0] == pytest.approx(norm.item(), rel=1e-12)


def test_tol_stops_at_the_first_checked_iterate_that_reaches_it():
    m, X, Y = problem(5)
    full = gradient_descent(copy.deepcopy(m), X, Y, mu=1e-2, steps=60)
    assert all(b < a for a, b in zip(full.loss, full.loss[1:]))
    tol = full.loss[37] / full.loss[0]
    h = gradient_descent(
        copy.deepcopy(m), X, Y, mu=1e-2, steps=60, tol=tol, check_every=10
    )
    assert len(h.loss) == 41  # reached at 37, read at 40
    assert h.loss == full.loss[:41]
    never = gradient_descent(m, X, Y, mu=1e-2, steps=60, tol=1e-300, check_every=10)
    assert never.loss == full.loss  # never reached: every step runs


def test_observe_sees_each_iterate_while_the_model_holds_it():
    m, X, Y = problem(6)
    seen = []

    def observe(out):
        seen.append(m.blocks[0].W_V.detach().clone())
        return {"F": out.output.abs().sum(), "H": out.features.abs().sum()}

    h = gradient_descent(m, X, Y, mu=1e-3, steps=3, observe=observe)
    again, X_, Y_ = problem(6)
    for t in range(4):
        torch.testing.assert_close(seen[t], again.blocks[0].W_V.detach())
        out = again(X_, return_all=True)
        assert h.observed["F"][t] == out.output.abs().sum().item()  # float64, exact
        assert h.observed["H"][t] == out.features.abs().sum().item()
        gradient_descent(again, X_, Y_, mu=1e-3, steps=1)


# --------------------------------------------------------------------- many models
BETAS = (0.0, 0.3, 0.75, 1.0)


def models(d_out=1, activation="tanh", betas=BETAS, seeds=(0, 1), n_layers=1):
    return [
        Transformer(
            6, 3, 7, d_out, beta=b, seed=s, activation=activation, n_layers=n_layers
        )
        for b in betas
        for s in seeds
    ]


def samples(N=5, n=4, d=6, d_out=1, seed=0, B=None):
    g = torch.Generator().manual_seed(seed)
    lead = () if B is None else (B,)
    X = torch.randn(*lead, N, n, d, generator=g, dtype=torch.float64)
    Y = torch.randn(*lead, N, n, d_out, generator=g, dtype=torch.float64)
    return X, Y


@pytest.mark.parametrize("activation", ["tanh", "gelu"])
@pytest.mark.parametrize("d_out, n_layers", [(1, 1), (3, 2)])
def test_the_stack_is_each_model_its_loss_and_its_gradient(activation, d_out, n_layers):
    ms = models(d_out, activation, n_layers=n_layers)
    X, Y = samples(d_out=d_out)
    s = stack(ms).trainable()
    loss, out = s.loss(X, Y)
    grads = torch.autograd.grad(loss.sum(), list(s.W.values()))
    for b, m in enumerate(ms):
        one = m(X, return_all=True)
        torch.testing.assert_close(loss[b], m.loss(X, Y), rtol=1e-12, atol=0)
        torch.testing.assert_close(out.Z[-1][b], one.Z[-1], rtol=1e-12, atol=1e-14)
        by_autograd = torch.autograd.grad(m.loss(X, Y), list(m.parameters()))
        for g, h in zip(grads, by_autograd):
            torch.testing.assert_close(g[b], h, rtol=1e-10, atol=1e-13)


def test_each_model_of_a_stack_trains_at_its_own_step_as_gradient_descent_does():
    ms = models(d_out=2)
    X, Y = samples(d_out=2)
    s = stack(ms).trainable()
    mu = np.linspace(1e-3, 4e-3, len(ms))
    hist = descend(lambda: s.loss(X, Y), s.W, mu=mu, steps=8)
    assert (hist.step_size == mu).all() and hist.loss.shape == (len(ms), 9)
    for b, model in enumerate(ms):
        h = gradient_descent(model, X, Y, mu=float(mu[b]), steps=8)
        np.testing.assert_allclose(hist.loss[b], h.loss, rtol=1e-11)
        np.testing.assert_allclose(hist.grad_norm[b], h.grad_norm, rtol=1e-10)
        np.testing.assert_allclose(hist.sigma_min[b], h.sigma_min, rtol=1e-9)
        np.testing.assert_allclose(hist.sigma_max[b], h.sigma_max, rtol=1e-11)
        torch.testing.assert_close(
            s.W["blocks.0.W_1"][b].detach(),
            model.blocks[0].W_1.detach(),
            rtol=1e-11,
            atol=1e-14,
        )


def test_models_with_samples_of_their_own_train_on_their_own():
    ms = models(betas=(0.0, 1.0), seeds=(0,))
    X, Y = samples(B=2)
    s = stack(ms).trainable()
    hist = descend(lambda: s.loss(X, Y), s.W, mu=2e-3, steps=5)
    for b, model in enumerate(ms):
        h = gradient_descent(model, X[b], Y[b], mu=2e-3, steps=5)
        np.testing.assert_allclose(hist.loss[b], h.loss, rtol=1e-11)


def test_observe_is_called_every_k_iterates_and_at_the_last_with_those_weights():
    ms = models()
    X, Y = samples()
    s = stack(ms).trainable()
    seen = []

    def observe(out, W):
        seen.append((out.Z[0].detach().clone(), W["blocks.0.W_1"].detach().clone()))
        return {"norm": torch.linalg.matrix_norm(out.Z[0]).sum(-1)}

    hist = descend(
        lambda: s.loss(X, Y), s.W, mu=1e-3, steps=7, observe=observe, observe_every=3
    )
    assert hist.observed_at == [0, 3, 6, 7]
    assert hist.observed["norm"].shape == (len(ms), 4)
    again = stack(ms).trainable()
    descend(lambda: again.loss(X, Y), again.W, mu=1e-3, steps=3)
    torch.testing.assert_close(seen[1][0], again.forward(X).Z[0].detach())
    torch.testing.assert_close(seen[1][1], again.W["blocks.0.W_1"].detach())


def test_the_stopping_rule_waits_for_every_model():
    ms = models(betas=(0.0, 1.0), seeds=(0,))
    X, Y = samples()
    s = stack(ms).trainable()
    full = descend(lambda: s.loss(X, Y), s.W, mu=5e-3, steps=40)
    ratio = full.loss[:, 20] / full.loss[:, 0]
    s = stack(ms).trainable()
    tol = ratio.max()  # the slower model reaches it at step 20
    h = descend(lambda: s.loss(X, Y), s.W, mu=5e-3, steps=40, tol=tol, check_every=4)
    assert h.loss.shape == (2, 21)
    np.testing.assert_array_equal(h.loss, full.loss[:, :21])


def test_divergence_names_the_models_and_the_setting_to_lower():
    ms = models(betas=(0.0, 1.0), seeds=(0,))
    X, Y = samples()
    s = stack(ms).trainable()
    with pytest.raises(TrainingDiverged) as err, np.errstate(all="ignore"):
        descend(
            lambda: s.loss(X, 1e3 * Y),
            s.W,
            mu=[1e-3, 1e3],
            steps=50,
            setting="mu_factor",
        )
    msg = str(err.value)
    assert "models [1]" in msg and "lower mu_factor" in msg and "1e+03" in msg


@pytest.mark.parametrize(
    "mu, match",
    [
        (0.0, "mu of model 0"),
        ([1e-3], "one per model"),
        (float("nan"), "mu of model 0"),
        (None, "either step sizes mu or an update rule"),
    ],
)
def test_bad_steps_are_refused(mu, match):
    X, Y = samples()
    s = stack(models(betas=(0.0,))).trainable()
    with pytest.raises(ValueError, match=match):
        descend(lambda: s.loss(X, Y), s.W, mu=mu, steps=1)


def adam(params, lr, steps):
    """torch's Adam at the rate ``lr`` falling to 0 on a cosine over ``steps``, and its
    step: the optimizer's, then the schedule's."""
    opt = torch.optim.Adam(params, lr=lr)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(opt, steps)

    def step():
        opt.step()
        schedule.step()

    return opt, step


def adam_descent(s, X, Y, *, lr, steps, setting="lr"):
    """:func:`descend` of the stack ``s`` with Adam's update in place of GD's."""
    s = s.trainable()
    _, step = adam(list(s.W.values()), lr, steps)

    def update(grads):
        for k, w in s.W.items():
            w.grad = grads[k]
        step()

    return descend(
        lambda: s.loss(X, Y),
        s.W,
        steps=steps,
        update=update,
        spectra=False,
        setting=setting,
        step=f"Adam at lr {lr:g}",
    )


def test_an_update_rule_on_the_stack_is_that_rule_for_each_model():
    ms = models(betas=(0.0, 1.0), seeds=(0,))
    X, Y = samples()
    loss = adam_descent(stack(ms), X, Y, lr=1e-2, steps=6).loss
    for b, model in enumerate(ms):
        opt, step = adam(model.parameters(), 1e-2, 6)
        for t in range(7):
            value = model.loss(X, Y)
            np.testing.assert_allclose(loss[b, t], value.item(), rtol=1e-10)
            opt.zero_grad()
            value.backward()
            step()


def test_an_update_rule_that_diverges_names_its_step_and_setting():
    X, Y = samples()
    s = stack(models(betas=(1.0,), seeds=(0,)))
    with pytest.raises(TrainingDiverged, match=r"Adam at lr 1e\+30.*lower adam_lr"):
        with np.errstate(all="ignore"):
            adam_descent(s, X, 1e200 * Y, lr=1e30, steps=5, setting="adam_lr")


def test_stack_keeps_each_models_beta_and_weights_and_refuses_a_mix():
    ms = models()
    s = stack(ms)
    assert s.beta.tolist() == [m.beta for m in ms]
    assert s.activation.name == "tanh" and s.tau == 3**0.5
    torch.testing.assert_close(s.W["blocks.0.W_V"][3], ms[3].blocks[0].W_V.detach())
    one = s.select([3])
    assert one.beta.tolist() == [ms[3].beta] and one.W["output.W_U"].shape[0] == 1
    with pytest.raises(ValueError, match="share sizes"):
        stack([Transformer(6, 3, 7, 1), Transformer(6, 3, 8, 1)])
    with pytest.raises(ValueError, match="share sizes, depth"):
        stack([Transformer(6, 3, 7, 1), Transformer(6, 3, 7, 1, n_layers=2)])
    with pytest.raises(ValueError, match="no models"):
        stack([])
