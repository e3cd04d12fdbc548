import json
import subprocess
import sys

import pytest

from rcutil import experiments, results
from rcutil.__main__ import main
from rcutil.profiles import settings_for


def test_model_experiment_writes_its_sealed_result(tmp_path, monkeypatch):
    monkeypatch.setenv("RCUTIL_RESULTS_DIR", str(tmp_path / "store"))
    assert main(["model", "--profile", "ci", "--out", str(tmp_path), "--no-progress"]) == 0
    written = json.loads((tmp_path / "model.json").read_text())
    assert written["experiment"] == "model" and written["profile"] == "ci"
    assert {"torch", "numpy", "python"} <= set(written["versions"])
    assert written["result"]["settings"]["profile"] == "ci"
    assert results.unsealed(tmp_path / "model.json") == results.unsealed(
        results.stored_path(experiments.load("model"), "ci"))


def test_same_profile_same_numbers():
    module = experiments.load("model")
    settings = settings_for(module.SETTINGS, "ci")
    assert module.run(settings, progress=False) == module.run(settings, progress=False)


def test_cli_profile_flag_and_errors(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "rcutil", "model", "--profile", "huge"],
                          capture_output=True, text=True)
    assert proc.returncode != 0 and "invalid choice: 'huge'" in proc.stderr
    proc = subprocess.run([sys.executable, "-m", "rcutil", "nonsense"], capture_output=True, text=True)
    assert proc.returncode != 0 and "invalid choice" in proc.stderr
    with pytest.raises(ValueError, match="unknown experiment"):
        experiments.load("nonsense")
