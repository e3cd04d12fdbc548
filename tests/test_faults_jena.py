"""Faults of the Jena data and sweep, each with the error a user sees (its type and the words
that say what to do) or the recovery.

* the 154-row excerpt on a fresh clone: no data folder, a download stubbed by a local zip
  served through a ``file://`` URL, the excerpt derived from it and verified;
* impossible values, rows out of order or repeated, a reversed file;
* the full file's checksum, recorded on the first download and enforced afterwards;
* a damaged excerpt; a non-numeric value; a diverging sweep.
"""
import dataclasses
import re
import zipfile
from types import SimpleNamespace

import numpy as np
import pytest
import torch

import rcutil  # noqa: F401
from rcutil import data
from rcutil import jena_data as jd
from rcutil.estimate import project
from rcutil.experiments import jena
from rcutil.profiles import settings_for

T = jd.FEATURES.index("T (degC)")


def serve(path, root):
    """A zip like the canonical one (``jena_climate_2009_2016.csv`` inside), as a file:// URL."""
    archive = root / (path.stem + ".zip")
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_STORED) as zf:
        zf.write(path, "jena_climate_2009_2016.csv")
    return archive.as_uri()


def set_field(raw: bytes, line: int, column: int, text: bytes) -> bytes:
    """``raw`` with field ``column`` (0 = the date) of file line ``line`` replaced."""
    lines = raw.split(b"\n")
    fields = lines[line - 1].split(b",")
    fields[column] = text
    lines[line - 1] = b",".join(fields)
    return b"\n".join(lines)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """A synthetic full-size file with the real file's kinds of imperfection, served as a zip,
    and the values digest of its first 154 rows (what the excerpt pin is for the real file)."""
    root = tmp_path_factory.mktemp("server")
    times, values = jd.synthetic_series(jd.N_ROWS, seed=7, gaps=219, duplicates=2, swaps=1,
                                        sentinels=3)
    csv = jd.write_csv(root / "jena_climate_2009_2016.csv", times, values)
    excerpt = root / "excerpt.csv"
    jd.derive_fixture(csv, excerpt)
    return SimpleNamespace(root=root, csv=csv, url=serve(csv, root),
                           digest=jd.values_digest(jd.read_csv(excerpt)))


@pytest.fixture
def fresh_clone(tmp_path, monkeypatch, server):
    """A new user's machine: no data folder, an empty cache, the canonical URL answered by the
    local zip, and the excerpt pin set to the synthetic file's first rows."""
    monkeypatch.delenv(data.DATA_DIR_ENV, raising=False)
    monkeypatch.setenv(data.CACHE_DIR_ENV, str(tmp_path / "cache"))
    monkeypatch.setitem(data.ASSETS, jd.FULL_FILE,
                        dataclasses.replace(data.ASSETS[jd.FULL_FILE], url=server.url))
    monkeypatch.setattr(jd, "FIXTURE_VALUES_SHA256", server.digest)
    return tmp_path / "cache"


def point_url(monkeypatch, url):
    monkeypatch.setitem(data.ASSETS, jd.FULL_FILE, dataclasses.replace(data.ASSETS[jd.FULL_FILE], url=url))


# --------------------------------------------------------------------------- 0: the excerpt on a fresh clone
def test_excerpt_is_derived_from_the_downloaded_full_file_without_a_data_folder(fresh_clone, server,
                                                                              monkeypatch):
    path = data.find(jd.FIXTURE_FILE, progress=False)
    assert path == fresh_clone / jd.FIXTURE_FILE
    full = fresh_clone / jd.FULL_FILE
    assert full.read_bytes() == server.csv.read_bytes()           # downloaded into the cache
    assert path.read_bytes() == b"\n".join(server.csv.read_bytes().split(b"\n")[:155]) + b"\n"
    assert not [p for p in fresh_clone.rglob(".*") if p.name.startswith((".derive", ".download"))]
    # the ci profile's data pipeline runs on it
    prepared = jena.load_data(settings_for(jena.SETTINGS, "ci"))
    assert prepared.X.shape == (16, 8, 14) and prepared.info["rows_in_file"] == 154
    # and a later lookup reuses it, offline
    point_url(monkeypatch, (fresh_clone / "nowhere.zip").as_uri())
    assert data.find(jd.FIXTURE_FILE, allow_download=False) == path


def test_excerpt_with_other_values_is_rejected_and_not_kept(fresh_clone, monkeypatch):
    monkeypatch.setattr(jd, "FIXTURE_VALUES_SHA256", "0" * 64)
    with pytest.raises(data.DataError) as err:
        data.find(jd.FIXTURE_FILE, progress=False)
    msg = str(err.value)
    assert "is not the first 154 rows" in msg and "Delete it and run again" in msg
    assert data.DATA_DIR_ENV in msg and "shared" not in msg.lower()
    assert not (fresh_clone / jd.FIXTURE_FILE).exists()


