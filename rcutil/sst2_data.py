"""SST-2 for the GPT-2 chapter: the GPT-2 byte-level BPE and the GLUE SST-2 TSV files.

* :func:`gpt2_tokenizer` builds the GPT-2 tokenizer with Hugging Face ``tokenizers``
  from ``gpt2_tokenizer/vocab.json`` and ``gpt2_tokenizer/merges.txt``, found (and
  checksummed) by :func:`rcutil.data.find`, or from two files given; either way
  :func:`check_tokenizer_files` checks them against each other first.
  ``"Hello world"`` encodes to ``[15496, 995]``.
* :func:`read_tsv` reads a GLUE SST-2 file: a header ``sentence<TAB>label``, then one
  row per sentence whose text ends with a space before the tab (stripped here) and whose
  label is 0 or 1. A file without rows, text that is not UTF-8 or a malformed row raises
  :class:`rcutil.data.DataError` naming the file and the line.
* :func:`load_split` ties the two together; :func:`pad_batch` turns token lists into a
  right-padded ``(B, T)`` tensor plus the lengths that the classification head needs.
* :func:`vocabulary` lists the GPT-2 ids that occur in the data (a few thousand of the
  50,257) and :func:`to_compact` renumbers tokens into that list, for a model whose
  embedding keeps only those rows (:meth:`rcutil.gpt2.GPT2Classifier.keep_tokens`).
* :func:`length_batches` cuts an epoch into batches of sentences of similar length, so
  that padding to the longest sentence of a batch costs little.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import torch

from .data import Asset, DataError, find, register

#: GPT-2's ``<|endoftext|>`` id; also used as the padding id (GPT-2 has no pad token).
EOS_ID = 50256
HEADER = ("sentence", "label")
SPLITS = {"train": "sst2/train.tsv", "dev": "sst2/dev.tsv"}
TOKENIZER_FILES = ("gpt2_tokenizer/vocab.json", "gpt2_tokenizer/merges.txt")

#: GLUE's SST-2 archive, and GPT-2's tokenizer files as Hugging Face publishes them.
SST2_URL = "https://dl.fbaipublicfiles.com/glue/data/SST-2.zip"
GPT2_URL = "https://huggingface.co/openai-community/gpt2/resolve/main/"
#: The registry entries of the files this module reads (pinned checksums).
ASSETS = tuple(
    register(asset)
    for asset in (
        Asset(
            SPLITS["train"],
            SST2_URL,
            "48eac26399f8456935f81dd9e3a745c1430adb6c62e233ccfe22db4a0d15d1d1",
            "SST-2/train.tsv",
        ),
        Asset(
            SPLITS["dev"],
            SST2_URL,
            "54a9c12c77e402fc14d6a66a506f24d999f596b0176eb777c972cccc2f9cc4b0",
            "SST-2/dev.tsv",
        ),
        Asset(
            TOKENIZER_FILES[0],
            GPT2_URL + "vocab.json",
            "196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783",
        ),
        Asset(
            TOKENIZER_FILES[1],
            GPT2_URL + "merges.txt",
            "1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5",
        ),
    )
)


_GET_FILES = (
    "call gpt2_tokenizer() without arguments for the verified copies that "
    "rcutil.data finds or downloads"
)


def _read_vocab(path: Path) -> dict[str, int]:
    """``vocab.json``: a JSON object of token -> id; :class:`DataError` naming the file
    (and the line of a JSON error) otherwise."""
    try:
        text = path.read_bytes().decode("utf-8")
        vocab = json.loads(text)
    except OSError as exc:
        raise DataError(
            f"cannot read the GPT-2 vocabulary {path} ({exc.strerror}): {_GET_FILES}"
        ) from None
    except UnicodeDecodeError as exc:
        raise DataError(
            f"{path} is not UTF-8 text (byte {exc.start:,}): it is not "
            f"GPT-2's vocab.json; {_GET_FILES}"
        ) from None
    except json.JSONDecodeError as exc:
        raise DataError(
            f"{path}, line {exc.lineno}: not JSON ({exc.msg}); it is "
            f"truncated or not GPT-2's vocab.json: {_GET_FILES}"
        ) from None
    if (
        not isinstance(vocab, dict)
        or not vocab
        or not all(
            isinstance(k, str) and type(v) is int and v >= 0 for k, v in vocab.items()
        )
    ):
        raise DataError(
            f"{path} is not a vocabulary (a JSON object of token -> id, "
            f"ids from 0): {_GET_FILES}"
        )
    if len(set(vocab.values())) != len(vocab):
        raise DataError(
            f"{path} gives two tokens the same id: it is not GPT-2's "
            f"vocab.json; {_GET_FILES}"
        )
    return vocab


_CUT = "the file is cut short in this line"


def _special(token: str) -> bool:
    return token.startswith("<|") and token.endswith("|>")


def check_tokenizer_files(vocab: str | Path, merges: str | Path) -> None:
    """Check GPT-2's ``vocab.json`` and ``merges.txt`` against each other; raise
    :class:`DataError` naming the file and the line of the first fault.

    ``merges.txt`` is a ``#version`` line, then one merge a line: two tokens separated
    by a space. Each token and their concatenation must be in the vocabulary, and every
    token of the vocabulary longer than one character (special tokens ``<|...|>`` aside)
    must be made by exactly one merge: a file cut short misses the last ones.
    """
    vocab, merges = Path(vocab), Path(merges)
    tokens = _read_vocab(vocab)
    try:
        raw = merges.read_bytes()
    except OSError as exc:
        raise DataError(
            f"cannot read the GPT-2 merges {merges} ({exc.strerror}): {_GET_FILES}"
        ) from None
    made: set[str] = set()
    lines = raw.split(b"\n")
    lineno = 0
    for lineno, line in enumerate(lines, start=1):
        cut = lineno == len(lines) and line  # a last line without its newline
        try:
            text = line.decode("utf-8").rstrip("\r")
        except UnicodeDecodeError as exc:
            raise DataError(
                f"{merges}, line {lineno}: not UTF-8 text (byte "
                f"{exc.start + 1} of the line): {_GET_FILES}"
            ) from None
        if not text or (lineno == 1 and text.startswith("#version")):
            continue
        parts = text.split(" ")
        if len(parts) != 2:
            raise DataError(
                f"{merges}, line {lineno}: expected two tokens separated "
                f"by a space, got {text[:80]!r}; "
                f"{_CUT if cut else 'the file is damaged'}: {_GET_FILES}"
            )
        unknown = [t for t in (*parts, "".join(parts)) if t not in tokens]
        if unknown:
            why = _CUT if cut else "the two files do not belong together"
            raise DataError(
                f"{merges}, line {lineno}: {unknown[0]!r} is not in "
                f"{vocab}: {why}; {_GET_FILES}"
            )
        made.add("".join(parts))
    needed = {t for t in tokens if len(t) > 1 and not _special(t)}
    if made != needed:
        missing = len(needed - made)
        raise DataError(
            f"{merges} ends at line {lineno} with {len(made):,} merges, "
            f"but {missing:,} of the {len(needed):,} tokens of {vocab} "
            f"longer than one character are made by none: the file is cut "
            f"short or not the one of this vocabulary; {_GET_FILES}"
        )


@lru_cache(maxsize=4)
def _tokenizer_from_files(vocab: str, merges: str):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    check_tokenizer_files(vocab, merges)
    try:
        bpe = models.BPE.from_file(vocab, merges)
    except Exception as exc:  # tokenizers raises a bare Exception without the file name
        raise DataError(
            f"the GPT-2 tokenizer cannot be read from {vocab} and {merges} "
            f"({exc}): {_GET_FILES}"
        ) from None
    tok = Tokenizer(bpe)
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    return tok


def gpt2_tokenizer(vocab: str | Path | None = None, merges: str | Path | None = None):
    """The GPT-2 byte-level BPE tokenizer (a ``tokenizers.Tokenizer``).

    Without arguments the files come from :func:`rcutil.data.find`; no special tokens
    are added when encoding, exactly like OpenAI's GPT-2 encoder.
    """
    vocab = Path(vocab) if vocab is not None else find(TOKENIZER_FILES[0])
    merges = Path(merges) if merges is not None else find(TOKENIZER_FILES[1])
    return _tokenizer_from_files(str(vocab), str(merges))


def encode(texts: Sequence[str], tokenizer=None) -> list[list[int]]:
    """Token ids of each text (GPT-2 BPE, no special tokens)."""
    if isinstance(texts, str):
        raise ValueError(
            "texts must be a sequence of strings, not one string: wrap it in a list"
        )
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
    """Read a GLUE SST-2 TSV file; raise :class:`DataError` naming the file and the line
    of the first fault.

    The header must be ``sentence<TAB>label``, then at least one row ``sentence<TAB>
    label`` with a non-empty sentence and a label of 0 or 1, in UTF-8. Lines end in LF,
    CRLF or CR (as an old Mac wrote them). Line numbers count from 1 (the header).
    """
    path = Path(path)
    sentences: list[str] = []
    labels: list[int] = []
    header = "expected the header 'sentence<TAB>label'"
    with open(path, "rb") as f:
        # bytes split only at \n, \r\n and \r, never inside a sentence's text
        for lineno, raw in enumerate(f.read().splitlines(), start=1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise DataError(
                    f"{path}, line {lineno}: not UTF-8 text (byte "
                    f"{exc.start + 1} of the line); SST-2 is UTF-8: "
                    f"replace the file"
                ) from None
            fields = line.split("\t")
            if lineno == 1:
                if tuple(fields) != HEADER:
                    raise DataError(f"{path}, line 1: {header}, got {line[:80]!r}")
                continue
            if len(fields) != 2:
                raise DataError(
                    f"{path}, line {lineno}: expected 2 tab-separated "
                    f"fields (sentence, label), got {len(fields)}: "
                    f"{line[:80]!r}"
                )
            sentence, label = fields[0].rstrip(" "), fields[1].strip()
            if not sentence:
                raise DataError(f"{path}, line {lineno}: the sentence is empty")
            if label not in ("0", "1"):
                raise DataError(
                    f"{path}, line {lineno}: the label must be 0 or 1, got {label!r}"
                )
            sentences.append(sentence)
            labels.append(int(label))
    if path.stat().st_size == 0:
        raise DataError(f"{path}, line 1: the file is empty; {header} and rows")
    if not labels:
        raise DataError(
            f"{path} has a header but no rows: it is cut short; replace it "
            f"(rcutil.data finds a verified copy of each split)"
        )
    return SST2Split(sentences, labels)


def load_split(split: str) -> SST2Split:
    """The ``train`` (67,349 rows) or ``dev`` (872 rows) split, via
    :func:`rcutil.data.find`."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {sorted(SPLITS)}, got {split!r}")
    return read_tsv(find(SPLITS[split]))


