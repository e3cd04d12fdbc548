"""The SST-2 training recipe run as an ensemble: a member of a stacked run trains as the
same model alone, batches that can be stacked, and a member that diverges."""

import math
from dataclasses import replace

import pytest
import torch

from rcutil import sst2_train as recipe
from rcutil.experiments import sst2
from rcutil.sst2_data import EOS_ID, to_compact, vocabulary

#: A tiny model and recipe (float32 unless a test asks for float64).
SETTINGS = replace(
    sst2.CI,
    d_model=16,
    n_head=2,
    d_ff=32,
    batch_size=8,
    steps=12,
    eval_every=4,
    warmup=0.2,
    data_seed=0,
)


def sentences(n=64, T=10, seed=0):
    """``n`` right-padded sentences of 1 to ``T`` tokens with random labels, in the
    compact numbering of their vocabulary: ``(data, vocabulary)`` as
    :func:`rcutil.sst2_train.train` reads them."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, T + 1, (n,), generator=g)
    ids = torch.randint(0, 50257, (300,), generator=g)
    tokens = ids[torch.randint(0, len(ids), (n, T), generator=g)]
    tokens[torch.arange(T)[None, :] >= lengths[:, None]] = EOS_ID
    labels = torch.randint(0, 2, (n,), generator=g)
    vocab = vocabulary(tokens.tolist())
    train = (to_compact(tokens, vocab), lengths, labels)
    data = {
        "train": train,
        "train_eval": tuple(t[:32] for t in train),
        "dev": tuple(t[32:48] for t in train),
        "vocabulary": vocab,
    }
    return data, vocab


def test_a_stacked_member_steps_as_the_same_model_alone_float64():
    """Three models (other seeds, other peak rates, one without the scaled projections)
    stepped as one :class:`Ensemble` give, member by member, the losses and weights of
    each model trained alone by :func:`train_step` on the same batches, to float64
    rounding: the same forward, gradient, clipping, AdamW and schedule."""
    data, vocab = sentences()
    members = [(0, 1e-3, True), (1, 3e-3, True), (2, 1e-2, False)]

    def model(seed, scaled):
        return recipe.make_model(
            SETTINGS, "scratch", 2, True, seed, vocab, scaled_projections=scaled
        ).double()

    def batches(seed):
        return recipe.Batches(data["train"], 8, seed, order_seed=0)

    alone, weights = [], []
    for seed, lr, scaled in members:
        m = model(seed, scaled)
        opt, sched = recipe.make_optimizer(m, SETTINGS, lr)
        b = batches(seed)
        alone.append(
            [
                float(recipe.train_step(m, opt, sched, *b.next(), grad_clip=1.0))
                for _ in range(SETTINGS.steps)
            ]
        )
        weights.append(m.state_dict())
    ensemble = recipe.Ensemble(
        [model(s, scaled) for s, _, scaled in members],
        SETTINGS,
        [lr for _, lr, _ in members],
    )
    streams = [batches(s) for s, _, _ in members]
    stacked = []
    for _ in range(SETTINGS.steps):
        x, n, y = (torch.stack(t) for t in zip(*(b.next() for b in streams)))
        stacked.append(ensemble.step(x, n, y))
    stacked = torch.stack(stacked).T
    torch.testing.assert_close(
        stacked, torch.tensor(alone, dtype=torch.float64), rtol=1e-12, atol=1e-13
    )
    assert (
        stacked[:, 0].std() > 0 and (stacked[:, -1] - stacked[:, 0]).abs().min() > 1e-3
    )
    for k, state in enumerate(weights):
        for name, w in ensemble.models[k].state_dict().items():
            torch.testing.assert_close(w, state[name], rtol=1e-9, atol=1e-11)


def test_train_gives_each_member_the_curves_it_has_alone():
    """:func:`train` of three members records, for each, the curves that member
    records when trained alone: stacking changes no number."""
    data, _ = sentences()
    members = [
        recipe.Member(0, 1e-3),
        recipe.Member(1, 3e-3),
        recipe.Member(2, 1e-2, False),
    ]
    together = recipe.train(SETTINGS, data, "scratch", 2, True, members)
    for member, curve in zip(members, together):
        (alone,) = recipe.train(SETTINGS, data, "scratch", 2, True, [member])
        for key in (*recipe.CURVES, "dev_accuracy", "steps"):
            assert curve[key] == alone[key], key
        assert curve["steps"] == [0, 4, 8, 12]
        assert math.isfinite(curve["dev_accuracy"])
    assert together[0]["train_loss"] != together[1]["train_loss"]


def test_batches_of_one_order_have_the_same_lengths_whatever_the_seed():
    """With one ``order_seed`` every seed's batch has, at every step, the shape of the
    others' (so they stack), while the sentences in it differ; without it the shapes
    differ from seed to seed."""
    data, _ = sentences(n=96, T=12)
    shared = [recipe.Batches(data["train"], 8, s, order_seed=5) for s in range(3)]
    own = [recipe.Batches(data["train"], 8, s) for s in range(3)]
    same_rows = differ = 0
    for _ in range(30):  # more than two epochs
        got = [b.next() for b in shared]
        assert len({g[0].shape for g in got}) == 1
        assert torch.equal(got[0][1].sort().values, got[1][1].sort().values)
        same_rows += torch.equal(got[0][0], got[1][0])
        differ += len({tuple(b.next()[0].shape) for b in own}) > 1
    assert same_rows < 10 and differ > 10


def test_an_ensemble_refuses_other_sizes_and_a_missing_rate():
    data, vocab = sentences()
    two = recipe.make_model(SETTINGS, "scratch", 2, True, 0, vocab)
    three = recipe.make_model(SETTINGS, "scratch", 3, True, 0, vocab)
    with pytest.raises(ValueError, match="share one architecture"):
        recipe.Ensemble([two, three], SETTINGS, [1e-3, 1e-3])
    with pytest.raises(ValueError, match="one peak rate per model"):
        recipe.Ensemble([two], SETTINGS, [1e-3, 1e-3])


def test_a_member_that_diverges_ends_at_inf_and_the_others_train_on():
    """Without recording, a member whose loss stops being finite ends with loss inf
    and error nan, and the other members end as they do alone; with recording it is an
    error naming its rate and seed."""
    data, _ = sentences()
    good, bad = recipe.Member(100, 1e-3), recipe.Member(100, 1e9)
    runs = recipe.train(SETTINGS, data, "scratch", 2, True, [good, bad], record=False)
    (alone,) = recipe.train(SETTINGS, data, "scratch", 2, True, [good], record=False)
    assert runs[0]["train_loss"] == alone["train_loss"]
    assert runs[1]["train_loss"] == [math.inf] and math.isnan(runs[1]["train_error"][0])
    with pytest.raises(FloatingPointError, match=r"lr=1e\+09, seed=100"):
        recipe.train(SETTINGS, data, "scratch", 2, True, [good, bad])
