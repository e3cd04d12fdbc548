"""rcutil.sst2_data: the GPT-2 tokenizer ids and the checks of its files, the SST-2
reader and its errors, padding, the compact vocabulary and length batches."""

import pytest
import torch

from rcutil import sst2_data
from rcutil.data import DataError, find
from rcutil.sst2_data import EOS_ID, encode, gpt2_tokenizer, pad_batch, read_tsv


def local_file(relpath):
    """A data file from $RCUTIL_DATA_DIR or the cache, never from the network; else
    skip."""
    try:
        return find(relpath, progress=False, allow_download=False)
    except DataError as exc:
        pytest.skip(
            f"data file {relpath} not available offline (set RCUTIL_DATA_DIR): {exc}"
        )


@pytest.fixture(scope="module")
def tokenizer():
    return gpt2_tokenizer(
        local_file("gpt2_tokenizer/vocab.json"), local_file("gpt2_tokenizer/merges.txt")
    )


def test_tokenizer_known_ids(tokenizer):
    assert encode(["Hello world"], tokenizer) == [[15496, 995]]
    # a leading space is part of the token, as in GPT-2's byte-level BPE
    assert encode([" Hello", "<|endoftext|>"], tokenizer)[0] == [18435]
    assert tokenizer.get_vocab_size() == 50257
    assert tokenizer.token_to_id("<|endoftext|>") == EOS_ID
    assert (
        tokenizer.decode(encode(["it 's a charming journey ."], tokenizer)[0])
        == "it 's a charming journey ."
    )


def test_encode_rejects_a_bare_string(tokenizer):
    with pytest.raises(ValueError, match="wrap it in a list"):
        encode("Hello world", tokenizer)


def write(tmp_path, text, name="rows.tsv"):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_read_tsv_strips_the_trailing_space(tmp_path):
    path = write(
        tmp_path,
        "sentence\tlabel\nhide new secretions \t0\na patient viewer \t1\nno space\t1\n",
    )
    split = read_tsv(path)
    assert split.sentences == ["hide new secretions", "a patient viewer", "no space"]
    assert split.labels == [0, 1, 1] and len(split) == 3


@pytest.mark.parametrize("ending", ["\n", "\r\n", "\r"], ids=["LF", "CRLF", "CR"])
def test_every_line_ending_reads_the_same_rows(tmp_path, ending):
    rows = ["sentence\tlabel", "hide new secretions \t0", "a patient viewer \t1"]
    split = read_tsv(write(tmp_path, ending.join(rows) + ending))
    assert split.sentences == ["hide new secretions", "a patient viewer"]
    assert split.labels == [0, 1]
    with pytest.raises(DataError, match="label must be 0 or 1") as info:
        read_tsv(write(tmp_path, ending.join([*rows, "bad \t2"]) + ending))
    assert str(info.value).startswith(f"{tmp_path / 'rows.tsv'}, line 4:")


def test_the_dev_split_with_old_mac_line_endings_reads_as_before(tmp_path):
    local_file("sst2/dev.tsv")
    dev = sst2_data.load_split("dev")
    cr = tmp_path / "dev.tsv"
    cr.write_bytes(find("sst2/dev.tsv").read_bytes().replace(b"\n", b"\r"))
    assert read_tsv(cr) == dev and len(dev) == 872


@pytest.mark.parametrize(
    "text, line, what",
    [
        ("sentence\tlabel\ngood \t1\nbad label \t2\n", 3, "0 or 1"),
        ("sentence\tlabel\ngood \t1\ngood \t0\nno tab here 1\n", 4, "2 tab-separated"),
        ("sentence\tlabel\ngood \t1\ntoo\tmany\t1\n", 3, "got 3"),
        ("sentence\tlabel\n \t1\n", 2, "sentence is empty"),
        ("sentence\tlabel\ngood \t1\n\ngood \t0\n", 3, "2 tab-separated"),
        ("text\tlabel\ngood \t1\n", 1, "header"),
        ("", 1, "empty"),
    ],
)
def test_malformed_rows_name_the_line(tmp_path, text, line, what):
    path = write(tmp_path, text)
    with pytest.raises(DataError, match=what) as info:
        read_tsv(path)
    assert str(info.value).startswith(f"{path}, line {line}:")


@pytest.mark.parametrize("text", ["sentence\tlabel\n", "sentence\tlabel"])
def test_a_file_with_a_header_and_no_rows_is_refused(tmp_path, text):
    path = write(tmp_path, text)
    with pytest.raises(DataError, match="no rows") as info:
        read_tsv(path)
    assert str(info.value).startswith(str(path))


