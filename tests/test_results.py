"""The results store (rcutil.results): typed results, reuse, a key made of what a result
depends on, files that cannot lie, and a lock that says what it waits for."""

import dataclasses
import errno
import json
import os
import stat
import textwrap
import threading
import time
import types
from pathlib import Path

import numpy as np
import pytest

from rcutil import data, env, experiments, results

ROOT = Path(__file__).resolve().parents[1]


def test_cached_results_are_reused_and_keyed_by_settings(tmp_path, monkeypatch):
    monkeypatch.setenv("RCUTIL_RESULTS_DIR", str(tmp_path))
    calls = []
    module = experiments.load("model")
    real_run = module.run
    monkeypatch.setattr(
        module, "run", lambda *a, **k: calls.append(a) or real_run(*a, **k)
    )
    first = experiments.cached("model", "ci", progress=False)
    again = experiments.cached(module, "ci", progress=False)
    assert isinstance(first, module.Result) and first == again and len(calls) == 1
    (stored,) = tmp_path.glob("model-ci-*.json")
    assert stat.S_IMODE(stored.stat().st_mode) == 0o644
    experiments.cached("model", "ci", progress=False, refresh=True)
    assert len(calls) == 2
    for off in ("0", "false", " No "):
        monkeypatch.setenv("RCUTIL_RESULTS_CACHE", off)
        experiments.cached("model", "ci", progress=False)
    assert len(calls) == 5
    monkeypatch.setenv("RCUTIL_RESULTS_CACHE", "maybe")
    with pytest.raises(env.EnvError, match="RCUTIL_RESULTS_CACHE"):
        experiments.cached("model", "ci", progress=False)


# ----------------------------------------------------------------------- typed results
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


# ----------------------------------------------------------------------- the key: code
# run reaches
LIB = '''
"""A library."""


def step(x):
    """Docstring."""
    return helper(x) + 1


def helper(x):
    return 2 * x


def unrelated():
    return 3
'''

EXP = '''
from .fake_lib import step

SCALE = 2


def run(settings, *, device="cpu", progress=True):
    return plot_scale(step(settings["x"]))


def plot_scale(y):
    return SCALE * y


def claims(result):
    return []


def draw(result):
    return "a figure"
'''


@pytest.fixture
def fake_sources(tmp_path, monkeypatch):
    """Two modules ``rcutil.fake_exp`` and ``rcutil.fake_lib`` written to
    ``tmp_path``."""
    files = {
        "rcutil.fake_exp": tmp_path / "fake_exp.py",
        "rcutil.fake_lib": tmp_path / "fake_lib.py",
    }
    real = results._module_file.__wrapped__

    def module_file(name):
        return files.get(name) or real(name)

    monkeypatch.setattr(results, "_module_file", module_file)

    def fingerprint(exp=EXP, lib=LIB):
        files["rcutil.fake_exp"].write_text(textwrap.dedent(exp))
        files["rcutil.fake_lib"].write_text(textwrap.dedent(lib))
        results._parsed_module.cache_clear()
        return results.science_fingerprint("rcutil.fake_exp")

    return fingerprint


def test_the_key_covers_what_run_reaches_through_imports(fake_sources):
    base = fake_sources()
    code = results.science_code("rcutil.fake_exp")
    assert {
        "rcutil.fake_exp:run",
        "rcutil.fake_exp:plot_scale",
        "rcutil.fake_exp:SCALE",
        "rcutil.fake_lib:step",
        "rcutil.fake_lib:helper",
    } <= set(code)
    # a computation run uses changes the key, whatever the function is called
    assert fake_sources(lib=LIB.replace("2 * x", "3 * x")) != base
    assert fake_sources(exp=EXP.replace("SCALE = 2", "SCALE = 4")) != base
    assert fake_sources(exp=EXP.replace("return SCALE * y", "return SCALE + y")) != base


def test_code_run_never_reaches_leaves_the_key(fake_sources):
    base = fake_sources()
    assert "rcutil.fake_exp:claims" not in results.science_code("rcutil.fake_exp")
    for exp, lib in (
        (EXP.replace('"a figure"', '"another figure"'), LIB),
        (EXP.replace("return []", "return [1]"), LIB),
        (EXP, LIB.replace("return 3", "return 4")),
        (EXP, LIB.replace('"""Docstring."""', '"""Another docstring."""')),
        (EXP.replace("def run(", "# a comment\ndef run("), LIB),
    ):
        assert fake_sources(exp, lib) == base


def test_the_key_of_a_real_experiment_leaves_out_its_claims_and_other_experiments():
    code = results.science_code(experiments.load("jena"))
    assert "rcutil.experiments.jena:run" in code and "rcutil.model:block" in code
    assert "rcutil.experiments.jena:claims" not in code
    assert not any(
        k.startswith(("rcutil.gpt2", "rcutil.experiments.sst2", "rcutil.data:"))
        for k in code
    )


