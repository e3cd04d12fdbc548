"""The model chapter's acceptance checks and its claim, read from a stored
:class:`~rcutil.experiments.model.Result`."""

from __future__ import annotations

from ... import results
from ...checks import Check
from ...claims import Claim, check_verdict, reconstruction
from . import Result

#: Largest difference of the model and the paper's formula written out (float64).
FORMULA_TOLERANCE = 1e-12


def checks(result: Result) -> list[Check]:
    """The chapter's acceptance checks."""
    fd = result.finite_difference_rel_error
    at = {v.beta: v.max_abs_diff for v in result.variants}
    sigma = {b: results.pick(result.gd, beta=b).sigma_min[0] for b in (0.0, 1.0)}
    complete = sorted(fd) == sorted(result.shapes)
    gradcheck = all(result.gradcheck.values())
    rate = max(r.max_rate for r in result.gd)
    formula = "model against the formula written out, largest difference"
    return [
        Check("every parameter block has its gradient checked", complete, "==", True),
        Check("autograd against central differences, largest", max(fd.values()), "<=", 1e-6),
        Check("`torch.autograd.gradcheck` passes in every block", gradcheck, "==", True),
        *[Check(f"$\\beta = {b:g}$: {formula}", at[b], "<=", FORMULA_TOLERANCE) for b in (1.0, 0.0, 0.5)],
        Check("GD: largest one-step ratio $\\Phi_{t+1}/\\Phi_t$, every $\\beta$", rate, "<", 1.0),
        Check("$\\sigma_{\\min}(Z_0)$ at $\\beta = 1$ over $\\beta = 0$", sigma[1.0] / sigma[0.0], ">", 10.0),
    ]  # fmt: skip


def claims(result: Result) -> list[Claim]:
    """The claim "the model is the paper's": every acceptance check of the chapter
    holds (one exact check per row of :func:`checks`)."""
    fd = max(result.finite_difference_rel_error.values())
    diff = max(v.max_abs_diff for v in result.variants)
    table = checks(result)
    failed = [c.what for c in table if not c.ok]
    return [
        Claim(
            "model",
            "The model",
            r"$F(X) = (\mathrm{FFN}(\mathrm{Attn}(X) + X) + \mathrm{Attn}(X) + X)W_U$, "
            r"softmax attention, a Lipschitz FFN; a residual strength "
            r"$\beta\in[0, 1]$; the loss $\frac12\|F - Y\|_F^2$, plain GD",
            f"gradients match finite differences to {fd:.1e} (relative) in every "
            rf"block; $\beta = 1$ and $\beta = 0$ match the formulas written out to "
            f"{diff:.1e}",
            check_verdict([c.ok for c in table]),
            (
                f"all {len(table)} checks hold: the code computes the paper's equations"
                if not failed
                else "a check fails: " + "; ".join(failed)
            ),
            rule=f"every acceptance check of the chapter holds ({len(table)} checks)",
            setting=reconstruction(
                r"activation $\tanh$",
                r"temperature $\tau = \sqrt{d_{QK}}$",
                "the book's initialisation",
                r"where $\beta$ enters a deep model",
            ),
        )
    ]