def test_text_that_is_not_utf8_names_the_file_and_line(tmp_path):
    path = tmp_path / "rows.tsv"
    path.write_bytes(b"sentence\tlabel\ngood \t1\nbad \xff\xfe text \t0\n")
    with pytest.raises(DataError, match="not UTF-8") as info:
        read_tsv(path)
    assert str(info.value).startswith(f"{path}, line 3:")


# ----------------------------------------------------------------- tokenizer files
def tokenizer_files(
    tmp_path, *, merges: bytes | None = None, vocab: bytes | None = None
):
    """Copies of GPT-2's tokenizer files, with ``merges`` or ``vocab`` replaced."""
    v, m = tmp_path / "vocab.json", tmp_path / "merges.txt"
    v.write_bytes(
        vocab
        if vocab is not None
        else local_file("gpt2_tokenizer/vocab.json").read_bytes()
    )
    m.write_bytes(
        merges
        if merges is not None
        else local_file("gpt2_tokenizer/merges.txt").read_bytes()
    )
    return v, m


def real_merges() -> bytes:
    return local_file("gpt2_tokenizer/merges.txt").read_bytes()


def test_the_tokenizer_files_are_checked_against_each_other():
    sst2_data.check_tokenizer_files(
        local_file("gpt2_tokenizer/vocab.json"), local_file("gpt2_tokenizer/merges.txt")
    )


def test_merges_cut_in_half_are_refused(tmp_path):
    """Cut at the end of a line: every line is a merge of the vocabulary, but the last
    25,000 tokens are made by none."""
    lines = real_merges().split(b"\n")
    vocab, merges = tokenizer_files(tmp_path, merges=b"\n".join(lines[:25_001]) + b"\n")
    with pytest.raises(DataError, match="made by none") as info:
        gpt2_tokenizer(vocab, merges)
    assert str(info.value).startswith(f"{merges} ends at line 25002 with 25,000 merges")


def test_merges_cut_within_a_line_name_that_line(tmp_path):
    raw = real_merges()
    cut = raw.index(b"\n", 200_000) + 4  # 3 bytes into a line
    vocab, merges = tokenizer_files(tmp_path, merges=raw[:cut])
    with pytest.raises(DataError, match="cut short in this line") as info:
        gpt2_tokenizer(vocab, merges)
    line = raw[:cut].count(b"\n") + 1
    assert f"{merges}, line {line}:" in str(info.value)


def test_merges_of_another_vocabulary_are_refused(tmp_path):
    raw = real_merges().replace(b"\n\xc4\xa0 t\n", b"\n\xc4\xa0 zq\n", 1)
    vocab, merges = tokenizer_files(tmp_path, merges=raw)
    with pytest.raises(DataError, match="do not belong together") as info:
        gpt2_tokenizer(vocab, merges)
    assert "'zq'" in str(info.value) and str(merges) in str(info.value)


@pytest.mark.parametrize(
    "merges, what",
    [
        (b"#version: 0.2\n\xc4\xa0 \xff\n", "not UTF-8"),
        (b"#version: 0.2\nonly-one-token\nand more\n", "two tokens"),
    ],
)
def test_a_damaged_merges_line_is_named(tmp_path, merges, what):
    vocab, path = tokenizer_files(tmp_path, merges=merges)
    with pytest.raises(DataError, match=what) as info:
        gpt2_tokenizer(vocab, path)
    assert str(info.value).startswith(f"{path}, line 2:")


@pytest.mark.parametrize(
    "vocab, what",
    [
        (b'{"a": 0, "b": ', "not JSON"),
        (b'["a", "b"]', "not a vocabulary"),
        (b'{"a": 0, "b": -1}', "not a vocabulary"),
        (b'{"a": 0, "b": 0}', "same id"),
        (b'{"a": 0, "\xff": 1}', "not UTF-8"),
    ],
)
def test_a_damaged_vocabulary_is_named(tmp_path, vocab, what):
    path, merges = tokenizer_files(tmp_path, vocab=vocab, merges=b"#version: 0.2\n")
    with pytest.raises(DataError, match=what) as info:
        gpt2_tokenizer(path, merges)
    assert str(path) in str(info.value)


@pytest.mark.parametrize("missing", ["vocab.json", "merges.txt"])
def test_a_missing_tokenizer_file_is_named(tmp_path, missing):
    vocab, merges = tokenizer_files(tmp_path)
    (tmp_path / missing).unlink()
    with pytest.raises(DataError, match="cannot read") as info:
        gpt2_tokenizer(vocab, merges)
    assert str(tmp_path / missing) in str(info.value)


