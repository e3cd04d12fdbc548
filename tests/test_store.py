"""The results store (rcutil.store): reuse, a key made of what a result depends on, a
stored result served only for the question it answers, files whose damage is reported,
and writes that fail in one line naming the path."""

import dataclasses
import errno
import json
import math
import os
import stat
import types
from pathlib import Path

import pytest

from rcutil import data, env, experiments, files, results, store
from rcutil.results import Finite, StoredResultError


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
    module.SETTINGS = {p: {"scale": 2 if p == "ci" else 3} for p in ("ci", "book")}
    module.SETTINGS["paper"] = module.SETTINGS["book"]
    module.calls = 0

    @dataclasses.dataclass
    class Result(results.Result):
        total: int
        mean: Finite = 1.0

    def run(settings, *, device="cpu", progress=True):
        module.calls += 1
        numbers = [int(x) for x in data.find("fake/numbers.txt").read_text().split()]
        return Result(settings, settings["scale"] * sum(numbers), module.mean)

    module.mean = 1.0
    module.Result, module.run = Result, run
    module.data_files = lambda settings: ["fake/numbers.txt"]
    return module, tmp_path


def the_file(tmp_path: Path, profile: str = "ci") -> Path:
    (path,) = (tmp_path / "results").glob(f"model-{profile}-*.json")
    return path


def test_a_replaced_data_file_is_never_answered_from_the_store(fake):
    module, tmp_path = fake
    assert store.cached(module, "ci").total == 12
    assert store.cached(module, "ci").total == 12 and module.calls == 1
    (tmp_path / "data" / "fake" / "numbers.txt").write_text("1 2 4\n")
    assert store.cached(module, "ci").total == 14 and module.calls == 2
    stored = sorted((tmp_path / "results").glob("model-ci-*.json"))
    assert len(stored) == 2, "the key holds the sha256 of the data read"


def test_a_stored_file_records_the_question_it_answers(fake):
    module, tmp_path = fake
    store.cached(module, "ci")
    payload = store.unsealed(the_file(tmp_path))
    assert payload["experiment"] == "model" and payload["profile"] == "ci"
    assert payload["settings"] == {"scale": 2, "profile": "ci"}
    assert payload["device"] == "cpu" and len(payload["code"]) == 64
    assert payload["data"] == {
        "fake/numbers.txt": data.sha256sum(tmp_path / "data" / "fake" / "numbers.txt")
    }


def _reseal(path: Path, change) -> None:
    """Edit a stored file and seal it again, as a copy or a forgery would."""
    payload = json.loads(path.read_text())
    change(payload)
    path.write_text(json.dumps(store.sealed(payload)))


@pytest.mark.parametrize(
    "change, words",
    [
        (lambda d: d.update(profile="book"), ["profile 'book'", "'ci'"]),
        (
            lambda d: d.update(settings={"scale": 3, "profile": "ci"}),
            ["other settings", "scale=3"],
        ),
        (lambda d: d.update(device="cuda"), ["device 'cuda'", "'cpu'"]),
        (lambda d: d.update(code="0" * 64), ["other code"]),
        (lambda d: d.update(data={}), ["other data files"]),
        (lambda d: d.update(experiment="jena"), ["experiment 'jena'"]),
        (lambda d: d.pop("code"), ["no code", "older"]),
    ],
    ids=["profile", "settings", "device", "code", "data", "experiment", "old file"],
)
def test_a_sealed_file_that_answers_another_question_is_recomputed(fake, change, words):
    """A valid, sealed file of another profile (device, code, ...) copied over this
    one's name is reported in one line and computed again, never served."""
    module, tmp_path = fake
    store.cached(module, "ci")
    path = the_file(tmp_path)
    _reseal(path, lambda d: (change(d), d["result"].update(total=99)))
    with pytest.warns(RuntimeWarning, match=path.name) as caught:
        assert store.cached(module, "ci").total == 12
    (warning,) = [w for w in caught if path.name in str(w.message)]
    for word in words + ["computing it again"]:
        assert word in str(warning.message), (word, str(warning.message))
    assert module.calls == 2 and store.unsealed(path)["result"]["total"] == 12


def test_another_profiles_file_copied_over_this_one_is_not_served(fake):
    module, tmp_path = fake
    store.cached(module, "book")
    store.cached(module, "ci")
    book, ci = the_file(tmp_path, "book"), the_file(tmp_path, "ci")
    ci.write_bytes(book.read_bytes())
    with pytest.warns(RuntimeWarning, match="profile 'book'"):
        assert store.cached(module, "ci").total == 12
    assert module.calls == 3


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
    store.cached(module, "ci")
    path = the_file(tmp_path)
    damage(path)
    with pytest.warns(RuntimeWarning, match=path.name):
        assert store.cached(module, "ci").total == 12
    assert module.calls == 2 and json.loads(path.read_text())["result"]["total"] == 12
    assert stat.S_IMODE(path.stat().st_mode) == 0o644


