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
    assert inner.units == 400 and inner.ran == 6 and inner.extrapolated
    assert p.seconds == pytest.approx(4.0)  # 400 units of 10 ms
    assert p.probe_seconds == pytest.approx(0.06)  # 3 units of each loop ran, not 200


def test_a_loop_shorter_than_the_probe_runs_whole(clock):
    p = project(Toy, {"n": 2})
    assert p.loops[0].units == 4 and p.seconds == pytest.approx(p.probe_seconds)


def again(settings, *, device="cpu", **kwargs):
    for _ in range(4):
        for _ in progress.steps(100, desc="inner", unit="unit", probe_once=True):
            Clock.now += 0.01


class Again:
    run = staticmethod(again)


def test_a_loop_probed_once_runs_one_item_when_it_comes_back(clock):
    p = project(Again, {})
    assert p.loops[0].units == 400 and p.loops[0].ran == 3 + 1 + 1 + 1
    assert p.seconds == pytest.approx(4.0)
    assert p.probe_seconds == pytest.approx(0.06)


def configurations(settings, *, device="cpu", **kwargs):
    """Six configurations of three sizes; a configuration of size s runs 10 units of
    s times 10 ms."""
    for size in progress_steps_of(settings["sizes"], shape=lambda size: size):
        for _ in progress.steps(10, desc=f"size {size}", unit="unit", progress=False):
            Clock.now += 0.01 * size


def progress_steps_of(items, **kw):
    return progress.steps(items, desc="configurations", unit="run", **kw)


class Configurations:
    run = staticmethod(configurations)


def test_one_configuration_per_shape_stands_for_its_shape(clock):
    said = []
    p = project(Configurations, {"sizes": [1, 2, 1, 3, 2, 1]}, say=said.append)
    outer = p.loops[0]
    assert outer.desc == "configurations" and outer.units == 6 and outer.ran == 3
    # 3 x size 1, 2 x size 2, 1 x size 3: 10 units each
    assert p.seconds == pytest.approx(10 * 0.01 * (3 * 1 + 2 * 2 + 1 * 3))
    assert {loop.desc: loop.units for loop in p.loops[1:]} == {
        "size 1": 30,
        "size 2": 20,
        "size 3": 10,
    }
    assert any("configurations: 3 of 6 runs (one per shape)" in line for line in said)
    assert any("probing size 3: 3 of 10 units" in line for line in said)


def growing(settings, *, device="cpu", **kwargs):
    """Items that cost more the later they come (batches sorted by length)."""
    for i in progress.steps(range(100), desc="batches", unit="batch", spread=True):
        Clock.now += 0.001 * (i + 1)


class Growing:
    run = staticmethod(growing)


def test_a_spread_probe_times_items_from_across_the_loop(clock):
    p = project(Growing, {})
    true = 0.001 * sum(range(1, 101))
    assert p.seconds == pytest.approx(true, rel=0.05)
    assert p.probe_seconds < 0.001 * 3 * 100


def test_outside_a_probe_every_item_runs():
    assert list(progress.steps(5, desc="x", progress=False)) == [0, 1, 2, 3, 4]


@pytest.mark.parametrize("name", ["model", "rank-collapse"])
def test_estimate_of_a_real_experiment_trains_a_few_steps_only(name):
    module = experiments.load(name)
    settings = settings_for(module.SETTINGS, "ci")
    p = project(module, settings)
    gd = [loop for loop in p.loops if loop.unit == "GD step"]
    assert gd and p.seconds > p.probe_seconds > 0


def test_cli_prints_the_projection_and_what_it_probes(capsys):
    assert main(["model", "--profile", "ci", "--estimate"]) == 0
    out, err = capsys.readouterr()
    assert "estimate for model, profile ci, on cpu" in out and "GD beta=" in out
    assert "whole run" in out and "extrapolated" in out
    assert "probing GD beta=" in err
