"""Experiment results as types: every experiment's result is a dataclass derived from
:class:`Result`, read from and written to plain JSON (:meth:`Result.to_json`,
:meth:`Result.from_json`).

A sweep is a list of points, each a dataclass that holds its own axis values
(``beta``, ``layers``, ``residual``) as fields, in the order of the settings;
:func:`pick` finds one point by its axis values. Values per seed are lists (or
arrays) whose first axis runs over ``settings["seeds"]``. A field typed :data:`Finite`
(or ``list[Finite]``, :data:`FiniteArray`) holds finite numbers only: reading NaN or an
infinity there is an error, not a number.

Where results are stored and when a stored one is reused: :mod:`rcutil.store`.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from pathlib import Path
from typing import Annotated, Any, TypeVar

import numpy as np


class StoredResultError(ValueError):
    """A result cannot be used: truncated, emptied, not JSON, edited, of another form,
    or holding a value its type does not allow."""


class _FiniteMark:
    """The mark of :data:`Finite`: the value is a finite number."""

    def __repr__(self) -> str:
        return "finite"


FINITE = _FiniteMark()
#: A float that is finite: no NaN, no infinity.
Finite = Annotated[float, FINITE]
#: An array of finite numbers.
FiniteArray = Annotated[np.ndarray, FINITE]


R = TypeVar("R", bound="Result")


@dataclasses.dataclass
class Result:
    """Base of every experiment's result: ``settings`` (the profile's row, with
    ``profile``) and the fields of the subclass. Fields may be numbers, strings, lists,
    dicts, numpy arrays, other dataclasses, and lists or dicts of these."""

    settings: dict

    def to_json(self) -> dict:
        """The result as plain JSON types."""
        return to_jsonable(self)

    @classmethod
    def from_json(cls: type[R], data: Any) -> R:
        """The result back from :meth:`to_json`'s form; a missing or unknown field, or
        a non-finite number in a :data:`Finite` field, raises
        :class:`StoredResultError` naming it."""
        return from_json(cls, data)


def from_json(hint, value, where: str | None = None):
    """``value`` (plain JSON) as the type ``hint`` (a dataclass, a list or dict of
    them, an array, a number, ...); ``where`` names the value in errors."""
    return _from_json(hint, value, where or getattr(hint, "__name__", "the result"))


def _check_finite(value, where: str):
    values = np.asarray(value, dtype=float)
    if not np.isfinite(values).all():
        bad = values[~np.isfinite(values)].flat[0]
        raise StoredResultError(
            f"{where} holds {bad}, where only finite numbers belong: the file is "
            f"damaged or was edited; delete it to compute it again"
        )
    return value


def _from_json(hint, value, where: str):
    """``value`` (plain JSON) as the type ``hint``."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is Annotated:
        converted = _from_json(args[0], value, where)
        return _check_finite(converted, where) if FINITE in args[1:] else converted
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        (hint,) = [a for a in args if a is not type(None)] or [Any]
        return _from_json(hint, value, where)
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        if not isinstance(value, dict):
            raise StoredResultError(
                f"{where} should be an object, got {type(value).__name__}"
            )
        hints = typing.get_type_hints(hint, include_extras=True)
        fields = [f.name for f in dataclasses.fields(hint) if f.init]
        missing = [f for f in fields if f not in value]
        unknown = [k for k in value if k not in fields]
        if missing or unknown:
            raise StoredResultError(f"{where} lacks {missing} or has unknown {unknown}")
        return hint(
            **{f: _from_json(hints[f], value[f], f"{where}.{f}") for f in fields}
        )
    if hint is np.ndarray:
        return np.asarray(value, dtype=float)
    if origin in (list, tuple) and args:
        if not isinstance(value, list):
            raise StoredResultError(
                f"{where} should be a list, got {type(value).__name__}"
            )
        if origin is tuple and (len(args) != 2 or args[1] is not Ellipsis):
            return tuple(
                _from_json(a, v, f"{where}[{i}]")
                for i, (a, v) in enumerate(zip(args, value))
            )
        return origin(
            _from_json(args[0], v, f"{where}[{i}]") for i, v in enumerate(value)
        )
    if origin is dict and args:
        if not isinstance(value, dict):
            raise StoredResultError(
                f"{where} should be an object, got {type(value).__name__}"
            )
        return {k: _from_json(args[1], v, f"{where}[{k!r}]") for k, v in value.items()}
    if hint is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    return value


def pick(points, **axes):
    """The one point of a sweep whose fields equal ``axes`` (e.g. ``pick(runs,
    beta=0.5)``); a ``KeyError`` names the values that match none or several."""
    found = [p for p in points if all(getattr(p, k) == v for k, v in axes.items())]
    if len(found) != 1:
        raise KeyError(
            f"{len(found)} points of the sweep have {axes}, expected exactly one"
        )
    return found[0]


def to_jsonable(obj: Any) -> Any:
    """Turn results, tensors, numpy values, tuples and paths into plain JSON types (NaN
    and inf stay floats)."""
    import torch

    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {
            f.name: to_jsonable(getattr(obj, f.name)) for f in dataclasses.fields(obj)
        }
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(v) for v in obj]
    if isinstance(obj, torch.Tensor):
        return to_jsonable(obj.detach().cpu().tolist())
    if isinstance(obj, np.ndarray):
        return to_jsonable(obj.tolist())
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, Path):
        return str(obj)
    if isinstance(obj, float) and math.isnan(obj):
        return obj
    if isinstance(obj, (str, int, float, bool)) or obj is None:
        return obj
    if isinstance(obj, torch.dtype):
        return str(obj)
    if callable(obj):
        return getattr(obj, "__name__", repr(obj))
    raise TypeError(f"cannot store {type(obj).__name__} in a result file: {obj!r}")
