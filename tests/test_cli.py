import json
import subprocess
import sys

import pytest

from rcutil import experiments
from rcutil.__main__ import main


def test_model_experiment_writes_json_and_figure(tmp_path):
    assert main(["model", "--profile", "ci", "--out", str(tmp_path), "--no-progress"]) == 0
    result = json.loads((tmp_path / "model.json").read_text())
    assert result["experiment"] == "model" and result["profile"] == "ci"
    assert result["seed"] == result["settings"]["seed"]
    assert {"torch", "numpy", "python"} <= set(result["versions"])
    assert all(result["gradcheck"].values())
    assert max(result["finite_difference_rel_error"].values()) < 1e-6
    assert (tmp_path / "model_gd.svg").stat().st_size > 1000


def test_same_profile_same_numbers(tmp_path):
    a = experiments.load("model").run("ci", progress=False)
    b = experiments.load("model").run("ci", progress=False)
    assert a == b


def test_cli_profile_flag_and_errors(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "rcutil", "model", "--profile", "huge"],
                          capture_output=True, text=True)
    assert proc.returncode != 0 and "invalid choice: 'huge'" in proc.stderr
    proc = subprocess.run([sys.executable, "-m", "rcutil", "nonsense"], capture_output=True, text=True)
    assert proc.returncode != 0 and "invalid choice" in proc.stderr
    with pytest.raises(ValueError, match="unknown experiment"):
        experiments.load("nonsense")
