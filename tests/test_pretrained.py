"""The pretrained path of the SST-2 experiment, end to end, without the real 548 MB
file.

A small random checkpoint in Hugging Face's GPT-2 layout is written with
``safetensors``, registered under the name of GPT-2 small with its own checksum and
size, and found through ``RCUTIL_DATA_DIR``, exactly as the real file would be.
"""

import hashlib
import math
from dataclasses import replace

import pytest
import torch

from rcutil import data, sst2_train
from rcutil.experiments import sst2
from rcutil.experiments.sst2 import verdicts
from rcutil.gpt2 import GPT2_SMALL, GPT2_SMALL_REVISION, load_hf_gpt2
from rcutil.sst2_data import EOS_ID, to_compact, vocabulary

D, HEADS, D_FF, BLOCKS = 16, 2, 32, 3
SETTINGS = replace(
    sst2.CI,
    inits=("pretrained",),
    d_model=D,
    n_head=HEADS,
    d_ff=D_FF,
    layers=(2,),
    batch_size=8,
    steps=6,
    eval_every=3,
    warmup=0.2,
    seeds=(0,),
    lr_grid={"pretrained": sst2.Rates.every(w=(1e-3, 1e-2), wo=(1e-3, 1e-2), depths=1)},
    long_steps=None,
)


