"""rcutil.gpt2: shapes, the causal mask, the residual switch, the weight mapping,
determinism."""

import math
from dataclasses import replace

import pytest
import torch

from rcutil.gpt2 import (
    GPT2Classifier,
    GPT2Config,
    from_hf_state_dict,
    hf_to_rcutil,
    load_hf_gpt2,
)

SMALL = dict(n_layer=3, n_head=2, d_model=16, d_ff=24, vocab_size=50, context=12)


def small(**kw) -> GPT2Classifier:
    return GPT2Classifier(GPT2Config(**{**SMALL, **kw}), seed=0)


def test_defaults_are_gpt2_small():
    cfg = GPT2Config()
    assert (
        cfg.n_layer,
        cfg.n_head,
        cfg.d_model,
        cfg.d_ff,
        cfg.vocab_size,
        cfg.context,
    ) == (12, 12, 768, 3072, 50257, 1024)
    # the 124M parameters of GPT-2 small (without its tied LM head) plus the 768 x 2
    # head
    n = GPT2Classifier(GPT2Config(n_layer=12), seed=0).num_parameters()
    assert n == 124_439_808 + 768 * 2


def test_shapes():
    m = small()
    tokens = torch.randint(0, 50, (4, 7))
    assert m(tokens).shape == (4, 2)
    out = m(tokens, torch.tensor([7, 3, 1, 5]), return_attention=True)
    assert out.logits.shape == (4, 2) and out.last_attention.shape == (4, 7, 16)


def test_bad_config_and_input():
    with pytest.raises(ValueError, match="divisible"):
        GPT2Config(d_model=10, n_head=3)
    with pytest.raises(ValueError, match="n_layer"):
        GPT2Config(n_layer=0)
    with pytest.raises(ValueError, match="context"):
        small()(torch.zeros(1, 13, dtype=torch.long))


@pytest.mark.parametrize("residual", [True, False])
def test_causal_mask(residual):
    """Changing tokens after position i changes nothing at positions <= i (nor the
    logits of a sentence whose last real token is at i): right padding needs no extra
    mask."""
    m = small(residual=residual)
    a = torch.randint(0, 50, (2, 9))
    b = a.clone()
    b[:, 5:] = torch.randint(0, 50, (2, 4))
    za, zb = (
        m(a, return_attention=True).last_attention,
        m(b, return_attention=True).last_attention,
    )
    torch.testing.assert_close(za[:, :5], zb[:, :5])
    assert not torch.allclose(za[:, 5:], zb[:, 5:])
    n = torch.tensor([5, 3])
    torch.testing.assert_close(m(a, n), m(b, n))
    torch.testing.assert_close(m(a, n)[1], m(a[1:, :3])[0])


