"""Experiment 2 of the paper: SST-2 with the GPT-2 architecture at L = 2, 6, 10, with and without residuals.

``python -m rcutil sst2 --profile P --out DIR`` writes ``DIR/sst2.json`` and two figures;
``python -m rcutil sst2 --profile P --estimate [--device cuda]`` times a few steps and prints
what the whole run would cost, without running it.

Every (L, residual) pair gets the same recipe: AdamW, linear warm-up then cosine decay,
batches of sentences of similar length, gradient clipping, the same data order and seeds;
only the depth, the residual switch and the learning rate change. The learning rate of each
pair is picked by the same rule (:func:`pilot`): a short run at every rate of ``lr_grid``,
and the rate with the lowest training loss at its end wins. ``init`` says where the weights
start: ``scratch`` (GPT-2's initialisation) or ``pretrained`` (the published GPT-2 small
weights, truncated to the first L blocks, with a new head). Along training the run records,
at every evaluation step, on a fixed subset of the training sentences: the cross-entropy
loss, the training error (1 - accuracy) and the stable and effective ranks of the last block's
attention-layer output ``z`` (stacked over the real tokens, see :mod:`rcutil.linalg`); and at
the end the accuracy on (a fixed subset of) the dev split.

The embedding keeps only the rows of the token ids that occur in the data
(:meth:`rcutil.gpt2.GPT2Classifier.keep_tokens`); a row that no input reads changes no output,
so this is the full-vocabulary model, at a fraction of the cost.
"""
from __future__ import annotations

import math
import time
import warnings
from pathlib import Path

import torch
from torch.nn import functional as F

from ..claims import Claim, status
from ..data import find
from ..gpt2 import GPT2_SMALL, GPT2Classifier, GPT2Config, from_hf_state_dict, read_hf_gpt2
from ..linalg import effective_rank, stable_rank
from ..progress import steps as loop
from ..sst2_data import (
    SPLITS,
    TOKENIZER_FILES,
    encode,
    gpt2_tokenizer,
    length_batches,
    load_split,
    pad_batch,
    to_compact,
    vocabulary,
)
from ..threads import torch_threads
from ..validate import device as check_device

#: ``init``: ``scratch`` (GPT-2's initialisation, seeded) or ``pretrained`` (GPT-2 small's
#: published weights, :data:`rcutil.gpt2.GPT2_SMALL`; the sizes must be GPT-2 small's).
#: ``n_train``: training sentences used (a random subset, fixed by ``data_seed``; ``None`` = all
#: 67,349); ``n_train_eval``: the fixed subset of those on which training error, loss and
#: ranks are measured; ``n_dev``: dev sentences (``None`` = all 872). ``lr_grid`` and
#: ``pilot_steps``: the learning rates tried and the length of each pilot (:func:`pilot`).
#: ``precision``: ``float32``, or ``bf16`` (autocast on a CUDA device that supports it).
#: ``threads``: torch CPU threads while training (``None``: leave torch's default). On two
#: shared cores, one thread ran these small matrix products about 4 times faster than two.
SETTINGS = {
    "ci": dict(init="scratch", d_model=64, n_head=1, d_ff=256, layers=[2, 6, 10], residual=[True, False],
               n_train=256, n_train_eval=256, n_dev=256, max_len=64, batch_size=16, steps=80,
               eval_every=20, lr_grid=[3e-4, 1e-3], pilot_steps=20, warmup=0.1, min_lr_ratio=0.1,
               weight_decay=0.01, betas=[0.9, 0.999], grad_clip=1.0, seeds=[0], data_seed=0,
               precision="float32", threads=1),
    "book": dict(init="scratch", d_model=128, n_head=2, d_ff=512, layers=[2, 6, 10], residual=[True, False],
                 n_train=2048, n_train_eval=512, n_dev=None, max_len=64, batch_size=32, steps=300,
                 eval_every=50, lr_grid=[1e-4, 3e-4, 1e-3], pilot_steps=60, warmup=0.1, min_lr_ratio=0.1,
                 weight_decay=0.01, betas=[0.9, 0.999], grad_clip=1.0, seeds=[0, 1], data_seed=0,
                 precision="float32", threads=1),
    # fine-tuning GPT-2 small: about two epochs of the 67,349 sentences at batch 32
    "paper": dict(init="pretrained", d_model=768, n_head=12, d_ff=3072, layers=[2, 6, 10],
                  residual=[True, False], n_train=None, n_train_eval=4096, n_dev=None, max_len=64,
                  batch_size=32, steps=4200, eval_every=300, lr_grid=[1e-5, 3e-5, 1e-4], pilot_steps=300,
                  warmup=0.1, min_lr_ratio=0.1, weight_decay=0.01, betas=[0.9, 0.999], grad_clip=1.0,
                  seeds=[0, 1, 2], data_seed=0, precision="bf16", threads=None),
}

