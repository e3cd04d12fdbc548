"""The FFN's activation sigma as one record: the function and the bounds the Lipschitz
rules and the certificate need (chapter :ref:`lipschitz`, eq.
``lip-tanh``).

The model (:mod:`rcutil.model`), the derivative rules (:mod:`rcutil.bounds`), the
certificate (:mod:`rcutil.certificate`) and the experiments' settings all take an
activation from here, by record or by name, so that adding one is one entry of
:data:`ACTIVATIONS`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

Fn = Callable[[torch.Tensor], torch.Tensor]


@dataclass(frozen=True)
class Activation:
    """``sigma`` applied entrywise, with what the proofs use of it.

    ``first_bound`` and ``second_bound`` are ``sup |sigma'|`` and ``sup |sigma''|``;
    ``value_bound`` is ``sup |sigma|`` (``inf`` when unbounded). Every bound assumes
    ``sigma(0) = 0``, so that also ``|sigma(x)| <= first_bound |x|``. A record without
    bounds (``None``) runs in the model but cannot be certified.
    """

    name: str
    fn: Fn
    first_bound: float | None = None
    second_bound: float | None = None
    value_bound: float | None = None

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return self.fn(x)

    @property
    def certifiable(self) -> bool:
        """Whether the bounds of the Lipschitz rules are known for it."""
        return None not in (self.first_bound, self.second_bound, self.value_bound)


def _gelu(x: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.gelu(x)


#: tanh: ``|tanh'| <= 1`` (at 0), ``|tanh''| <= 4 / (3 sqrt 3)`` (where ``tanh x =
#: 1/sqrt 3``), ``|tanh| < 1`` (eq. ``lip-tanh``).
TANH = Activation("tanh", torch.tanh, 1.0, 4.0 / (3.0 * math.sqrt(3.0)), 1.0)
#: GELU (exact, ``x Phi(x)``): ``sup |sigma'| = Phi(sqrt 2) + sqrt 2 phi(sqrt 2)`` (at
#: ``x = sqrt 2``), ``sup |sigma''| = 2 phi(0)`` (``sigma'' = (2 - x^2) phi(x)``,
#: largest at 0), unbounded values.
GELU = Activation(
    "gelu",
    _gelu,
    0.5 * (1 + math.erf(1.0)) + math.sqrt(2) * math.exp(-1.0) / math.sqrt(2 * math.pi),
    2.0 / math.sqrt(2 * math.pi),
    math.inf,
)

#: Every activation by name.
ACTIVATIONS = {a.name: a for a in (TANH, GELU)}
#: Functions that are one of the records, so that ``activation=torch.tanh`` means
#: :data:`TANH`.
_SAME = {
    torch.tanh: TANH,
    torch.nn.functional.tanh: TANH,
    torch.Tensor.tanh: TANH,
    torch.nn.functional.gelu: GELU,
}


def get(activation) -> Activation:
    """The record of ``activation``: a record, a name of :data:`ACTIVATIONS`, one of
    their functions (``torch.tanh``), a ``torch.nn.Tanh``/``GELU`` module, or any other
    callable (a record without bounds, named after it)."""
    if isinstance(activation, Activation):
        return activation
    if isinstance(activation, str):
        if activation not in ACTIVATIONS:
            raise ValueError(
                f"unknown activation {activation!r}: choose one of "
                f"{', '.join(ACTIVATIONS)}"
            )
        return ACTIVATIONS[activation]
    if isinstance(activation, torch.nn.Tanh):
        return TANH
    if isinstance(activation, torch.nn.GELU) and activation.approximate == "none":
        return GELU
    if not callable(activation):
        raise ValueError(
            f"activation must be one of {', '.join(ACTIVATIONS)}, an "
            f"rcutil.activations.Activation or a callable, got {activation!r}"
        )
    try:
        return _SAME[activation]
    except (KeyError, TypeError):  # TypeError: an unhashable callable
        pass
    return Activation(getattr(activation, "__name__", repr(activation)), activation)
