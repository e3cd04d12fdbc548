"""The closed-form loss and gradient of a stack of one-layer models (eqs. model-forward
and model-grad) against automatic differentiation of rcutil.model.block, and batched
gradient descent and Adam against one model at a time."""

import numpy as np
import pytest
import torch

from rcutil.model import (
    Stack,
    Transformer,
    autograd_loss_and_gradient,
    batched_loss,
    loss_and_gradient,
    stack,
)
from rcutil.train import (
    TrainingDiverged,
    batched_adam,
    batched_gradient_descent,
    gradient_descent,
)

BETAS = (0.0, 0.3, 0.75, 1.0)


def problem(
    d_out=1, activation="tanh", betas=BETAS, seeds=(0, 1), N=5, n=4, d=6, seed=0
):
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(N, n, d, generator=g, dtype=torch.float64)
    Y = torch.randn(N, n, d_out, generator=g, dtype=torch.float64)
    models = [
        Transformer(d, 3, 7, d_out, beta=b, seed=s, activation=activation)
        for b in betas
        for s in seeds
    ]
    return models, stack(models), X, Y


def reference(model, X, Y):
    """Loss, gradient by name of WEIGHTS and Z of one model, by autograd of the
    model."""
    out = model(X, return_all=True)
    loss = 0.5 * ((out.output - Y) ** 2).sum()
    names = {
        "output.W_U": "W_U",
        **{f"blocks.0.{w}": w for w in ("W_Q", "W_K", "W_V", "W_1", "W_2")},
    }
    grads = torch.autograd.grad(loss, list(model.parameters()))
    by_name = {names[k]: g for (k, _), g in zip(model.named_parameters(), grads)}
    return loss.detach(), by_name, out.Z[0].detach().reshape(-1, X.shape[-1])


@pytest.mark.parametrize("activation", ["tanh", "gelu"])
@pytest.mark.parametrize("d_out", [1, 3])
@pytest.mark.parametrize(
    "chunk_bytes",
    [1, 20_000, 1 << 30],
    ids=["a-sample-per-chunk", "some-chunks", "one-chunk"],
)
def test_closed_form_is_autograd_of_each_model(activation, d_out, chunk_bytes):
    models, s, X, Y = problem(d_out, activation)
    got = loss_and_gradient(s, X, Y, chunk_bytes=chunk_bytes)
    for b, model in enumerate(models):
        loss, grad, Z = reference(model, X, Y)
        torch.testing.assert_close(got.loss[b], loss, rtol=1e-12, atol=0)
        torch.testing.assert_close(got.Z[b], Z, rtol=1e-12, atol=1e-14)
        for name, g in grad.items():
            torch.testing.assert_close(
                got.grad[name][b],
                g,
                rtol=1e-10,
                atol=1e-12 * float(g.abs().max()),
                msg=name,
            )


def test_autograd_twin_and_batched_loss_agree_with_the_closed_form():
    _, s, X, Y = problem(d_out=2, activation="gelu")
    a, b = loss_and_gradient(s, X, Y), autograd_loss_and_gradient(s, X, Y)
    torch.testing.assert_close(a.loss, b.loss, rtol=1e-12, atol=0)
    torch.testing.assert_close(a.Z, b.Z, rtol=1e-12, atol=1e-14)
    for k in a.grad:
        torch.testing.assert_close(a.grad[k], b.grad[k], rtol=1e-10, atol=1e-13, msg=k)
    loss, Z = batched_loss(s, X, Y)
    torch.testing.assert_close(loss, a.loss, rtol=1e-12, atol=0)
    assert Z.shape == (len(s.beta), *X.shape)


def test_stack_refuses_more_than_one_layer_and_names_autograd():
    deep = Transformer(6, 3, 7, 1, n_layers=2)
    with pytest.raises(ValueError, match=r"one layer.*n_layers = 2.*autograd"):
        stack([deep])


def test_stack_refuses_models_of_different_sizes_and_nothing():
    with pytest.raises(ValueError, match="share sizes"):
        stack([Transformer(6, 3, 7, 1), Transformer(6, 3, 8, 1)])
    with pytest.raises(ValueError, match="no models"):
        stack([])


def test_an_activation_without_derivative_is_refused_naming_autograd():
    _, s, X, Y = problem()
    plain = Transformer(6, 3, 7, 1, activation=lambda x: torch.sin(x))
    with pytest.raises(ValueError, match=r"no derivative.*autograd_loss_and_gradient"):
        loss_and_gradient(stack([plain]), X, Y)


