"""Fault injection: what a careless or unlucky user can do, and what they get back.

Each test causes one fault and checks the answer: the type of the error and the words of its
message that name the problem and the fix, or the recovery. The numbers in the test names are
those of the list of faults the book was hardened against; the faults of the Jena file (its
fixture, impossible values, order of timestamps, checksum, and the advice of its messages)
are in ``test_faults_jena.py``.
"""
from __future__ import annotations

import contextlib
import hashlib
import http.server
import importlib.util
import io
import os
import socket
import subprocess
import sys
import threading
import urllib.request
import zipfile
from pathlib import Path

import pytest
import torch

from rcutil import data, experiments, plotting, profiles, threads, train, validate
from rcutil.__main__ import main
from rcutil.model import Transformer

ROOT = Path(__file__).resolve().parents[1]


# ----------------------------------------------------------------------- helpers
@pytest.fixture
def isolated(tmp_path, monkeypatch):
    """No data folder, an empty cache, a private asset registry, and no pauses between retries."""
    monkeypatch.delenv(data.DATA_DIR_ENV, raising=False)
    monkeypatch.setenv(data.CACHE_DIR_ENV, str(tmp_path / "cache"))
    monkeypatch.setattr(data, "ASSETS", {})
    monkeypatch.setattr(data, "BACKOFF_S", 0.0)
    return tmp_path


def sha(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()


def one_line_error(proc: subprocess.CompletedProcess | tuple[int, str], *words: str) -> str:
    """Assert a failed command with exactly one line on stderr, no traceback, holding ``words``."""
    rc, stderr = (proc.returncode, proc.stderr) if hasattr(proc, "returncode") else proc
    lines = stderr.strip().splitlines()
    assert rc not in (0, None), stderr
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    for word in words:
        assert word in lines[0], (word, lines[0])
    return lines[0]


def cli(*args: str, **env: str) -> subprocess.CompletedProcess:
    """``python -m rcutil ARGS`` in a fresh process, with ``env`` added to the environment."""
    return subprocess.run([sys.executable, "-m", "rcutil", *args, "--no-progress"], capture_output=True,
                          text=True, timeout=300, env={**os.environ, **env})


class _Handler(http.server.BaseHTTPRequestHandler):
    answer = None     #: answer(handler, k): how to answer the k-th request (k = 1, 2, ...)
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
    """Serve ``answer(handler, k)`` for the k-th request on 127.0.0.1; yields (URL, requests)."""
    handler = type("Handler", (_Handler,), {"answer": answer, "hits": []})
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/f.bin", handler.hits
    finally:
        httpd.shutdown()
        httpd.server_close()


# ----------------------------------------------------------------------- 0: a fresh machine
class _Response(io.BytesIO):
    def __init__(self, payload: bytes):
        super().__init__(payload)
        self.headers = {"Content-Length": str(len(payload))}


def _mirror() -> dict[str, bytes]:
    """The canonical URLs of the SST-2 archive and the tokenizer files, served from the copies
    this machine has (data folder or cache)."""
    try:
        local = {rel: data.find(rel, allow_download=False) for rel in
                 ("sst2/train.tsv", "sst2/dev.tsv", "gpt2_tokenizer/vocab.json", "gpt2_tokenizer/merges.txt")}
    except data.DataError as exc:
        pytest.skip(f"needs local copies of the data files to stand in for the network: {exc}")
    archive = io.BytesIO()
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_STORED) as zf:
        for split in ("train", "dev"):
            zf.write(local[f"sst2/{split}.tsv"], f"SST-2/{split}.tsv")
    return {data.SST2_URL: archive.getvalue(),
            data.GPT2_URL + "vocab.json": local["gpt2_tokenizer/vocab.json"].read_bytes(),
            data.GPT2_URL + "merges.txt": local["gpt2_tokenizer/merges.txt"].read_bytes()}


