"""Training the GPT-2 classifier on SST-2: the recipe of the SST-2 experiment
(:mod:`rcutil.experiments.sst2`), the same for every depth and residual switch.

* the data as tensors (:func:`prepare_data`) and the model of a run (:func:`make_model`:
  GPT-2's initialisation or GPT-2 small's published weights, with or without residuals);
* AdamW with weight decay on the matrices (eq. ``sst2-adamw``), a linear warm-up then a
  cosine decay of the rate (eq. ``sst2-schedule``), the gradient clipped in norm
  (:func:`train_step`), batches of sentences of similar length (:class:`Batches`);
* the evaluation of a model on a set of sentences: loss, error and the ranks of the last
  block's attention-layer output (:func:`evaluate`).

``settings`` is always the experiment's :class:`rcutil.experiments.sst2.Settings`.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import replace

import torch
from torch.nn import functional as F

from . import gpt2, sst2_data
from .data import find
from .linalg import effective_rank, stable_rank
from .progress import steps

#: ``scratch``: GPT-2's initialisation; ``pretrained``: GPT-2 small's published weights.
INITS = ("scratch", "pretrained")
PRECISIONS = ("float32", "bf16")


def prepare_data(settings) -> dict:
    """``(tokens, lengths, labels)`` of the training subset (``train``), its evaluation
    subset (``train_eval``) and dev, right-padded, tokens numbered in ``vocabulary``
    (the GPT-2 ids they use, :func:`rcutil.sst2_data.vocabulary`)."""
    train, dev = sst2_data.load_split("train"), sst2_data.load_split("dev")
    gen = torch.Generator().manual_seed(settings.data_seed)
    order = torch.randperm(len(train), generator=gen)
    n_train = len(train) if settings.n_train is None else settings.n_train
    if not 1 <= settings.n_train_eval <= n_train:
        raise ValueError(
            f"n_train_eval must lie in [1, n_train={n_train}], got "
            f"{settings.n_train_eval}"
        )
    rows = {
        "train": order[:n_train].tolist(),
        "dev": list(range(len(dev)))
        if settings.n_dev is None
        else torch.randperm(len(dev), generator=gen)[: settings.n_dev].tolist(),
    }
    split = {"train": train, "dev": dev}
    tok = sst2_data.gpt2_tokenizer()
    ids = {
        k: [
            x[: settings.max_len]
            for x in sst2_data.encode([split[k].sentences[i] for i in rows[k]], tok)
        ]
        for k in split
    }
    vocab = sst2_data.vocabulary(ids["train"], ids["dev"])
    out = {}
    for k in split:
        tokens, lengths = sst2_data.pad_batch(ids[k], max_len=settings.max_len)
        out[k] = (
            sst2_data.to_compact(tokens, vocab),
            lengths,
            torch.tensor([split[k].labels[i] for i in rows[k]]),
        )
    n_eval = settings.n_train_eval
    return {
        **out,
        "train_eval": tuple(t[:n_eval] for t in out["train"]),
        "vocabulary": vocab,
        "n_train_rows": len(train),
    }


def pretrained_weights(settings):
    """GPT-2 small's file (found and checked by :func:`rcutil.data.find`) and its
    tensors for the deepest model of the run, read once."""
    path = find(gpt2.GPT2_SMALL.relpath)
    return path, gpt2.read_hf_gpt2(path, max(settings.layers))


def make_model(
    settings,
    init: str,
    layers: int,
    residual: bool,
    seed: int,
    vocab: torch.Tensor,
    device="cpu",
    *,
    weights=None,
    scaled_projections: bool = True,
) -> gpt2.GPT2Classifier:
    """The model of one run, its embedding cut to the rows of ``vocab``.

    ``scratch``: GPT-2's initialisation of the 50,257-token model from ``seed`` (output
    projections scaled by ``1/sqrt(2L)`` unless ``scaled_projections`` is false), then
    the rows of ``vocab`` kept. ``pretrained``: GPT-2 small's first ``layers`` blocks
    (``weights`` from :func:`pretrained_weights`, else read now), a new head from
    ``seed``. Without residuals the same weights lose both skips (eq.
    ``sst2-block-wo``)."""
    config = gpt2.GPT2Config(
        n_layer=layers,
        n_head=settings.n_head,
        d_model=settings.d_model,
        d_ff=settings.d_ff,
        residual=residual,
        scaled_projections=scaled_projections,
    )
    if init == "scratch":
        model = gpt2.GPT2Classifier(config, seed=seed)
    elif init == "pretrained":
        path, state = weights or pretrained_weights(replace(settings, layers=(layers,)))
        model = gpt2.from_hf_state_dict(
            state, layers, residual=residual, seed=seed, config=config, source=str(path)
        )
    else:
        raise ValueError(f"init must be one of {INITS}, got {init!r}")
    return model.keep_tokens(vocab).to(device)


def lr_factor(step: int, settings) -> float:
    """Eq. ``sst2-schedule``: linear warm-up over ``warmup * steps`` steps, then a
    cosine decay to ``min_lr_ratio`` of the peak rate."""
    warm = max(1, int(settings.warmup * settings.steps))
    if step < warm:
        return (step + 1) / warm
    t = (step - warm) / max(1, settings.steps - warm)
    r = settings.min_lr_ratio
    return r + (1 - r) * 0.5 * (1 + math.cos(math.pi * t))


def make_optimizer(model: gpt2.GPT2Classifier, settings, lr: float):
    """AdamW (eq. ``sst2-adamw``) at peak rate ``lr``, weight decay on the matrices only
    (not on biases and LayerNorm gains), and the schedule :func:`lr_factor`."""
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    groups = [
        {"params": decay, "weight_decay": settings.weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]
    opt = torch.optim.AdamW(groups, lr=lr, betas=tuple(settings.betas), fused=True)
    return opt, torch.optim.lr_scheduler.LambdaLR(opt, lambda t: lr_factor(t, settings))


def autocast_dtype(settings, device) -> torch.dtype | None:
    """``torch.bfloat16`` for ``precision`` ``bf16`` on a CUDA GPU that supports it,
    else ``None`` (float32); bf16 asked for where it cannot run gives a warning."""
    if settings.precision not in PRECISIONS:
        raise ValueError(
            f"precision must be one of {PRECISIONS}, got {settings.precision!r}"
        )
    if settings.precision == "float32":
        return None
    if (
        str(device).startswith("cuda")
        and torch.cuda.is_available()
        and torch.cuda.is_bf16_supported()
    ):
        return torch.bfloat16
    warnings.warn(
        f"precision bf16 needs a CUDA device with bf16 support; {device} "
        f"runs in float32",
        RuntimeWarning,
        stacklevel=2,
    )
    return None


def train_step(
    model,
    opt,
    sched,
    tokens,
    lengths,
    labels,
    *,
    grad_clip: float,
    amp: torch.dtype | None = None,
) -> torch.Tensor:
    """One step: eqs. ``sst2-embed``-``sst2-head``, the mean cross-entropy, backward,
    the gradient clipped to norm ``grad_clip``, AdamW and the schedule. Returns the
    batch loss as a tensor, without waiting for it."""
    with torch.autocast(
        tokens.device.type, dtype=amp or torch.float32, enabled=amp is not None
    ):
        loss = F.cross_entropy(model(tokens, lengths), labels)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    opt.step()
    sched.step()
    return loss.detach()


@torch.no_grad()
def evaluate(
    model,
    tokens,
    lengths,
    labels,
    *,
    batch_size=128,
    device="cpu",
    rank: bool = False,
    amp: torch.dtype | None = None,
) -> dict:
    """Loss, error (1 - accuracy) and, with ``rank``, the stable and effective ranks of
    the last block's ``z`` stacked over every real token; sentences go in order of
    length, ``batch_size`` at a time."""
    model.eval()
    order = torch.argsort(lengths)
    loss_sum, wrong, rows = 0.0, 0, []
    for i in steps(
        range(0, len(order), batch_size),
        desc="evaluation",
        unit="batch",
        progress=False,
        spread=True,  # batches grow with the sentences: --estimate times a few across
        probe_once=True,
    ):
        idx = order[i : i + batch_size]
        T = int(lengths[idx].max())
        x, n, y = (t[idx].to(device) for t in (tokens, lengths, labels))
        x = x[:, :T]
        with torch.autocast(
            x.device.type, dtype=amp or torch.float32, enabled=amp is not None
        ):
            out = model(x, n, return_attention=True) if rank else None
            logits = (out.logits if rank else model(x, n)).float()
        loss_sum += float(F.cross_entropy(logits, y, reduction="sum"))
        wrong += int((logits.argmax(-1) != y).sum())
        if rank:
            real = torch.arange(T, device=device) < n[:, None]
            rows.append(out.last_attention[real])
    model.train()
    res = {"loss": loss_sum / len(order), "error": wrong / len(order)}
    if rank:
        Z = torch.cat(rows).float()
        res.update(
            stable_rank=float(stable_rank(Z)), effective_rank=float(effective_rank(Z))
        )
    return res


class Batches:
    """The training batches of one run, epoch after epoch
    (:func:`rcutil.sst2_data.length_batches`), each cut to its longest sentence; the
    order is fixed by ``seed``."""

    def __init__(self, data: tuple, batch_size: int, seed: int, device="cpu"):
        self.lengths = data[1]  # on the host: batch lengths known without a sync
        self.data = tuple(t.to(device) for t in data)
        self.batch_size, self.device = batch_size, device
        self.gen = torch.Generator().manual_seed(10_000 + seed)
        self.queue: list = []

    def next(self):
        """``(tokens (B, T), lengths (B,), labels (B,))`` of the next batch."""
        if not self.queue:
            epoch = sst2_data.length_batches(self.lengths, self.batch_size, self.gen)
            rows = torch.cat(epoch).to(self.device).split([len(b) for b in epoch])
            longest = [int(self.lengths[b].max()) for b in epoch]
            self.queue = list(zip(rows, longest))[::-1]
        rows, T = self.queue.pop()
        tokens, lengths, labels = self.data
        return tokens[rows, :T], lengths[rows], labels[rows]
