"""The Lipschitz chapter's acceptance checks and its claim, read from a stored
:class:`~rcutil.experiments.lipschitz.Result`."""

from __future__ import annotations

from ...checks import Check
from ...claims import Claim, check_verdict, reconstruction
from . import CONSTANTS, Result

#: Largest ratio accepted: 1 and the round-off of a difference taken at step 1e-6.
ROUND_OFF = 1e-6
#: Smallest ratio accepted on the instance built to attain a constant.
ATTAINED = 0.97
#: Each constant typeset, by the argument it is taken in: ``"W_Q"`` -> ``$L_{W_Q}$``.
LABEL = {name: f"$L_{{{name}}}$" for name in CONSTANTS}


def largest(result: Result) -> float:
    """The largest ratio over every constant and instance, attaining ones included."""
    return max(max(float(c.ratios.max()), c.attained) for c in result.constants)


def checks(result: Result) -> list[Check]:
    """The chapter's acceptance checks: no ratio above 1, each constant attained."""
    attained = {LABEL[c.name]: c.attained for c in result.constants}
    return [
        Check("largest ratio over every constant and instance", largest(result), "<=", 1 + ROUND_OFF),
        *[Check(f"{L}: ratio on its attaining instance", r, ">=", ATTAINED) for L, r in attained.items()],
    ]  # fmt: skip


def claims(result: Result) -> list[Claim]:
    """ "The layers are Lipschitz": no measured ratio exceeds its constant, on any
    random or attaining instance (one exact check per constant)."""
    worst = largest(result)
    over = {c.name: max(float(c.ratios.max()), c.attained) for c in result.constants}
    broken = [LABEL[name] for name, r in over.items() if r > 1 + ROUND_OFF]
    n = result.settings.n_instances
    return [
        Claim(
            "lemma-lipschitz",
            "Lemma: Lipschitz constants of the layers",
            "attention, FFN and output map are Lipschitz in their weights on a bounded "
            "region, with the softmax Jacobian bounded",
            "softmax Jacobian norm at most 1/2 (a sum of squares, checked in SymPy); "
            f"over {n:,} random instances and one attaining instance per constant, the "
            f"largest finite-difference ratio over its constant is {worst:.4f}",
            check_verdict([r <= 1 + ROUND_OFF for r in over.values()]),
            (
                f"every one of the {len(over)} constants bounds its differences"
                if not broken
                else "a measured difference exceeds its constant: " + ", ".join(broken)
            ),
            rule=f"no ratio of a measured difference to its constant exceeds 1 (up to "
            f"{ROUND_OFF:g} of round-off), for every constant and instance",
            setting=reconstruction(
                "constants derived here",
                r"activation $\tanh$",
                "a ball of weights of the book's choosing",
            ),
        )
    ]