INITS = ("scratch", "pretrained")
PRECISIONS = ("float32", "bf16")

#: "Barely trains": a final training error within this distance of the majority-label error.
BARELY = 0.05


# --------------------------------------------------------------------------- data
def data_files(settings: dict) -> list[str]:
    """The data files the experiment reads (their sha256 is part of the stored result's key)."""
    files = [SPLITS["train"], SPLITS["dev"], *TOKENIZER_FILES]
    return files + [GPT2_SMALL.relpath] if settings["init"] == "pretrained" else files


def prepare_data(settings: dict) -> dict:
    """Tokenised, right-padded tensors of the training subset, its evaluation subset and dev.

    Returns a dict with ``train``, ``train_eval`` and ``dev``, each ``(tokens, lengths,
    labels)`` with tokens numbered in ``vocabulary`` (the sorted GPT-2 ids that occur in
    them, see :func:`rcutil.sst2_data.vocabulary`), plus ``n_train_rows`` (rows of the full
    training file).
    """
    train, dev = load_split("train"), load_split("dev")
    gen = torch.Generator().manual_seed(settings["data_seed"])
    order = torch.randperm(len(train), generator=gen)
    n_train = len(train) if settings["n_train"] is None else settings["n_train"]
    if not 1 <= settings["n_train_eval"] <= n_train:
        raise ValueError(f"n_train_eval must lie in [1, n_train={n_train}], got {settings['n_train_eval']}")
    pick = order[:n_train].tolist()
    dev_pick = (list(range(len(dev))) if settings["n_dev"] is None
                else torch.randperm(len(dev), generator=gen)[:settings["n_dev"]].tolist())
    tok = gpt2_tokenizer()
    ids = {name: [x[:settings["max_len"]] for x in encode([split.sentences[i] for i in rows], tok)]
           for name, split, rows in (("train", train, pick), ("dev", dev, dev_pick))}
    vocab = vocabulary(ids["train"], ids["dev"])

    def tensors(name, split, rows):
        tokens, lengths = pad_batch(ids[name], max_len=settings["max_len"])
        return to_compact(tokens, vocab), lengths, torch.tensor([split.labels[i] for i in rows])

    tr = tensors("train", train, pick)
    return {"train": tr, "train_eval": tuple(t[:settings["n_train_eval"]] for t in tr),
            "dev": tensors("dev", dev, dev_pick), "vocabulary": vocab, "n_train_rows": len(train)}


# --------------------------------------------------------------------------- model and training
def pretrained_weights(settings: dict) -> tuple[Path, dict[str, torch.Tensor]]:
    """The path of GPT-2 small's file (found and checked by :func:`rcutil.data.find`) and its
    tensors for the deepest model of the run (read once, truncated per model)."""
    path = find(GPT2_SMALL.relpath)
    return path, read_hf_gpt2(path, max(settings["layers"]))


