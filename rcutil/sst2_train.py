"""Training the GPT-2 classifier on SST-2: the recipe of the SST-2 experiment
(:mod:`rcutil.experiments.sst2`), the same for every depth and residual switch.

* the data as tensors (:func:`prepare_data`) and the model of a run (:func:`make_model`:
  GPT-2's initialisation or GPT-2 small's published weights, with or without residuals);
* AdamW with weight decay on the matrices (eq. ``sst2-adamw``), a linear warm-up then a
  cosine decay of the rate (eq. ``sst2-schedule``), the gradient clipped in norm
  (:func:`train_step`), batches of sentences of similar length (:class:`Batches`);
* the evaluation of a model on a set of sentences: loss, error and the ranks of the last
  block's attention-layer output (:func:`evaluate`);
* several models of one architecture trained as one (:class:`Ensemble`): the seeds of an
  arm, or the rates of its grid, with their weights stacked along a leading member axis
  and one forward and backward for all, each member with its own rate, clipping and
  AdamW state.

``settings`` is always the experiment's :class:`rcutil.experiments.sst2.Settings`.
"""

from __future__ import annotations

import copy
import math
import time
import warnings
from dataclasses import replace
from typing import NamedTuple

import torch
from torch.func import functional_call, stack_module_state, vmap
from torch.nn import functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from . import gpt2, sst2_data
from .data import find
from .linalg import effective_rank, stable_rank
from .progress import same
from .progress import steps as loop

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
    for i in loop(
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
    (:func:`rcutil.sst2_data.length_batches`), each cut to its longest sentence. Which
    sentences share a batch is fixed by ``seed``, the order of the batches by
    ``order_seed`` (by ``seed`` too when it is ``None``): runs that share
    ``order_seed`` get, at every step, batches of sentences of the same lengths, so
    that they can be stacked."""

    def __init__(
        self,
        data: tuple,
        batch_size: int,
        seed: int,
        device="cpu",
        *,
        order_seed: int | None = None,
    ):
        self.lengths = data[1]  # on the host: batch lengths known without a sync
        self.data = tuple(t.to(device) for t in data)
        self.batch_size, self.device = batch_size, device
        self.gen = torch.Generator().manual_seed(10_000 + seed)
        self.order = (
            None
            if order_seed is None
            else torch.Generator().manual_seed(20_000 + order_seed)
        )
        self.queue: list = []

    def next(self):
        """``(tokens (B, T), lengths (B,), labels (B,))`` of the next batch."""
        if not self.queue:
            epoch = sst2_data.length_batches(
                self.lengths, self.batch_size, self.gen, order=self.order
            )
            rows = torch.cat(epoch).to(self.device).split([len(b) for b in epoch])
            longest = [int(self.lengths[b].max()) for b in epoch]
            self.queue = list(zip(rows, longest))[::-1]
        rows, T = self.queue.pop()
        tokens, lengths, labels = self.data
        return tokens[rows, :T], lengths[rows], labels[rows]


class Ensemble:
    """K models of one architecture trained as one, each exactly as
    :func:`train_step` trains it alone.

    The weights are stacked along a leading member axis
    (:func:`torch.func.stack_module_state`) and one forward and backward computes every
    member's loss on its own batch (:func:`torch.func.vmap` of
    :func:`torch.func.functional_call` of the model, attention through PyTorch's math
    kernel, the one with batching rules). Each model of ``models`` then holds views of
    its member's weights: it has its own optimizer (:func:`make_optimizer` at its own
    peak rate), its gradient is clipped to its own norm, and it can be evaluated as
    any model (:func:`evaluate`) at any step."""

    def __init__(self, models: list, settings: dict, lrs: list[float]):
        if not models or len(models) != len(lrs):
            raise ValueError(
                f"an ensemble needs one peak rate per model: got {len(models)} "
                f"models and {len(lrs)} rates"
            )

        def architecture(m):  # the scale of the projections is only a starting point
            return replace(m.cfg, scaled_projections=True), m.head.weight.dtype

        first = models[0]
        for m in models[1:]:
            if architecture(m) != architecture(first):
                raise ValueError(
                    "the models of an ensemble must share one architecture and dtype: "
                    f"{m.cfg} against {first.cfg}; train other sizes apart"
                )
        params, self.buffers = stack_module_state(models)
        self.params = {k: v.detach().requires_grad_() for k, v in params.items()}
        for k, m in enumerate(models):  # each model reads and writes its member
            for name, p in m.named_parameters():
                p.data = self.params[name].detach()[k]
        self.models, self.grad_clip = models, settings.grad_clip
        self.optimizers = [
            make_optimizer(m, settings, lr) for m, lr in zip(models, lrs)
        ]
        self.base = copy.deepcopy(first).to("meta")

    def __len__(self) -> int:
        return len(self.models)

    def losses(self, tokens, lengths, labels) -> torch.Tensor:
        """The mean cross-entropy of every member on its own batch: ``tokens`` (K, B,
        T), ``lengths`` and ``labels`` (K, B); returns (K,)."""

        def loss(params, buffers, x, n, y):
            logits = functional_call(self.base, (params, buffers), (x, n))
            return F.cross_entropy(logits, y)

        with sdpa_kernel(SDPBackend.MATH):  # the fused kernels have no batching rule
            return vmap(loss)(self.params, self.buffers, tokens, lengths, labels)

    def step(self, tokens, lengths, labels, *, amp: torch.dtype | None = None):
        """One step of every member: :func:`train_step`'s forward, cross-entropy,
        backward, clipping, AdamW and schedule, the members stacked. Returns the (K,)
        batch losses as a tensor, without waiting for them."""
        with torch.autocast(
            tokens.device.type, dtype=amp or torch.float32, enabled=amp is not None
        ):
            loss = self.losses(tokens, lengths, labels)
        grads = torch.autograd.grad(loss.sum(), list(self.params.values()))
        # contiguous: the fused AdamW step reads a gradient's memory in order
        grads = {name: g.contiguous() for name, g in zip(self.params, grads)}
        for k, (m, (opt, sched)) in enumerate(zip(self.models, self.optimizers)):
            for name, p in m.named_parameters():
                p.grad = grads[name][k]
            torch.nn.utils.clip_grad_norm_(m.parameters(), self.grad_clip)
            opt.step()
            sched.step()
        return loss.detach()


class Member(NamedTuple):
    """One model of an ensemble: its seed (weights and which sentences share a batch),
    its peak rate, and whether its output projections start scaled by ``1/sqrt(2L)``."""

    seed: int
    lr: float
    scaled_projections: bool = True


#: What :func:`train` records per member at every evaluation step.
CURVES = ("train_error", "train_loss", "batch_loss", "stable_rank", "effective_rank")


def train(
    settings: dict,
    data: dict,
    init: str,
    layers: int,
    residual: bool,
    members: list[Member],
    *,
    record: bool = True,
    device="cpu",
    weights=None,
    progress: bool = False,
    desc: str = "",
) -> list[dict]:
    """Train the models ``members`` of one architecture (``init``, ``layers``,
    ``residual``) for ``settings.steps`` steps, as one :class:`Ensemble`.

    Every member draws its own batches (:class:`Batches` from its seed) in the order of
    ``settings.data_seed``, so that all members' batches have the same shape at
    every step. With ``record``, each member is evaluated at step 0 and every
    ``eval_every`` steps (ranks included) and on dev at the end; without it, only its
    final training loss and error. The host reads the losses only at an evaluation.
    With ``record`` a member whose loss stops being finite raises
    ``FloatingPointError`` naming it; without it, that member's curves end in ``inf``
    (loss) and ``nan`` (error) and the others go on. Returns one dict per member:
    ``steps``, the lists of :data:`CURVES`, ``dev_accuracy``, ``seconds`` (of the whole
    ensemble, per member) and ``parameters``."""
    models = [
        make_model(
            settings,
            init,
            layers,
            residual,
            m.seed,
            data["vocabulary"],
            device,
            weights=weights,
            scaled_projections=m.scaled_projections,
        )
        for m in members
    ]
    ensemble = Ensemble(models, settings, [m.lr for m in members])
    amp = autocast_dtype(settings, device)
    batches = [
        Batches(
            data["train"],
            settings.batch_size,
            m.seed,
            device,
            order_seed=settings.data_seed,
        )
        for m in members
    ]
    curves = [
        {"steps": [], **{k: [] for k in CURVES}, "dev_accuracy": math.nan}
        for _ in members
    ]
    finite = torch.ones(len(members), dtype=torch.bool)

    def measure(step, batch_loss):
        for k, (model, curve) in enumerate(zip(models, curves)):
            if finite[k]:
                tr = evaluate(
                    model, *data["train_eval"], device=device, rank=record, amp=amp
                )
            else:
                tr = {"loss": math.inf, "error": math.nan}
                tr |= {"stable_rank": math.nan, "effective_rank": math.nan}
            curve["steps"].append(step)
            curve["train_loss"].append(tr["loss"])
            curve["train_error"].append(tr["error"])
            curve["batch_loss"].append(
                tr["loss"] if batch_loss is None else float(batch_loss[k])
            )
            if record:
                curve["stable_rank"].append(tr["stable_rank"])
                curve["effective_rank"].append(tr["effective_rank"])

    start, total, done = time.perf_counter(), settings.steps, 0
    every = settings.eval_every if record else total
    if record:
        measure(0, None)
    tag = desc or f"L={layers} {'w' if residual else 'wo'}, {len(members)} models"
    for end in loop(
        [*range(every, total, every), total],
        desc=f"{tag}: evaluations",
        unit="evaluation",
        progress=progress,
        shape=same,
    ):
        running = torch.zeros(len(members), device=device)
        for _ in loop(
            range(done, end),
            desc=tag,
            unit="optimizer step",
            progress=progress,
            probe_once=True,
        ):
            stacked = (torch.stack(t) for t in zip(*(b.next() for b in batches)))
            running += ensemble.step(*stacked, amp=amp)
        batch_loss = (running / (end - done)).cpu()  # the one wait for the device
        bad = finite & ~torch.isfinite(batch_loss)
        if bad.any():
            k = int(bad.nonzero()[0])
            if record:
                raise FloatingPointError(
                    f"the loss became {float(batch_loss[k])} between steps {done} and "
                    f"{end} ({init}, L={layers} {'w' if residual else 'wo'}, "
                    f"lr={members[k].lr:g}, seed={members[k].seed}); lower lr_grid in "
                    f"SETTINGS"
                )
            finite &= ~bad
        measure(end, batch_loss)
        done = end
    for k, (model, curve) in enumerate(zip(models, curves)):
        if record and finite[k]:
            dev = evaluate(model, *data["dev"], device=device, amp=amp)
            curve["dev_accuracy"] = 1 - dev["error"]
        curve["seconds"] = (time.perf_counter() - start) / len(members)
        curve["parameters"] = model.num_parameters()
    return curves
