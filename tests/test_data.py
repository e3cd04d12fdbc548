"""rcutil.data on small files the tests make themselves; downloads use file:// URLs."""
import hashlib
import zipfile

import pytest

from rcutil import data


@pytest.fixture
def isolated(tmp_path, monkeypatch):
    """Empty data folder and cache, and a private asset registry."""
    monkeypatch.setenv("RCUTIL_DATA_DIR", str(tmp_path / "datadir"))
    monkeypatch.setenv("RCUTIL_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(data, "ASSETS", {})
    (tmp_path / "datadir").mkdir()
    return tmp_path


def sha(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()


def serve(tmp_path, name: str, payload: bytes) -> str:
    src = tmp_path / "server" / name
    src.parent.mkdir(parents=True, exist_ok=True)
    src.write_bytes(payload)
    return src.as_uri()


def test_data_dir_is_used_first_and_verified(isolated):
    payload = b"sentence\tlabel\nfine \t1\n"
    data.register(data.Asset("sst/x.tsv", "file:///nonexistent", sha(payload)))
    (isolated / "datadir" / "sst").mkdir()
    (isolated / "datadir" / "sst" / "x.tsv").write_bytes(payload)
    assert data.find("sst/x.tsv") == isolated / "datadir" / "sst" / "x.tsv"


def test_corrupt_file_names_file_expected_checksum_and_fix(isolated):
    payload = b"good bytes"
    data.register(data.Asset("a/f.txt", "file:///nonexistent", sha(payload)))
    (isolated / "datadir" / "a").mkdir()
    bad = isolated / "datadir" / "a" / "f.txt"
    bad.write_bytes(b"bad bytes")
    with pytest.raises(data.DataError) as err:
        data.find("a/f.txt")
    msg = str(err.value)
    assert str(bad) in msg and sha(payload) in msg and sha(b"bad bytes") in msg and "Delete it" in msg


def test_cache_is_used_when_data_dir_lacks_the_file(isolated):
    payload = b"cached"
    data.register(data.Asset("a/c.txt", "file:///nonexistent", sha(payload)))
    cached = isolated / "cache" / "a" / "c.txt"
    cached.parent.mkdir(parents=True)
    cached.write_bytes(payload)
    assert data.find("a/c.txt") == cached


def test_download_is_verified_and_lands_in_cache(isolated):
    payload = b"downloaded bytes\n" * 100
    url = serve(isolated, "f.bin", payload)
    data.register(data.Asset("d/f.bin", url, sha(payload)))
    path = data.find("d/f.bin", progress=False)
    assert path == isolated / "cache" / "d" / "f.bin" and path.read_bytes() == payload
    assert [p.name for p in path.parent.iterdir() if not p.name.endswith(".lock")] == ["f.bin"], \
        "no temporary file is left"


def test_download_from_zip_member(isolated):
    payload = b"sentence\tlabel\n"
    archive = isolated / "server" / "SST.zip"
    archive.parent.mkdir(parents=True)
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("SST/train.tsv", payload)
        zf.writestr("SST/other.tsv", b"other")
    data.register(data.Asset("s/train.tsv", archive.as_uri(), sha(payload), member="SST/train.tsv"))
    assert data.find("s/train.tsv", progress=False).read_bytes() == payload


def test_corrupt_download_is_rejected_and_nothing_is_left(isolated):
    url = serve(isolated, "f.bin", b"tampered")
    data.register(data.Asset("d/f.bin", url, sha(b"original")))
    with pytest.raises(data.DataError, match="corrupt.*expected " + sha(b"original")):
        data.find("d/f.bin", progress=False)
    folder = isolated / "cache" / "d"
    assert not folder.exists() or [p.name for p in folder.iterdir()] == [".f.bin.lock"]


def test_unknown_checksum_is_recorded_then_enforced(isolated):
    checked = []

    def validate(path):
        checked.append(path)
        if not path.read_bytes().startswith(b"header"):
            raise data.DataError(f"{path}: wrong header")

    url = serve(isolated, "j.csv", b"header\n1,2\n")
    data.register(data.Asset("j/j.csv", url, None, validate=validate))
    path = data.find("j/j.csv", progress=False)
    recorded = path.with_name("j.csv.sha256").read_text().split()[0]
    assert recorded == sha(b"header\n1,2\n") and checked
    path.write_bytes(b"header\n1,3\n")  # same structure, different bytes
    with pytest.raises(data.DataError, match="corrupt"):
        data.find("j/j.csv")


def test_structure_check_rejects_bad_download(isolated):
    def validate(path):
        raise data.DataError(f"{path.name}: wrong header")

    url = serve(isolated, "j.csv", b"nonsense")
    data.register(data.Asset("j/j.csv", url, None, validate=validate))
    with pytest.raises(data.DataError, match="wrong header"):
        data.find("j/j.csv", progress=False)
    assert not (isolated / "cache" / "j" / "j.csv").exists()


def test_missing_file_without_network_names_file_checksum_and_fix(isolated):
    data.register(data.Asset("m/f.txt", (isolated / "server" / "absent.txt").as_uri(), sha(b"x")))
    with pytest.raises(data.DataError) as err:
        data.find("m/f.txt", progress=False)
    msg = str(err.value)
    assert "m/f.txt is missing" in msg and sha(b"x") in msg and "RCUTIL_DATA_DIR" in msg


def test_fixture_without_url_says_where_to_get_it(isolated):
    data.register(data.Asset("f/fixture.csv", None, sha(b"x")))
    with pytest.raises(data.DataError, match="no download URL.*RCUTIL_DATA_DIR"):
        data.find("f/fixture.csv")


def test_unknown_name():
    with pytest.raises(ValueError, match="unknown data file"):
        data.find("nope.txt")


def test_registry_knows_the_shared_files():
    for rel in ["sst2/train.tsv", "sst2/dev.tsv", "gpt2_tokenizer/vocab.json", "gpt2_tokenizer/merges.txt"]:
        assert rel in data.ASSETS and len(data.ASSETS[rel].sha256) == 64 and data.ASSETS[rel].url
