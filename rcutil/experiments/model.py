"""The checks of the chapter on the model, as numbers (``python -m rcutil model``).

* autograd gradients against central finite differences, per parameter block (float64);
* the residual-strength variant against the paper's formulas written out at beta = 1 and 0;
* a short full-batch GD run at a small step, for several beta, whose loss must fall at every step.
"""
from __future__ import annotations

from pathlib import Path

import torch

from ..claims import Claim, status
from ..model import Transformer, attention, beta_key, ffn, squared_loss
from ..train import gradient_descent

SETTINGS = {
    "ci": dict(N=4, n=6, d=8, d_qk=4, d_F=16, d_out=2, steps=60, mu=2e-3, betas=[0.0, 0.5, 1.0],
               seed=0, fd_eps=1e-6),
    "book": dict(N=8, n=8, d=16, d_qk=8, d_F=32, d_out=2, steps=300, mu=1e-3, betas=[0.0, 0.5, 1.0],
                 seed=0, fd_eps=1e-6),
    "paper": dict(N=16, n=16, d=64, d_qk=16, d_F=128, d_out=4, steps=1000, mu=2e-4,
                  betas=[0.0, 0.5, 1.0], seed=0, fd_eps=1e-6),
}


def make_problem(settings: dict, *, beta: float = 1.0, device="cpu", dtype=torch.float64):
    """A model and a regression problem ``(X, Y)`` of the sizes in ``settings``, all from its ``seed``."""
    gen = torch.Generator().manual_seed(settings["seed"])
    X = torch.randn(settings["N"], settings["n"], settings["d"], generator=gen, dtype=torch.float64)
    Y = torch.randn(settings["N"], settings["n"], settings["d_out"], generator=gen, dtype=torch.float64)
    model = Transformer(settings["d"], settings["d_qk"], settings["d_F"], settings["d_out"], beta=beta,
                        seed=settings["seed"], dtype=dtype, device=device)
    return model, X.to(device=device, dtype=dtype), Y.to(device=device, dtype=dtype)


def paper_formula(model: Transformer, X: torch.Tensor, beta: float) -> torch.Tensor:
    """The paper's single-layer formula written out term by term (no shared code path).

    ``beta = 1``: ``(FFN(Attn(X) + X) + Attn(X) + X) W_U``; ``beta = 0``: ``FFN(Attn(X)) W_U``;
    otherwise ``(FFN(Attn(X) + beta X) + beta (Attn(X) + beta X)) W_U``.
    """
    b = model.blocks[0]
    A = attention(X, b.W_Q, b.W_K, b.W_V, model.tau)
    if beta == 1.0:
        out = ffn(A + X, b.W_1, b.W_2, model.activation) + A + X
    elif beta == 0.0:
        out = ffn(A, b.W_1, b.W_2, model.activation)
    else:
        out = ffn(A + beta * X, b.W_1, b.W_2, model.activation) + beta * (A + beta * X)
    return out @ model.W_U


def finite_difference_errors(model: Transformer, X, Y, eps: float) -> dict[str, float]:
    """Per block: max |autograd - central difference| / max |autograd| of dPhi/dW over all entries."""
    loss = model.loss(X, Y)
    names = [n for n, _ in model.named_parameters()]
    grads = dict(zip(names, torch.autograd.grad(loss, list(model.parameters()))))
    errors = {}
    with torch.no_grad():
        for name, p in model.named_parameters():
            fd = torch.zeros_like(p)
            flat, fd_flat = p.view(-1), fd.view(-1)
            for i in range(flat.numel()):
                old = flat[i].item()
                flat[i] = old + eps
                up = model.loss(X, Y).item()
                flat[i] = old - eps
                down = model.loss(X, Y).item()
                flat[i] = old
                fd_flat[i] = (up - down) / (2 * eps)
            g = grads[name]
            errors[name] = ((g - fd).abs().max() / g.abs().max().clamp_min(1e-300)).item()
    return errors