def test_0_fresh_clone_downloads_every_ci_data_file_without_a_data_folder(tmp_path, monkeypatch):
    """No data folder, an empty cache, and the network stubbed by copies of the real files: every
    data file the ci profile reads is downloaded, verified against its pinned checksum and cached."""
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
    needed = {rel for e in experiments.registry() if hasattr(m := experiments.load(e.name), "data_files")
              for rel in m.data_files(profiles.settings_for(m.SETTINGS, "ci"))}
    # the Jena files (the fixture is derived from the downloaded full file): test_faults_jena.py
    needed = sorted(rel for rel in needed if not rel.startswith("jena_climate/"))
    assert {"sst2/train.tsv", "sst2/dev.tsv", "gpt2_tokenizer/vocab.json"} <= set(needed)
    for rel in needed:
        path = data.find(rel, progress=False)
        assert path == tmp_path / "cache" / rel and data.sha256sum(path) == data.ASSETS[rel].sha256
    assert requests and all(timeout == data.TIMEOUT_S for _, timeout in requests)
    assert data.find(needed[0]) and len(requests) == len(needed), "a second lookup reads the cache"


def test_0_a_file_without_download_speaks_of_the_projects_folders(isolated):
    data.register(data.Asset("f/fixture.csv", None, sha(b"x")))
    with pytest.raises(data.DataError) as err:
        data.find("f/fixture.csv")
    msg = str(err.value)
    assert "RCUTIL_DATA_DIR" in msg and str(isolated / "cache" / "f" / "fixture.csv") in msg
    assert "shared" not in msg


def test_9_a_corrupt_file_that_has_no_download_is_not_sent_to_download_it(isolated, monkeypatch):
    data.register(data.Asset("f/fixture.csv", None, sha(b"x")))
    monkeypatch.setenv(data.DATA_DIR_ENV, str(isolated / "datadir"))
    bad = isolated / "datadir" / "f" / "fixture.csv"
    bad.parent.mkdir(parents=True)
    bad.write_bytes(b"y")
    with pytest.raises(data.DataError) as err:
        data.find("f/fixture.csv")
    msg = str(err.value)
    assert msg.startswith(f"{bad} is corrupt") and "Replace it with a correct copy, or point RCUTIL_DATA_DIR" in msg
    assert "download" not in msg