def sha(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def checkpoint_tensors(seed=0, blocks=BLOCKS):
    """GPT-2's tensors at a small width, in Hugging Face's layout (Conv1D weights (in,
    out), the causal-mask buffers, GPT-2 small's vocabulary and context)."""
    g = torch.Generator().manual_seed(seed)
    r = lambda *shape: 0.1 * torch.randn(*shape, generator=g)  # noqa: E731
    sd = {
        "wte.weight": r(50257, D),
        "wpe.weight": r(1024, D),
        "ln_f.weight": 1 + r(D),
        "ln_f.bias": r(D),
    }
    for l in range(blocks):
        p = f"h.{l}."
        sd.update(
            {
                p + "ln_1.weight": 1 + r(D),
                p + "ln_1.bias": r(D),
                p + "attn.c_attn.weight": r(D, 3 * D),
                p + "attn.c_attn.bias": r(3 * D),
                p + "attn.c_proj.weight": r(D, D),
                p + "attn.c_proj.bias": r(D),
                p + "attn.bias": torch.tril(torch.ones(1, 1, 8, 8)),
                p + "ln_2.weight": 1 + r(D),
                p + "ln_2.bias": r(D),
                p + "mlp.c_fc.weight": r(D, D_FF),
                p + "mlp.c_fc.bias": r(D_FF),
                p + "mlp.c_proj.weight": r(D_FF, D),
                p + "mlp.c_proj.bias": r(D),
            }
        )
    return sd


@pytest.fixture
def checkpoint(tmp_path, monkeypatch):
    """The small checkpoint at RCUTIL_DATA_DIR/gpt2_small/model.safetensors, registered
    with its checksum and size under GPT-2 small's name (a private registry; no
    network)."""
    from safetensors.torch import save_file

    root = tmp_path / "data"
    path = root / GPT2_SMALL.relpath
    path.parent.mkdir(parents=True)
    tensors = checkpoint_tensors()
    save_file(tensors, str(path))
    monkeypatch.setenv("RCUTIL_DATA_DIR", str(root))
    monkeypatch.setenv("RCUTIL_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(data, "ASSETS", dict(data.ASSETS))
    data.register(
        data.Asset(
            GPT2_SMALL.relpath,
            "file:///nonexistent/model.safetensors",
            sha(path),
            size=path.stat().st_size,
        )
    )
    return path, tensors


def batch_data(vocab_ids, n=24, T=7, seed=0):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, T + 1, (n,), generator=g)
    tokens = vocab_ids[torch.randint(0, len(vocab_ids), (n, T), generator=g)]
    tokens[torch.arange(T)[None, :] >= lengths[:, None]] = EOS_ID
    labels = torch.randint(0, 2, (n,), generator=g)
    vocab = vocabulary(tokens.tolist())
    return tokens, lengths, labels, vocab, to_compact(tokens, vocab)


def test_the_real_file_is_pinned():
    assert GPT2_SMALL.size == 548_105_171
    assert (
        GPT2_SMALL.sha256
        == "248dfc3911869ec493c76e65bf2fcf7f615828b0254c12b473182f0f81d3a707"
    )
    assert GPT2_SMALL.url == (
        "https://huggingface.co/openai-community/gpt2/resolve/"
        f"{GPT2_SMALL_REVISION}/model.safetensors"
    )
    assert len(GPT2_SMALL_REVISION) == 40
    assert sst2.data_files(SETTINGS)[-1] == GPT2_SMALL.relpath
    assert GPT2_SMALL.relpath not in sst2.data_files(
        replace(SETTINGS, inits=("scratch",))
    )


@pytest.mark.parametrize("residual", [True, False])
def test_pretrained_model_maps_truncates_and_gathers(checkpoint, residual):
    path, sd = checkpoint
    tokens, lengths, labels, vocab, compact = batch_data(
        torch.tensor([5, 17, 995, 15496, 50000])
    )
    model = sst2_train.make_model(SETTINGS, "pretrained", 2, residual, 0, vocab)
    assert (
        model.cfg.n_layer == 2 and len(model.h) == 2 and model.cfg.residual is residual
    )
    # the rows of the ids the data uses, gathered from the full table
    torch.testing.assert_close(
        model.wte.weight, sd["wte.weight"][vocab], rtol=0, atol=0
    )
    torch.testing.assert_close(model.wpe.weight, sd["wpe.weight"], rtol=0, atol=0)
    # Conv1D weights transposed, the third block left out
    torch.testing.assert_close(
        model.h[1].mlp.c_fc.weight, sd["h.1.mlp.c_fc.weight"].T, rtol=0, atol=0
    )
    torch.testing.assert_close(
        model.h[0].attn.c_attn.weight, sd["h.0.attn.c_attn.weight"].T, rtol=0, atol=0
    )
    # the same function as the full-vocabulary model read from the file
    full = load_hf_gpt2(path, 2, residual=residual, n_head=HEADS)
    torch.testing.assert_close(
        model(compact, lengths), full(tokens, lengths), rtol=1e-5, atol=1e-6
    )


def test_pretrained_training_steps(checkpoint):
    """The experiment's own loop trains the pretrained model: the rate chosen over the
    grid, then a few steps."""
    tokens, lengths, labels, vocab, compact = batch_data(torch.arange(100, 160))
    d = {
        "train": (compact, lengths, labels),
        "train_eval": (compact, lengths, labels),
        "dev": (compact[:8], lengths[:8], labels[:8]),
        "vocabulary": vocab,
    }
    weights = sst2_train.pretrained_weights(SETTINGS)
    grid = [sst2_train.Member(SETTINGS.selection_seed, lr) for lr in (1e-3, 1e-2)]
    runs = sst2_train.train(
        SETTINGS, d, "pretrained", 2, True, grid, record=False, weights=weights
    )
    losses = {m.lr: c["train_loss"][-1] for m, c in zip(grid, runs)}
    assert len(losses) == 2 and all(math.isfinite(x) for x in losses.values())
    chosen = sst2.chosen({lr: (loss, 0.0) for lr, loss in losses.items()})
    (curve,) = sst2_train.train(
        SETTINGS,
        d,
        "pretrained",
        2,
        True,
        [sst2_train.Member(0, chosen)],
        weights=weights,
    )
    steps, loss = curve["steps"], curve["train_loss"]
    assert steps == [0, 3, 6] and all(math.isfinite(x) for x in loss)
    assert loss[-1] < loss[0]
    # training leaves the tensors read from the file alone: every run starts from the
    # file's
    for key in ("wte.weight", "h.1.attn.c_attn.weight", "ln_f.bias"):
        torch.testing.assert_close(weights[1][key], checkpoint[1][key], rtol=0, atol=0)


def test_same_function_as_transformers_on_the_checkpoint(checkpoint):
    transformers = pytest.importorskip("transformers")
    from safetensors.torch import load_file

    path, sd = checkpoint
    cfg = transformers.GPT2Config(
        n_layer=BLOCKS,
        n_head=HEADS,
        n_embd=D,
        n_inner=D_FF,
        vocab_size=50257,
        n_positions=1024,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
    )
    ref = transformers.GPT2Model(cfg).eval()
    missing, unexpected = ref.load_state_dict(load_file(str(path)), strict=False)
    assert not missing, missing  # every parameter came from the file
    ref.h = ref.h[:2]  # truncated like ours
    tokens, lengths, labels, vocab, compact = batch_data(
        torch.tensor([5, 17, 995, 15496, 50000])
    )
    ours = sst2_train.make_model(SETTINGS, "pretrained", 2, True, 0, vocab)
    with torch.no_grad():
        hidden = ref(tokens).last_hidden_state[torch.arange(len(lengths)), lengths - 1]
        torch.testing.assert_close(
            ours(compact, lengths), hidden @ ours.head.weight.T, rtol=1e-5, atol=1e-5
        )


def test_wrong_checksum_names_the_file(checkpoint):
    path, _ = checkpoint
    data.register(
        data.Asset(GPT2_SMALL.relpath, None, "0" * 64, size=path.stat().st_size)
    )
    with pytest.raises(data.DataError, match=f"{path}.*sha256"):
        sst2_train.pretrained_weights(SETTINGS)


def test_wrong_size_names_the_file_before_hashing(checkpoint):
    path, _ = checkpoint
    data.register(data.Asset(GPT2_SMALL.relpath, None, sha(path), size=548_105_171))
    with pytest.raises(data.DataError, match=f"{path}.*548,105,171"):
        sst2_train.pretrained_weights(SETTINGS)


def rewrite(path, tensors):
    from safetensors.torch import save_file

    save_file(tensors, str(path))
    data.register(
        data.Asset(GPT2_SMALL.relpath, None, sha(path), size=path.stat().st_size)
    )


def test_missing_tensor_names_the_file_and_the_tensor(checkpoint):
    path, sd = checkpoint
    rewrite(path, {k: v for k, v in sd.items() if k != "h.1.mlp.c_proj.bias"})
    with pytest.raises(ValueError, match=f"{path} has no tensor 'h.1.mlp.c_proj.bias'"):
        sst2_train.pretrained_weights(SETTINGS)


def test_shape_mismatch_names_the_file_and_the_tensor(checkpoint):
    path, sd = checkpoint
    rewrite(path, dict(sd, **{"h.0.attn.c_proj.weight": torch.zeros(D, D + 1)}))
    vocab = torch.tensor([5, EOS_ID])
    with pytest.raises(
        ValueError,
        match=rf"{path}: tensor 'h.0.attn.c_proj.weight' has shape \(16, 17\)",
    ):
        sst2_train.make_model(
            SETTINGS,
            "pretrained",
            2,
            True,
            0,
            vocab,
            weights=sst2_train.pretrained_weights(SETTINGS),
        )
    # a checkpoint of another width than the settings ask for
    with pytest.raises(ValueError, match="tensor 'wte.weight' has shape"):
        sst2_train.make_model(
            replace(SETTINGS, d_model=32, n_head=2), "pretrained", 1, True, 0, vocab
        )


def test_size_is_checked_against_the_announced_length(tmp_path, monkeypatch):
    """A server that announces another length than the pinned size: nothing is
    downloaded."""
    (tmp_path / "empty").mkdir()
    monkeypatch.setenv("RCUTIL_DATA_DIR", str(tmp_path / "empty"))
    monkeypatch.setenv("RCUTIL_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(data, "ASSETS", {})
    src = tmp_path / "server" / "model.safetensors"
    src.parent.mkdir()
    src.write_bytes(b"x" * 10)
    data.register(
        data.Asset(
            "w/model.safetensors",
            src.as_uri(),
            hashlib.sha256(b"x" * 10).hexdigest(),
            size=11,
        )
    )
    with pytest.raises(data.DataError, match="announces 10 bytes.*11"):
        data.find("w/model.safetensors", progress=False)
    assert not (tmp_path / "cache" / "w" / "model.safetensors").exists()
    data.register(
        data.Asset(
            "w/model.safetensors",
            src.as_uri(),
            hashlib.sha256(b"x" * 10).hexdigest(),
            size=10,
        )
    )
    assert data.find("w/model.safetensors", progress=False).read_bytes() == b"x" * 10


def test_offline_error_names_the_url_and_where_to_put_the_file(tmp_path, monkeypatch):
    (tmp_path / "empty").mkdir()
    monkeypatch.setenv("RCUTIL_DATA_DIR", str(tmp_path / "empty"))
    monkeypatch.setenv("RCUTIL_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(data, "ASSETS", {})
    url = (tmp_path / "unreachable" / "model.safetensors").as_uri()
    data.register(
        data.Asset(GPT2_SMALL.relpath, url, GPT2_SMALL.sha256, size=GPT2_SMALL.size)
    )
    with pytest.raises(data.DataError) as err:
        data.find(GPT2_SMALL.relpath, progress=False)
    msg = str(err.value)
    assert (
        url in msg
        and str(tmp_path / "cache" / GPT2_SMALL.relpath) in msg
        and "RCUTIL_DATA_DIR" in msg
    )


@pytest.fixture
def sst2_files():
    """The SST-2 and tokenizer files, found before :func:`checkpoint` moves the data
    folder."""
    return {rel: data.find(rel) for rel in sst2.data_files(replace(SETTINGS, inits=()))}


@pytest.mark.slow
def test_a_run_with_a_pretrained_and_a_scratch_arm(
    sst2_files, checkpoint, tmp_path, monkeypatch
):
    """``run`` with both inits, as the paper profile has them, at a tiny size: every arm
    of both, the control from scratch, a result that survives the store's JSON, and the
    claims of each init in rows of their own."""
    for rel, path in sst2_files.items():
        (tmp_path / "data" / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "data" / rel).symlink_to(path)
    settings = replace(
        SETTINGS,
        inits=("pretrained", "scratch"),
        layers=(1, 2),
        n_train=48,
        n_train_eval=16,
        n_dev=8,
        max_len=64,
        steps=4,
        eval_every=2,
        data_seed=0,
        seeds=(0, 1),
        control_seeds=1,
        threads=1,
        lr_grid={
            "pretrained": sst2.Rates.every(w=(1e-3,), wo=(1e-3, 1e-2), depths=2),
            "scratch": sst2.Rates.every(w=(1e-3,), wo=(1e-3,), depths=2),
        },
    )
    monkeypatch.setattr(sst2, "MAX_EXTENSIONS", 0)  # the grids as given
    result = sst2.run(settings, progress=False)
    result = sst2.Result.from_json(result.to_json())
    assert [(r.init, r.layers, r.residual) for r in result.runs] == [
        (init, L, w)
        for init in ("pretrained", "scratch")
        for L in (1, 2)
        for w in (True, False)
    ]
    assert [len(s.lr_grid) for s in result.selections[:4]] == [1, 2, 1, 2]
    assert result.control.layers == 2 and len(result.control.final_error) == 1
    assert all(r.train_error.shape == (2, 3) for r in result.runs)
    keys = [c.key for c in verdicts.claims(result)]
    assert keys == [
        f"sst2-{claim}{tag}"
        for tag in ("-pretrained", "")
        for claim in ("lower", "depth", "noresidual")
    ]
    assert verdicts.checks(result)
