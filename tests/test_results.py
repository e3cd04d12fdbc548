"""Typed results (rcutil.results): a result reads back as its types, a missing or
unknown field is named, and a field typed finite refuses NaN and infinities."""

import dataclasses
import json
import math

import numpy as np
import pytest

from rcutil import results
from rcutil.results import Finite, FiniteArray


@dataclasses.dataclass
class Point:
    beta: float
    loss: list[float]


@dataclasses.dataclass
class Sweep(results.Result):
    points: list[Point]
    by_name: dict[str, float]
    curve: np.ndarray
    note: str | None = None


def test_a_result_reads_back_as_its_types():
    r = Sweep(
        {"profile": "ci"},
        [Point(0.0, [3.0, 2.0]), Point(1.0, [3.0, 1.0])],
        {"a": 1.0},
        np.arange(3.0),
    )
    back = Sweep.from_json(json.loads(json.dumps(r.to_json())))
    assert isinstance(back.points[1], Point) and back.points[1].loss == [3.0, 1.0]
    assert isinstance(back.curve, np.ndarray) and back.curve.tolist() == [0.0, 1.0, 2.0]
    assert results.pick(back.points, beta=1.0) is back.points[1]
    with pytest.raises(KeyError, match="0 points"):
        results.pick(back.points, beta=0.5)


def test_a_result_with_a_missing_or_unknown_field_is_refused():
    good = Sweep({}, [Point(0.0, [1.0])], {}, np.zeros(1)).to_json()
    with pytest.raises(results.StoredResultError, match="points"):
        Sweep.from_json({k: v for k, v in good.items() if k != "points"})
    with pytest.raises(results.StoredResultError, match="extra"):
        Sweep.from_json({**good, "extra": 1})
    with pytest.raises(results.StoredResultError, match=r"points\[0\]"):
        Sweep.from_json({**good, "points": [{"beta": 0.0}]})


@dataclasses.dataclass
class Run:
    loss: list[Finite]
    best: Finite
    curve: FiniteArray
    accuracy: float = math.nan  # may be NaN: not typed finite


@dataclasses.dataclass
class Runs(results.Result):
    runs: list[Run]


def runs_json(**change):
    run = {"loss": [2.0, 1.0], "best": 1.0, "curve": [1.0, 0.5], "accuracy": math.nan}
    return {"settings": {}, "runs": [{**run, **change}]}


def test_finite_fields_read_back_and_an_untyped_nan_stays():
    back = Runs.from_json(json.loads(json.dumps(runs_json())))
    assert back.runs[0].loss == [2.0, 1.0] and back.runs[0].best == 1.0
    assert isinstance(back.runs[0].curve, np.ndarray)
    assert math.isnan(back.runs[0].accuracy)


@pytest.mark.parametrize(
    "field, value, where",
    [
        ("loss", [2.0, math.nan], r"runs\[0\]\.loss\[1\]"),
        ("best", math.inf, r"runs\[0\]\.best"),
        ("curve", [1.0, -math.inf], r"runs\[0\]\.curve"),
    ],
)
def test_a_non_finite_number_in_a_finite_field_is_refused(field, value, where):
    text = json.dumps(runs_json(**{field: value}))  # JSON as Python writes NaN
    with pytest.raises(results.StoredResultError, match=where) as err:
        Runs.from_json(json.loads(text))
    assert "only finite numbers" in str(err.value) and "delete it" in str(err.value)
