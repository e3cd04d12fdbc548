"""rcutil.data: where a data file is found, how it is checked, downloaded and recorded
(only in the user cache, never in place of a pin), and the one-line errors of each
fault. Files and servers are made by the tests: file://
URLs, and a local HTTP server for what only HTTP can do (errors, stalls, cut
connections)."""

from __future__ import annotations

import contextlib
import hashlib
import http.server
import io
import os
import socket
import subprocess
import sys
import threading
import urllib.error
import urllib.request
import zipfile

import pytest

from rcutil import data, experiments, gpt2, jena_data, profiles, sst2_data


@pytest.fixture
def isolated(tmp_path, monkeypatch):
    """No data folder, an empty cache, a private asset registry, no pause between
    retries."""
    monkeypatch.delenv(data.DATA_DIR_ENV, raising=False)
    monkeypatch.setenv(data.CACHE_DIR_ENV, str(tmp_path / "cache"))
    monkeypatch.setattr(data, "ASSETS", {})
    monkeypatch.setattr(data, "BACKOFF_S", 0.0)
    return tmp_path


@pytest.fixture
def datadir(isolated, monkeypatch):
    """An empty data folder named by $RCUTIL_DATA_DIR."""
    folder = isolated / "datadir"
    folder.mkdir()
    monkeypatch.setenv(data.DATA_DIR_ENV, str(folder))
    return folder


def sha(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()


def serve(tmp_path, name: str, payload: bytes) -> str:
    src = tmp_path / "server" / name
    src.parent.mkdir(parents=True, exist_ok=True)
    src.write_bytes(payload)
    return src.as_uri()


def put(folder, relpath: str, payload: bytes):
    path = folder / relpath
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(payload)
    return path


class _Handler(http.server.BaseHTTPRequestHandler):
    answer = None  #: answer(handler, k): how to answer the k-th request (k >= 1)
    hits: list

    def log_message(self, *args):
        pass

    def do_GET(self):
        self.hits.append(self.path)
        type(self).answer(self, len(self.hits))

    def send_payload(self, payload: bytes, cut: int | None = None):
        """Announce ``payload`` and send it, or only its first ``cut`` bytes."""
        self.send_response(200)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload[:cut])


@contextlib.contextmanager
def http_server(answer):
    """Serve ``answer(handler, k)`` for the k-th request on 127.0.0.1; yields (URL,
    requests)."""
    handler = type("Handler", (_Handler,), {"answer": answer, "hits": []})
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/f.bin", handler.hits
    finally:
        httpd.shutdown()
        httpd.server_close()