def make_model(settings: dict, layers: int, residual: bool, seed: int, vocab: torch.Tensor, device="cpu",
               *, weights: tuple[Path, dict[str, torch.Tensor]] | None = None) -> GPT2Classifier:
    """The model of one run, with an embedding of the rows of ``vocab`` only.

    ``init="scratch"``: GPT-2's initialisation of the full 50,257-token model from ``seed``,
    then the rows of ``vocab`` kept, so the model is the full-vocabulary model restricted to
    the rows it reads. ``init="pretrained"``: the published GPT-2 small weights (``weights``
    from :func:`pretrained_weights`, else read now), the first ``layers`` blocks, the rows of
    ``vocab`` gathered from the full table, and a new head drawn from ``seed``; a tensor of
    another shape than the settings ask for raises ``ValueError`` naming the file and the
    tensor. Without residuals the same weights are wired without both skips (eq.
    ``sst2-block-wo``).
    """
    config = GPT2Config(n_layer=layers, n_head=settings["n_head"], d_model=settings["d_model"],
                        d_ff=settings["d_ff"], residual=residual)
    if settings["init"] == "scratch":
        model = GPT2Classifier(config, seed=seed)
    elif settings["init"] == "pretrained":
        path, state = weights if weights is not None else pretrained_weights(dict(settings, layers=[layers]))
        model = from_hf_state_dict(state, layers, residual=residual, seed=seed, config=config, source=str(path))
    else:
        raise ValueError(f"init must be one of {INITS}, got {settings['init']!r}")
    return model.keep_tokens(vocab).to(device)


def lr_factor(step: int, settings: dict) -> float:
    """The schedule of eq. ``sst2-schedule``: linear warm-up over ``warmup * steps`` steps, then
    cosine decay to ``min_lr_ratio`` of the peak rate."""
    warm = max(1, int(settings["warmup"] * settings["steps"]))
    if step < warm:
        return (step + 1) / warm
    t = (step - warm) / max(1, settings["steps"] - warm)
    return settings["min_lr_ratio"] + (1 - settings["min_lr_ratio"]) * 0.5 * (1 + math.cos(math.pi * t))


def make_optimizer(model: GPT2Classifier, settings: dict, lr: float):
    """AdamW (eq. ``sst2-adamw``) at peak rate ``lr``, weight decay on the matrices only (not on
    biases and LayerNorm gains), and the schedule :func:`lr_factor`."""
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": settings["weight_decay"]},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=lr, betas=tuple(settings["betas"]), fused=True)
    return opt, torch.optim.lr_scheduler.LambdaLR(opt, lambda step: lr_factor(step, settings))


def autocast_dtype(settings: dict, device) -> torch.dtype | None:
    """``torch.bfloat16`` when ``precision`` is ``bf16`` and the device is a CUDA GPU that
    supports it, else ``None`` (float32). bf16 asked for where it cannot run gives a warning."""
    if settings["precision"] not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, got {settings['precision']!r}")
    if settings["precision"] == "float32":
        return None
    if str(device).startswith("cuda") and torch.cuda.is_available() and torch.cuda.is_bf16_supported():
        return torch.bfloat16
    warnings.warn(f"precision bf16 needs a CUDA device with bf16 support; {device} runs in float32",
                  RuntimeWarning, stacklevel=2)
    return None


def train_step(model: GPT2Classifier, opt, sched, tokens, lengths, labels, *, grad_clip: float,
               amp: torch.dtype | None = None) -> torch.Tensor:
    """One optimizer step on one batch: the forward pass of eqs. ``sst2-embed``-``sst2-head``,
    the mean cross-entropy, backward, the gradient clipped to norm ``grad_clip``, AdamW (eq.
    ``sst2-adamw``) and the schedule. Returns the batch loss as a tensor, without waiting for it."""
    with torch.autocast(tokens.device.type, dtype=amp or torch.float32, enabled=amp is not None):
        loss = F.cross_entropy(model(tokens, lengths), labels)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    opt.step()
    sched.step()
    return loss.detach()