def pad_batch(ids: Sequence[Sequence[int]], *, max_len: int, pad_id: int = EOS_ID):
    """Right-pad (and truncate to ``max_len``) token lists: ``(tokens (B, T), lengths
    (B,))``.

    ``T`` is the longest (truncated) length in the batch. Right padding leaves every
    real token's causal attention unchanged, so the model needs no extra mask.
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


def vocabulary(
    *token_lists: Sequence[Sequence[int]], pad_id: int = EOS_ID
) -> torch.Tensor:
    """The sorted GPT-2 ids that occur in any of the token lists, plus ``pad_id``: the
    rows of the embedding that a model of these sentences ever reads."""
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
        raise ValueError(
            f"token id {int(tokens[missing][0])} is not in the vocabulary of "
            f"{len(vocab)} ids: build the vocabulary from every split the model reads"
        )
    return pos


def length_batches(
    lengths: torch.Tensor,
    batch_size: int,
    generator: torch.Generator,
    *,
    order: torch.Generator | None = None,
) -> list[torch.Tensor]:
    """One epoch of row indices, cut into batches of similar length.

    The rows are shuffled with ``generator``, sorted by length (stable, so equal
    lengths stay shuffled), cut into batches of ``batch_size`` (the last one may be
    smaller) and the batches are shuffled with ``order`` (default ``generator``): every
    row appears once per epoch, a batch pads its sentences to a length close to theirs,
    and the order of the batches carries no length trend. The lengths of the sorted
    rows do not depend on the first shuffle, so two epochs drawn with the same
    ``order`` have batches of the same sizes and lengths, step for step, whatever
    their ``generator``.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")
    perm = torch.randperm(len(lengths), generator=generator)
    rows = perm[torch.sort(lengths[perm], stable=True).indices]
    batches = list(rows.split(batch_size))
    shuffle = torch.randperm(len(batches), generator=order or generator)
    return [batches[i] for i in shuffle.tolist()]
