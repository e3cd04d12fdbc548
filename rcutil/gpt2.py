"""A compact GPT-2 with a sequence-classification head, and a loader for published
weights.

The architecture is GPT-2's (Radford et al., 2019), written to be read top to bottom:

* token and position embeddings, ``h_0 = E[tokens] + P[0..T)``;
* ``n_layer`` pre-LayerNorm blocks. With residuals (``residual=True``) ``z = h +
  Attn(LN_1(h))`` and ``h' = z + MLP(LN_2(z))``; without (``residual=False``, both
  sub-blocks) ``z = Attn(LN_1(h))`` and ``h' = MLP(LN_2(z))``. ``z`` is the
  attention-layer output (the book's eq. ``model-z`` with beta = 1 or 0);
* causal multi-head attention through
  ``torch.nn.functional.scaled_dot_product_attention`` (scores scaled by
  ``1/sqrt(d_head)``), and an MLP ``GELU(x W_fc) W_proj`` with GPT-2's tanh
  approximation of GELU;
* a final LayerNorm, then the classification head: a bias-free linear map of the hidden
  state of the **last non-pad token** (the token that has attended to the whole sentence
  under the causal mask; this is also what Hugging Face's
  ``GPT2ForSequenceClassification`` does).

Inputs are right-padded token ids with their lengths: causal attention never lets a real
token see a pad to its right, so no extra attention mask is needed.

The head reads one position per sentence, so without ``return_attention`` the last block
is computed at that position only (the same numbers, for fewer rows).
:meth:`GPT2Classifier.keep_tokens` keeps only the embedding rows of the token ids a data
set uses: rows no input reads change no output.

:func:`load_hf_gpt2` maps a Hugging Face ``model.safetensors`` file (keys ``wte``,
``wpe``, ``h.<l>.attn.c_attn``, ...; its ``Conv1D`` layers store weights as ``(in,
out)``, the transpose of ``nn.Linear``) onto this model, reading only the first
``n_layer`` blocks; errors name the file and the tensor. :data:`GPT2_SMALL` registers
the published GPT-2 small weights as a data asset (pinned revision, size and sha256),
found or downloaded by :mod:`rcutil.data`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import NamedTuple

import torch
from torch import nn
from torch.nn import functional as F

from .data import Asset, register


@dataclass(frozen=True)
class GPT2Config:
    """Sizes of the model; the defaults are GPT-2 small (124M parameters without a
    head)."""

    n_layer: int = 12
    n_head: int = 12
    d_model: int = 768
    d_ff: int = 3072
    vocab_size: int = 50257
    context: int = 1024
    n_classes: int = 2
    residual: bool = True
    layer_norm_eps: float = 1e-5
    init_std: float = 0.02
    #: scale the blocks' output projections by ``1/sqrt(2 n_layer)`` at initialisation
    scaled_projections: bool = True

    def __post_init__(self):
        for name in (
            "n_layer",
            "n_head",
            "d_model",
            "d_ff",
            "vocab_size",
            "context",
            "n_classes",
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(
                    f"GPT2Config.{name} must be a positive integer, got {value!r}"
                )
        if self.d_model % self.n_head:
            raise ValueError(
                f"GPT2Config.d_model ({self.d_model}) must be divisible by "
                f"n_head ({self.n_head}); change one of them"
            )

    def to_dict(self) -> dict:
        return asdict(self)


class CausalSelfAttention(nn.Module):
    """Multi-head causal softmax attention: ``softmax(Q K^T / sqrt(d_head) + causal) V
    W_O``."""

    def __init__(self, cfg: GPT2Config):
        super().__init__()
        self.n_head = cfg.n_head
        self.c_attn = nn.Linear(
            cfg.d_model, 3 * cfg.d_model
        )  # W_Q, W_K, W_V side by side
        self.c_proj = nn.Linear(cfg.d_model, cfg.d_model)  # W_O

    def forward(
        self, x: torch.Tensor, last: torch.Tensor | None = None
    ) -> torch.Tensor:
        """``(B, T, d) -> (B, T, d)``; with ``last`` (``(B,)`` positions) only the
        output at those positions, ``(B, d)``: their queries against the keys and values
        up to them."""
        B, T, d = x.shape
        if last is None:
            q, k, v = self.c_attn(x).split(d, dim=2)
            # (B, T, d) -> (B, heads, T, d_head)
            q, k, v = (
                t.view(B, T, self.n_head, d // self.n_head).transpose(1, 2)
                for t in (q, k, v)
            )
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            return self.c_proj(y.transpose(1, 2).reshape(B, T, d))
        W, b = self.c_attn.weight, self.c_attn.bias
        k, v = (
            t.view(B, T, self.n_head, d // self.n_head).transpose(1, 2)
            for t in F.linear(x, W[d:], b[d:]).split(d, dim=2)
        )
        q = F.linear(x[torch.arange(B, device=x.device), last], W[:d], b[:d]).view(
            B, self.n_head, 1, -1
        )
        causal = (torch.arange(T, device=x.device)[None, :] <= last[:, None]).view(
            B, 1, 1, T
        )
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=causal)
        return self.c_proj(y.reshape(B, d))


class MLP(nn.Module):
    """``GELU(x W_fc + b) W_proj + b`` with GPT-2's tanh-approximate GELU."""

    def __init__(self, cfg: GPT2Config):
        super().__init__()
        self.c_fc = nn.Linear(cfg.d_model, cfg.d_ff)
        self.c_proj = nn.Linear(cfg.d_ff, cfg.d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))


