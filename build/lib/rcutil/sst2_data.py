"""SST-2 for the GPT-2 chapter: the GPT-2 byte-level BPE and the GLUE SST-2 TSV files.

* :func:`gpt2_tokenizer` builds the GPT-2 tokenizer with Hugging Face ``tokenizers`` from
  ``gpt2_tokenizer/vocab.json`` and ``gpt2_tokenizer/merges.txt``, found (and checksummed)
  by :func:`rcutil.data.find`. ``"Hello world"`` encodes to ``[15496, 995]``.
* :func:`read_tsv` reads a GLUE SST-2 file: a header ``sentence<TAB>label``, then one row per
  sentence whose text ends with a space before the tab (stripped here) and whose label is
  0 or 1. A malformed row raises :class:`rcutil.data.DataError` naming the file and line.
* :func:`load_split` ties the two together; :func:`pad_batch` turns token lists into a
  right-padded ``(B, T)`` tensor plus the lengths that the classification head needs.
* :func:`vocabulary` lists the GPT-2 ids that occur in the data (a few thousand of the 50,257)
  and :func:`to_compact` renumbers tokens into that list, for a model whose embedding keeps
  only those rows (:meth:`rcutil.gpt2.GPT2Classifier.keep_tokens`).
* :func:`length_batches` cuts an epoch into batches of sentences of similar length, so that
  padding to the longest sentence of a batch costs little.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import torch

from .data import DataError, find

#: GPT-2's ``<|endoftext|>`` id; also used as the padding id (GPT-2 has no pad token).
EOS_ID = 50256
HEADER = ("sentence", "label")
SPLITS = {"train": "sst2/train.tsv", "dev": "sst2/dev.tsv"}
TOKENIZER_FILES = ("gpt2_tokenizer/vocab.json", "gpt2_tokenizer/merges.txt")


@lru_cache(maxsize=4)
def _tokenizer_from_files(vocab: str, merges: str):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    tok = Tokenizer(models.BPE.from_file(vocab, merges))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    return tok


def gpt2_tokenizer(vocab: str | Path | None = None, merges: str | Path | None = None):
    """The GPT-2 byte-level BPE tokenizer (a ``tokenizers.Tokenizer``).

    Without arguments the files come from :func:`rcutil.data.find`; no special tokens are
    added when encoding, exactly like OpenAI's GPT-2 encoder.
    """
    vocab = Path(vocab) if vocab is not None else find(TOKENIZER_FILES[0])
    merges = Path(merges) if merges is not None else find(TOKENIZER_FILES[1])
    return _tokenizer_from_files(str(vocab), str(merges))


def encode(texts: Sequence[str], tokenizer=None) -> list[list[int]]:
    """Token ids of each text (GPT-2 BPE, no special tokens)."""
    if isinstance(texts, str):
        raise ValueError("texts must be a sequence of strings, not one string: wrap it in a list")
    tok = tokenizer if tokenizer is not None else gpt2_tokenizer()
    return [e.ids for e in tok.encode_batch(list(texts), add_special_tokens=False)]


@dataclass(frozen=True)
class SST2Split:
    """One split of SST-2: sentences (trailing space stripped) and labels in {0, 1}."""

    sentences: list[str]
    labels: list[int]

    def __len__(self) -> int:
        return len(self.labels)


def read_tsv(path: str | Path) -> SST2Split:
    """Read a GLUE SST-2 TSV file; raise :class:`DataError` naming the line of a malformed row.

    A row must be ``sentence<TAB>label`` with a non-empty sentence and a label of 0 or 1;
    the header must be ``sentence<TAB>label``. Line numbers count from 1 (the header).
    """
    path = Path(path)
    sentences: list[str] = []
    labels: list[int] = []
    with open(path, encoding="utf-8", newline="") as f:
        for lineno, raw in enumerate(f, start=1):
            line = raw.rstrip("\n").rstrip("\r")
            fields = line.split("\t")
            if lineno == 1:
                if tuple(fields) != HEADER:
                    raise DataError(f"{path}, line 1: expected the header 'sentence<TAB>label', "
                                    f"got {line[:80]!r}")
                continue
            if len(fields) != 2:
                raise DataError(f"{path}, line {lineno}: expected 2 tab-separated fields "
                                f"(sentence, label), got {len(fields)}: {line[:80]!r}")
            sentence, label = fields[0].rstrip(" "), fields[1].strip()
            if not sentence:
                raise DataError(f"{path}, line {lineno}: the sentence is empty")
            if label not in ("0", "1"):
                raise DataError(f"{path}, line {lineno}: the label must be 0 or 1, got {label!r}")
            sentences.append(sentence)
            labels.append(int(label))
    if path.stat().st_size == 0:
        raise DataError(f"{path}, line 1: the file is empty; expected the header 'sentence<TAB>label'")
    return SST2Split(sentences, labels)


def load_split(split: str) -> SST2Split:
    """The ``train`` (67,349 rows) or ``dev`` (872 rows) split, via :func:`rcutil.data.find`."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {sorted(SPLITS)}, got {split!r}")
    return read_tsv(find(SPLITS[split]))