@torch.no_grad()
def evaluate(model: GPT2Classifier, tokens, lengths, labels, *, batch_size=64, device="cpu",
             rank: bool = False, amp: torch.dtype | None = None) -> dict:
    """Loss, error (1 - accuracy) and, with ``rank``, the stable and effective ranks of the last
    block's ``z`` stacked over all real (non-pad) tokens of the set.

    The sentences go through in order of length, ``batch_size`` at a time, so that each batch
    is padded to little more than its own sentences."""
    model.eval()
    order = torch.argsort(lengths)  # similar lengths together: little padding
    loss_sum = torch.zeros((), device=device)
    correct = torch.zeros((), device=device, dtype=torch.long)
    rows = []
    for i in range(0, len(order), batch_size):
        idx = order[i:i + batch_size]
        T = int(lengths[idx].max())
        x, n, y = tokens[idx, :T].to(device), lengths[idx].to(device), labels[idx].to(device)
        with torch.autocast(x.device.type, dtype=amp or torch.float32, enabled=amp is not None):
            out = model(x, n, return_attention=True)
        loss_sum += F.cross_entropy(out.logits.float(), y, reduction="sum")
        correct += (out.logits.argmax(-1) == y).sum()
        if rank:
            mask = torch.arange(T, device=device)[None, :] < n[:, None]
            rows.append(out.last_attention[mask].float())
    model.train()
    res = {"loss": float(loss_sum) / len(order), "error": 1 - int(correct) / len(order)}
    if rank:
        Z = torch.cat(rows)
        res["stable_rank"] = float(stable_rank(Z))
        res["effective_rank"] = float(effective_rank(Z))
    return res


class Batches:
    """The training batches of one run, epoch after epoch (:func:`rcutil.sst2_data.length_batches`),
    on the device, each cut to its longest sentence; the order is fixed by ``seed``."""

    def __init__(self, data: tuple, batch_size: int, seed: int, device="cpu"):
        self.lengths = data[1]  # stays on the host: the batch lengths are known without a sync
        self.data = tuple(t.to(device) for t in data)
        self.batch_size, self.device = batch_size, device
        self.gen = torch.Generator().manual_seed(10_000 + seed)  # the same order for every model
        self.queue: list = []

    def _epoch(self) -> None:
        epoch = length_batches(self.lengths, self.batch_size, self.gen)
        rows = torch.cat(epoch).to(self.device).split([len(b) for b in epoch])
        self.queue = [(r, int(self.lengths[b].max())) for r, b in zip(rows, epoch)][::-1]

    def next(self):
        """``(tokens (B, T), lengths (B,), labels (B,))`` of the next batch."""
        if not self.queue:
            self._epoch()
        rows, T = self.queue.pop()
        tokens, lengths, labels = self.data
        return tokens[rows, :T], lengths[rows], labels[rows]


def train_one(settings: dict, data: dict, layers: int, residual: bool, seed: int, lr: float, *,
              device="cpu", progress=False, weights=None, rank: bool = True, dev: bool = True) -> dict:
    """Train one model at peak rate ``lr``; return its histories (one entry per evaluation step).

    The losses stay on the device between evaluations: the loop never waits for the device, and
    a non-finite loss is reported at the next evaluation, with the steps it happened between.
    """
    torch.manual_seed(seed)
    model = make_model(settings, layers, residual, seed, data["vocabulary"], device, weights=weights)
    opt, sched = make_optimizer(model, settings, lr)
    amp = autocast_dtype(settings, device)
    batches = Batches(data["train"], settings["batch_size"], seed, device)
    hist = {k: [] for k in ("step", "train_loss", "train_error", "stable_rank", "effective_rank",
                            "batch_loss")}
    running, count, last = torch.zeros((), device=device), 0, 0

    def record(step, batch_loss):
        tr = evaluate(model, *data["train_eval"], device=device, rank=rank, amp=amp)
        hist["step"].append(step)
        hist["train_loss"].append(tr["loss"])
        hist["train_error"].append(tr["error"])
        hist["batch_loss"].append(tr["loss"] if batch_loss is None else batch_loss)
        if rank:
            hist["stable_rank"].append(tr["stable_rank"])
            hist["effective_rank"].append(tr["effective_rank"])

    start = time.perf_counter()
    record(0, None)
    desc = f"L={layers} {'w' if residual else 'wo'} lr {lr:g} seed {seed}"
    for step in loop(range(1, settings["steps"] + 1), desc=desc, unit="optimizer step",
                     progress=progress):
        loss = train_step(model, opt, sched, *batches.next(), grad_clip=settings["grad_clip"], amp=amp)
        running += loss
        count += 1
        if step % settings["eval_every"] == 0 or step == settings["steps"]:
            batch_loss = float(running) / count  # the one wait for the device per evaluation
            if not math.isfinite(batch_loss):
                raise FloatingPointError(
                    f"the loss became {batch_loss} between steps {last} and {step} (L={layers}, "
                    f"residual={residual}, lr={lr:g}, seed={seed}); lower lr_grid in SETTINGS")
            record(step, batch_loss)
            running, count, last = torch.zeros((), device=device), 0, step
    if dev:
        hist["dev_accuracy"] = 1 - evaluate(model, *data["dev"], device=device, amp=amp)["error"]
    hist["seconds"] = time.perf_counter() - start
    hist["parameters"] = model.num_parameters()
    return hist