class Block(nn.Module):
    """A pre-LayerNorm block; returns ``(h', z)`` with ``z`` the attention-layer
    output."""

    def __init__(self, cfg: GPT2Config):
        super().__init__()
        self.residual = cfg.residual
        self.ln_1 = nn.LayerNorm(cfg.d_model, eps=cfg.layer_norm_eps)
        self.attn = CausalSelfAttention(cfg)
        self.ln_2 = nn.LayerNorm(cfg.d_model, eps=cfg.layer_norm_eps)
        self.mlp = MLP(cfg)

    def forward(
        self, h: torch.Tensor, last: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Eq. ``sst2-block-w`` (or ``sst2-block-wo`` without residuals) at every
        position; with ``last`` (``(B,)`` positions) only at those, ``(B, d)`` each:
        under the causal mask a position needs nothing to its right, so this is the same
        numbers, computed for fewer rows."""
        a = self.attn(self.ln_1(h), last)
        if self.residual:
            z = (
                h if last is None else h[torch.arange(len(h), device=h.device), last]
            ) + a
            return z + self.mlp(self.ln_2(z)), z
        z = a
        return self.mlp(self.ln_2(z)), z


class GPT2Output(NamedTuple):
    logits: torch.Tensor  # (B, n_classes)
    last_attention: (
        torch.Tensor
    )  # (B, T, d): z of the last block (attention-layer output)


class GPT2Classifier(nn.Module):
    """GPT-2 (``cfg.n_layer`` blocks, residuals on or off) with a last-token
    classification head.

    ``forward(tokens, lengths)`` takes right-padded ids ``(B, T)`` and the number of
    real tokens of each row ``(B,)`` (all ``T`` when omitted) and returns the logits
    ``(B, n_classes)``; with ``return_attention=True`` it returns a :class:`GPT2Output`
    that also holds the last block's attention-layer output ``z``.
    """

    def __init__(
        self, cfg: GPT2Config | None = None, *, seed: int | None = 0, **overrides
    ):
        super().__init__()
        cfg = (
            GPT2Config(**overrides)
            if cfg is None
            else (GPT2Config(**{**cfg.to_dict(), **overrides}) if overrides else cfg)
        )
        self.cfg = cfg
        self.wte = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.wpe = nn.Embedding(cfg.context, cfg.d_model)
        self.h = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(cfg.d_model, eps=cfg.layer_norm_eps)
        self.head = nn.Linear(cfg.d_model, cfg.n_classes, bias=False)
        self.reset_parameters(seed)

    @torch.no_grad()
    def reset_parameters(self, seed: int | None = 0) -> None:
        """GPT-2's initialisation: N(0, 0.02^2) weights, zero biases, the output
        projections of each block scaled by ``1/sqrt(2 n_layer)`` (unless
        ``cfg.scaled_projections`` is false); LayerNorms at (1, 0). ``seed`` makes it
        deterministic (``None``: use the global generator)."""
        gen = torch.Generator().manual_seed(seed) if seed is not None else None
        std = self.cfg.init_std
        proj = 1 / math.sqrt(2 * self.cfg.n_layer)
        proj = proj if self.cfg.scaled_projections else 1.0
        for name, p in self.named_parameters():
            if name.endswith("bias"):
                p.zero_()
            elif ".ln_" in name or name.startswith("ln_"):
                p.fill_(1.0)
            else:
                scale = proj if name.endswith("c_proj.weight") else 1.0
                p.copy_(torch.randn(p.shape, generator=gen) * (std * scale))

    def forward(
        self,
        tokens: torch.Tensor,
        lengths: torch.Tensor | None = None,
        *,
        return_attention: bool = False,
    ):
        B, T = tokens.shape
        if T > self.cfg.context:
            raise ValueError(
                f"sequence length {T} exceeds the context of {self.cfg.context} "
                "tokens; "
                f"truncate the inputs"
            )
        pos = torch.arange(T, device=tokens.device)
        last = (
            torch.full((B,), T - 1, device=tokens.device)
            if lengths is None
            else lengths.to(tokens.device) - 1
        )
        h = self.wte(tokens) + self.wpe(pos)
        for block in self.h[:-1]:
            h, _ = block(h)
        if (
            return_attention
        ):  # the last block everywhere: its z at every token is wanted
            h, z = self.h[-1](h)
            logits = self.head(
                self.ln_f(h)[torch.arange(B, device=tokens.device), last]
            )
            return GPT2Output(logits, z)
        # the head reads one position per sentence: the last block only computes that
        # one
        h, _ = self.h[-1](h, last)
        return self.head(self.ln_f(h))

    @torch.no_grad()
    def keep_tokens(self, token_ids: torch.Tensor) -> GPT2Classifier:
        """Keep only the rows of ``E`` (eq. ``sst2-embed``) of the given token ids, in
        that order.

        Afterwards the model reads token ``k`` of its own, smaller vocabulary where it
        read ``token_ids[k]`` before: inputs must be mapped with
        :func:`rcutil.sst2_data.to_compact`. Rows that no input uses never enter the
        forward pass, so they cannot change an output or a gradient; dropping them
        changes nothing but the cost of the embedding's gradient and of its optimizer
        state. Returns ``self``.
        """
        token_ids = torch.as_tensor(token_ids, dtype=torch.long).to(
            self.wte.weight.device
        )
        if token_ids.dim() != 1 or len(token_ids) == 0:
            raise ValueError(
                "token_ids must be a non-empty 1-D list of ids, got shape "
                f"{tuple(token_ids.shape)}"
            )
        if int(token_ids.min()) < 0 or int(token_ids.max()) >= self.cfg.vocab_size:
            raise ValueError(
                f"token ids must lie in [0, {self.cfg.vocab_size}), got "
                f"{int(token_ids.min())}..{int(token_ids.max())}"
            )
        rows = self.wte.weight[token_ids].clone()
        self.wte = nn.Embedding(
            len(token_ids), self.cfg.d_model, device=rows.device, dtype=rows.dtype
        )
        self.wte.weight.copy_(rows)
        self.cfg = replace(self.cfg, vocab_size=len(token_ids))
        return self

    def num_parameters(self, *, embeddings: bool = True) -> int:
        n = sum(p.numel() for p in self.parameters())
        return (
            n if embeddings else n - self.wte.weight.numel() - self.wpe.weight.numel()
        )


# --------------------------------------------------------------------------- published
# weights
#: Hugging Face GPT-2 name -> this model's name (the same), per block; ``True`` marks a
#: Conv1D weight stored as ``(in, out)`` that must be transposed into ``nn.Linear``'s
#: ``(out, in)``.
_CONV1D = ("attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj")
_BLOCK_MAP = {
    f"{part}.{kind}": (f"{part}.{kind}", part in _CONV1D and kind == "weight")
    for part in ("ln_1", "attn.c_attn", "attn.c_proj", "ln_2", "mlp.c_fc", "mlp.c_proj")
    for kind in ("weight", "bias")
}
_TOP_MAP = {
    "wte.weight": "wte.weight",
    "wpe.weight": "wpe.weight",
    "ln_f.weight": "ln_f.weight",
    "ln_f.bias": "ln_f.bias",
}

#: GPT-2 small as Hugging Face publishes it (``openai-community/gpt2``), pinned to one
#: revision.
GPT2_SMALL_REVISION = "607a30d783dfa663caf39e06633721c8d4cfcd7e"
GPT2_SMALL = register(
    Asset(
        "gpt2_small/model.safetensors",
        f"https://huggingface.co/openai-community/gpt2/resolve/{GPT2_SMALL_REVISION}/model.safetensors",
        "248dfc3911869ec493c76e65bf2fcf7f615828b0254c12b473182f0f81d3a707",
        size=548_105_171,
    )
)


def hf_keys(n_layer: int) -> list[str]:
    """The Hugging Face tensor names that the first ``n_layer`` blocks (plus embeddings
    and the final LayerNorm) need, in the order of :func:`hf_to_rcutil`."""
    return [*_TOP_MAP] + [
        f"h.{layer}.{src}" for layer in range(n_layer) for src in _BLOCK_MAP
    ]


def hf_to_rcutil(
    state: Mapping[str, torch.Tensor],
    n_layer: int,
    *,
    source: str = "the GPT-2 state dict",
) -> dict[str, torch.Tensor]:
    """Rename (and transpose) a Hugging Face GPT-2 state dict for
    :class:`GPT2Classifier`.

    Keys may carry the ``transformer.`` prefix of ``GPT2LMHeadModel``; the causal-mask
    buffers (``attn.bias``, ``attn.masked_bias``) and ``lm_head`` are ignored; blocks
    beyond ``n_layer`` are dropped. A missing tensor raises ``ValueError`` naming
    ``source`` (the file) and the tensor.
    """
    plain = {k.removeprefix("transformer."): v for k, v in state.items()}
    out: dict[str, torch.Tensor] = {}
    for src, dst in _TOP_MAP.items():
        if src not in plain:
            raise ValueError(
                f"{source} has no tensor {src!r}: is it a Hugging Face GPT-2 "
                "checkpoint?"
            )
        out[dst] = plain[src]
    for layer in range(n_layer):
        for src, (dst, transpose) in _BLOCK_MAP.items():
            key = f"h.{layer}.{src}"
            if key not in plain:
                raise ValueError(
                    f"{source} has no tensor {key!r}: it has fewer than {n_layer} "
                    f"blocks, or is not a Hugging Face GPT-2 checkpoint"
                )
            w = plain[key]
            out[f"h.{layer}.{dst}"] = w.t().contiguous() if transpose else w
    return out


def read_hf_gpt2(path: str | Path, n_layer: int) -> dict[str, torch.Tensor]:
    """The tensors of the first ``n_layer`` blocks (plus embeddings and the final
    LayerNorm) of a Hugging Face GPT-2 ``model.safetensors``, read with ``safetensors``
    without loading the rest.

    A tensor that is missing raises ``ValueError`` naming the file and the tensor.
    """
    from safetensors import safe_open

    path = Path(path)
    try:
        f = safe_open(str(path), framework="pt")
    except (
        Exception
    ) as exc:  # safetensors raises its own error types for a damaged header
        raise ValueError(f"{path} is not a readable safetensors file: {exc}") from exc
    with f:
        names = set(f.keys())
        state = {}
        for key in hf_keys(n_layer):
            name = key if key in names else f"transformer.{key}"
            if name not in names:
                raise ValueError(
                    f"{path} has no tensor {key!r}: it has fewer than {n_layer} "
                    f"blocks, or is not a Hugging Face GPT-2 checkpoint"
                )
            state[key] = f.get_tensor(name)
    return state


def load_hf_gpt2(path: str | Path, n_layer: int, **options) -> GPT2Classifier:
    """GPT-2 from a Hugging Face ``model.safetensors`` file, truncated to the first
    ``n_layer`` blocks: :func:`from_hf_state_dict` of the tensors of those blocks alone
    (:func:`read_hf_gpt2`), with its keyword ``options`` (``residual``, ``n_classes``,
    ``seed``, ``n_head``, ``config``). Errors name the file and the tensor."""
    path = Path(path)
    state = read_hf_gpt2(path, n_layer)
    return from_hf_state_dict(state, n_layer, source=str(path), **options)


def from_hf_state_dict(
    state: Mapping[str, torch.Tensor],
    n_layer: int,
    *,
    residual: bool = True,
    n_classes: int = 2,
    seed: int = 0,
    n_head: int | None = None,
    config: GPT2Config | None = None,
    source: str = "the GPT-2 state dict",
) -> GPT2Classifier:
    """Build a :class:`GPT2Classifier` from a Hugging Face GPT-2 state dict (see
    :func:`hf_to_rcutil`).

    With ``config`` the model has those sizes (its ``n_layer``, ``residual`` and
    ``n_classes`` are replaced by the arguments) and a tensor of another shape raises
    ``ValueError`` naming ``source`` and the tensor. Without it the sizes are read from
    the tensors and ``n_head`` defaults to ``d_model / 64``, the head size of every
    published GPT-2.
    """
    mapped = hf_to_rcutil(state, n_layer, source=source)
    if config is None:
        vocab_size, d_model = mapped["wte.weight"].shape
        config = GPT2Config(
            n_layer=n_layer,
            n_head=n_head or d_model // 64,
            d_model=d_model,
            d_ff=mapped["h.0.mlp.c_fc.weight"].shape[0] if n_layer else 4 * d_model,
            vocab_size=vocab_size,
            context=mapped["wpe.weight"].shape[0],
            n_classes=n_classes,
            residual=residual,
        )
    else:
        config = replace(
            config, n_layer=n_layer, n_classes=n_classes, residual=residual
        )
    model = GPT2Classifier(config, seed=seed)
    expected = model.state_dict()
    for key, value in mapped.items():
        if tuple(value.shape) != tuple(expected[key].shape):
            shape = tuple(value.t().shape) if _transposed(key) else tuple(value.shape)
            want = (
                tuple(expected[key].t().shape)
                if _transposed(key)
                else tuple(expected[key].shape)
            )
            raise ValueError(
                f"{source}: tensor {key!r} has shape {shape}, the model expects {want} "
                f"(d={config.d_model}, d_F={config.d_ff}, vocabulary "
                f"{config.vocab_size}, "
                f"context {config.context})"
            )
    missing, unexpected = model.load_state_dict(mapped, strict=False)
    assert not unexpected and set(missing) == {"head.weight"}, (missing, unexpected)
    return model


def _transposed(key: str) -> bool:
    """Whether the Hugging Face file stores tensor ``key`` transposed (a ``Conv1D``
    weight)."""
    parts = key.split(".", 2)
    return parts[0] == "h" and _BLOCK_MAP.get(parts[2], (None, False))[1]