def test_the_seal_is_a_checksum_a_resealed_edit_is_served(fake):
    """What the seal does not do (the module docstring says so): a number edited with
    the sha256 computed again is accepted."""
    module, tmp_path = fake
    store.cached(module, "ci")
    _reseal(the_file(tmp_path), lambda d: d["result"].update(total=42))
    assert store.cached(module, "ci").total == 42 and module.calls == 1


@pytest.mark.parametrize("value", [math.nan, math.inf])
def test_a_resealed_non_finite_number_where_the_type_says_finite_is_refused(
    fake, value
):
    module, tmp_path = fake
    store.cached(module, "ci")
    path = the_file(tmp_path)
    _reseal(path, lambda d: d["result"].update(mean=value))
    with pytest.warns(RuntimeWarning, match="only finite numbers"):
        assert store.cached(module, "ci").mean == 1.0
    assert module.calls == 2


def test_a_run_whose_result_breaks_its_type_stores_nothing(fake):
    module, tmp_path = fake
    module.mean = math.nan
    with pytest.raises(StoredResultError, match="nothing was stored") as err:
        store.cached(module, "ci")
    assert "mean" in str(err.value)
    assert not list((tmp_path / "results").glob("model-ci-*.json"))


def test_a_folder_where_a_stored_result_belongs_is_named(fake):
    module, tmp_path = fake
    path = store.stored_path(module, "ci")
    path.mkdir(parents=True)
    with pytest.raises(StoredResultError, match="is a folder"):
        store.cached(module, "ci")


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
        store.cached(module, "ci")


def test_leftovers_of_a_killed_write_go_at_the_next_run(fake):
    module, tmp_path = fake
    path = store.stored_path(module, "ci")
    path.parent.mkdir(parents=True)
    leftover = path.with_name(f".{path.name}.abc123.tmp")
    leftover.write_text('{"half": ')
    store.cached(module, "ci")
    assert not leftover.exists() and path.is_file()


def test_a_full_disk_names_the_file_and_leaves_nothing(tmp_path, monkeypatch):
    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(json, "dump", full)
    with pytest.raises(files.WriteError, match=r"x\.json.*No space left") as err:
        store.write_json({"a": 1}, tmp_path / "x.json")
    assert "free some space" in str(err.value)
    assert list(tmp_path.iterdir()) == []


def test_a_full_disk_stops_the_store_before_the_run_naming_the_path(fake, monkeypatch):
    """The lock file is the store's first write: a full disk is found there, before
    any computing, in one line naming the path and the variable to change."""
    module, tmp_path = fake
    real_open = open

    def full_open(file, mode="r", *args, **kwargs):
        if "w" in mode and str(file).endswith(".lock"):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_open(file, mode, *args, **kwargs)

    monkeypatch.setattr("builtins.open", full_open)
    with pytest.raises(files.WriteError, match="No space left on device") as err:
        store.cached(module, "ci")
    message = str(err.value)
    assert str(tmp_path / "results") in message and "\n" not in message
    assert "free some space" in message and "RCUTIL_RESULTS_DIR" in message
    assert module.calls == 0


def test_a_real_result_with_a_resealed_nan_loss_is_recomputed(tmp_path, monkeypatch):
    """The model chapter's GD losses are typed finite: a NaN sealed into its stored
    file is refused, reported, and computed again."""
    monkeypatch.setenv("RCUTIL_RESULTS_DIR", str(tmp_path))
    module = experiments.load("model")

    def run(settings, **kwargs):  # a result at once, of the real type
        gd = module.GDRun(1.0, [1.0, 0.5], [1.0] * 2, [1.0] * 2, [1.0] * 2)
        return module.Result(settings, {}, {}, {}, [], [gd])

    monkeypatch.setattr(module, "run", run)
    experiments.cached("model", "ci", progress=False)
    (path,) = tmp_path.glob("model-ci-*.json")
    _reseal(path, lambda d: d["result"]["gd"][0]["loss"].__setitem__(1, math.nan))
    with pytest.warns(RuntimeWarning, match=r"gd\[0\]\.loss\[1\] holds nan"):
        again = experiments.cached("model", "ci", progress=False)
    assert all(math.isfinite(x) for x in again.gd[0].loss)
