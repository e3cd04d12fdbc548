"""Time the book's SST-2 training step against Hugging Face ``transformers``' GPT-2.

    .venv/bin/python benchmarks/gpt2_step.py [--profile book] [--layers L] [--threads 1]
        [--repeats R] [--steps S]

Both sides take one optimizer step on the same batch: a real training batch of the
profile (the one whose padded length is nearest an epoch's mean, :func:`typical_batch`),
forward, cross-entropy of the last real token's logits, backward, gradient clipping,
AdamW (fused) and the learning-rate schedule, float32 on the CPU, with the same weights
(rcutil's model is loaded from the reference's state dict, and the two give the same
logits). Two ratios rcutil / Hugging Face (below 1: rcutil is faster):

1. **the book's step against what a user would otherwise run**: rcutil's step as the
   experiment runs it, with the embedding trimmed to the token ids the data uses
   (:func:`rcutil.sst2_train.train_step`), against ``GPT2ForSequenceClassification``
   with GPT-2's full 50,257-token vocabulary;
2. **the two models at equal vocabulary**: both with the trimmed vocabulary, so that
   only the model code differs.

Each is printed for every depth of the profile, and for one step of each depth together
(``all``), the mix of the experiment's training, where every depth trains as many steps.

After a warm-up the steps are timed in alternation (R rounds of S steps each, median
per-step time), so that a change in the machine's load hits all sides alike. With one
torch thread (the default, as the book trains) the clock is the process's CPU time,
which other processes on a shared machine inflate far less than wall time; with more
threads it is wall time. ``transformers`` is an optional dependency
(``pip install -e .[bench]``); without it the script says so and exits 0.

The seeds of an arm trained as one ensemble against a loop over them are timed by
``benchmarks/sst2_seeds.py``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

from rcutil import threads

threads.single_threaded_blas()  # the book's thread policy, before torch loads numpy

import torch  # noqa: E402

threads.apply_environment()


def hf_classifier(transformers, settings, layers: int, vocab_size: int):
    """``GPT2ForSequenceClassification`` of the profile's sizes (no dropout, SDPA
    attention), the pad id GPT-2's ``<|endoftext|>`` renumbered into the vocabulary the
    model reads."""
    pad = vocab_size - 1
    cfg = transformers.GPT2Config(
        n_embd=settings.d_model,
        n_layer=layers,
        n_head=settings.n_head,
        n_inner=settings.d_ff,
        vocab_size=vocab_size,
        n_positions=1024,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        num_labels=2,
        pad_token_id=pad,
        bos_token_id=pad,
        eos_token_id=pad,
    )
    torch.manual_seed(0)
    try:
        return transformers.GPT2ForSequenceClassification(
            cfg, attn_implementation="sdpa"
        ).train()
    except TypeError:  # older transformers take it on the config only
        cfg._attn_implementation = "sdpa"
        return transformers.GPT2ForSequenceClassification(cfg).train()


def rcutil_twin(ref, settings, layers: int, vocab: torch.Tensor | None):
    """rcutil's classifier with the reference's weights; with ``vocab``, only those rows
    kept."""
    from rcutil.gpt2 import GPT2Config, from_hf_state_dict

    config = GPT2Config(
        n_layer=layers,
        n_head=settings.n_head,
        d_model=settings.d_model,
        d_ff=settings.d_ff,
        vocab_size=ref.config.vocab_size,
    )
    state = ref.transformer.state_dict()
    ours = from_hf_state_dict(state, layers, config=config).train()
    with torch.no_grad():
        ours.head.weight.copy_(ref.score.weight)
    return ours.keep_tokens(vocab) if vocab is not None else ours


def step_fn(model, settings, tokens, lengths, labels, *, hf: bool):
    """One optimizer step of the experiment's recipe
    (:func:`rcutil.sst2_train.train_step`); for Hugging Face's model the same recipe
    around its own forward (labels in, loss out)."""
    from rcutil import sst2_train as sst2

    lr = settings.lr_grid["scratch"].w[0]
    opt, sched = sst2.make_optimizer(model, settings, lr)
    if not hf:
        return lambda: sst2.train_step(
            model, opt, sched, tokens, lengths, labels, grad_clip=settings.grad_clip
        )

    def step():
        loss = model(input_ids=tokens, labels=labels).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), settings.grad_clip)
        opt.step()
        sched.step()
        return loss.detach()

    return step


def typical_batch(data: dict, settings):
    """``(tokens, lengths, labels)`` of the training batch (of one epoch of the
    experiment's batches) whose padded length is nearest the epoch's mean: what one step
    costs on average."""
    from rcutil.sst2_data import length_batches

    lengths = data["train"][1]
    gen = torch.Generator().manual_seed(0)
    epoch = length_batches(lengths, settings.batch_size, gen)
    padded = torch.stack([lengths[b].max() for b in epoch]).float()
    rows = epoch[int((padded - padded.mean()).abs().argmin())]
    tokens, lengths, labels = (t[rows] for t in data["train"])
    return tokens[:, : int(lengths.max())], lengths, labels


def profile_batch(profile: str):
    """The SST-2 settings of ``profile``, its data, and its typical training batch."""
    from rcutil import sst2_train
    from rcutil.experiments import sst2
    from rcutil.profiles import settings_for

    settings = settings_for(sst2.SETTINGS, profile)
    data = sst2_train.prepare_data(settings)
    return settings, data, typical_batch(data, settings)


def timed(
    fns: dict, *, repeats: int, steps: int, clock=time.perf_counter
) -> dict[str, float]:
    """Median seconds per step of each function, timed in alternating rounds after a
    warm-up."""
    for fn in fns.values():
        for _ in range(3):
            fn()
    times = {k: [] for k in fns}
    for _ in range(repeats):
        for k, fn in fns.items():
            start = clock()
            for _ in range(steps):
                fn()
            times[k].append((clock() - start) / steps)
    return {k: statistics.median(v) for k, v in times.items()}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add = parser.add_argument
    add("--profile", default="book", help="the SST-2 settings row (default book)")
    add("--layers", type=int, default=None, help="blocks L (default: the profile's)")
    add("--threads", type=int, default=1, help="torch threads (default 1, as the book)")
    add("--repeats", type=int, default=7, help="alternating rounds (default 7)")
    add("--steps", type=int, default=5, help="steps per round (default 5)")
    args = parser.parse_args(argv)
    try:
        import transformers
    except ImportError:
        print(
            "transformers is not installed: this benchmark compares against Hugging "
            "Face's GPT2ForSequenceClassification. Install it with `pip install "
            "transformers` (or `pip install -e .[bench]`) and run again. Nothing was "
            "timed."
        )
        return 0
    transformers.logging.set_verbosity_error()
    torch.set_num_threads(args.threads)
    from rcutil.sst2_data import EOS_ID

    settings, data, (tokens, lengths, labels) = profile_batch(args.profile)
    vocab = data["vocabulary"]
    assert vocab[-1] == EOS_ID  # the pad id is the last row of the trimmed vocabulary
    full_tokens = vocab[tokens]  # the same batch in GPT-2's own ids
    clock = time.process_time if torch.get_num_threads() == 1 else time.perf_counter
    print(
        f"torch {torch.__version__}, transformers {transformers.__version__}, "
        f"{torch.get_num_threads()} thread(s); profile {args.profile}: "
        f"d={settings.d_model}, batch {tuple(tokens.shape)} (the training batch "
        f"of mean padded length), vocabulary {len(vocab):,} of 50,257 ids; clock: "
        f"{'process CPU time' if clock is time.process_time else 'wall time'}"
    )
    print(
        "The machine may be shared: absolute times vary; the alternating rounds keep "
        "the ratios fair."
    )
    print(f"{'L':>3}  {'comparison':<44}{'rcutil ms':>11}{'HF ms':>9}{'ratio':>8}")
    totals = {"rcutil": 0.0, "hf_full": 0.0, "rcutil_eq": 0.0, "hf_eq": 0.0}
    for layers in [args.layers] if args.layers else settings.layers:
        hf_full = hf_classifier(transformers, settings, layers, 50257)
        hf_trim = hf_classifier(transformers, settings, layers, len(vocab))
        ours = rcutil_twin(hf_full, settings, layers, vocab)
        ours_eq = rcutil_twin(hf_trim, settings, layers, None)
        with torch.no_grad():  # same weights, same function
            torch.testing.assert_close(
                ours(tokens, lengths),
                hf_full(input_ids=full_tokens).logits,
                rtol=1e-4,
                atol=1e-5,
            )
            torch.testing.assert_close(
                ours_eq(tokens, lengths),
                hf_trim(input_ids=tokens).logits,
                rtol=1e-4,
                atol=1e-5,
            )
        batch = (lengths, labels)
        fns = {
            "rcutil": step_fn(ours, settings, tokens, *batch, hf=False),
            "hf_full": step_fn(hf_full, settings, full_tokens, *batch, hf=True),
            "rcutil_eq": step_fn(ours_eq, settings, tokens, *batch, hf=False),
            "hf_eq": step_fn(hf_trim, settings, tokens, *batch, hf=True),
        }
        med = timed(fns, repeats=args.repeats, steps=args.steps, clock=clock)
        for k in totals:
            totals[k] += med[k]
        _rows(layers, med)
    if not args.layers:
        _rows("all", totals)
        print(
            "'all': one step of each depth, the mix of the experiment's training "
            "(every depth trains the same number of steps)"
        )
    print(
        "targets: SST-2 step against HF with the full vocabulary <= 0.60; equal "
        "vocabulary <= 0.85"
    )
    return 0


def _rows(layers, med: dict) -> None:
    for name, a, b in (
        ("SST-2 step (trimmed) vs HF full vocabulary", med["rcutil"], med["hf_full"]),
        ("equal vocabulary (trimmed on both sides)", med["rcutil_eq"], med["hf_eq"]),
    ):
        print(f"{layers!s:>3}  {name:<44}{1e3 * a:>11.1f}{1e3 * b:>9.1f}{a / b:>8.2f}")


if __name__ == "__main__":
    sys.exit(main())