@contextlib.contextmanager
def silent_server():
    """A server that accepts connections and never answers; yields (URL,
    connections)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    accepted = []
    stop = threading.Event()

    def accept():
        sock.settimeout(0.1)
        while not stop.is_set():
            with contextlib.suppress(OSError):
                accepted.append(sock.accept()[0])

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}/f.bin", accepted
    finally:
        stop.set()
        thread.join()
        for conn in accepted:
            conn.close()
        sock.close()


# ---------------------------------------------------------------------- where files are
def test_data_dir_is_used_first_and_verified(datadir):
    payload = b"sentence\tlabel\nfine \t1\n"
    data.register(data.Asset("sst/x.tsv", "file:///nonexistent", sha(payload)))
    path = put(datadir, "sst/x.tsv", payload)
    assert data.find("sst/x.tsv") == path


def test_cache_is_used_when_data_dir_lacks_the_file(datadir, isolated):
    data.register(data.Asset("a/c.txt", "file:///nonexistent", sha(b"cached")))
    cached = put(isolated / "cache", "a/c.txt", b"cached")
    assert data.find("a/c.txt") == cached


def test_unknown_name():
    with pytest.raises(ValueError, match="unknown data file"):
        data.find("nope.txt")


def test_every_file_is_registered_by_the_module_that_reads_it_with_its_check():
    for rel in (*sst2_data.SPLITS.values(), *sst2_data.TOKENIZER_FILES):
        assert len(data.ASSETS[rel].sha256) == 64 and data.ASSETS[rel].url
    assert data.ASSETS[gpt2.GPT2_SMALL.relpath] is gpt2.GPT2_SMALL
    full = data.ASSETS[jena_data.FULL_FILE]
    excerpt = data.ASSETS[jena_data.FIXTURE_FILE]
    assert full.url == jena_data.URL and full.sha256 is None
    assert full.validate is jena_data.check_structure and full.record
    assert excerpt.source == jena_data.FULL_FILE and excerpt.pinned
    assert excerpt.derive is jena_data.derive_fixture
    assert excerpt.validate is jena_data.check_fixture and not excerpt.record


def test_the_fetcher_knows_no_data_set_until_a_data_module_is_imported():
    """rcutil.data is the generic fetcher: the data modules above it register their
    files when imported (an import edge, never a name resolved from a string)."""
    code = (
        "from rcutil import data; print(len(data.ASSETS)); "
        "import rcutil.jena_data; print(sorted(data.ASSETS))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.stdout.splitlines() == [
        "0",
        str(sorted([jena_data.FULL_FILE, jena_data.FIXTURE_FILE])),
    ], out.stderr


def test_an_unregistered_name_says_which_modules_register_files(isolated):
    with pytest.raises(ValueError, match="unknown data file 'sst2/x.tsv'") as err:
        data.find("sst2/x.tsv")
    assert "rcutil.sst2_data" in str(err.value) and "registers" in str(err.value)


@pytest.mark.parametrize("where", ["datadir", "cache"])
def test_a_folder_where_a_file_should_be_is_called_a_folder(request, isolated, where):
    """Not "missing and could not be downloaded", with advice about the cache."""
    root = (
        request.getfixturevalue("datadir") if where == "datadir" else isolated / "cache"
    )
    data.register(data.Asset("s/train.tsv", "https://example.org/x.zip", sha(b"x")))
    (root / "s" / "train.tsv").mkdir(parents=True)
    with pytest.raises(data.DataError, match="is a folder") as err:
        data.find("s/train.tsv", progress=False)
    assert str(root / "s" / "train.tsv") in str(err.value)
    assert "download" not in str(err.value)


@pytest.mark.parametrize("broken", ["s/train.tsv", "s"])
def test_a_broken_link_where_a_file_should_be_is_called_a_link(datadir, broken):
    data.register(data.Asset("s/train.tsv", "https://example.org/x.zip", sha(b"x")))
    (datadir / "s").mkdir()
    if broken == "s":
        (datadir / "s").rmdir()
    (datadir / broken).symlink_to(datadir / "gone")
    with pytest.raises(data.DataError, match="which does not exist") as err:
        data.find("s/train.tsv", progress=False)
    assert f"{datadir / broken} is a link to {datadir / 'gone'}" in str(err.value)


def test_a_file_where_a_folder_of_the_path_should_be_is_named(datadir):
    data.register(data.Asset("s/train.tsv", "https://example.org/x.zip", sha(b"x")))
    (datadir / "s").write_text("not a folder")
    with pytest.raises(data.DataError, match="is a file, not a folder") as err:
        data.find("s/train.tsv", progress=False)
    assert str(err.value).startswith(str(datadir / "s"))


def test_data_and_cache_folders_that_are_wrong(tmp_path, monkeypatch):
    monkeypatch.setenv(data.DATA_DIR_ENV, str(tmp_path / "nowhere"))
    with pytest.raises(data.DataError, match="does not exist") as err:
        data.find("sst2/dev.tsv")
    assert f"RCUTIL_DATA_DIR={tmp_path / 'nowhere'}" in str(err.value)
    monkeypatch.setenv(data.DATA_DIR_ENV, "  ")  # blank: unset
    (tmp_path / "cachefile").write_text("")
    monkeypatch.setenv(data.CACHE_DIR_ENV, str(tmp_path / "cachefile"))
    with pytest.raises(data.DataError, match="is a file, not a folder") as err:
        data.find("sst2/dev.tsv")
    assert str(err.value).startswith("RCUTIL_CACHE_DIR")


# ----------------------------------------------------------------------- checks
def test_corrupt_file_names_file_expected_checksum_and_fix(datadir):
    data.register(data.Asset("a/f.txt", "file:///nonexistent", sha(b"good bytes")))
    bad = put(datadir, "a/f.txt", b"bad bytes")
    with pytest.raises(data.DataError, match="corrupt") as err:
        data.find("a/f.txt")
    msg = str(err.value)
    assert str(bad) in msg and sha(b"good bytes") in msg and sha(b"bad bytes") in msg
    assert "Delete it" in msg


def test_a_corrupt_file_that_has_no_download_is_not_sent_to_download_it(datadir):
    data.register(data.Asset("f/fixture.csv", None, sha(b"x")))
    bad = put(datadir, "f/fixture.csv", b"y")
    with pytest.raises(data.DataError, match="Replace it") as err:
        data.find("f/fixture.csv")
    assert str(err.value).startswith(f"{bad} is corrupt")
    assert "download" not in str(err.value)


@pytest.mark.parametrize("where", ["datadir", "cache"])
def test_an_empty_data_file_is_called_empty(request, isolated, where):
    root = (
        request.getfixturevalue("datadir") if where == "datadir" else isolated / "cache"
    )
    data.register(data.Asset("a/f.txt", "https://example.org/f.txt", sha(b"content")))
    empty = put(root, "a/f.txt", b"")
    with pytest.raises(data.DataError, match=r"is empty \(0 bytes\)") as err:
        data.find("a/f.txt")
    assert str(err.value).startswith(str(empty)) and "Delete it" in str(err.value)


def test_unknown_checksum_is_recorded_then_enforced(isolated):
    checked = []

    def validate(path):
        checked.append(path)
        if not path.read_bytes().startswith(b"header"):
            raise data.DataError(f"{path}: wrong header")

    url = serve(isolated, "j.csv", b"header\n1,2\n")
    data.register(data.Asset("j/j.csv", url, None, validate=validate, record=True))
    path = data.find("j/j.csv", progress=False)
    recorded = path.with_name("j.csv.sha256").read_text().split()[0]
    assert recorded == sha(b"header\n1,2\n") and len(checked) == 1
    assert data.find("j/j.csv") == path and len(checked) == 1, (
        "the recorded checksum vouches for the structure: no second structure check"
    )
    path.write_bytes(b"header\n1,3\n")  # same structure, other bytes
    with pytest.raises(data.DataError, match="j.csv.sha256"):
        data.find("j/j.csv")


def test_a_stale_recorded_checksum_is_named_and_deleting_it_is_the_fix(isolated):
    """A good file beside a .sha256 of another file: the message names the record, not
    the file, as the culprit; once the record is deleted, the file is checked by its
    structure and recorded again."""

    def validate(path):
        if not path.read_bytes().startswith(b"header"):
            raise data.DataError(f"{path}: wrong header")

    data.register(
        data.Asset(
            "j/j.csv", "file:///nonexistent", None, validate=validate, record=True
        )
    )
    good = put(isolated / "cache", "j/j.csv", b"header\n1,2\n")
    record = good.with_name("j.csv.sha256")
    record.write_text(f"{sha(b'other')}  j.csv\n")
    with pytest.raises(data.DataError, match="passes the structure check") as err:
        data.find("j/j.csv")
    msg = str(err.value)
    assert f"delete {record}" in msg and "corrupt" not in msg
    record.unlink()
    assert data.find("j/j.csv") == good
    assert record.read_text().split()[0] == sha(good.read_bytes())


def test_a_corrupt_file_with_a_recorded_checksum_names_the_record_too(isolated):
    def validate(path):
        if not path.read_bytes().startswith(b"header"):
            raise data.DataError(f"{path}: wrong header")

    data.register(
        data.Asset(
            "j/j.csv", "file:///nonexistent", None, validate=validate, record=True
        )
    )
    bad = put(isolated / "cache", "j/j.csv", b"garbage")
    bad.with_name("j.csv.sha256").write_text(f"{sha(b'header')}  j.csv\n")
    with pytest.raises(data.DataError, match="is corrupt") as err:
        data.find("j/j.csv")
    assert "Delete it" in str(err.value) and "j.csv.sha256" in str(err.value)


@pytest.mark.parametrize("record", ["", "not-a-checksum  j.csv\n"])
def test_a_damaged_checksum_record_is_named(isolated, record):
    data.register(data.Asset("j/j.csv", "file:///nonexistent", None, record=True))
    put(isolated / "cache", "j/j.csv", b"header\n")
    (isolated / "cache" / "j" / "j.csv.sha256").write_text(record)
    with pytest.raises(data.DataError, match="not a sha256 record") as err:
        data.find("j/j.csv")
    assert "delete it" in str(err.value)


def header_check(path):
    if not path.read_bytes().startswith(b"header"):
        raise data.DataError(f"{path}: wrong header")


def test_a_record_beside_a_file_in_the_data_folder_is_neither_trusted_nor_written(
    datadir,
):
    """Only the user cache holds records: in the data folder the file is checked by
    its structure every time, whatever a .sha256 beside it says."""
    checked = []

    def validate(path):
        checked.append(path)
        header_check(path)

    data.register(
        data.Asset(
            "j/j.csv", "file:///nonexistent", None, validate=validate, record=True
        )
    )
    bad = put(datadir, "j/j.csv", b"garbage")
    bad.with_name("j.csv.sha256").write_text(f"{sha(b'garbage')}  j.csv\n")
    with pytest.raises(data.DataError, match="wrong header"):
        data.find("j/j.csv")
    good = put(datadir, "j/j.csv", b"header\n1,2\n")
    good.with_name("j.csv.sha256").unlink()
    assert data.find("j/j.csv") == good and checked
    assert not good.with_name("j.csv.sha256").exists(), "nothing written there"


@pytest.mark.parametrize("where", ["datadir", "cache"])
def test_a_record_never_stands_in_for_a_pinned_check(request, isolated, where):
    """An edited file with a matching .sha256 beside it is still refused by the digest
    its check pins, in the data folder and in the cache alike."""
    root = (
        request.getfixturevalue("datadir") if where == "datadir" else isolated / "cache"
    )

    def pinned(path):
        if sha(path.read_bytes()) != sha(b"the pinned rows\n"):
            raise data.DataError(f"{path} is not the pinned excerpt")

    data.register(data.Asset("j/head.csv", None, validate=pinned, pinned=True))
    edited = put(root, "j/head.csv", b"the pinned rows, edited\n")
    edited.with_name("head.csv.sha256").write_text(
        f"{sha(edited.read_bytes())}  head.csv\n"
    )
    with pytest.raises(data.DataError, match="not the pinned excerpt"):
        data.find("j/head.csv")


# ----------------------------------------------------------------------- downloads
def test_download_is_verified_and_lands_in_cache(isolated):
    payload = b"downloaded bytes\n" * 100
    url = serve(isolated, "f.bin", payload)
    data.register(data.Asset("d/f.bin", url, sha(payload)))
    path = data.find("d/f.bin", progress=False)
    assert path == isolated / "cache" / "d" / "f.bin" and path.read_bytes() == payload
    assert [p.name for p in path.parent.iterdir() if not p.name.endswith(".lock")] == [
        "f.bin"
    ], "no temporary file is left"


def test_download_from_zip_member(isolated):
    payload = b"sentence\tlabel\n"
    archive = isolated / "server" / "SST.zip"
    archive.parent.mkdir(parents=True)
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("SST/train.tsv", payload)
        zf.writestr("SST/other.tsv", b"other")
    data.register(
        data.Asset(
            "s/train.tsv", archive.as_uri(), sha(payload), member="SST/train.tsv"
        )
    )
    assert data.find("s/train.tsv", progress=False).read_bytes() == payload


def test_corrupt_download_is_rejected_and_nothing_is_left(isolated):
    data.register(
        data.Asset("d/f.bin", serve(isolated, "f.bin", b"tampered"), sha(b"original"))
    )
    with pytest.raises(data.DataError, match="corrupt") as err:
        data.find("d/f.bin", progress=False)
    assert sha(b"original") in str(err.value)
    folder = isolated / "cache" / "d"
    assert not folder.exists() or [p.name for p in folder.iterdir()] == [".f.bin.lock"]


def test_structure_check_rejects_bad_download_and_names_its_url(isolated):
    def validate(path):
        raise data.DataError(f"{path}, line 1: wrong header")

    url = serve(isolated, "j.csv", b"nonsense")
    data.register(data.Asset("j/j.csv", url, None, validate=validate))
    with pytest.raises(data.DataError, match="wrong header") as err:
        data.find("j/j.csv", progress=False)
    assert str(err.value).startswith(f"the file downloaded from {url}, line 1")
    assert not (isolated / "cache" / "j" / "j.csv").exists()


def test_an_empty_download_is_called_empty(isolated):
    data.register(data.Asset("a/f.txt", serve(isolated, "f.txt", b""), sha(b"content")))
    with pytest.raises(data.DataError, match="is empty") as err:
        data.find("a/f.txt", progress=False)
    assert str(err.value).startswith("the file downloaded from file://")


def test_missing_file_without_network_names_file_checksum_and_fix(isolated):
    data.register(
        data.Asset("m/f.txt", (isolated / "server" / "absent.txt").as_uri(), sha(b"x"))
    )
    with pytest.raises(data.DataError, match="is missing") as err:
        data.find("m/f.txt", progress=False)
    assert sha(b"x") in str(err.value) and "RCUTIL_DATA_DIR" in str(err.value)


def test_a_file_without_download_speaks_of_the_projects_folders(isolated):
    data.register(data.Asset("f/fixture.csv", None, sha(b"x")))
    with pytest.raises(data.DataError, match="no download URL") as err:
        data.find("f/fixture.csv")
    msg = str(err.value)
    assert "RCUTIL_DATA_DIR" in msg
    assert str(isolated / "cache" / "f" / "fixture.csv") in msg
    assert "shared" not in msg


def test_a_server_that_never_answers_times_out_with_bounded_retries(
    isolated, monkeypatch
):
    monkeypatch.setattr(data, "TIMEOUT_S", 0.3)
    with silent_server() as (url, accepted):
        data.register(data.Asset("d/f.bin", url, sha(b"x")))
        with pytest.raises(data.DataError, match="no answer within 0.3 s") as err:
            data.find("d/f.bin", progress=False)
        assert len(accepted) == data.ATTEMPTS == 3
    msg = str(err.value)
    assert url in msg and f"after {data.ATTEMPTS} attempts" in msg
    assert "RCUTIL_DATA_DIR" in msg and "\n" not in msg
    assert not list((isolated / "cache" / "d").glob(".f.bin.*.tmp"))


def test_a_transient_server_error_is_retried(isolated):
    payload = b"payload\n" * 50

    def answer(h, k):
        return h.send_error(503) if k < 3 else h.send_payload(payload)

    with http_server(answer) as (url, hits):
        data.register(data.Asset("d/f.bin", url, sha(payload)))
        assert data.find("d/f.bin", progress=False).read_bytes() == payload
    assert len(hits) == 3


def test_a_missing_page_is_not_retried_and_is_named(isolated):
    with http_server(lambda h, k: h.send_error(404)) as (url, hits):
        data.register(data.Asset("d/f.bin", url, sha(b"x")))
        with pytest.raises(data.DataError, match="HTTP Error 404") as err:
            data.find("d/f.bin", progress=False)
    assert url in str(err.value) and len(hits) == 1


def test_a_cut_connection_is_retried_and_never_kept(isolated):
    payload = b"0123456789" * 100

    def answer(h, k):
        return h.send_payload(payload, cut=300 if k == 1 else None)

    with http_server(answer) as (url, hits):
        data.register(data.Asset("d/f.bin", url, sha(payload)))
        assert data.find("d/f.bin", progress=False).read_bytes() == payload
    assert len(hits) == 2


def test_two_processes_download_a_file_once(isolated):
    payload = b"slow bytes\n" * 1000
    gate = threading.Event()

    def answer(h, k):
        return gate.wait(5) and h.send_payload(payload)

    with http_server(answer) as (url, hits):
        data.register(data.Asset("d/f.bin", url, sha(payload)))
        found = []
        workers = [
            threading.Thread(
                target=lambda: found.append(data.find("d/f.bin", progress=False))
            )
            for _ in range(2)
        ]
        for w in workers:
            w.start()
        threading.Timer(0.5, gate.set).start()
        for w in workers:
            w.join(30)
    assert len(found) == 2 and found[0] == found[1] and found[0].read_bytes() == payload
    assert len(hits) == 1, "the second waited for the first one's download"


@pytest.mark.parametrize(
    "litter", [".f.bin.k1ll3d.tmp", ".f.bin.sha256.r3c0rd.tmp", ".f.bin.zip.tmp"]
)
def test_what_a_killed_download_left_is_removed_by_the_next(isolated, litter):
    payload = b"fresh"
    folder = isolated / "cache" / "d"
    left = put(folder, litter, b"half a download")
    url = serve(isolated, "f.bin", payload)
    data.register(data.Asset("d/f.bin", url, sha(payload)))
    assert data.find("d/f.bin", progress=False).read_bytes() == payload
    assert not left.exists() and not list(folder.glob("*.tmp"))


def test_what_a_killed_derivation_left_is_removed_by_the_next(isolated):
    url = serve(isolated, "src.txt", b"abc")
    data.register(data.Asset("d/src.txt", url, sha(b"abc")))
    data.register(
        data.Asset(
            "d/made.txt",
            None,
            sha(b"ABC"),
            source="d/src.txt",
            derive=lambda src, out: out.write_bytes(src.read_bytes().upper()),
        )
    )
    left = put(isolated / "cache" / "d", ".made.txt.k1ll3d.tmp", b"AB")
    assert data.find("d/made.txt", progress=False).read_bytes() == b"ABC"
    assert not left.exists()


def test_a_killed_download_leaves_no_file_a_rerun_would_trust(isolated):
    """kill -9 in the middle of a download, in a real process: nothing at the cached
    path, and the next run downloads and verifies the file."""
    payload = b"x" * 100_000
    started = threading.Event()

    def answer(handler, k):
        if k == 1:  # the first download stalls after its first bytes
            handler.send_response(200)
            handler.send_header("Content-Length", str(len(payload)))
            handler.end_headers()
            handler.wfile.write(payload[:1000])
            handler.wfile.flush()
            started.set()
            threading.Event().wait(10)
        else:
            handler.send_payload(payload)

    with http_server(answer) as (url, hits):
        code = (
            "from rcutil import data\n"
            f"data.ASSETS = {{'d/f.bin': data.Asset('d/f.bin', {url!r}, "
            f"{sha(payload)!r})}}\n"
            "data.find('d/f.bin', progress=False)\n"
        )
        proc = subprocess.Popen(
            [sys.executable, "-c", code],
            env={**os.environ, data.CACHE_DIR_ENV: str(isolated / "cache")},
        )
        assert started.wait(60), "the download did not start"
        proc.kill()
        proc.wait()
        folder = isolated / "cache" / "d"
        assert not (folder / "f.bin").exists() and list(folder.glob(".f.bin.*.tmp"))
        data.register(data.Asset("d/f.bin", url, sha(payload)))
        assert data.find("d/f.bin", progress=False).read_bytes() == payload
    assert not list(folder.glob(".f.bin.*.tmp"))


def test_a_damaged_archive_member_names_the_archive_url_and_member(isolated):
    payload = b"sentence\tlabel\n" + b"a fine film \t1\n" * 2000
    archive = isolated / "server" / "SST.zip"
    archive.parent.mkdir()
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("SST/train.tsv", payload)
    raw = bytearray(archive.read_bytes())
    raw[len(raw) // 3] ^= 0xFF  # one flipped byte inside the compressed member
    archive.write_bytes(bytes(raw))
    data.register(
        data.Asset(
            "s/train.tsv", archive.as_uri(), sha(payload), member="SST/train.tsv"
        )
    )
    with pytest.raises(data.DataError, match="damaged") as err:
        data.find("s/train.tsv", progress=False)
    msg = str(err.value)
    assert "member SST/train.tsv" in msg and archive.as_uri() in msg
    assert ".tmp" not in msg and "run again" in msg


def test_a_wrong_archive_member_is_reported_without_a_temporary_path(isolated):
    archive = isolated / "server" / "SST.zip"
    archive.parent.mkdir()
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("SST/train.tsv", b"other bytes")
    data.register(
        data.Asset(
            "s/train.tsv", archive.as_uri(), sha(b"expected"), member="SST/train.tsv"
        )
    )
    with pytest.raises(data.DataError, match="not kept") as err:
        data.find("s/train.tsv", progress=False)
    msg = str(err.value)
    assert msg.startswith(
        f"the member SST/train.tsv of the archive from {archive.as_uri()} is corrupt"
    )
    assert ".tmp" not in msg and sha(b"expected") in msg


# --------------------------------------------------------------------- a fresh machine
class _Response(io.BytesIO):
    def __init__(self, payload: bytes):
        super().__init__(payload)
        self.headers = {"Content-Length": str(len(payload))}


def _mirror() -> dict[str, bytes]:
    """The canonical URLs of the SST-2 archive and the tokenizer files, served from the
    copies this machine has (data folder or cache)."""
    try:
        local = {
            rel: data.find(rel, allow_download=False)
            for rel in (
                "sst2/train.tsv",
                "sst2/dev.tsv",
                "gpt2_tokenizer/vocab.json",
                "gpt2_tokenizer/merges.txt",
            )
        }
    except data.DataError as exc:
        pytest.skip(
            f"needs local copies of the data files to stand in for the network: {exc}"
        )
    archive = io.BytesIO()
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_STORED) as zf:
        for split in ("train", "dev"):
            zf.write(local[f"sst2/{split}.tsv"], f"SST-2/{split}.tsv")
    return {
        sst2_data.SST2_URL: archive.getvalue(),
        **{
            sst2_data.GPT2_URL + name: local[f"gpt2_tokenizer/{name}"].read_bytes()
            for name in ("vocab.json", "merges.txt")
        },
    }


def test_fresh_clone_downloads_every_ci_data_file_without_a_data_folder(
    tmp_path, monkeypatch
):
    """No data folder, an empty cache, and the network stubbed by copies of the real
    files: every data file the ci profile reads is downloaded, verified against its
    pinned checksum and cached (the Jena files: test_jena_data.py)."""
    mirror = _mirror()
    requests = []

    def urlopen(url, *, timeout=None):
        requests.append((url, timeout))
        if url not in mirror:
            raise urllib.error.URLError(f"no route to {url} in this test")
        return _Response(mirror[url])

    monkeypatch.delenv(data.DATA_DIR_ENV, raising=False)
    monkeypatch.setenv(data.CACHE_DIR_ENV, str(tmp_path / "cache"))
    monkeypatch.setattr(urllib.request, "urlopen", urlopen)
    needed = {
        rel
        for e in experiments.registry()
        if hasattr(m := experiments.load(e.name), "data_files")
        for rel in m.data_files(profiles.settings_for(m.SETTINGS, "ci"))
    }
    needed = sorted(rel for rel in needed if not rel.startswith("jena_climate/"))
    assert {"sst2/train.tsv", "sst2/dev.tsv", "gpt2_tokenizer/vocab.json"} <= set(
        needed
    )
    for rel in needed:
        path = data.find(rel, progress=False)
        assert path == tmp_path / "cache" / rel
        assert data.sha256sum(path) == data.ASSETS[rel].sha256
    assert requests and all(timeout == data.TIMEOUT_S for _, timeout in requests)
    assert data.find(needed[0]) and len(requests) == len(needed), "the cache is read"