def gradcheck_blocks(model: Transformer, X, Y, names=None) -> dict[str, bool]:
    """``torch.autograd.gradcheck`` of Phi as a function of each parameter block alone (of the
    blocks in ``names``, default all)."""
    out = {}
    for name, p in model.named_parameters():
        if names is not None and name not in names:
            continue
        def phi(W, name=name):
            params = {n: (W if n == name else q.detach()) for n, q in model.named_parameters()}
            return squared_loss(torch.func.functional_call(model, params, (X,)), Y)

        out[name] = bool(torch.autograd.gradcheck(phi, (p.detach().clone().requires_grad_(True),)))
    return out


def run(settings: dict, *, device: str = "cpu", progress: bool = True) -> dict:
    """All checks of the model chapter for the profile's sizes; returns a JSON-ready dict."""
    model, X, Y = make_problem(settings, device=device)

    fd_errors = finite_difference_errors(model, X, Y, settings["fd_eps"])
    gradcheck = gradcheck_blocks(model, X, Y)

    variant = {}
    with torch.no_grad():
        for beta in (1.0, 0.0, 0.5):
            diff = (model(X, beta=beta) - paper_formula(model, X, beta)).abs().max().item()
            variant[beta_key(beta)] = diff

    gd = {}
    for beta in settings["betas"]:
        m, X_, Y_ = make_problem(settings, beta=beta, device=device)
        hist = gradient_descent(m, X_, Y_, mu=settings["mu"], steps=settings["steps"], progress=progress,
                                desc=f"GD beta={beta:g}")
        gd[beta_key(beta)] = hist.to_dict() | {"max_rate": max(hist.rates())}
    return {
        "settings": settings,
        "seed": settings["seed"],
        "shapes": {k: list(v) for k, v in model.shapes().items()},
        "finite_difference_rel_error": fd_errors,
        "gradcheck": gradcheck,
        "variant_max_abs_diff": variant,
        "gd": gd,
    }


def claims(result: dict) -> list[Claim]:
    """"The model is the paper's": gradients match finite differences (relative error below
    1e-6, gradcheck passes) and the beta-variant matches the formulas written out (1e-12)."""
    fd = max(result["finite_difference_rel_error"].values())
    diff = max(result["variant_max_abs_diff"].values())
    ok = all(result["gradcheck"].values()) and fd < 1e-6 and diff < 1e-12
    return [Claim(
        "model", "The model",
        "F(X) = (FFN(Attn(X) + X) + Attn(X) + X) W_U, softmax attention, Lipschitz FFN; "
        "residual-strength variant with beta in [0, 1]; loss 1/2 ||F - Y||^2, plain GD",
        f"gradients match finite differences to {fd:.1e} (relative) in every block; beta = 1 and "
        f"beta = 0 match the formulas written out to {diff:.1e}",
        status(ok, deviation=True),
        "the equations are the paper's; activation (tanh), temperature (sqrt(d_QK)), "
        "initialisation and where beta enters a deep model are the book's choices")]


def plot_gd(result: dict, ax_loss, ax_sigma) -> None:
    """Loss and sigma_min(Z_t) of the GD runs, one curve per beta."""
    from ..plotting import colors

    for color, (beta, hist) in zip(colors(len(result["gd"])), result["gd"].items()):
        ax_loss.semilogy(hist["loss"], color=color, label=f"β = {float(beta):g}")
        ax_sigma.semilogy(hist["sigma_min"], color=color, label=f"β = {float(beta):g}")
    ax_loss.set(xlabel="GD step t", ylabel=r"loss $\Phi(\theta_t)$")
    ax_sigma.set(xlabel="GD step t", ylabel=r"$\sigma_{\min}(Z_t)$")
    ax_loss.legend()


def plot(result: dict, out_dir) -> list[Path]:
    import matplotlib.pyplot as plt

    from ..plotting import save, setup

    setup(svg=False)
    fig, (a, b) = plt.subplots(1, 2, figsize=(9, 3.4), layout="constrained")
    plot_gd(result, a, b)
    path = save(fig, Path(out_dir) / "model_gd.svg")
    plt.close(fig)
    return [path]