def test_targets_of_another_width_are_refused():
    _, s, X, Y = problem(d_out=1)
    with pytest.raises(ValueError, match=r"Y has shape.*d_out"):
        loss_and_gradient(s, X, torch.cat([Y, Y], -1))


def test_stack_keeps_each_models_beta_and_weights():
    models, s, _, _ = problem()
    assert s.beta.tolist() == [m.beta for m in models]
    torch.testing.assert_close(s.W["W_V"][3], models[3].blocks[0].W_V.detach())
    one = s.select([3])
    assert one.beta.tolist() == [models[3].beta] and one.W["W_U"].shape[0] == 1


# --------------------------------------------------------------------------- training
def test_batched_gd_at_own_steps_is_gradient_descent_of_each_model():
    models, s, X, Y = problem(d_out=2)
    mu = np.linspace(1e-3, 4e-3, len(models))
    hist = batched_gradient_descent(s, X, Y, mu=mu, steps=8)
    for b, model in enumerate(models):
        h = gradient_descent(model, X, Y, mu=float(mu[b]), steps=8)
        np.testing.assert_allclose(hist.loss[b], h.loss, rtol=1e-11)
        np.testing.assert_allclose(hist.sigma_min[b], h.sigma_min, rtol=1e-9)
        np.testing.assert_allclose(hist.sigma_max[b], h.sigma_max, rtol=1e-11)
        torch.testing.assert_close(
            hist.final.W["W_1"][b], model.blocks[0].W_1.detach(), rtol=1e-11, atol=1e-14
        )
    assert (hist.step_size == mu).all()


def test_observe_is_called_every_k_iterates_and_at_the_last():
    _, s, X, Y = problem()
    seen = []

    def observe(Z, s):
        seen.append((Z.clone(), s.W["W_1"].clone()))
        return {"norm": torch.linalg.matrix_norm(Z)}

    hist = batched_gradient_descent(
        s, X, Y, mu=1e-3, steps=7, observe=observe, observe_every=3
    )
    assert hist.observed_at == [0, 3, 6, 7]
    assert hist.observed["norm"].shape == (len(s.beta), 4)
    again = batched_gradient_descent(s, X, Y, mu=1e-3, steps=3)
    torch.testing.assert_close(seen[1][0], loss_and_gradient(again.final, X, Y).Z)
    torch.testing.assert_close(seen[1][1], again.final.W["W_1"])  # the weights of t = 3


def test_divergence_names_the_models_and_the_setting_to_lower():
    _, s, X, Y = problem(betas=(0.0, 1.0), seeds=(0,))
    mu = [1e-3, 1e3]
    with pytest.raises(TrainingDiverged) as err, np.errstate(all="ignore"):
        batched_gradient_descent(s, X, 1e3 * Y, mu=mu, steps=50, setting="mu_factor")
    msg = str(err.value)
    assert "models [1]" in msg and "lower mu_factor" in msg


@pytest.mark.parametrize(
    "mu, match",
    [
        (0.0, "mu of model 0"),
        ([1e-3], "one per model"),
        (float("nan"), "mu of model 0"),
    ],
)
def test_bad_steps_are_refused(mu, match):
    _, s, X, Y = problem(betas=(0.0,), seeds=(0, 1))
    with pytest.raises(ValueError, match=match):
        batched_gradient_descent(s, X, Y, mu=mu, steps=1)


def test_batched_adam_is_adam_of_each_model():
    models, s, X, Y = problem(betas=(0.0, 1.0), seeds=(0,))
    loss = batched_adam(s, X, Y, lr=1e-2, steps=6)
    for b, model in enumerate(models):
        opt = torch.optim.Adam(model.parameters(), lr=1e-2)
        schedule = torch.optim.lr_scheduler.CosineAnnealingLR(opt, 6)
        for t in range(7):
            value = model.loss(X, Y)
            np.testing.assert_allclose(loss[b, t], value.item(), rtol=1e-10)
            opt.zero_grad()
            value.backward()
            opt.step()
            schedule.step()


def test_stack_type_is_a_named_tuple_of_what_the_models_share():
    _, s, _, _ = problem()
    assert isinstance(s, Stack) and s.activation.name == "tanh" and s.tau == 3**0.5