def pilot(settings: dict, data: dict, layers: int, residual: bool, *, device="cpu", weights=None,
          progress=False) -> dict:
    """Pick the peak learning rate of one (L, residual) pair: the rule of eq. ``sst2-pilot``.

    For every rate of ``lr_grid``, the recipe of the full run compressed to ``pilot_steps``
    steps (warm-up and decay included), from the first seed's initialisation and data order;
    the rate whose model ends with the lowest loss on the training-evaluation subset wins (a
    pilot whose loss is not finite counts as infinite). Returns the grid, the losses and the rate.
    """
    short = dict(settings, steps=settings["pilot_steps"], eval_every=settings["pilot_steps"])
    losses, start = [], math.nan
    for lr in settings["lr_grid"]:
        try:
            hist = train_one(short, data, layers, residual, settings["seeds"][0], lr, device=device,
                             weights=weights, progress=progress, rank=False, dev=False)
        except FloatingPointError:
            losses.append(math.inf)
            continue
        start = hist["train_loss"][0]
        losses.append(hist["train_loss"][-1] if math.isfinite(hist["train_loss"][-1]) else math.inf)
    best = min(range(len(losses)), key=lambda i: losses[i])
    return {"lr_grid": list(settings["lr_grid"]), "loss": losses, "loss_start": start,
            "lr": settings["lr_grid"][best]}


def _mean(rows):
    return [sum(col) / len(col) for col in zip(*rows)]


def run(settings: dict, *, device: str = "cpu", progress: bool = True) -> dict:
    """Pick each pair's rate by a pilot, then train every (L, residual) pair for every seed;
    histories are averaged over seeds."""
    with torch_threads(settings["threads"]):
        return _run(settings, str(check_device(device)), progress)


def _run(settings: dict, device: str, progress: bool) -> dict:
    data = prepare_data(settings)
    weights = pretrained_weights(settings) if settings["init"] == "pretrained" else None
    amp = autocast_dtype(settings, device)
    runs = []
    keys = ("train_loss", "train_error", "stable_rank", "effective_rank", "batch_loss")
    for layers in settings["layers"]:
        for residual in settings["residual"]:
            chosen = pilot(settings, data, layers, residual, device=device, weights=weights, progress=progress)
            per_seed = [train_one(settings, data, layers, residual, seed, chosen["lr"], device=device,
                                  progress=progress, weights=weights)
                        for seed in settings["seeds"]]
            mean = {k: _mean([h[k] for h in per_seed]) for k in keys}
            runs.append({
                "layers": layers, "residual": residual, "lr": chosen["lr"], "pilot": chosen,
                "steps": per_seed[0]["step"],
                "train_error_history": mean["train_error"],
                "train_loss_history": mean["train_loss"],
                "batch_loss_history": mean["batch_loss"],
                "stable_rank_history": mean["stable_rank"],
                "effective_rank_history": mean["effective_rank"],
                "final_train_error": mean["train_error"][-1],
                "final_train_loss": mean["train_loss"][-1],
                "dev_accuracy": sum(h["dev_accuracy"] for h in per_seed) / len(per_seed),
                "stable_rank_last_attention": mean["stable_rank"][-1],
                "effective_rank_last_attention": mean["effective_rank"][-1],
                "parameters": per_seed[0]["parameters"],
                "seconds": sum(h["seconds"] for h in per_seed),
                "per_seed": {k: [h[k] for h in per_seed] for k in (*keys, "dev_accuracy")},
            })
    labels = data["train_eval"][2].float().mean()
    return {"settings": settings, "seeds": settings["seeds"], "n_train_rows": data["n_train_rows"],
            "n_train_used": len(data["train"][2]), "n_dev_used": len(data["dev"][2]),
            "vocabulary_size": len(data["vocabulary"]), "init": settings["init"],
            "precision": "bf16" if amp is not None else "float32",
            "majority_error": float(min(labels, 1 - labels)), "runs": runs}