def test_without_network_the_message_names_the_project_folders(fresh_clone, monkeypatch, tmp_path):
    point_url(monkeypatch, (tmp_path / "nowhere.zip").as_uri())
    with pytest.raises(data.DataError) as err:
        data.find(jd.FIXTURE_FILE, progress=False)
    msg = str(err.value)
    assert jd.FIXTURE_FILE in msg and jd.FULL_FILE in msg and "could not be downloaded" in msg
    assert data.DATA_DIR_ENV in msg and str(fresh_clone) in msg and "shared" not in msg.lower()


# --------------------------------------------------------------------------- 1: impossible values, order
@pytest.mark.parametrize("column", [c for c in jd.FEATURES if c not in jd.WIND_COLUMNS])
def test_sentinel_outside_the_wind_columns_is_an_error_naming_line_and_column(tmp_path, column):
    times, values = jd.synthetic_series(300)
    values[123, jd.FEATURES.index(column)] = jd.SENTINEL
    path = jd.write_csv(tmp_path / "j.csv", times, values)
    with pytest.raises(jd.JenaFormatError) as err:
        jd.read_csv(path)
    msg = str(err.value)
    assert re.search(rf"line 125, column '{re.escape(column)}': -9999 is outside the physical range", msg)
    assert "may hold the missing-value marker" in msg and "delete it and run again" in msg


def test_sentinel_in_a_wind_column_is_cleaned_and_counted(tmp_path):
    times, values = jd.synthetic_series(300)
    values[[5, 6], jd.FEATURES.index("max. wv (m/s)")] = jd.SENTINEL
    path = jd.write_csv(tmp_path / "j.csv", times, values)
    prepared = jd.load(jd.FULL_FILE, path=path, sampling=1, train_fraction=0.7, n=8, n_windows=4)
    assert prepared.info["cleaning"]["sentinels_replaced"] == {"wv (m/s)": 0, "max. wv (m/s)": 2}


def test_a_few_rows_out_of_order_or_repeated_are_cleaned_and_counted_in_the_result(tmp_path, monkeypatch):
    times, values = jd.synthetic_series(300, seed=2)
    order = np.arange(300)
    order[[0, 1]] = order[[1, 0]]                  # the first two rows reversed
    order[[150, 151]] = order[[151, 150]]
    times, values = times[order], values[order]
    times = np.append(times, times[-1])             # the last row repeated
    values = np.append(values, values[-1:], axis=0)
    path = jd.write_csv(tmp_path / "j.csv", times, values)
    monkeypatch.setitem(jena.SETTINGS, "ci", dict(jena.SETTINGS["ci"], steps=3, lanczos_steps=3,
                                                  spectra_every=1))
    with jena.torch_threads(1):
        result = jena.run(settings_for(jena.SETTINGS, "ci"), progress=False, path=path)
    info = result["data"]
    assert info["cleaning"]["out_of_order"] == 2 and info["cleaning"]["duplicates"] == 1
    assert info["cleaning"]["rows_read"] == 301 and info["rows_clean"] == 300
    assert info["first_time"] == "2009-01-01T00:10:00" and info["first_time"] < info["last_time"]


def test_a_reversed_file_is_an_error(tmp_path):
    times, values = jd.synthetic_series(300)
    path = jd.write_csv(tmp_path / "j.csv", times[::-1], values[::-1])
    with pytest.raises(jd.JenaFormatError, match=r"299 of 300 rows are out of time order.*line 3"):
        jd.load(jd.FULL_FILE, path=path, sampling=1, train_fraction=0.7, n=8, n_windows=4)


def test_the_std_of_T_is_not_skewed_by_a_sentinel(tmp_path):
    """The failure this guards against: one -9999 in T turns its training std from a few
    degrees into hundreds. Now the file is refused instead."""
    times, values = jd.synthetic_series(3000)
    good = jd.load(jd.FULL_FILE, path=jd.write_csv(tmp_path / "a.csv", times, values), sampling=1,
                   train_fraction=0.7, n=8, n_windows=4)
    assert good.std[T] < 10
    values[100, T] = jd.SENTINEL
    with pytest.raises(jd.JenaFormatError, match="T \\(degC\\)"):
        jd.load(jd.FULL_FILE, path=jd.write_csv(tmp_path / "b.csv", times, values), sampling=1,
                train_fraction=0.7, n=8, n_windows=4)


