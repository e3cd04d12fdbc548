"""The Jena experiment (rcutil.experiments.jena) on inputs it must handle or refuse:
rows out of order, cleaned and counted in its result; a sweep that diverges; a device
that is not there."""
import re

import numpy as np
import pytest
import synthetic_jena as sj
import torch

import rcutil
from rcutil.estimate import project
from rcutil.experiments import jena
from rcutil.profiles import settings_for


def test_rows_out_of_order_or_repeated_are_counted_in_the_result(tmp_path, monkeypatch):
    times, values = sj.synthetic_series(300, seed=2)
    order = np.arange(300)
    order[[0, 1]] = order[[1, 0]]
    order[[150, 151]] = order[[151, 150]]
    times, values = times[order], values[order]
    times = np.append(times, times[-1])             # the last row repeated
    values = np.append(values, values[-1:], axis=0)
    path = sj.write_csv(tmp_path / "j.csv", times, values)
    monkeypatch.setitem(jena.SETTINGS, "ci", dict(jena.SETTINGS["ci"], steps=3,
                                                  lanczos_steps=3, spectra_every=1))
    with jena.torch_threads(1):
        result = jena.run(settings_for(jena.SETTINGS, "ci"), progress=False, path=path)
    info = result["data"]
    assert info["cleaning"]["out_of_order"] == 2 and info["cleaning"]["duplicates"] == 1
    assert info["cleaning"]["rows_read"] == 301 and info["rows_clean"] == 300
    assert info["first_time"] == "2009-01-01T00:10:00" < info["last_time"]


@pytest.mark.filterwarnings("ignore:.*encountered:RuntimeWarning")
def test_a_diverging_sweep_names_the_setting_to_change():
    settings = dict(settings_for(jena.SETTINGS, "ci"), seeds=(0,), betas=(0.0, 1.0))
    gen = torch.Generator().manual_seed(0)
    X = torch.randn(4, 8, 14, generator=gen, dtype=torch.float64)
    Y = 100 * torch.randn(4, 8, 1, generator=gen, dtype=torch.float64)
    template, params, betas, _ = jena.stacked_models(settings)
    with pytest.raises(rcutil.TrainingDiverged, match="diverged at step") as err:
        jena.batched_gd(template, params, betas, X, Y, mu=10.0, steps=200)
    msg = str(err.value)
    assert "mu_factor" in msg and not re.search(r"\beta\b", msg)


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_a_missing_gpu_is_named_before_any_work():
    with pytest.raises(ValueError, match="no usable CUDA device") as err:
        project(jena, settings_for(jena.SETTINGS, "ci"), device="cuda")
    assert "use cpu" in str(err.value)
    with pytest.raises(ValueError, match="'cuda' asked for"):
        jena.run(settings_for(jena.SETTINGS, "ci"), device="cuda", progress=False)
