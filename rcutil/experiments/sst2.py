"""Experiment 2 of the paper: SST-2 with the GPT-2 architecture at L = 2, 6, 10, with and without residuals.

``python -m rcutil sst2 --profile P --out DIR`` writes ``DIR/sst2.json`` and two figures.

Every (L, residual) pair is trained from scratch with the same optimizer (AdamW), learning
rate schedule (linear warm-up, then cosine decay), batch size, gradient clipping, data order
and seeds; only the depth and the residual switch change. Along training the run records,
at every evaluation step, on a fixed subset of the training sentences: the cross-entropy
loss, the training error (1 - accuracy) and the stable rank of the last block's
attention-layer output ``z`` (stacked over the real tokens, see :mod:`rcutil.linalg`); and
the accuracy on (a fixed subset of) the dev split.
"""
from __future__ import annotations

import math
import time
from pathlib import Path

import torch
from torch.nn import functional as F
from tqdm.auto import tqdm

from ..claims import Claim, status
from ..gpt2 import GPT2Classifier, GPT2Config
from ..linalg import effective_rank, stable_rank
from ..profiles import settings_for
from ..sst2_data import SPLITS, TOKENIZER_FILES, encode, gpt2_tokenizer, load_split, pad_batch
from ..threads import torch_threads

NAME = "sst2"
CHAPTER = "sst2"
TITLE = "SST-2 with GPT-2: depth and residual connections"
ORDER = 70
JSON_NAME = "sst2"

#: ``threads``: torch CPU threads while training (``None``: leave torch's default). On two
#: shared cores, one thread ran these small matrix products about 4 times faster than two.
#: ``n_train``: training sentences used (a random subset, fixed by ``data_seed``; ``None`` = all
#: 67,349); ``n_train_eval``: the fixed subset of those on which training error, loss and
#: stable rank are measured; ``n_dev``: dev sentences (``None`` = all 872).
SETTINGS = {
    "ci": dict(d_model=64, n_head=1, d_ff=256, layers=[2, 6, 10], residual=[True, False],
               n_train=256, n_train_eval=256, n_dev=256, max_len=64, batch_size=16, steps=80,
               eval_every=20, lr=1e-3, warmup=0.1, min_lr_ratio=0.1, weight_decay=0.01,
               betas=[0.9, 0.999], grad_clip=1.0, seeds=[0], data_seed=0, threads=1),
    "book": dict(d_model=128, n_head=2, d_ff=512, layers=[2, 6, 10], residual=[True, False],
                 n_train=2048, n_train_eval=512, n_dev=None, max_len=64, batch_size=32, steps=300,
                 eval_every=50, lr=1e-3, warmup=0.1, min_lr_ratio=0.1, weight_decay=0.01,
                 betas=[0.9, 0.999], grad_clip=1.0, seeds=[0, 1], data_seed=0, threads=1),
    "paper": dict(d_model=768, n_head=12, d_ff=3072, layers=[2, 6, 10], residual=[True, False],
                  n_train=None, n_train_eval=4096, n_dev=None, max_len=64, batch_size=32, steps=6000,
                  eval_every=300, lr=3e-4, warmup=0.1, min_lr_ratio=0.1, weight_decay=0.01,
                  betas=[0.9, 0.999], grad_clip=1.0, seeds=[0, 1, 2], data_seed=0,
                  threads=None),
}


#: "Barely trains": a final training error within this distance of the majority-label error.
BARELY = 0.05


# --------------------------------------------------------------------------- data
def data_files(settings: dict) -> list[str]:
    """The data files the experiment reads (their sha256 is part of the stored result's key)."""
    return [SPLITS["train"], SPLITS["dev"], *TOKENIZER_FILES]


