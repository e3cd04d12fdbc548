"""The generic estimate: the real run, probed, projects each loop to its full length."""

import types

import pytest

from rcutil import experiments, progress
from rcutil.__main__ import main
from rcutil.estimate import project
from rcutil.profiles import settings_for


class Clock:
    """A clock that moves only when the toy run works: every unit takes exactly 10
    ms."""

    now = 0.0

    @classmethod
    def perf_counter(cls):
        return cls.now


def toy_run(settings, *, device="cpu", progress=True):
    """Two outer configurations, each with an inner loop of ``n`` units of 10 ms."""
    for _ in range(2):
        for _ in progress_steps(settings["n"]):
            Clock.now += 0.01


def progress_steps(n):
    return progress.steps(n, desc="inner", unit="unit", progress=False)


class Toy:
    run = staticmethod(toy_run)


@pytest.fixture
def clock(monkeypatch):
    from rcutil import estimate

    fake = types.SimpleNamespace(perf_counter=Clock.perf_counter)
    monkeypatch.setattr(progress, "time", fake)
    monkeypatch.setattr(estimate, "time", fake)
    Clock.now = 0.0


def test_a_probe_projects_nested_loops_to_their_length(clock):
    p = project(Toy, {"n": 200})
    (inner,) = p.loops
    assert inner.units == 400
    assert p.seconds == pytest.approx(4.0)  # 400 units of 10 ms
    assert p.probe_seconds == pytest.approx(0.06)  # 3 units of each loop ran, not 200


def test_a_loop_shorter_than_the_probe_runs_whole(clock):
    p = project(Toy, {"n": 2})
    assert p.loops[0].units == 4 and p.seconds == pytest.approx(p.probe_seconds)


def test_outside_a_probe_every_item_runs():
    assert list(progress.steps(5, desc="x", progress=False)) == [0, 1, 2, 3, 4]


@pytest.mark.parametrize("name", ["model", "rank-collapse"])
def test_estimate_of_a_real_experiment_trains_a_few_steps_only(name):
    module = experiments.load(name)
    settings = settings_for(module.SETTINGS, "ci")
    p = project(module, settings)
    gd = [loop for loop in p.loops if loop.unit == "GD step"]
    assert gd and p.seconds > p.probe_seconds > 0


def test_cli_prints_the_projection(capsys):
    assert main(["model", "--profile", "ci", "--estimate"]) == 0
    out = capsys.readouterr().out
    assert "estimate for model, profile ci, on cpu" in out and "GD beta=" in out
    assert "whole run" in out