def test_an_error_while_building_the_tokenizer_names_both_files(tmp_path, monkeypatch):
    import tokenizers

    class Failing:
        class BPE:
            @staticmethod
            def from_file(vocab, merges):
                raise Exception("Error while reading BPE files")

    vocab, merges = tokenizer_files(tmp_path, vocab=b'{"a": 0}', merges=b"")
    monkeypatch.setattr(tokenizers, "models", Failing)
    with pytest.raises(DataError, match="cannot be read") as info:
        gpt2_tokenizer(vocab, merges)
    assert str(vocab) in str(info.value) and str(merges) in str(info.value)


def test_pad_batch():
    tokens, lengths = pad_batch([[1, 2, 3], [4], [5, 6, 7, 8, 9]], max_len=4)
    assert tokens.tolist() == [
        [1, 2, 3, EOS_ID],
        [4, EOS_ID, EOS_ID, EOS_ID],
        [5, 6, 7, 8],
    ]
    assert lengths.tolist() == [3, 1, 4]
    with pytest.raises(ValueError, match="at least one token"):
        pad_batch([[1], []], max_len=4)
    with pytest.raises(ValueError, match="max_len"):
        pad_batch([[1]], max_len=0)


def test_sst2_row_counts_and_labels():
    local_file("sst2/train.tsv")
    local_file("sst2/dev.tsv")
    train, dev = sst2_data.load_split("train"), sst2_data.load_split("dev")
    assert len(train) == 67_349 and len(dev) == 872
    assert set(train.labels) == {0, 1} and set(dev.labels) == {0, 1}
    assert train.sentences[0] == "hide new secretions from the parental units"
    assert not any(s != s.strip() for s in train.sentences[:1000])
    with pytest.raises(ValueError, match="split must be one of"):
        sst2_data.load_split("test")


def test_sst2_fits_the_sequence_length():
    """Every SST-2 sentence fits in the 64 tokens the experiment uses (nothing is
    truncated)."""
    local_file("sst2/dev.tsv")
    tok = gpt2_tokenizer(
        local_file("gpt2_tokenizer/vocab.json"), local_file("gpt2_tokenizer/merges.txt")
    )
    from rcutil.experiments.sst2 import SETTINGS

    dev = sst2_data.load_split("dev").sentences
    lengths = torch.tensor([len(x) for x in encode(dev, tok)])
    assert int(lengths.max()) <= min(row.max_len for row in SETTINGS.values())


# --------------------------------------------------------------- vocabulary and batches
def test_vocabulary_and_compact_ids():
    from rcutil.sst2_data import to_compact, vocabulary

    vocab = vocabulary([[995, 15496], [7]], [[7, 300]])
    assert vocab.tolist() == [7, 300, 995, 15496, EOS_ID]  # sorted, with the pad id
    tokens = torch.tensor([[15496, 995, EOS_ID], [300, 7, 7]])
    compact = to_compact(tokens, vocab)
    assert compact.tolist() == [[3, 2, 4], [1, 0, 0]]
    assert torch.equal(vocab[compact], tokens)  # a renumbering, all kept
    with pytest.raises(ValueError, match="token id 8 is not in the vocabulary"):
        to_compact(torch.tensor([[7, 8]]), vocab)
    with pytest.raises(ValueError, match="token id 99999"):
        to_compact(torch.tensor([99999]), vocab)


def test_length_batches_cover_an_epoch_with_similar_lengths():
    from rcutil.sst2_data import length_batches

    g = torch.Generator().manual_seed(0)
    lengths = torch.randint(1, 60, (203,), generator=g)
    batches = length_batches(lengths, 16, torch.Generator().manual_seed(1))
    rows = torch.cat(batches)
    assert sorted(rows.tolist()) == list(range(203))  # every row once
    assert sorted(len(b) for b in batches) == [11] + [16] * 12
    padded = sum(int(lengths[b].max()) * len(b) for b in batches)
    shuffled = sum(
        int(lengths[b].max()) * len(b)
        for b in torch.randperm(203, generator=g).split(16)
    )
    assert padded < 0.6 * shuffled  # far less padding
    # the order of the batches carries no length trend: not sorted by length
    maxima = [int(lengths[b].max()) for b in batches]
    assert maxima != sorted(maxima) and maxima != sorted(maxima, reverse=True)
    again = length_batches(lengths, 16, torch.Generator().manual_seed(1))
    assert all(torch.equal(a, b) for a, b in zip(batches, again))  # deterministic
    with pytest.raises(ValueError, match="batch_size"):
        length_batches(lengths, 0, g)