def manual_block(block, h, residual, n_head):
    """The block written out with an explicit masked softmax (no
    scaled_dot_product_attention)."""

    def attn(x):
        B, T, d = x.shape
        q, k, v = (x @ block.attn.c_attn.weight.T + block.attn.c_attn.bias).split(
            d, dim=2
        )
        q, k, v = (t.view(B, T, n_head, d // n_head).transpose(1, 2) for t in (q, k, v))
        scores = q @ k.transpose(-1, -2) / math.sqrt(d // n_head)
        scores = scores.masked_fill(
            torch.triu(torch.ones(T, T, dtype=torch.bool), 1), float("-inf")
        )
        y = (scores.softmax(-1) @ v).transpose(1, 2).reshape(B, T, d)
        return y @ block.attn.c_proj.weight.T + block.attn.c_proj.bias

    def mlp(x):
        u = x @ block.mlp.c_fc.weight.T + block.mlp.c_fc.bias
        g = 0.5 * u * (1 + torch.tanh(math.sqrt(2 / math.pi) * (u + 0.044715 * u**3)))
        return g @ block.mlp.c_proj.weight.T + block.mlp.c_proj.bias

    if residual:
        z = h + attn(block.ln_1(h))
        return z + mlp(block.ln_2(z)), z
    z = attn(block.ln_1(h))
    return mlp(block.ln_2(z)), z


@pytest.mark.parametrize("residual", [True, False])
def test_residual_switch_matches_written_out_block(residual):
    torch.manual_seed(1)
    m = small(residual=residual)
    with torch.no_grad():  # non-trivial biases and LayerNorm parameters
        for p in m.parameters():
            p.add_(0.1 * torch.randn_like(p))
    h = torch.randn(2, 6, 16)
    got_h, got_z = m.h[0](h)
    want_h, want_z = manual_block(m.h[0], h, residual, 2)
    torch.testing.assert_close(got_h, want_h, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(got_z, want_z, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("residual", [True, False])
def test_last_block_at_the_read_positions_only(residual):
    """The head reads one position per sentence, so the last block computes only that
    one; the logits and the gradients are those of the block computed everywhere."""
    torch.manual_seed(2)
    m = small(residual=residual)
    with torch.no_grad():
        for p in m.parameters():
            p.add_(0.1 * torch.randn_like(p))
    tokens, lengths = torch.randint(0, 50, (4, 9)), torch.tensor([9, 1, 4, 6])
    h = torch.randn(4, 9, 16)
    full_h, full_z = m.h[-1](h)
    rows = torch.arange(4)
    part_h, part_z = m.h[-1](h, lengths - 1)
    torch.testing.assert_close(part_h, full_h[rows, lengths - 1], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(part_z, full_z[rows, lengths - 1], rtol=1e-5, atol=1e-6)
    grads = []
    for attention in (True, False):
        m.zero_grad()
        out = m(tokens, lengths, return_attention=attention)
        logits = out.logits if attention else out
        (logits**2).sum().backward()
        grads.append((logits.detach(), [p.grad.clone() for p in m.parameters()]))
    torch.testing.assert_close(grads[1][0], grads[0][0], rtol=1e-5, atol=1e-6)
    for a, b in zip(grads[1][1], grads[0][1]):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)


def test_residual_switch_changes_the_function():
    tokens = torch.randint(0, 50, (3, 6))
    assert not torch.allclose(
        small(residual=True)(tokens), small(residual=False)(tokens)
    )
    # same seed, same weights: the switch changes only the wiring
    a, b = small(residual=True), small(residual=False)
    for (na, pa), (nb, pb) in zip(a.named_parameters(), b.named_parameters()):
        assert na == nb and torch.equal(pa, pb)


# ----------------------------------------------------------------- Hugging Face weight
# layout
def hf_state_dict(n_blocks=3, d=16, d_ff=24, vocab=50, context=12, prefix="", seed=0):
    """A random state dict in the layout of Hugging Face's GPT-2 ``model.safetensors``:
    Conv1D weights stored (in, out), plus the causal-mask buffer that has no
    parameter."""
    g = torch.Generator().manual_seed(seed)
    r = lambda *shape: torch.randn(*shape, generator=g)  # noqa: E731
    sd = {
        f"{prefix}wte.weight": r(vocab, d),
        f"{prefix}wpe.weight": r(context, d),
        f"{prefix}ln_f.weight": r(d),
        f"{prefix}ln_f.bias": r(d),
    }
    for l in range(n_blocks):
        p = f"{prefix}h.{l}."
        sd.update(
            {
                p + "ln_1.weight": r(d),
                p + "ln_1.bias": r(d),
                p + "attn.c_attn.weight": r(d, 3 * d),
                p + "attn.c_attn.bias": r(3 * d),
                p + "attn.c_proj.weight": r(d, d),
                p + "attn.c_proj.bias": r(d),
                p + "attn.bias": torch.tril(torch.ones(1, 1, context, context)),
                p + "ln_2.weight": r(d),
                p + "ln_2.bias": r(d),
                p + "mlp.c_fc.weight": r(d, d_ff),
                p + "mlp.c_fc.bias": r(d_ff),
                p + "mlp.c_proj.weight": r(d_ff, d),
                p + "mlp.c_proj.bias": r(d),
            }
        )
    return sd


@pytest.mark.parametrize("prefix", ["", "transformer."])
def test_hf_mapping_names_shapes_and_transposes(prefix):
    sd = hf_state_dict(prefix=prefix)
    mapped = hf_to_rcutil(sd, n_layer=2)
    assert not any(
        k.startswith("h.2.") for k in mapped
    )  # truncated to the first 2 blocks
    assert not any(
        k.endswith(".attn.bias") for k in mapped
    )  # the mask buffer is dropped
    model = from_hf_state_dict(sd, 2, n_head=2)
    assert (
        model.cfg.n_layer,
        model.cfg.d_model,
        model.cfg.d_ff,
        model.cfg.vocab_size,
        model.cfg.context,
    ) == (2, 16, 24, 50, 12)
    ours = model.state_dict()
    assert set(ours) == set(mapped) | {"head.weight"}
    for l in range(2):
        src = f"{prefix}h.{l}."
        for name in ("attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj"):
            assert torch.equal(
                ours[f"h.{l}.{name}.weight"], sd[src + name + ".weight"].T
            )
            assert torch.equal(ours[f"h.{l}.{name}.bias"], sd[src + name + ".bias"])
        for name in ("ln_1.weight", "ln_1.bias", "ln_2.weight", "ln_2.bias"):
            assert torch.equal(ours[f"h.{l}.{name}"], sd[src + name])
    assert torch.equal(ours["wte.weight"], sd[prefix + "wte.weight"])
    assert torch.equal(ours["wpe.weight"], sd[prefix + "wpe.weight"])
    assert torch.equal(ours["ln_f.bias"], sd[prefix + "ln_f.bias"])


def test_hf_mapping_errors():
    sd = hf_state_dict(n_blocks=2)
    with pytest.raises(ValueError, match="h.2.ln_1.weight"):
        hf_to_rcutil(sd, n_layer=3)
    del sd["wpe.weight"]
    with pytest.raises(ValueError, match="wpe.weight"):
        hf_to_rcutil(sd, n_layer=1)
    sd = hf_state_dict(n_blocks=2)
    sd["h.1.mlp.c_fc.weight"] = sd[
        "h.1.mlp.c_fc.weight"
    ].T.contiguous()  # a wrong orientation
    with pytest.raises(ValueError, match="h.1.mlp.c_fc.weight"):
        from_hf_state_dict(sd, 2, n_head=2)


def test_load_safetensors_file(tmp_path):
    from safetensors.torch import save_file

    sd = hf_state_dict()
    save_file(
        {k: v.contiguous() for k, v in sd.items()}, str(tmp_path / "model.safetensors")
    )
    model = load_hf_gpt2(
        tmp_path / "model.safetensors", n_layer=3, residual=False, n_head=2
    )
    assert model.cfg.residual is False and model.cfg.n_layer == 3
    ref = from_hf_state_dict(sd, 3, residual=False, n_head=2)
    tokens = torch.randint(0, 50, (2, 5))
    torch.testing.assert_close(model(tokens), ref(tokens))


def test_same_function_as_transformers_gpt2():
    """With the same weights, rcutil's GPT-2 and Hugging Face's GPT2Model agree (if
    installed)."""
    transformers = pytest.importorskip("transformers")
    cfg = transformers.GPT2Config(
        n_layer=3,
        n_head=2,
        n_embd=16,
        n_inner=24,
        vocab_size=50,
        n_positions=12,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
    )
    torch.manual_seed(0)
    ref = transformers.GPT2Model(cfg).eval()
    ours = from_hf_state_dict(ref.state_dict(), n_layer=2, n_head=2)
    ref.h = ref.h[:2]  # truncate the reference the same way
    tokens = torch.randint(0, 50, (3, 8))
    with torch.no_grad():
        h_ref = ref(tokens).last_hidden_state[:, -1]
        torch.testing.assert_close(
            ours(tokens), h_ref @ ours.head.weight.T, rtol=1e-5, atol=1e-5
        )


# ----------------------------------------------------------------- determinism
def test_initialisation_is_deterministic():
    a, b = small(), small()
    c = GPT2Classifier(GPT2Config(**SMALL), seed=1)
    for pa, pb in zip(a.parameters(), b.parameters()):
        assert torch.equal(pa, pb)
    assert not torch.equal(a.wte.weight, c.wte.weight)
    std = a.h[0].attn.c_attn.weight.std().item()
    assert 0.015 < std < 0.025  # N(0, 0.02^2)


def synthetic_data(n=32, T=8, vocab_ids=None, seed=0):
    """Random right-padded token ids, lengths and labels, with their vocabulary (GPT-2
    ids)."""
    from rcutil.sst2_data import EOS_ID, to_compact, vocabulary

    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, T + 1, (n,), generator=g)
    ids = (
        vocab_ids
        if vocab_ids is not None
        else torch.randint(0, 50257, (400,), generator=g)
    )
    tokens = ids[torch.randint(0, len(ids), (n, T), generator=g)]
    tokens[torch.arange(T)[None, :] >= lengths[:, None]] = EOS_ID  # right padding
    labels = torch.randint(0, 2, (n,), generator=g)
    vocab = vocabulary(tokens.tolist())
    return tokens, lengths, labels, vocab, to_compact(tokens, vocab)


def _settings():
    from rcutil.experiments import sst2

    return replace(
        sst2.CI,
        d_model=16,
        n_head=2,
        d_ff=32,
        batch_size=8,
        steps=6,
        eval_every=3,
        warmup=0.2,
        seeds=(0,),
        lr_grid={"scratch": sst2.Rates.every(w=(1e-3,), wo=(1e-3,))},
    )


#: A tiny SST-2 model and recipe.
SETTINGS = _settings()


def test_training_is_deterministic():
    """Two runs of the experiment's training loop on the same synthetic data agree."""
    from rcutil import sst2_train

    tokens, lengths, labels, vocab, compact = synthetic_data()
    data = {
        "train": (compact, lengths, labels),
        "train_eval": (compact, lengths, labels),
        "dev": (compact[:8], lengths[:8], labels[:8]),
        "vocabulary": vocab,
    }
    a, b, c = (
        sst2_train.train(
            SETTINGS, data, "scratch", 2, True, [sst2_train.Member(seed, 1e-3)]
        )[0]
        for seed in (0, 0, 1)
    )
    for key in (
        "train_loss",
        "train_error",
        "stable_rank",
        "dev_accuracy",
        "batch_loss",
    ):
        assert a[key] == b[key]
    assert a["steps"] == [0, 3, 6] and all(math.isfinite(x) for x in a["train_loss"])
    assert a["train_loss"][1:] != c["train_loss"][1:]  # another seed: other numbers


def test_output_projections_scaled_by_depth_unless_asked_not_to():
    """GPT-2's initialisation scales the blocks' output projections by 1/sqrt(2L), with
    and without residuals; ``scaled_projections=False`` leaves them at N(0, 0.02^2)."""

    def stds(**kw):
        m = GPT2Classifier(GPT2Config(n_layer=8, n_head=2, d_model=64, d_ff=256, **kw))
        proj = torch.cat(
            [
                p.flatten()
                for n, p in m.named_parameters()
                if n.endswith("c_proj.weight")
            ]
        )
        other = torch.cat(
            [p.flatten() for n, p in m.named_parameters() if n.endswith("c_fc.weight")]
        )
        return proj.std().item(), other.std().item()

    for residual in (True, False):
        proj, fc = stds(residual=residual)
        assert proj == pytest.approx(0.02 / 4, rel=0.05)
        assert fc == pytest.approx(0.02, rel=0.05)
        proj, fc = stds(residual=residual, scaled_projections=False)
        assert proj == pytest.approx(0.02, rel=0.05)
        assert fc == pytest.approx(0.02, rel=0.05)


# ----------------------------------------------------------------- the trimmed
# vocabulary
def test_keep_tokens_gathers_rows_and_checks_ids():
    m = small()
    full = m.wte.weight.detach().clone()
    ids = torch.tensor([3, 7, 49])
    m.keep_tokens(ids)
    assert m.cfg.vocab_size == 3 and m.wte.weight.shape == (3, 16)
    torch.testing.assert_close(m.wte.weight, full[ids], rtol=0, atol=0)
    with pytest.raises(ValueError, match=r"lie in \[0, 3\)"):
        m.keep_tokens(torch.tensor([0, 3]))
    with pytest.raises(ValueError, match="non-empty"):
        m.keep_tokens(torch.tensor([], dtype=torch.long))


def test_trimmed_vocabulary_trains_like_the_full_one():
    """From the same seed, the model with only the rows its data reads and the model
    with all 50,257 rows give the same losses, step after step, to float32 rounding
    (AdamW with weight decay on the embedding too: decay moves rows that are never read,
    which changes nothing)."""
    from rcutil import sst2_train as sst2

    tokens, lengths, labels, vocab, compact = synthetic_data(n=48, T=10)
    settings = replace(SETTINGS, steps=12)
    full = GPT2Classifier(GPT2Config(n_layer=2, n_head=2, d_model=16, d_ff=32), seed=0)
    trimmed = sst2.make_model(settings, "scratch", 2, True, 0, vocab)
    assert trimmed.cfg.vocab_size == len(vocab) < 500 and full.cfg.vocab_size == 50257
    unread = torch.ones(50257, dtype=torch.bool)
    unread[vocab] = False
    before = full.wte.weight[unread].detach().clone()
    opts = {id(m): sst2.make_optimizer(m, settings, 3e-3) for m in (full, trimmed)}
    losses = {"full": [], "trimmed": []}
    for step in range(settings.steps):
        rows = torch.arange(step * 4, step * 4 + 8) % len(labels)
        for name, m, x in (("full", full, tokens), ("trimmed", trimmed, compact)):
            loss = sst2.train_step(
                m, *opts[id(m)], x[rows], lengths[rows], labels[rows], grad_clip=1.0
            )
            losses[name].append(float(loss))
    torch.testing.assert_close(
        torch.tensor(losses["trimmed"]),
        torch.tensor(losses["full"]),
        rtol=1e-5,
        atol=1e-6,
    )
    assert max(losses["full"]) - min(losses["full"]) > 1e-3  # it did train
    torch.testing.assert_close(
        trimmed.wte.weight, full.wte.weight[vocab], rtol=1e-5, atol=1e-6
    )
    assert not torch.equal(full.wte.weight[unread], before)  # decay moved them