# ----------------------------------------------------------------------- 0b: the site test's browser
def _load_chrome():
    spec = importlib.util.spec_from_file_location("site_chrome", ROOT / "tests" / "site" / "chrome.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


chrome = _load_chrome()


def fake_program(folder: Path, name: str, output: str, rc: int = 0) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(f"#!/bin/sh\necho '{output}'\nexit {rc}\n")
    path.chmod(0o755)
    return path


def test_0b_uses_the_chrome_the_machine_has_with_its_driver(tmp_path):
    bin_ = tmp_path / "bin"
    fake_program(bin_, "chromium-browser", "Command requires the chromium snap to be installed", rc=1)
    chrome_ = fake_program(bin_, "google-chrome", "Google Chrome 131.0.6778.85")
    driver = fake_program(tmp_path / "webdriver", "chromedriver", "ChromeDriver 131.0.6778.85 (abc)")
    env = {"PATH": str(bin_), "CHROMEWEBDRIVER": str(driver.parent)}   # GitHub's ubuntu-latest
    assert chrome.find_chrome(env) == (str(chrome_), str(driver))


def test_0b_a_driver_of_another_version_is_named(tmp_path):
    bin_ = tmp_path / "bin"
    fake_program(bin_, "chromium", "Chromium 156.0.8078.114 built on Debian")
    fake_program(bin_, "chromedriver", "ChromeDriver 120.0.6099.71")
    with pytest.raises(chrome.BrowserNotFound,
                       match="version 156 but .* chromedriver 120: install the chromedriver of version 156"):
        chrome.find_chrome({"PATH": str(bin_)})


def test_0b_off_debian_no_apt_and_one_line_saying_what_to_install(tmp_path):
    bin_ = tmp_path / "bin"
    fake_program(bin_, "apt-get", "apt 2.4")
    (tmp_path / "os-release").write_text('NAME="Ubuntu"\nID=ubuntu\nID_LIKE=debian\n')
    ran = []
    with pytest.raises(chrome.BrowserNotFound) as err:
        chrome.ensure_chrome({"PATH": str(bin_)}, os_release=tmp_path / "os-release", run=ran.append)
    assert ran == [], "apt is used on Debian only"
    msg = str(err.value)
    assert "\n" not in msg and "install Google Chrome or Chromium" in msg and "CHROMEDRIVER" in msg
    proc = subprocess.run([sys.executable, str(ROOT / "tests" / "site" / "chrome.py")], capture_output=True,
                          text=True, env={"PATH": str(bin_)})
    one_line_error(proc, "no Chrome or Chromium", "install")


def test_0b_on_debian_apt_installs_chromium_and_its_driver(tmp_path):
    bin_ = tmp_path / "bin"
    fake_program(bin_, "apt-get", "apt 2.6")
    (tmp_path / "os-release").write_text('PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nID=debian\n')
    ran = []

    def run(command, env):
        ran.append(command[-4:])
        if "install" in command:   # what apt would do
            fake_program(bin_, "chromium", "Chromium 156.0.8078.114")
            fake_program(bin_, "chromedriver", "ChromeDriver 156.0.8078.114")
        return subprocess.CompletedProcess(command, 0)

    found = chrome.ensure_chrome({"PATH": str(bin_)}, os_release=tmp_path / "os-release", run=run)
    assert found == (str(bin_ / "chromium"), str(bin_ / "chromedriver"))
    assert ran[-1] == ["install", "-y", "-qq", "chromium", "chromium-driver"][-4:] and len(ran) == 2


def test_0b_the_makefile_uses_the_finder():
    recipe = subprocess.run(["make", "-n", "-s", "-C", str(ROOT), "browser-deps"], capture_output=True,
                            text=True).stdout
    assert "tests/site/chrome.py --install" in recipe and "apt-get" not in recipe
    readme = (ROOT / "README.md").read_text()
    assert "CHROMEDRIVER" in readme and "chromium-driver" in readme


# ----------------------------------------------------------------------- 3, 4, 6: the results store
# ----------------------------------------------------------------------- 5, 14: the residual strength
@pytest.mark.parametrize("beta", [float("nan"), float("inf"), -1.0, 1.5, 100.0, torch.tensor(2.0)])
def test_5_14_beta_outside_0_1_is_refused_by_constructor_and_forward(beta):
    with pytest.raises(ValueError, match=r"beta must be in \[0, 1\].*got"):
        Transformer(4, 2, 3, 1, beta=beta)
    m = Transformer(4, 2, 3, 1)
    with pytest.raises(ValueError, match=r"beta must be in \[0, 1\].*got"):
        m(torch.zeros(1, 2, 4, dtype=torch.float64), beta=beta)


def test_5_beta_of_every_model_in_a_vmap_batch_passes_and_counts():
    """Under vmap the betas cannot be read; they still reach the equations, one per model."""
    m = Transformer(4, 2, 3, 1, seed=1)
    X = torch.randn(2, 3, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    betas = torch.tensor([0.0, 0.5, 1.0], dtype=torch.float64)
    batched = torch.func.vmap(lambda b: m(X, beta=b))(betas)
    for out, b in zip(batched, betas.tolist()):
        torch.testing.assert_close(out, m(X, beta=b))


@pytest.mark.parametrize("beta", [0.0, 0.25, 1, torch.tensor(0.5, requires_grad=True)])
def test_14_beta_in_0_1_is_accepted(beta):
    out = Transformer(4, 2, 3, 1)(torch.ones(1, 2, 4, dtype=torch.float64), beta=beta)
    assert torch.isfinite(out).all()


# ----------------------------------------------------------------------- 7: downloads that hang or fail
@contextlib.contextmanager
def silent_server():
    """A server that accepts connections and never answers; yields (URL, connection count)."""
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


def test_7_a_server_that_never_answers_times_out_with_bounded_retries(isolated, monkeypatch):
    monkeypatch.setattr(data, "TIMEOUT_S", 0.3)
    with silent_server() as (url, accepted):
        data.register(data.Asset("d/f.bin", url, sha(b"x")))
        with pytest.raises(data.DataError) as err:
            data.find("d/f.bin", progress=False)
        assert len(accepted) == data.ATTEMPTS == 3
    msg = str(err.value)
    assert url in msg and f"after {data.ATTEMPTS} attempts" in msg and "no answer within 0.3 s" in msg
    assert "Without network" in msg and "RCUTIL_DATA_DIR" in msg and "\n" not in msg
    assert not list((isolated / "cache" / "d").glob(".download-*"))


def test_7_a_transient_server_error_is_retried(isolated):
    payload = b"payload\n" * 50
    with http_server(lambda h, k: h.send_error(503) if k < 3 else h.send_payload(payload)) as (url, hits):
        data.register(data.Asset("d/f.bin", url, sha(payload)))
        assert data.find("d/f.bin", progress=False).read_bytes() == payload
    assert len(hits) == 3


def test_7_a_missing_page_is_not_retried_and_is_named(isolated):
    with http_server(lambda h, k: h.send_error(404)) as (url, hits):
        data.register(data.Asset("d/f.bin", url, sha(b"x")))
        with pytest.raises(data.DataError,
                           match=r"could not be downloaded from http://127.*f\.bin \(HTTPError: HTTP Error 404"):
            data.find("d/f.bin", progress=False)
    assert len(hits) == 1


def test_7_a_cut_connection_is_retried_and_never_kept(isolated):
    payload = b"0123456789" * 100
    with http_server(lambda h, k: h.send_payload(payload, cut=300 if k == 1 else None)) as (url, hits):
        data.register(data.Asset("d/f.bin", url, sha(payload)))
        assert data.find("d/f.bin", progress=False).read_bytes() == payload
    assert len(hits) == 2


def test_7_litter_of_a_killed_download_is_removed_by_the_next(isolated):
    payload = b"fresh"
    src = isolated / "server" / "f.bin"
    src.parent.mkdir()
    src.write_bytes(payload)
    folder = isolated / "cache" / "d"
    litter = folder / ".download-f.bin-k1ll3d"
    litter.mkdir(parents=True)
    (litter / "raw").write_bytes(b"half a download")
    data.register(data.Asset("d/f.bin", src.as_uri(), sha(payload)))
    assert data.find("d/f.bin", progress=False).read_bytes() == payload
    assert not litter.exists() and not list(folder.glob(".download-*"))


def test_7_two_processes_download_a_file_once(isolated):
    payload = b"slow bytes\n" * 1000
    gate = threading.Event()
    with http_server(lambda h, k: gate.wait(5) and h.send_payload(payload)) as (url, hits):
        data.register(data.Asset("d/f.bin", url, sha(payload)))
        found = []
        workers = [threading.Thread(target=lambda: found.append(data.find("d/f.bin", progress=False)))
                   for _ in range(2)]
        for w in workers:
            w.start()
        threading.Timer(0.5, gate.set).start()
        for w in workers:
            w.join(30)
    assert len(found) == 2 and found[0] == found[1] and found[0].read_bytes() == payload
    assert len(hits) == 1, "the second waited for the first one's download"


# ----------------------------------------------------------------------- 8: --out checked before the run
@pytest.fixture
def no_run(monkeypatch):
    """The model experiment, with a run that fails the test if it starts."""
    module = experiments.load("model")
    monkeypatch.setattr(module, "run", lambda *a, **k: pytest.fail("the run started"))
    return module


def test_8_out_naming_a_file_fails_before_the_run(tmp_path, capsys, no_run):
    out = tmp_path / "out.txt"
    out.write_text("not a folder")
    rc = main(["model", "--out", str(out), "--no-progress"])
    one_line_error((rc, capsys.readouterr().err), f"--out {out} is a file", "choose")


def test_8_out_that_cannot_be_written_fails_before_the_run(tmp_path, capsys, no_run, monkeypatch):
    out = tmp_path / "locked"
    out.mkdir()
    out.chmod(0o555)
    if os.geteuid() == 0:   # root writes anywhere: deny the write as the file system would
        def deny(*args, **kwargs):
            raise PermissionError(13, "Permission denied")

        monkeypatch.setattr("tempfile.TemporaryFile", deny)
    rc = main(["model", "--out", str(out / "sub"), "--no-progress"])
    one_line_error((rc, capsys.readouterr().err), "is not a folder this user can write to", "Permission denied",
                   "choose another --out")


# ----------------------------------------------------------------------- 11, 15: damaged and empty files
def test_11_a_damaged_archive_member_names_the_archive_url_and_member(isolated):
    payload = b"sentence\tlabel\n" + b"a fine film \t1\n" * 2000
    archive = isolated / "server" / "SST.zip"
    archive.parent.mkdir()
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("SST/train.tsv", payload)
    raw = bytearray(archive.read_bytes())
    raw[len(raw) // 3] ^= 0xFF   # one flipped byte inside the compressed member
    archive.write_bytes(bytes(raw))
    data.register(data.Asset("s/train.tsv", archive.as_uri(), sha(payload), member="SST/train.tsv"))
    with pytest.raises(data.DataError) as err:
        data.find("s/train.tsv", progress=False)
    msg = str(err.value)
    assert "member SST/train.tsv" in msg and archive.as_uri() in msg and "damaged" in msg
    assert ".download-" not in msg and "run again" in msg


def test_11_a_wrong_archive_member_is_reported_without_a_temporary_path(isolated):
    archive = isolated / "server" / "SST.zip"
    archive.parent.mkdir()
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("SST/train.tsv", b"other bytes")
    data.register(data.Asset("s/train.tsv", archive.as_uri(), sha(b"expected"), member="SST/train.tsv"))
    with pytest.raises(data.DataError) as err:
        data.find("s/train.tsv", progress=False)
    msg = str(err.value)
    assert msg.startswith(f"the member SST/train.tsv of the archive from {archive.as_uri()} is corrupt")
    assert ".download-" not in msg and sha(b"expected") in msg and "not kept" in msg


def test_11_a_structure_error_of_a_download_names_the_url(isolated):
    def validate(path):
        raise data.DataError(f"{path}, line 1: wrong header")

    src = isolated / "server" / "j.csv"
    src.parent.mkdir()
    src.write_bytes(b"nonsense")
    data.register(data.Asset("j/j.csv", src.as_uri(), None, validate=validate))
    with pytest.raises(data.DataError, match=rf"^the file downloaded from {src.as_uri()}, line 1: wrong header"):
        data.find("j/j.csv", progress=False)


@pytest.mark.parametrize("where", ["datadir", "cache"])
def test_15_an_empty_data_file_is_called_empty(isolated, monkeypatch, where):
    data.register(data.Asset("a/f.txt", "https://example.org/f.txt", sha(b"content")))
    if where == "datadir":
        monkeypatch.setenv(data.DATA_DIR_ENV, str(isolated / "datadir"))
    empty = isolated / where / "a" / "f.txt"
    empty.parent.mkdir(parents=True)
    empty.write_bytes(b"")
    with pytest.raises(data.DataError, match=rf"^{empty} is empty \(0 bytes\)\. Delete it and run again"):
        data.find("a/f.txt")


def test_15_an_empty_download_is_called_empty(isolated):
    src = isolated / "server" / "f.txt"
    src.parent.mkdir()
    src.write_bytes(b"")
    data.register(data.Asset("a/f.txt", src.as_uri(), sha(b"content")))
    with pytest.raises(data.DataError, match=rf"the file downloaded from {src.as_uri()} is empty"):
        data.find("a/f.txt", progress=False)


# ----------------------------------------------------------------------- 13: arguments and settings
def test_13_a_float32_input_to_a_float64_model_names_both_dtypes():
    m = Transformer(4, 2, 3, 1)
    with pytest.raises(ValueError, match=r"X has dtype torch.float32 but the model's parameters are "
                                         r"torch.float64: pass X.to\(torch.float64\)"):
        m(torch.zeros(1, 2, 4))
    with pytest.raises(ValueError, match=r"X has dtype torch.float32"):
        train.gradient_descent(m, torch.zeros(1, 2, 4), torch.zeros(1, 2, 1), mu=0.1, steps=1)
    with pytest.raises(ValueError, match=r"Y is torch.float32 .* X is torch.float64 .* Y.to\(X\)"):
        train.gradient_descent(m, torch.zeros(1, 2, 4, dtype=torch.float64), torch.zeros(1, 2, 1), mu=0.1, steps=1)


@pytest.mark.parametrize("make, match", [
    (lambda: Transformer(4, 2, 3, 1, beta="abc"), r"beta must be a number in \[0, 1\].*got 'abc' \(str\)"),
    (lambda: Transformer(4, 2, 3, 1)(torch.zeros(1, 2, 4, dtype=torch.float64), beta="abc"), r"beta must be a number"),
    (lambda: Transformer(4, 2, 3, 1, tau="abc"), r"tau must be a finite positive number, got 'abc'"),
    (lambda: Transformer(4, 2, 3, 1, dtype=torch.int64), r"dtype must be a floating-point torch dtype"),
    (lambda: Transformer(4, 2, 3, 1, device="CPU"),
     r"device 'CPU' is not a torch device \(device names are lower case: 'cpu'\)"),
    (lambda: validate.device("gpu"), r"device 'gpu' is not a torch device: use cpu, cuda"),
])
def test_13_bad_model_arguments_are_named(make, match):
    with pytest.raises(ValueError, match=match):
        make()


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_13_cuda_without_cuda_says_so():
    with pytest.raises(ValueError, match=r"device 'cuda' asked for, but this torch has no usable CUDA device.*use cpu"):
        Transformer(4, 2, 3, 1, device="cuda")


def test_13_gd_arguments_and_a_frozen_model():
    m = Transformer(4, 2, 3, 1)
    X, Y = torch.zeros(1, 2, 4, dtype=torch.float64), torch.zeros(1, 2, 1, dtype=torch.float64)
    with pytest.raises(ValueError, match=r"mu \(the step size\) must be a finite positive number, got 'abc'"):
        train.gradient_descent(m, X, Y, mu="abc", steps=1)
    m.requires_grad_(False)
    with pytest.raises(ValueError, match=r"every parameter of the model is frozen .*requires_grad_\(True\)"):
        train.gradient_descent(m, X, Y, mu=0.1, steps=1)


def test_13_threads_setting_that_is_not_a_number(monkeypatch):
    monkeypatch.setenv(threads.ENV_VAR, "abc")
    with pytest.raises(ValueError, match=r"RCUTIL_TORCH_THREADS must be a positive integer .* got 'abc': set it to 1"):
        threads.apply_environment()


def test_13_data_and_cache_folders_that_are_wrong(tmp_path, monkeypatch):
    monkeypatch.setenv(data.DATA_DIR_ENV, str(tmp_path / "nowhere"))
    with pytest.raises(data.DataError,
                       match=rf"RCUTIL_DATA_DIR={tmp_path / 'nowhere'} does not exist: set it .* or unset it"):
        data.find("sst2/dev.tsv")
    monkeypatch.delenv(data.DATA_DIR_ENV)
    (tmp_path / "cachefile").write_text("")
    monkeypatch.setenv(data.CACHE_DIR_ENV, str(tmp_path / "cachefile"))
    with pytest.raises(data.DataError,
                       match=r"RCUTIL_CACHE_DIR .*cachefile is a file, not a folder: set RCUTIL_CACHE_DIR to a folder"):
        data.find("sst2/dev.tsv")


def test_13_cli_faults_are_one_line_without_traceback(tmp_path):
    one_line_error(cli("model", "--out", str(tmp_path), RCUTIL_TORCH_THREADS="abc"),
                   "python -m rcutil: error: RCUTIL_TORCH_THREADS must be a positive integer")
    one_line_error(cli("model", "--device", "CPU", "--out", str(tmp_path)), "device 'CPU'", "lower case")
    assert not list(tmp_path.iterdir()), "nothing was written"


def test_13_cli_debug_lets_the_error_through_with_its_traceback(tmp_path):
    with pytest.raises(ValueError, match="device 'CPU'"):
        main(["model", "--device", "CPU", "--out", str(tmp_path), "--debug"])


@pytest.mark.parametrize("args, env, words", [
    (["--device", "cuda"], {}, ["device 'cuda' asked for", "use cpu"]),
    (["--estimate", "--device", "nonsense"], {}, ["device 'nonsense' is not a torch device"]),
    ([], {"RCUTIL_PROFILE": "huge"}, ["unknown profile 'huge'", "ci, book, paper"]),
    ([], {"RCUTIL_DATA_DIR": "nowhere"}, ["RCUTIL_DATA_DIR=", "nowhere does not exist", "unset it"]),
    ([], {"RCUTIL_CACHE_DIR": "FILE", "RCUTIL_DATA_DIR": ""}, ["RCUTIL_CACHE_DIR", "is a file, not a folder"]),
])
def test_13_cli_faults_in_process(tmp_path, capsys, monkeypatch, no_run, args, env, words):
    if "cuda" in args and torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    (tmp_path / "FILE").write_text("")
    for key, value in env.items():
        monkeypatch.setenv(key, str(tmp_path / value) if value in ("FILE", "nowhere") else value)
    experiment = "sst2" if {"RCUTIL_CACHE_DIR", "RCUTIL_DATA_DIR"} & set(env) else "model"
    rc = main([experiment, "--out", str(tmp_path / "out"), "--no-progress", *args])
    one_line_error((rc, capsys.readouterr().err), "python -m rcutil: error:", *words)


# ----------------------------------------------------------------------- 16: reproducible figures
def _figure():
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    ax.plot([1, 2, 3], [1, 4, 2], label="a")
    ax.fill_between([1, 2, 3], [0, 1, 1], [2, 3, 3])   # clipped: carries a clip-path id
    ax.legend()
    return fig


def test_16_the_same_figure_gives_the_same_svg_bytes(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    a = plotting.save(_figure(), tmp_path / "a.svg").read_bytes()
    b = plotting.save(_figure(), tmp_path / "b.svg").read_bytes()
    assert b"clip-path" in a and b"dc:date" not in a
    assert a == b


def test_16_figures_rendered_inline_in_a_chapter_are_reproducible():
    import matplotlib
    from IPython.core.interactiveshell import InteractiveShell

    matplotlib.use("Agg")
    shell = InteractiveShell.instance()
    try:
        with matplotlib.rc_context():
            plotting.setup()
            render = shell.display_formatter.formatters["image/svg+xml"]
            a, b = render(_figure()), render(_figure())
    finally:
        InteractiveShell.clear_instance()
    assert "clip-path" in a and "dc:date" not in a
    assert a == b