# ----------------------------------------------------------------------- a fake
# experiment
@pytest.fixture
def fake(tmp_path, monkeypatch):
    """An experiment module that reads one data file and counts its runs."""
    monkeypatch.setenv("RCUTIL_RESULTS_DIR", str(tmp_path / "results"))
    monkeypatch.setenv("RCUTIL_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setattr(data, "ASSETS", {})
    data.register(data.Asset("fake/numbers.txt", None))
    (tmp_path / "data" / "fake").mkdir(parents=True)
    (tmp_path / "data" / "fake" / "numbers.txt").write_text("1 2 3\n")
    module = types.ModuleType(
        "rcutil.experiments.model"
    )  # a real module's source, for the key
    module.SETTINGS = {p: {"scale": 2} for p in ("ci", "book", "paper")}
    module.calls = 0

    @dataclasses.dataclass
    class Result(results.Result):
        total: int

    def run(settings, *, device="cpu", progress=True):
        module.calls += 1
        numbers = [int(x) for x in data.find("fake/numbers.txt").read_text().split()]
        return Result(settings, settings["scale"] * sum(numbers))

    module.Result, module.run = Result, run
    module.data_files = lambda settings: ["fake/numbers.txt"]
    return module, tmp_path


def test_a_replaced_data_file_is_never_answered_from_the_store(fake):
    module, tmp_path = fake
    assert results.cached(module, "ci").total == 12
    assert results.cached(module, "ci").total == 12 and module.calls == 1
    (tmp_path / "data" / "fake" / "numbers.txt").write_text("1 2 4\n")
    assert results.cached(module, "ci").total == 14 and module.calls == 2
    stored = sorted((tmp_path / "results").glob("model-ci-*.json"))
    assert len(stored) == 2, "the key holds the sha256 of the data read"


def _edit(path: Path, change) -> None:
    payload = json.loads(path.read_text())
    change(payload)
    path.write_text(json.dumps(payload))


@pytest.mark.parametrize(
    "damage",
    [
        lambda p: p.write_text('{"result": {"total": 1'),  # cut short
        lambda p: p.write_text(""),  # emptied
        lambda p: p.write_text("{}"),  # replaced
        lambda p: _edit(p, lambda d: d["result"].update(total=42)),  # a number edited
        lambda p: _edit(p, lambda d: d["result"].pop("total")),  # a key removed
        lambda p: _edit(p, lambda d: d.pop("sha256")),  # the seal removed
    ],
    ids=[
        "truncated",
        "emptied",
        "replaced by {}",
        "number edited",
        "key removed",
        "no sha256",
    ],
)
def test_a_damaged_or_edited_stored_result_is_named_recomputed_and_replaced(
    fake, damage
):
    module, tmp_path = fake
    results.cached(module, "ci")
    (path,) = (tmp_path / "results").glob("model-ci-*.json")
    damage(path)
    with pytest.warns(RuntimeWarning, match=path.name):
        assert results.cached(module, "ci").total == 12
    assert module.calls == 2 and json.loads(path.read_text())["result"]["total"] == 12
    assert stat.S_IMODE(path.stat().st_mode) == 0o644


def test_a_folder_where_a_stored_result_belongs_is_named(fake):
    module, tmp_path = fake
    path = results.stored_path(module, "ci")
    path.mkdir(parents=True)
    with pytest.raises(results.StoredResultError, match="is a folder"):
        results.cached(module, "ci")


@pytest.mark.parametrize("make", ["file", "read-only folder"])
def test_a_results_dir_that_cannot_hold_results_names_the_variable(
    fake, monkeypatch, make
):
    module, tmp_path = fake
    target = tmp_path / "target"
    if make == "file":
        target.write_text("")
    else:
        if os.geteuid() == 0:
            pytest.skip("root writes to read-only folders")
        target.mkdir()
        target.chmod(0o500)
    monkeypatch.setenv("RCUTIL_RESULTS_DIR", str(target))
    with pytest.raises(env.EnvError, match="RCUTIL_RESULTS_DIR"):
        results.cached(module, "ci")


def test_leftovers_of_a_killed_write_go_at_the_next_run(fake):
    module, tmp_path = fake
    path = results.stored_path(module, "ci")
    path.parent.mkdir(parents=True)
    leftover = path.with_name(f".{path.name}.abc123.tmp")
    leftover.write_text('{"half": ')
    results.cached(module, "ci")
    assert not leftover.exists() and path.is_file()


def test_a_full_disk_names_the_file_and_leaves_nothing(tmp_path, monkeypatch):
    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(json, "dump", full)
    with pytest.raises(
        results.ResultWriteError, match=r"x\.json.*No space left.*free some space"
    ):
        results.write_json({"a": 1}, tmp_path / "x.json")
    assert list(tmp_path.iterdir()) == []


def test_a_lock_wait_says_what_it_waits_for_and_ends_at_its_limit(
    tmp_path, monkeypatch, capsys
):
    import fcntl

    path = tmp_path / "r.json"
    lock = path.with_name("r.json.lock")
    lock.write_text(f"{os.getpid()}\n")
    holder = open(lock)
    fcntl.flock(holder, fcntl.LOCK_EX)
    monkeypatch.setattr(results, "LOCK_SPEAK_S", 0.2)
    monkeypatch.setenv("RCUTIL_LOCK_TIMEOUT", "1")
    try:
        with pytest.raises(TimeoutError, match=r"r\.json\.lock.*RCUTIL_LOCK_TIMEOUT"):
            with results.locked(path):
                pass
    finally:
        holder.close()
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "waiting for" in err and str(lock) in err
    assert f"pid {os.getpid()}" in err


def test_a_lock_is_free_once_its_holder_is_gone(tmp_path):
    import fcntl

    path = tmp_path / "r.json"
    holder = open(path.with_name("r.json.lock"), "a")
    fcntl.flock(holder, fcntl.LOCK_EX)
    threading.Timer(
        0.3, holder.close
    ).start()  # the holder ends: the system frees its lock
    start = time.monotonic()
    with results.locked(path):
        assert time.monotonic() - start < 5
