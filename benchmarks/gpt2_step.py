"""Time one training step of rcutil's GPT-2 against Hugging Face ``transformers``' GPT2Model.

    .venv/bin/python benchmarks/gpt2_step.py [--threads N] [--repeats R] [--steps S]

One step = forward, cross-entropy on the last token's logits, backward, AdamW step. Both
models have the same configuration and the same weights (rcutil's model is loaded from the
reference's state dict), residuals on, float32, CPU, the same head (a bias-free linear map
of the last token's final hidden state) and the same optimizer (fused AdamW). After a
warm-up, the two are timed in alternation (R rounds of S steps each, the median per-step
time is kept), so that a change in the machine's load hits both alike. The script prints
the ratio rcutil / reference (at most 1.0 means rcutil is no slower) and the achieved
GFLOP/s against a float32 matmul peak measured in the same process.

``transformers`` is an optional dependency (``pip install rcutil[bench]``); without it the
script says so and exits 0.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time

import torch
from torch.nn import functional as F

import rcutil  # noqa: F401  (sets the thread policy before numpy)


def step_flops(d: int, layers: int, d_ff: int, batch: int, T: int) -> float:
    """Floating-point operations of one training step (about 3 x the forward's matmuls).

    Forward per block: QKV and output projections ``2 * tokens * 4 d^2``, MLP ``2 * tokens *
    2 d d_F``, scores and weighted values ``2 * 2 * batch * T^2 * d`` (the full square;
    embeddings, LayerNorm and the 2-class head are left out).
    """
    tokens = batch * T
    forward = layers * (2 * tokens * (4 * d * d + 2 * d * d_ff) + 4 * batch * T * T * d)
    return 3.0 * forward


def matmul_peak(n: int = 1024, repeats: int = 10) -> float:
    """Best float32 GFLOP/s of an ``n x n`` matrix product."""
    a, b = torch.randn(n, n), torch.randn(n, n)
    for _ in range(3):
        a @ b
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - t)
    return 2 * n**3 / best / 1e9


class HFClassifier(torch.nn.Module):
    """``transformers.GPT2Model`` plus the same last-token head as rcutil's classifier."""

    def __init__(self, gpt2, d: int):
        super().__init__()
        self.transformer = gpt2
        self.head = torch.nn.Linear(d, 2, bias=False)

    def forward(self, tokens):
        return self.head(self.transformer(tokens).last_hidden_state[:, -1])


def build(transformers, d, layers, n_head, d_ff):
    from rcutil.gpt2 import from_hf_state_dict

    cfg = transformers.GPT2Config(n_embd=d, n_layer=layers, n_head=n_head, n_inner=d_ff,
                                  vocab_size=50257, n_positions=1024, resid_pdrop=0.0,
                                  embd_pdrop=0.0, attn_pdrop=0.0)
    torch.manual_seed(0)
    try:
        gpt2 = transformers.GPT2Model(cfg, attn_implementation="sdpa")
    except TypeError:  # older transformers take it on the config only
        cfg._attn_implementation = "sdpa"
        gpt2 = transformers.GPT2Model(cfg)
    ref = HFClassifier(gpt2, d).train()
    ours = from_hf_state_dict(gpt2.state_dict(), layers, n_head=n_head).train()
    with torch.no_grad():
        ours.head.weight.copy_(ref.head.weight)
    return ours, ref


def make_step(model, tokens, labels):
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)

    def step():
        loss = F.cross_entropy(model(tokens), labels)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss

    return step


def bench(transformers, name, d, layers, n_head, d_ff, batch, T, *, repeats, steps):
    ours, ref = build(transformers, d, layers, n_head, d_ff)
    g = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, 50257, (batch, T), generator=g)
    labels = torch.randint(0, 2, (batch,), generator=g)
    with torch.no_grad():  # same weights, same function
        torch.testing.assert_close(ours(tokens), ref(tokens), rtol=1e-4, atol=1e-4)
    steps_fn = {"rcutil": make_step(ours, tokens, labels), "transformers": make_step(ref, tokens, labels)}
    for fn in steps_fn.values():  # warm-up: first autograd calls, allocator, optimizer state
        for _ in range(3):
            fn()
    times = {k: [] for k in steps_fn}
    for _ in range(repeats):  # alternate, so that load changes hit both
        for k, fn in steps_fn.items():
            t = time.perf_counter()
            for _ in range(steps):
                fn()
            times[k].append((time.perf_counter() - t) / steps)
    med = {k: statistics.median(v) for k, v in times.items()}
    flops = step_flops(d, layers, d_ff, batch, T)
    return {"name": name, "ours": med["rcutil"], "ref": med["transformers"],
            "ratio": med["rcutil"] / med["transformers"], "gflops": flops / 1e9,
            "spread": {k: (min(v), max(v)) for k, v in times.items()}}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    parser.add_argument("--repeats", type=int, default=5, help="alternating rounds (default 5)")
    parser.add_argument("--steps", type=int, default=3, help="steps per round (default 3)")
    args = parser.parse_args(argv)
    try:
        import transformers
    except ImportError:
        print("transformers is not installed: this benchmark compares against Hugging Face's "
              "GPT2Model. Install it with `pip install transformers` (or `pip install -e .[bench]`) "
              "and run again. Nothing was timed.")
        return 0
    transformers.logging.set_verbosity_error()
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    from rcutil.experiments.sst2 import SETTINGS

    book = SETTINGS["book"]
    configs = [
        ("d=256, L=10, 16x64", 256, 10, 4, 1024, 16, 64),
        # the book profile's model at its deepest, on a batch padded to 32 tokens (SST-2
        # training batches are padded to their longest sentence, typically 25-40 tokens)
        (f"book: d={book['d_model']}, L={max(book['layers'])}, {book['batch_size']}x32",
         book["d_model"], max(book["layers"]), book["n_head"], book["d_ff"], book["batch_size"], 32),
    ]
    peak = matmul_peak()
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, "
          f"{torch.get_num_threads()} thread(s); float32 matmul peak (1024^3): {peak:.1f} GFLOP/s")
    print("The machine may be shared: absolute times vary; the alternating rounds keep the ratio fair.")
    header = (f"{'configuration':<28}{'rcutil ms':>11}{'HF ms':>9}{'ratio':>8}"
              f"{'rcutil GF/s':>13}{'HF GF/s':>9}{'% peak':>8}")
    print(header)
    ok = True
    for cfg in configs:
        r = bench(transformers, *cfg, repeats=args.repeats, steps=args.steps)
        g_ours, g_ref = r["gflops"] / r["ours"], r["gflops"] / r["ref"]
        print(f"{r['name']:<28}{1e3 * r['ours']:>11.1f}{1e3 * r['ref']:>9.1f}{r['ratio']:>8.2f}"
              f"{g_ours:>13.1f}{g_ref:>9.1f}{100 * g_ours / peak:>7.0f}%")
        ok &= r["ratio"] <= 1.0
    print("target ratio <= 1.0:", "met" if ok else "NOT met")
    return 0


if __name__ == "__main__":
    sys.exit(main())
