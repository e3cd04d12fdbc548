"""rcutil.experiments.sst2: the learning-rate pilot, the training loop's host waits, the estimate."""
import math

import pytest
import torch
from test_gpt2 import SETTINGS, synthetic_data
from torch.utils._python_dispatch import TorchDispatchMode

from rcutil.estimate import project
from rcutil.experiments import sst2
from rcutil.profiles import settings_for


def tiny_data():
    tokens, lengths, labels, vocab, compact = synthetic_data(n=64, T=8)
    return {"train": (compact, lengths, labels), "train_eval": (compact[:16], lengths[:16], labels[:16]),
            "dev": (compact[:8], lengths[:8], labels[:8]), "vocabulary": vocab}


def test_pilot_picks_the_rate_with_the_lowest_training_loss(monkeypatch):
    """The rule: every rate of the grid is tried by the same short run; the lowest final loss
    on the training subset wins; a diverging pilot counts as infinite."""
    seen = []

    def fake_train_one(settings, data, layers, residual, seed, lr, **kw):
        seen.append((settings["steps"], settings["eval_every"], seed, lr))
        if lr == 1e-2:
            raise FloatingPointError("the loss became nan")
        return {"train_loss": [0.7, {1e-4: 0.5, 3e-4: 0.3, 1e-3: 0.4}[lr]]}

    monkeypatch.setattr(sst2, "train_one", fake_train_one)
    settings = dict(SETTINGS, steps=100, pilot_steps=7, seeds=[3, 4], lr_grid=[1e-4, 3e-4, 1e-3, 1e-2])
    chosen = sst2.pilot(settings, {}, 2, True)
    assert chosen["lr"] == 3e-4 and chosen["loss"] == [0.5, 0.3, 0.4, math.inf]
    assert chosen["loss_start"] == 0.7
    assert seen == [(7, 7, 3, lr) for lr in settings["lr_grid"]]   # short, the first seed, every rate


def test_pilot_on_a_real_model_prefers_a_rate_that_trains():
    data = tiny_data()
    settings = dict(SETTINGS, lr_grid=[1e-7, 3e-3], pilot_steps=8)
    chosen = sst2.pilot(settings, data, 2, True)
    assert chosen["lr"] == 3e-3 and chosen["loss"][1] < chosen["loss"][0]


class ScalarReads(TorchDispatchMode):
    """Counts reads of a tensor's value by the host (``item``, ``float``, ``int``, ``bool``)."""

    def __init__(self):
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is torch.ops.aten._local_scalar_dense.default:
            self.count += 1
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("steps", [3, 7])
def test_training_steps_do_not_wait_for_the_device(steps, monkeypatch):
    """Between two evaluations the loop reads no tensor value: the host never waits for the
    device. The number of reads is the same for 3 steps as for 7 (one epoch is 8 batches)."""
    monkeypatch.setattr(sst2, "evaluate", lambda *a, **k: {"loss": 0.5, "error": 0.5, "stable_rank": 1.0,
                                                           "effective_rank": 1.0})
    data = tiny_data()
    counts = {}
    for n in (steps, 2):
        with ScalarReads() as reads:
            sst2.train_one(dict(SETTINGS, steps=n, eval_every=100), data, 2, True, 0, 1e-3)
        counts[n] = reads.count
    assert counts[steps] == counts[2], counts


def test_bf16_asked_where_it_cannot_run_warns_and_uses_float32():
    with pytest.warns(RuntimeWarning, match="bf16 needs a CUDA device"):
        assert sst2.autocast_dtype(dict(SETTINGS, precision="bf16"), "cpu") is None
    assert sst2.autocast_dtype(dict(SETTINGS, precision="float32"), "cpu") is None
    with pytest.raises(ValueError, match="precision must be one of"):
        sst2.autocast_dtype(dict(SETTINGS, precision="fp8"), "cpu")
    with pytest.raises(ValueError, match="init must be one of"):
        sst2.make_model(dict(SETTINGS, init="random"), 2, True, 0, torch.tensor([1, 2]))


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA device")
def test_a_missing_gpu_is_named():
    with pytest.raises(ValueError, match="device 'cuda' asked for, but this torch has no usable CUDA device"):
        project(sst2, settings_for(sst2.SETTINGS, "ci"), device="cuda")
    with pytest.raises(ValueError, match="device 'cuda:1' asked for, but this torch has no usable CUDA device"):
        sst2.run(settings_for(sst2.SETTINGS, "ci"), device="cuda:1")
