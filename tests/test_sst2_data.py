"""rcutil.sst2_data: the GPT-2 tokenizer ids, the SST-2 reader and its errors, padding."""
import pytest
import torch

from rcutil.data import DataError, find
from rcutil.sst2_data import EOS_ID, encode, gpt2_tokenizer, load_split, pad_batch, read_tsv


def local_file(relpath):
    """A data file from $RCUTIL_DATA_DIR or the cache, never from the network; else skip."""
    try:
        return find(relpath, progress=False, allow_download=False)
    except DataError as exc:
        pytest.skip(f"data file {relpath} not available offline (set RCUTIL_DATA_DIR): {exc}")


@pytest.fixture(scope="module")
def tokenizer():
    return gpt2_tokenizer(local_file("gpt2_tokenizer/vocab.json"),
                          local_file("gpt2_tokenizer/merges.txt"))


def test_tokenizer_known_ids(tokenizer):
    assert encode(["Hello world"], tokenizer) == [[15496, 995]]
    # a leading space is part of the token, as in GPT-2's byte-level BPE
    assert encode([" Hello", "<|endoftext|>"], tokenizer)[0] == [18435]
    assert tokenizer.get_vocab_size() == 50257
    assert tokenizer.token_to_id("<|endoftext|>") == EOS_ID
    assert tokenizer.decode(encode(["it 's a charming journey ."], tokenizer)[0]) == \
        "it 's a charming journey ."


def test_encode_rejects_a_bare_string(tokenizer):
    with pytest.raises(ValueError, match="wrap it in a list"):
        encode("Hello world", tokenizer)


def write(tmp_path, text, name="rows.tsv"):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_read_tsv_strips_the_trailing_space(tmp_path):
    path = write(tmp_path, "sentence\tlabel\nhide new secretions \t0\na patient viewer \t1\nno space\t1\n")
    split = read_tsv(path)
    assert split.sentences == ["hide new secretions", "a patient viewer", "no space"]
    assert split.labels == [0, 1, 1] and len(split) == 3


@pytest.mark.parametrize("text, line, what", [
    ("sentence\tlabel\ngood \t1\nbad label \t2\n", 3, "label must be 0 or 1"),
    ("sentence\tlabel\ngood \t1\ngood \t0\nno tab here 1\n", 4, "2 tab-separated fields"),
    ("sentence\tlabel\ngood \t1\ntoo\tmany\t1\n", 3, "got 3"),
    ("sentence\tlabel\n \t1\n", 2, "sentence is empty"),
    ("sentence\tlabel\ngood \t1\n\ngood \t0\n", 3, "2 tab-separated fields"),
    ("text\tlabel\ngood \t1\n", 1, "header"),
    ("", 1, "empty"),
])
def test_malformed_rows_name_the_line(tmp_path, text, line, what):
    path = write(tmp_path, text)
    with pytest.raises(DataError, match=f"line {line}:.*{what}") as info:
        read_tsv(path)
    assert str(path) in str(info.value)


def test_pad_batch():
    tokens, lengths = pad_batch([[1, 2, 3], [4], [5, 6, 7, 8, 9]], max_len=4)
    assert tokens.tolist() == [[1, 2, 3, EOS_ID], [4, EOS_ID, EOS_ID, EOS_ID], [5, 6, 7, 8]]
    assert lengths.tolist() == [3, 1, 4]
    with pytest.raises(ValueError, match="at least one token"):
        pad_batch([[1], []], max_len=4)
    with pytest.raises(ValueError, match="max_len"):
        pad_batch([[1]], max_len=0)


def test_sst2_row_counts_and_labels():
    local_file("sst2/train.tsv")
    local_file("sst2/dev.tsv")
    train, dev = load_split("train"), load_split("dev")
    assert len(train) == 67_349 and len(dev) == 872
    assert set(train.labels) == {0, 1} and set(dev.labels) == {0, 1}
    assert train.sentences[0] == "hide new secretions from the parental units"
    assert not any(s != s.strip() for s in train.sentences[:1000])
    with pytest.raises(ValueError, match="split must be one of"):
        load_split("test")


def test_sst2_fits_the_sequence_length():
    """Every SST-2 sentence fits in the 64 tokens the experiment uses (nothing is truncated)."""
    local_file("sst2/dev.tsv")
    tok = gpt2_tokenizer(local_file("gpt2_tokenizer/vocab.json"), local_file("gpt2_tokenizer/merges.txt"))
    from rcutil.experiments.sst2 import SETTINGS

    lengths = torch.tensor([len(x) for x in encode(load_split("dev").sentences, tok)])
    assert int(lengths.max()) <= min(row["max_len"] for row in SETTINGS.values())


# ----------------------------------------------------------------- vocabulary and batches
def test_vocabulary_and_compact_ids():
    from rcutil.sst2_data import to_compact, vocabulary

    vocab = vocabulary([[995, 15496], [7]], [[7, 300]])
    assert vocab.tolist() == [7, 300, 995, 15496, EOS_ID]          # sorted, with the pad id
    tokens = torch.tensor([[15496, 995, EOS_ID], [300, 7, 7]])
    compact = to_compact(tokens, vocab)
    assert compact.tolist() == [[3, 2, 4], [1, 0, 0]]
    assert torch.equal(vocab[compact], tokens)                     # a renumbering, nothing lost
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
    assert sorted(rows.tolist()) == list(range(203))                 # every row once
    assert sorted(len(b) for b in batches) == [11] + [16] * 12
    padded = sum(int(lengths[b].max()) * len(b) for b in batches)
    shuffled = sum(int(lengths[b].max()) * len(b) for b in torch.randperm(203, generator=g).split(16))
    assert padded < 0.6 * shuffled                                   # far less padding
    # the order of the batches carries no length trend: not sorted by length
    maxima = [int(lengths[b].max()) for b in batches]
    assert maxima != sorted(maxima) and maxima != sorted(maxima, reverse=True)
    again = length_batches(lengths, 16, torch.Generator().manual_seed(1))
    assert all(torch.equal(a, b) for a, b in zip(batches, again))   # deterministic
    with pytest.raises(ValueError, match="batch_size"):
        length_batches(lengths, 0, g)