# --------------------------------------------------------------------------- cost before a run
def estimate_settings(settings: dict) -> dict:
    """What ``--estimate`` probes: the run's settings with GPT-2's initialisation in place of
    the pretrained weights (the same shapes and cost, and no 548 MB download)."""
    return dict(settings, init="scratch")


def typical_batch(data: dict, settings: dict) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(tokens, lengths, labels)`` of the training batch (of one epoch of :class:`Batches`)
    whose padded length is nearest the epoch's mean: what one step costs on average."""
    lengths = data["train"][1]
    epoch = length_batches(lengths, settings["batch_size"], torch.Generator().manual_seed(0))
    padded = torch.stack([lengths[b].max() for b in epoch]).float()
    rows = epoch[int((padded - padded.mean()).abs().argmin())]
    tokens, lengths, labels = (t[rows] for t in data["train"])
    return tokens[:, :int(lengths.max())], lengths, labels


# --------------------------------------------------------------------------- results and figures
def find_run(result: dict, layers: int, residual: bool) -> dict:
    for r in result["runs"]:
        if r["layers"] == layers and r["residual"] == residual:
            return r
    raise ValueError(f"no run with layers={layers}, residual={residual} in the result")


def verdicts(result: dict) -> dict:
    """The three claims of experiment 2 as booleans, with the final training errors per depth.

    * ``lower_everywhere``: with residuals the final error is strictly lower at every depth;
    * ``falls_with_depth``: with residuals it strictly falls from each depth to the next;
    * ``deep_wo_stalls``: without residuals the deepest model ends within :data:`BARELY` of
      the majority-label error.
    """
    layers = result["settings"]["layers"]
    w = [find_run(result, L, True)["final_train_error"] for L in layers]
    wo = [find_run(result, L, False)["final_train_error"] for L in layers]
    return {
        "layers": layers, "error_w": w, "error_wo": wo, "majority_error": result["majority_error"],
        "lower_everywhere": all(a < b for a, b in zip(w, wo)),
        "falls_with_depth": all(b < a for a, b in zip(w, w[1:])),
        "deep_wo_stalls": wo[-1] >= result["majority_error"] - BARELY,
    }


def protocol_text(result: dict) -> str:
    """The protocol behind the result's numbers, in one line (for the report's rows)."""
    settings = result["settings"]
    start = ("GPT-2 small's published weights fine-tuned" if settings["init"] == "pretrained"
             else "GPT-2 architecture trained from scratch")
    n = "all" if settings["n_train"] is None else f"{settings['n_train']:,}"
    lrs = "/".join(f"{lr:g}" for lr in settings["lr_grid"])
    return (f"{start} (d = {settings['d_model']}, {n} training sentences, {settings['steps']:,} AdamW steps, "
            f"{len(result['seeds'])} seed(s)), each (L, residual) at its own learning rate from {{{lrs}}} "
            f"picked by a {settings['pilot_steps']}-step pilot")