def prepare_data(settings: dict) -> dict:
    """Tokenised, right-padded tensors of the training subset, its evaluation subset and dev.

    Returns a dict with ``train``, ``train_eval`` and ``dev``, each ``(tokens, lengths,
    labels)``, plus ``n_train_rows`` (rows of the full training file).
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

    def tensors(split, rows):
        ids = encode([split.sentences[i] for i in rows], tok)
        tokens, lengths = pad_batch(ids, max_len=settings["max_len"])
        return tokens, lengths, torch.tensor([split.labels[i] for i in rows])

    tr = tensors(train, pick)
    return {"train": tr, "train_eval": tuple(t[:settings["n_train_eval"]] for t in tr),
            "dev": tensors(dev, dev_pick), "n_train_rows": len(train)}


# --------------------------------------------------------------------------- model and training
def make_model(settings: dict, layers: int, residual: bool, seed: int, device="cpu") -> GPT2Classifier:
    settings = GPT2Config(n_layer=layers, n_head=settings["n_head"], d_model=settings["d_model"], d_ff=settings["d_ff"],
                     residual=residual)
    return GPT2Classifier(settings, seed=seed).to(device)


def make_optimizer(model: GPT2Classifier, settings: dict):
    """AdamW, weight decay on the matrices only (not on biases and LayerNorm gains), and the
    learning-rate schedule: linear warm-up over ``warmup * steps``, then cosine decay to
    ``min_lr_ratio * lr``."""
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": settings["weight_decay"]},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=settings["lr"], betas=tuple(settings["betas"]), fused=True)
    warm = max(1, int(settings["warmup"] * settings["steps"]))

    def factor(step: int) -> float:
        if step < warm:
            return (step + 1) / warm
        t = (step - warm) / max(1, settings["steps"] - warm)
        return settings["min_lr_ratio"] + (1 - settings["min_lr_ratio"]) * 0.5 * (1 + math.cos(math.pi * t))

    return opt, torch.optim.lr_scheduler.LambdaLR(opt, factor)


@torch.no_grad()
def evaluate(model: GPT2Classifier, tokens, lengths, labels, *, batch_size=256, device="cpu",
             rank: bool = False) -> dict:
    """Loss, error (1 - accuracy) and, with ``rank``, the stable and effective ranks of the last
    block's ``z`` stacked over all real (non-pad) tokens of the set."""
    model.eval()
    order = torch.argsort(lengths)  # similar lengths together: little padding
    loss_sum, correct, rows = 0.0, 0, []
    for i in range(0, len(order), batch_size):
        idx = order[i:i + batch_size]
        T = int(lengths[idx].max())
        x, n, y = tokens[idx, :T].to(device), lengths[idx].to(device), labels[idx].to(device)
        out = model(x, n, return_attention=True)
        loss_sum += float(F.cross_entropy(out.logits, y, reduction="sum"))
        correct += int((out.logits.argmax(-1) == y).sum())
        if rank:
            mask = torch.arange(T, device=device)[None, :] < n[:, None]
            rows.append(out.last_attention[mask].float())
    model.train()
    res = {"loss": loss_sum / len(order), "error": 1 - correct / len(order)}
    if rank:
        Z = torch.cat(rows)
        res["stable_rank"] = float(stable_rank(Z))
        res["effective_rank"] = float(effective_rank(Z))
    return res


def train_one(settings: dict, data: dict, layers: int, residual: bool, seed: int, *, device="cpu",
              progress=False) -> dict:
    """Train one model from scratch; return its histories (one entry per evaluation step)."""
    torch.manual_seed(seed)
    model = make_model(settings, layers, residual, seed, device)
    opt, sched = make_optimizer(model, settings)
    tokens, lengths, labels = data["train"]
    order_gen = torch.Generator().manual_seed(10_000 + seed)  # the same batch order for every model
    perm, pos = torch.randperm(len(labels), generator=order_gen), 0
    hist = {k: [] for k in ("step", "train_loss", "train_error", "dev_accuracy", "stable_rank",
                            "effective_rank", "batch_loss")}
    running, count = 0.0, 0

    def record(step):
        tr = evaluate(model, *data["train_eval"], device=device, rank=True)
        dv = evaluate(model, *data["dev"], device=device)
        hist["step"].append(step)
        hist["train_loss"].append(tr["loss"])
        hist["train_error"].append(tr["error"])
        hist["stable_rank"].append(tr["stable_rank"])
        hist["effective_rank"].append(tr["effective_rank"])
        hist["dev_accuracy"].append(1 - dv["error"])
        hist["batch_loss"].append(running / count if count else tr["loss"])

    start = time.perf_counter()
    record(0)
    bar = tqdm(range(1, settings["steps"] + 1), disable=not progress, leave=False,
               desc=f"L={layers} {'w' if residual else 'wo'} seed {seed}")
    for step in bar:
        if pos + settings["batch_size"] > len(perm):
            perm, pos = torch.randperm(len(labels), generator=order_gen), 0
        idx = perm[pos:pos + settings["batch_size"]]
        pos += settings["batch_size"]
        T = int(lengths[idx].max())
        logits = model(tokens[idx, :T].to(device), lengths[idx].to(device))
        loss = F.cross_entropy(logits, labels[idx].to(device))
        if not torch.isfinite(loss):
            raise FloatingPointError(f"loss became {float(loss)} at step {step} (L={layers}, "
                                     f"residual={residual}, seed={seed}); lower lr in SETTINGS")
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), settings["grad_clip"])
        opt.step()
        sched.step()
        running, count = running + loss.item(), count + 1
        if step % settings["eval_every"] == 0 or step == settings["steps"]:
            record(step)
            running, count = 0.0, 0
            bar.set_postfix(train_error=f"{hist['train_error'][-1]:.3f}")
    hist["seconds"] = time.perf_counter() - start
    hist["parameters"] = model.num_parameters()
    return hist