# --------------------------------------------------------------------------- 2: trust on first use
def test_full_file_checksum_is_recorded_on_first_download_and_enforced(fresh_clone, server):
    path = data.find(jd.FULL_FILE, progress=False)
    recorded = path.with_name(path.name + ".sha256")
    assert recorded.read_text().split()[0] == data.sha256sum(server.csv)
    raw = path.read_bytes()
    path.write_bytes(set_field(raw, 1000, 1, b"%.2f" % (float(raw.split(b"\n")[999].split(b",")[1]) + 0.01)))
    with pytest.raises(data.DataError, match=r"corrupt: its sha256 is .*Delete it and run again to "
                                             r"download a fresh copy"):
        data.find(jd.FULL_FILE, progress=False)
    path.unlink()                                   # the advice works
    assert data.sha256sum(data.find(jd.FULL_FILE, progress=False)) == data.sha256sum(server.csv)


def test_a_download_with_impossible_values_is_refused_and_not_trusted(fresh_clone, server, monkeypatch):
    bad = server.root / "bad" / "jena_climate_2009_2016.csv"
    bad.parent.mkdir(exist_ok=True)
    bad.write_bytes(set_field(server.csv.read_bytes(), 5000, T + 1, b"-9999.00"))
    point_url(monkeypatch, serve(bad, bad.parent))
    with pytest.raises(jd.JenaFormatError, match=r"line 5000, column 'T \(degC\)'"):
        data.find(jd.FULL_FILE, progress=False)
    assert not [p for p in fresh_clone.rglob("*.csv*") if not p.name.endswith(".lock")]  # no file, no checksum


# --------------------------------------------------------------------------- 9: a damaged excerpt
def test_damaged_excerpt_says_how_to_fix_it_and_the_fix_works(fresh_clone, monkeypatch, tmp_path):
    path = data.find(jd.FIXTURE_FILE, progress=False)
    path.write_bytes(set_field(path.read_bytes(), 20, 2, b"-1.23"))
    with pytest.raises(jd.JenaFormatError) as err:
        data.find(jd.FIXTURE_FILE, progress=False)
    msg = str(err.value)
    assert "Delete it and run again" in msg and "derived again from the full file" in msg
    assert "no download URL" not in msg and "shared" not in msg.lower()
    path.unlink()
    point_url(monkeypatch, (tmp_path / "nowhere.zip").as_uri())   # no network needed: the cached full file
    assert data.find(jd.FIXTURE_FILE, progress=False) == path


# --------------------------------------------------------------------------- 10: consistent advice
def test_non_numeric_value_and_short_file_give_the_same_advice(tmp_path):
    times, values = jd.synthetic_series(20)
    path = jd.write_csv(tmp_path / "j.csv", times, values)
    path.write_bytes(set_field(path.read_bytes(), 6, 5, b"n/a"))
    with pytest.raises(jd.JenaFormatError) as err:
        jd.read_csv(path)
    msg = str(err.value)
    assert "line 6, column 'rh (%)': 'n/a' is not a finite number" in msg
    assert "Fix or delete that line" not in msg
    assert "delete it and run again to download a fresh copy" in msg
    with pytest.raises(jd.JenaFormatError) as err:
        jd.check_structure(jd.write_csv(tmp_path / "k.csv", times, values))
    assert "delete it and run again to download a fresh copy" in str(err.value)


# --------------------------------------------------------------------------- 12: divergence
@pytest.mark.filterwarnings("ignore:.*encountered:RuntimeWarning")
def test_diverging_sweep_names_the_setting_to_change():
    settings = dict(settings_for(jena.SETTINGS, "ci"), seeds=(0,), betas=(0.0, 1.0))
    gen = torch.Generator().manual_seed(0)
    X = torch.randn(4, 8, 14, generator=gen, dtype=torch.float64)
    Y = 100 * torch.randn(4, 8, 1, generator=gen, dtype=torch.float64)
    template, params, betas, _ = jena.stacked_models(settings)
    with pytest.raises(rcutil.TrainingDiverged) as err:
        jena.batched_gd(template, params, betas, X, Y, mu=10.0, steps=200)
    msg = str(err.value)
    assert "mu_factor" in msg and not re.search(r"\beta\b", msg) and "diverged at step" in msg


# --------------------------------------------------------------------------- a device that is not there
@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_missing_gpu_is_named_before_any_work():
    with pytest.raises(ValueError, match=r"device 'cuda' asked for, but this torch has no usable CUDA device.*use cpu"):
        project(jena, settings_for(jena.SETTINGS, "ci"), device="cuda")
    with pytest.raises(ValueError, match=r"device 'cuda' asked for"):
        jena.run(settings_for(jena.SETTINGS, "ci"), device="cuda", progress=False)