def claims(result: dict) -> list[Claim]:
    """The three claims of experiment 2, read on :func:`verdicts`."""
    v = verdicts(result)
    layers = v["layers"]
    protocol = protocol_text(result)
    rows = [Claim(
        "sst2-lower", "SST-2: residuals give lower training error at every depth",
        "with residuals the training error is lower at every depth L = 2, 6, 10",
        "; ".join(f"L = {L}: w {a:.3f}, wo {b:.3f}" for L, a, b in zip(layers, v["error_w"], v["error_wo"])),
        status(v["lower_everywhere"], deviation=True),
        protocol + ("" if v["lower_everywhere"] else "; at " + ", ".join(
            f"L = {L}" for L, a, b in zip(layers, v["error_w"], v["error_wo"]) if not a < b)
            + " the model without residuals is not worse"))]
    rows.append(Claim(
        "sst2-depth", "SST-2: with residuals the error keeps falling as L grows",
        "with residuals, deeper models reach a lower training error",
        "w: " + ", ".join(f"L = {L}: {e:.3f}" for L, e in zip(layers, v["error_w"])),
        status(v["falls_with_depth"], deviation=True),
        protocol + ("" if v["falls_with_depth"] else
                    "; at this scale and training budget the deeper residual models do not reach a lower error")))
    rows.append(Claim(
        "sst2-noresidual", "SST-2: without residuals deeper models barely train",
        "without residuals the deeper models barely train",
        "wo: " + ", ".join(f"L = {L}: {e:.3f}" for L, e in zip(layers, v["error_wo"]))
        + f" (majority-label error {v['majority_error']:.3f})",
        status(v["deep_wo_stalls"], deviation=True),
        protocol + (f"; the deepest model without residuals ends within {BARELY} of the majority-label error"
                    if v["deep_wo_stalls"] else "; the deepest model without residuals does train at this scale")))
    return rows


def plot_error_curves(result: dict):
    """Training error against step, one panel per L, with (w) and without (wo) residuals."""
    import matplotlib.pyplot as plt
    import numpy as np

    from .. import plotting

    layers = result["settings"]["layers"]
    fig, axes = plt.subplots(1, len(layers), figsize=(3.0 * len(layers), 3.2), sharey=True)
    c = plotting.colors(2)
    for ax, L in zip(np.atleast_1d(axes), layers):
        for residual, color in zip((True, False), c):
            r = find_run(result, L, residual)
            plotting.band(ax, r["steps"], np.array(r["per_seed"]["train_error"]), color=color,
                          label="w (residual)" if residual else "wo (no residual)")
        ax.axhline(result["majority_error"], color="k", lw=0.8, ls=":")
        ax.set_title(f"L = {L}")
        ax.set_xlabel("step")
    np.atleast_1d(axes)[0].set_ylabel("training error")
    np.atleast_1d(axes)[0].legend(loc="lower left")
    fig.tight_layout()
    return fig


def plot_final_error(result: dict):
    """Final training error against L, with (w) and without (wo) residuals (mean and seeds)."""
    import matplotlib.pyplot as plt

    from .. import plotting

    layers = result["settings"]["layers"]
    fig, ax = plt.subplots(figsize=(4.6, 3.2))
    for residual, color, marker in zip((True, False), plotting.colors(2), ("o", "s")):
        runs = [find_run(result, L, residual) for L in layers]
        ax.plot(layers, [r["final_train_error"] for r in runs], marker=marker, color=color,
                label="w (residual)" if residual else "wo (no residual)")
        for L, r in zip(layers, runs):
            seeds = [h[-1] for h in r["per_seed"]["train_error"]]
            ax.scatter([L] * len(seeds), seeds, color=color, s=12, alpha=0.5)
    ax.axhline(result["majority_error"], color="k", lw=0.8, ls=":", label="majority class")
    ax.set_xticks(layers)
    ax.set_xlabel("layers L")
    ax.set_ylabel("final training error")
    ax.legend()
    fig.tight_layout()
    return fig


def plot(result: dict, out_dir) -> list[Path]:
    from .. import plotting

    out_dir = Path(out_dir)
    return [plotting.save(plot_error_curves(result), out_dir / "sst2_train_error.svg"),
            plotting.save(plot_final_error(result), out_dir / "sst2_final_error.svg")]