def _mean(rows):
    return [sum(col) / len(col) for col in zip(*rows)]


def run(profile: str | None = None, *, device: str = "cpu", progress: bool = True) -> dict:
    """Train every (L, residual) pair for every seed; histories are averaged over seeds."""
    settings = settings_for(SETTINGS, profile)
    with torch_threads(settings["threads"]):
        return _run(settings, device, progress)


def _run(settings: dict, device: str, progress: bool) -> dict:
    data = prepare_data(settings)
    runs = []
    for layers in settings["layers"]:
        for residual in settings["residual"]:
            per_seed = [train_one(settings, data, layers, residual, seed, device=device, progress=progress)
                        for seed in settings["seeds"]]
            keys = ("train_loss", "train_error", "dev_accuracy", "stable_rank", "effective_rank",
                    "batch_loss")
            mean = {k: _mean([h[k] for h in per_seed]) for k in keys}
            runs.append({
                "layers": layers, "residual": residual, "steps": per_seed[0]["step"],
                "train_error_history": mean["train_error"],
                "train_loss_history": mean["train_loss"],
                "batch_loss_history": mean["batch_loss"],
                "dev_accuracy_history": mean["dev_accuracy"],
                "stable_rank_history": mean["stable_rank"],
                "effective_rank_history": mean["effective_rank"],
                "final_train_error": mean["train_error"][-1],
                "final_train_loss": mean["train_loss"][-1],
                "dev_accuracy": mean["dev_accuracy"][-1],
                "stable_rank_last_attention": mean["stable_rank"][-1],
                "effective_rank_last_attention": mean["effective_rank"][-1],
                "parameters": per_seed[0]["parameters"],
                "seconds": sum(h["seconds"] for h in per_seed),
                "per_seed": {k: [h[k] for h in per_seed] for k in keys},
            })
    return {"settings": settings, "seeds": settings["seeds"], "n_train_rows": data["n_train_rows"],
            "n_train_used": len(data["train"][2]), "n_dev_used": len(data["dev"][2]),
            "majority_error": float(min(data["train_eval"][2].float().mean(),
                                        1 - data["train_eval"][2].float().mean())),
            "runs": runs}


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


def claims(result: dict) -> list[Claim]:
    """The three claims of experiment 2, read on :func:`verdicts`."""
    v = verdicts(result)
    layers = v["layers"]
    protocol = "GPT-2 architecture trained from scratch (no pretrained weights) at the book's width and subset"
    rows = [Claim(
        "sst2-lower", "SST-2: residuals give lower training error at every depth",
        "with residuals the training error is lower at every depth L = 2, 6, 10",
        "; ".join(f"L = {L}: w {a:.3f}, wo {b:.3f}" for L, a, b in zip(layers, v["error_w"], v["error_wo"])),
        status(v["lower_everywhere"], deviation=True),
        protocol + ("" if v["lower_everywhere"] else "; at " + ", ".join(
            f"L = {L}" for L, a, b in zip(layers, v["error_w"], v["error_wo"]) if not a < b)
            + " the model without residuals is not worse"),
        CHAPTER)]
    rows.append(Claim(
        "sst2-depth", "SST-2: with residuals the error keeps falling as L grows",
        "with residuals, deeper models reach a lower training error",
        "w: " + ", ".join(f"L = {L}: {e:.3f}" for L, e in zip(layers, v["error_w"])),
        status(v["falls_with_depth"], deviation=True),
        "same optimizer, schedule and steps at every depth" if v["falls_with_depth"] else
        "at this scale and training budget the deeper residual models do not reach a lower error",
        CHAPTER))
    rows.append(Claim(
        "sst2-noresidual", "SST-2: without residuals deeper models barely train",
        "without residuals the deeper models barely train",
        "wo: " + ", ".join(f"L = {L}: {e:.3f}" for L, e in zip(layers, v["error_wo"]))
        + f" (majority-label error {v['majority_error']:.3f})",
        status(v["deep_wo_stalls"], deviation=True),
        f"the deepest model without residuals ends within {BARELY} of the majority-label error"
        if v["deep_wo_stalls"] else "the deepest model without residuals does train at this scale",
        CHAPTER))
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