def pad_batch(ids: Sequence[Sequence[int]], *, max_len: int, pad_id: int = EOS_ID):
    """Right-pad (and truncate to ``max_len``) token lists: ``(tokens (B, T), lengths (B,))``.

    ``T`` is the longest (truncated) length in the batch. Right padding leaves every real
    token's causal attention unchanged, so the model needs no extra mask.
    """
    if max_len < 1:
        raise ValueError(f"max_len must be at least 1, got {max_len}")
    lengths = [min(len(x), max_len) for x in ids]
    if min(lengths, default=0) < 1:
        raise ValueError("every sequence must have at least one token")
    T = max(lengths)
    tokens = torch.full((len(ids), T), pad_id, dtype=torch.long)
    for i, (x, n) in enumerate(zip(ids, lengths)):
        tokens[i, :n] = torch.as_tensor(x[:n], dtype=torch.long)
    return tokens, torch.as_tensor(lengths, dtype=torch.long)


def vocabulary(*token_lists: Sequence[Sequence[int]], pad_id: int = EOS_ID) -> torch.Tensor:
    """The sorted GPT-2 ids that occur in any of the token lists, plus ``pad_id``: the rows of
    the embedding that a model of these sentences ever reads."""
    ids = {pad_id}
    for lists in token_lists:
        for x in lists:
            ids.update(x)
    return torch.tensor(sorted(ids), dtype=torch.long)


def to_compact(tokens: torch.Tensor, vocab: torch.Tensor) -> torch.Tensor:
    """Renumber GPT-2 ids into positions of ``vocab`` (sorted, from :func:`vocabulary`).

    An id that is not in ``vocab`` raises ``ValueError``: the model has no row for it.
    """
    pos = torch.searchsorted(vocab, tokens).clamp(max=len(vocab) - 1)
    missing = vocab[pos] != tokens
    if bool(missing.any()):
        raise ValueError(f"token id {int(tokens[missing][0])} is not in the vocabulary of "
                         f"{len(vocab)} ids: build the vocabulary from every split the model reads")
    return pos


def length_batches(lengths: torch.Tensor, batch_size: int, generator: torch.Generator) -> list[torch.Tensor]:
    """One epoch of row indices, cut into batches of similar length.

    The rows are shuffled, sorted by length (stable, so equal lengths stay shuffled), cut into
    batches of ``batch_size`` (the last one may be smaller) and the batches are shuffled, all
    with ``generator``: every row appears once per epoch, a batch pads its sentences to a
    length close to theirs, and the order of the batches carries no length trend.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")
    perm = torch.randperm(len(lengths), generator=generator)
    rows = perm[torch.sort(lengths[perm], stable=True).indices]
    batches = list(rows.split(batch_size))
    return [batches[i] for i in torch.randperm(len(batches), generator=generator).tolist()]
