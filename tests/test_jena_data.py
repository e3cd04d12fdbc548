"""rcutil.jena_data on files the tests write (tests/synthetic_jena.py): parsing,
error paths and their advice, cleaning, sentinels, normalisation, the 154-row excerpt
derived from a download on a fresh machine, the full file's checksum recorded on its
first download, and the ``book``-profile pipeline end to end on a generated file of the
canonical size."""

import dataclasses
import hashlib
import re
import zipfile
from types import SimpleNamespace

import numpy as np
import pytest
import synthetic_jena as sj

from rcutil import data
from rcutil import jena_data as jd
from rcutil.experiments import jena
from rcutil.profiles import settings_for

HEADER_LINE = ",".join(f'"{h}"' for h in jd.HEADER)
T = jd.FEATURES.index("T (degC)")


def write_csv(path, rows: int, *, seed=0, sentinels=(), header=None, newline="\n"):
    """A file in the canonical format with physically consistent values (see
    tests/synthetic_jena.py); ``sentinels``: (row, column) set to -9999."""
    times, vals = sj.synthetic_series(rows, seed=seed)
    for r, c in sentinels:
        vals[r, c] = jd.SENTINEL
    sj.write_csv(path, times, vals, newline=newline)
    if header is not None:
        lines = path.read_text().split(newline)
        lines[0] = header
        path.write_text(newline.join(lines))
    return vals


def edit_line(path, index, edit):
    lines = path.read_text().splitlines()
    lines[index] = edit(lines[index])
    path.write_text("\n".join(lines) + "\n")


def fixture_path():
    try:
        return data.find(jd.FIXTURE_FILE, allow_download=False)
    except data.DataError as exc:
        pytest.skip(f"the 154-row excerpt is not available here: {exc}")


def test_fixture_parses_and_its_digests_are_the_pinned_ones():
    path = fixture_path()
    t = jd.read_csv(path)
    assert t.values.shape == (154, 14)
    assert str(t.times[0]) == "2009-01-01T00:10:00"
    assert str(t.times[-1]) == "2009-01-02T01:40:00"
    assert t.values[0, 0] == 996.52 and t.values[-1, -1] == 185.00
    assert data.sha256sum(path) == jd.FIXTURE_BYTES_SHA256
    assert jd.values_digest(t) == jd.FIXTURE_VALUES_SHA256
    cleaned, report = jd.clean(t)
    assert report["rows_kept"] == 154
    assert report["gaps"] == 0 and report["duplicates"] == 0


def test_derived_excerpt_is_byte_identical_whatever_the_line_endings(tmp_path):
    """A full file that starts with the excerpt's rows, written with CRLF, gives back
    the excerpt byte for byte."""
    fixture = fixture_path().read_bytes()
    more = sj.write_csv(
        tmp_path / "more.csv", *sj.synthetic_series(50, start="2009-01-02T01:50:00")
    )
    full = tmp_path / "full.csv"
    rows = more.read_bytes().split(b"\n", 1)[1]
    full.write_bytes((fixture + rows).replace(b"\n", b"\r\n"))
    out = tmp_path / "excerpt.csv"
    jd.derive_fixture(full, out)
    assert out.read_bytes() == fixture
    jd.check_fixture(out)
    # the values digest alone also identifies it: CRLF bytes differ, values do not
    crlf = tmp_path / "crlf.csv"
    crlf.write_bytes(fixture.replace(b"\n", b"\r\n"))
    assert hashlib.sha256(crlf.read_bytes()).hexdigest() != jd.FIXTURE_BYTES_SHA256
    jd.check_fixture(crlf)


def test_values_digest_ignores_spelling_but_not_values(tmp_path):
    a, b = tmp_path / "a.csv", tmp_path / "b.csv"
    write_csv(a, 30)
    b.write_bytes(a.read_bytes().replace(b"\n", b"\r\n"))
    assert jd.values_digest(jd.read_csv(a)) == jd.values_digest(jd.read_csv(b))
    edit_line(b, 5, lambda line: line[:-1] + ("1" if line[-1] != "1" else "2"))
    assert jd.values_digest(jd.read_csv(a)) != jd.values_digest(jd.read_csv(b))


def test_roundtrip_and_crlf(tmp_path):
    p = tmp_path / "j.csv"
    vals = write_csv(p, 50, newline="\r\n")
    t = jd.read_csv(p)
    np.testing.assert_array_equal(t.values, vals)
    assert (np.diff(t.times) == np.timedelta64(600, "s")).all()
    np.testing.assert_array_equal(t.lines, np.arange(2, 52))


def test_synthetic_series_is_physical_and_consistent():
    times, v = sj.synthetic_series(5000, seed=3)
    col = {c: v[:, j] for j, c in enumerate(jd.FEATURES)}
    for c, (lo, hi) in jd.RANGES.items():
        assert lo <= col[c].min() and col[c].max() <= hi, c
    np.testing.assert_allclose(
        col["VPdef (mbar)"], col["VPmax (mbar)"] - col["VPact (mbar)"], atol=0.02
    )
    assert (col["Tdew (degC)"] <= col["T (degC)"] + 0.01).all()
    assert (col["max. wv (m/s)"] >= col["wv (m/s)"] - 0.01).all()
    assert -15 < col["T (degC)"].mean() < 10  # January
    assert 950 < col["p (mbar)"].mean() < 1030


def test_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        jd.read_csv(tmp_path / "nope.csv")


def test_wrong_header(tmp_path):
    p = tmp_path / "j.csv"
    write_csv(p, 5, header=HEADER_LINE.replace("T (degC)", "Temp"))
    with pytest.raises(jd.JenaFormatError, match="wrong header") as err:
        jd.read_csv(p)
    assert "'Temp' should be 'T (degC)'" in str(err.value)
    write_csv(p, 5, header=HEADER_LINE.rsplit(",", 1)[0])
    with pytest.raises(ValueError, match="14 columns, expected 15"):
        jd.read_csv(p)


def test_short_file(tmp_path):
    p = tmp_path / "j.csv"
    write_csv(p, 10)
    with pytest.raises(jd.JenaFormatError, match="too short") as err:
        jd.read_csv(p, min_rows=20)
    assert "10 data rows, at least 20" in str(err.value)
    with pytest.raises(jd.JenaFormatError, match="420,551") as err:
        jd.check_structure(p)
    assert "10 data rows" in str(err.value)
    # a window that does not fit in the training part is also a short file
    with pytest.raises(jd.JenaFormatError, match="training part is too short"):
        jd.load(jd.FULL_FILE, path=p, sampling=1, train_fraction=0.7, n=8, n_windows=2)
    (tmp_path / "e.csv").write_text("")
    with pytest.raises(jd.JenaFormatError, match="empty"):
        jd.read_csv(tmp_path / "e.csv")


@pytest.mark.parametrize("bad", ["abc", "", "nan"])
def test_non_numeric_field_names_line_and_column(tmp_path, bad):
    p = tmp_path / "j.csv"
    write_csv(p, 10)

    def edit(line):
        fields = line.split(",")
        fields[5] = bad  # column 'rh (%)'
        return ",".join(fields)

    edit_line(p, 4, edit)  # file line 5 = the 4th data row
    with pytest.raises(jd.JenaFormatError, match="not a finite number") as err:
        jd.read_csv(p)
    assert f"line 5, column 'rh (%)': '{bad}'" in str(err.value)


@pytest.mark.parametrize(
    "index, edit, words",
    [
        (7, lambda line: line + ",1.00", "line 8: 16 fields"),
        (
            2,
            lambda line: "2009-01-01 00:30:00" + line[19:],
            "line 3: the date '2009-01-01",
        ),
        (6, lambda line: "31.02.2009" + line[10:], "line 7: the date '31.02.2009"),
        (
            3,
            lambda line: "01.01.2009 24:00:00" + line[19:],
            "line 4: the date '01.01.2009",
        ),
    ],
    ids=["field-count", "date-format", "impossible-date", "impossible-hour"],
)
def test_bad_field_count_and_date(tmp_path, index, edit, words):
    p = tmp_path / "j.csv"
    write_csv(p, 10)
    edit_line(p, index, edit)
    with pytest.raises(jd.JenaFormatError, match=re.escape(words)):
        jd.read_csv(p)


@pytest.mark.parametrize("column", jd.FEATURES)
def test_every_column_has_a_physical_range(tmp_path, column):
    """A value just outside the range fails, one just inside passes, for every
    column."""
    p = tmp_path / "j.csv"
    times, vals = sj.synthetic_series(12)
    j = jd.FEATURES.index(column)
    lo, hi = jd.RANGES[column]
    vals[3, j] = lo
    vals[4, j] = hi
    sj.write_csv(p, times, vals)
    jd.read_csv(p)
    vals[6, j] = hi + 0.01
    sj.write_csv(p, times, vals)
    with pytest.raises(jd.JenaFormatError, match="outside the physical range") as err:
        jd.read_csv(p)
    assert f"line 8, column '{column}'" in str(err.value)


def test_cleaning_sorts_deduplicates_and_reports_gaps(tmp_path):
    p = tmp_path / "j.csv"
    times, vals = sj.synthetic_series(200, seed=1)
    keep = np.ones(200, dtype=bool)
    keep[[50, 51, 52, 120]] = False  # two gaps: 3 steps and 1 step
    times, vals = times[keep], vals[keep]
    repeat = vals[9].copy()
    repeat[0] += 0.5  # same time, other pressure
    times, vals = np.insert(times, 10, times[9]), np.insert(vals, 10, repeat, axis=0)
    order = np.arange(len(times))
    order[[30, 31]] = order[[31, 30]]  # one pair out of order
    sj.write_csv(p, times[order], vals[order])
    table = jd.read_csv(p)
    assert table.times[30] > table.times[31]
    cleaned, report = jd.clean(table)
    assert report["rows_read"] == 197 and report["rows_kept"] == 196
    assert report["out_of_order"] == 1 and report["duplicates"] == 1
    assert report["duplicates_differing"] == 1  # the repeated row differed
    assert report["gaps"] == 2 and report["missing_steps"] == 4
    assert report["longest_gap_steps"] == 3
    assert report["expected_rows"] == 200 and report["irregular_steps"] == 0
    assert (np.diff(cleaned.times) > np.timedelta64(0, "s")).all()
    np.testing.assert_array_equal(cleaned.values[9], vals[9])  # the first is kept
    i = int(np.flatnonzero(cleaned.times == times[31])[0])
    np.testing.assert_array_equal(cleaned.values[i], vals[31])
    assert cleaned.lines[i] == 2 + 30  # the line it came from


def test_sentinels_are_set_to_zero_and_counted(tmp_path):
    p = tmp_path / "j.csv"
    wv, mwv = jd.FEATURES.index("wv (m/s)"), jd.FEATURES.index("max. wv (m/s)")
    vals = write_csv(p, 40, sentinels=[(3, wv), (9, wv), (9, mwv)])
    t = jd.read_csv(p)
    cleaned, counts = jd.clean_sentinels(t.values)
    assert counts == {"wv (m/s)": 2, "max. wv (m/s)": 1}
    assert (cleaned != jd.SENTINEL).all()
    assert cleaned[3, wv] == 0.0 and cleaned[9, mwv] == 0.0
    keep = np.ones_like(vals, dtype=bool)
    keep[[3, 9, 9], [wv, wv, mwv]] = False
    np.testing.assert_array_equal(cleaned[keep], vals[keep])
    assert (t.values == jd.SENTINEL).sum() == 3  # the input is not modified
    assert jd.clean(t)[1]["sentinels_replaced"] == counts


def test_normalisation_uses_training_rows_only(tmp_path):
    p = tmp_path / "j.csv"
    vals = write_csv(p, 100)
    a = jd.load(jd.FULL_FILE, path=p, sampling=1, train_fraction=0.7, n=4, n_windows=5)
    # change only the held-out part: nothing about the training windows may change
    T = jd.FEATURES.index("T (degC)") + 1
    lines = p.read_text().splitlines()
    for i in range(71, 101):
        f = lines[i].split(",")
        f[T] = "%.2f" % (float(f[T]) + 2.0)
        lines[i] = ",".join(f)
    p.write_text("\n".join(lines) + "\n")
    b = jd.load(jd.FULL_FILE, path=p, sampling=1, train_fraction=0.7, n=4, n_windows=5)
    np.testing.assert_array_equal(a.mean, b.mean)
    np.testing.assert_array_equal(a.X, b.X)
    np.testing.assert_array_equal(a.Y, b.Y)
    np.testing.assert_allclose(a.mean, vals[:70].mean(0), rtol=1e-12)
    np.testing.assert_allclose(a.std, vals[:70].std(0), rtol=1e-12)
    assert a.info["rows_train"] == 70


def test_windows_are_consecutive_and_target_is_next_steps():
    series = np.arange(60, dtype=float)[:, None] * np.ones((1, 3)) + np.arange(3)
    X, Y, starts = jd.make_windows(series, n=5, count=4, target=1)
    assert X.shape == (4, 5, 3) and Y.shape == (4, 5, 1)
    assert starts[0] == 0 and starts[-1] == 50
    for k, s in enumerate(starts):
        np.testing.assert_array_equal(X[k, :, 0], np.arange(s, s + 5))
        np.testing.assert_array_equal(Y[k, :, 0], np.arange(s + 5, s + 10) + 1)


def test_each_read_parses_the_file_as_it_is_now(tmp_path):
    p = tmp_path / "j.csv"
    write_csv(p, 20)
    assert jd.read_csv(p).n_rows == 20
    write_csv(p, 21)
    assert jd.read_csv(p).n_rows == 21


@pytest.mark.slow
def test_book_pipeline_end_to_end_on_full_size_file(tmp_path, monkeypatch):
    """The ``book`` data settings on a generated file of 420,551 rows, found through
    rcutil.data (structure check included), then two GD steps of the whole sweep."""
    root = tmp_path / "data"
    p = root / jd.FULL_FILE
    wv = jd.FEATURES.index("wv (m/s)")
    write_csv(p, jd.N_ROWS, sentinels=[(1000, wv), (300_000, wv)])
    monkeypatch.setenv(data.DATA_DIR_ENV, str(root))
    monkeypatch.setenv(data.CACHE_DIR_ENV, str(tmp_path / "cache"))
    short = dataclasses.replace(
        jena.BOOK,
        steps=2,
        floor_iterations=2,
        lanczos_steps=2,
        spectra_every=1,
        draws=8,
    )
    monkeypatch.setitem(jena.SETTINGS, "book", short)
    result = jena.run(settings_for(jena.SETTINGS, "book"), progress=False)
    s, info = short, result.data
    assert info.rows_in_file == jd.N_ROWS
    assert info.rows_train == int(jd.N_ROWS * s.train_fraction)
    assert info.sha256 == data.sha256sum(p)
    assert info.sentinels_replaced == {"wv (m/s)": 2, "max. wv (m/s)": 0}
    assert info.cleaning.rows_kept == jd.N_ROWS and info.cleaning.gaps == 0
    assert (
        max(info.window_starts) + 2 * s.n * s.sampling <= info.rows_train + s.sampling
    )
    assert tuple(p.beta for p in result.points) == s.betas
    for r in result.runs:
        assert r.loss.shape == (len(s.seeds), 3) and np.isfinite(r.loss).all()


# -------------------------------------------------------------------- impossible values
def set_field(raw: bytes, line: int, column: int, text: bytes) -> bytes:
    """``raw`` with field ``column`` (0 = the date) of file line ``line`` replaced."""
    lines = raw.split(b"\n")
    fields = lines[line - 1].split(b",")
    fields[column] = text
    lines[line - 1] = b",".join(fields)
    return b"\n".join(lines)


@pytest.mark.parametrize("column", [c for c in jd.FEATURES if c not in jd.WIND_COLUMNS])
def test_a_sentinel_outside_the_wind_columns_names_line_and_column(tmp_path, column):
    times, values = sj.synthetic_series(300)
    values[123, jd.FEATURES.index(column)] = jd.SENTINEL
    path = sj.write_csv(tmp_path / "j.csv", times, values)
    with pytest.raises(jd.JenaFormatError, match="outside the physical range") as err:
        jd.read_csv(path)
    msg = str(err.value)
    assert f"line 125, column '{column}': -9999" in msg
    assert "may hold the missing-value marker" in msg
    assert "delete it and run again" in msg


def test_a_sentinel_in_a_wind_column_is_cleaned_and_counted(tmp_path):
    times, values = sj.synthetic_series(300)
    values[[5, 6], jd.FEATURES.index("max. wv (m/s)")] = jd.SENTINEL
    path = sj.write_csv(tmp_path / "j.csv", times, values)
    prepared = jd.load(
        jd.FULL_FILE, path=path, sampling=1, train_fraction=0.7, n=8, n_windows=4
    )
    assert prepared.info["cleaning"]["sentinels_replaced"] == {
        "wv (m/s)": 0,
        "max. wv (m/s)": 2,
    }


def test_a_few_rows_out_of_order_or_repeated_are_cleaned_and_counted(tmp_path):
    times, values = sj.synthetic_series(300, seed=2)
    order = np.arange(300)
    order[[0, 1]] = order[[1, 0]]  # the first two rows reversed
    order[[150, 151]] = order[[151, 150]]
    times, values = times[order], values[order]
    times = np.append(times, times[-1])  # the last row repeated
    values = np.append(values, values[-1:], axis=0)
    path = sj.write_csv(tmp_path / "j.csv", times, values)
    info = jd.load(
        jd.FULL_FILE, path=path, sampling=1, train_fraction=0.7, n=8, n_windows=4
    ).info
    assert info["cleaning"]["out_of_order"] == 2 and info["cleaning"]["duplicates"] == 1
    assert info["cleaning"]["rows_read"] == 301 and info["rows_clean"] == 300
    assert info["first_time"] == "2009-01-01T00:10:00"


def test_a_reversed_file_is_an_error(tmp_path):
    times, values = sj.synthetic_series(300)
    path = sj.write_csv(tmp_path / "j.csv", times[::-1], values[::-1])
    with pytest.raises(jd.JenaFormatError, match="out of time order") as err:
        jd.load(
            jd.FULL_FILE, path=path, sampling=1, train_fraction=0.7, n=8, n_windows=4
        )
    assert "299 of 300 rows" in str(err.value) and "line 3" in str(err.value)


def test_the_std_of_T_is_not_skewed_by_a_sentinel(tmp_path):
    """The failure this guards against: one -9999 in T turns its training std from a
    few degrees into hundreds. Now the file is refused instead."""
    times, values = sj.synthetic_series(3000)
    windows = dict(sampling=1, train_fraction=0.7, n=8, n_windows=4)
    good = jd.load(
        jd.FULL_FILE, path=sj.write_csv(tmp_path / "a.csv", times, values), **windows
    )
    assert good.std[T] < 10
    values[100, T] = jd.SENTINEL
    with pytest.raises(jd.JenaFormatError, match=re.escape("T (degC)")):
        jd.load(
            jd.FULL_FILE,
            path=sj.write_csv(tmp_path / "b.csv", times, values),
            **windows,
        )


def test_a_non_numeric_value_and_a_short_file_give_the_same_advice(tmp_path):
    times, values = sj.synthetic_series(20)
    path = sj.write_csv(tmp_path / "j.csv", times, values)
    path.write_bytes(set_field(path.read_bytes(), 6, 5, b"n/a"))
    with pytest.raises(jd.JenaFormatError, match="not a finite number") as err:
        jd.read_csv(path)
    msg = str(err.value)
    assert "line 6, column 'rh (%)': 'n/a'" in msg
    assert "delete it and run again to download a fresh copy" in msg
    with pytest.raises(jd.JenaFormatError, match="delete it and run again"):
        jd.check_structure(sj.write_csv(tmp_path / "k.csv", times, values))


# ----------------------------------------------------- a fresh machine and its download
def serve(path, root):
    """A zip like the canonical one (``jena_climate_2009_2016.csv`` inside), as a
    file:// URL."""
    archive = root / (path.stem + ".zip")
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_STORED) as zf:
        zf.write(path, "jena_climate_2009_2016.csv")
    return archive.as_uri()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """A synthetic full-size file with the real file's kinds of imperfection, served as
    a zip, and the values digest of its first 154 rows (what the excerpt pin is for the
    real file)."""
    root = tmp_path_factory.mktemp("server")
    times, values = sj.synthetic_series(
        jd.N_ROWS, seed=7, gaps=219, duplicates=2, swaps=1, sentinels=3
    )
    csv = sj.write_csv(root / "jena_climate_2009_2016.csv", times, values)
    excerpt = root / "excerpt.csv"
    jd.derive_fixture(csv, excerpt)
    return SimpleNamespace(
        root=root,
        csv=csv,
        url=serve(csv, root),
        digest=jd.values_digest(jd.read_csv(excerpt)),
    )


def point_url(monkeypatch, url):
    monkeypatch.setitem(
        data.ASSETS,
        jd.FULL_FILE,
        dataclasses.replace(data.ASSETS[jd.FULL_FILE], url=url),
    )


@pytest.fixture
def fresh_clone(tmp_path, monkeypatch, server):
    """A new user's machine: no data folder, an empty cache, the canonical URL answered
    by the local zip, and the excerpt pin set to the synthetic file's first rows."""
    monkeypatch.delenv(data.DATA_DIR_ENV, raising=False)
    monkeypatch.setenv(data.CACHE_DIR_ENV, str(tmp_path / "cache"))
    point_url(monkeypatch, server.url)
    monkeypatch.setattr(jd, "FIXTURE_VALUES_SHA256", server.digest)
    return tmp_path / "cache"


def test_the_excerpt_is_derived_from_the_downloaded_full_file(
    fresh_clone, server, monkeypatch
):
    path = data.find(jd.FIXTURE_FILE, progress=False)
    assert path == fresh_clone / jd.FIXTURE_FILE
    full = fresh_clone / jd.FULL_FILE
    assert full.read_bytes() == server.csv.read_bytes()  # downloaded
    assert (
        path.read_bytes()
        == b"\n".join(server.csv.read_bytes().split(b"\n")[:155]) + b"\n"
    )
    assert not [
        p
        for p in fresh_clone.rglob(".*")
        if p.name.startswith((".derive", ".download"))
    ]
    # the ci profile's data pipeline runs on it
    prepared = jena.load_data(settings_for(jena.SETTINGS, "ci"))
    assert prepared.X.shape == (16, 8, 14) and prepared.info["rows_in_file"] == 154
    # and a later lookup reuses it, offline
    point_url(monkeypatch, (fresh_clone / "nowhere.zip").as_uri())
    assert data.find(jd.FIXTURE_FILE, allow_download=False) == path


def test_an_excerpt_with_other_values_is_rejected_and_not_kept(
    fresh_clone, monkeypatch
):
    monkeypatch.setattr(jd, "FIXTURE_VALUES_SHA256", "0" * 64)
    with pytest.raises(data.DataError, match="is not the first 154 rows") as err:
        data.find(jd.FIXTURE_FILE, progress=False)
    msg = str(err.value)
    assert "Delete it and run again" in msg
    assert data.DATA_DIR_ENV in msg and "shared" not in msg.lower()
    assert not (fresh_clone / jd.FIXTURE_FILE).exists()


def test_without_network_the_message_names_the_project_folders(
    fresh_clone, monkeypatch, tmp_path
):
    point_url(monkeypatch, (tmp_path / "nowhere.zip").as_uri())
    with pytest.raises(data.DataError, match="could not be downloaded") as err:
        data.find(jd.FIXTURE_FILE, progress=False)
    msg = str(err.value)
    assert jd.FIXTURE_FILE in msg and jd.FULL_FILE in msg
    assert data.DATA_DIR_ENV in msg and str(fresh_clone) in msg
    assert "shared" not in msg.lower()


def test_the_full_files_checksum_is_recorded_on_first_download_and_enforced(
    fresh_clone, server, monkeypatch
):
    path = data.find(jd.FULL_FILE, progress=False)
    record = path.with_name(path.name + ".sha256")
    assert record.read_text().split()[0] == data.sha256sum(server.csv)
    # a recorded checksum vouches for the structure: found again, the file is not parsed
    with monkeypatch.context() as m:
        m.setattr(jd, "_parse", lambda p: pytest.fail(f"{p} was parsed"))
        assert data.find(jd.FULL_FILE, progress=False) == path
    raw = path.read_bytes()
    value = float(raw.split(b"\n")[999].split(b",")[1]) + 0.01
    path.write_bytes(set_field(raw, 1000, 1, b"%.2f" % value))  # still plausible
    with pytest.raises(data.DataError, match="sha256") as err:
        data.find(jd.FULL_FILE, progress=False)
    assert str(record) in str(err.value)
    path.unlink()  # the advice works
    found = data.find(jd.FULL_FILE, progress=False)
    assert data.sha256sum(found) == data.sha256sum(server.csv)


def test_a_download_with_impossible_values_is_refused_and_not_trusted(
    fresh_clone, server, monkeypatch
):
    bad = server.root / "bad" / "jena_climate_2009_2016.csv"
    bad.parent.mkdir(exist_ok=True)
    bad.write_bytes(set_field(server.csv.read_bytes(), 5000, T + 1, b"-9999.00"))
    point_url(monkeypatch, serve(bad, bad.parent))
    with pytest.raises(jd.JenaFormatError, match=re.escape("column 'T (degC)'")) as err:
        data.find(jd.FULL_FILE, progress=False)
    assert "line 5000" in str(err.value)
    assert not [p for p in fresh_clone.rglob("*.csv*") if not p.name.endswith(".lock")]


def test_a_damaged_excerpt_says_how_to_fix_it_and_the_fix_works(
    fresh_clone, monkeypatch, tmp_path
):
    path = data.find(jd.FIXTURE_FILE, progress=False)
    path.write_bytes(set_field(path.read_bytes(), 20, 2, b"-1.23"))
    with pytest.raises(jd.JenaFormatError, match="Delete it and run again") as err:
        data.find(jd.FIXTURE_FILE, progress=False)
    msg = str(err.value)
    assert "derived again from the full file" in msg
    assert "no download URL" not in msg and "shared" not in msg.lower()
    path.unlink()
    point_url(monkeypatch, (tmp_path / "nowhere.zip").as_uri())  # the cached full file
    assert data.find(jd.FIXTURE_FILE, progress=False) == path


def test_an_edited_excerpt_with_a_matching_record_in_the_data_folder_is_refused(
    tmp_path, monkeypatch
):
    """A record beside a file in the data folder is no record of rcutil's: the excerpt
    is checked by its pinned values whatever a .sha256 beside it says."""
    source = data.find(jd.FIXTURE_FILE, allow_download=False)
    folder = tmp_path / "data" / "jena_climate"
    folder.mkdir(parents=True)
    edited = folder / source.name
    raw = source.read_bytes()
    value = float(raw.split(b"\n")[20].split(b",")[T + 1]) + 5
    edited.write_bytes(set_field(raw, 20, T + 1, b"%.2f" % value))
    edited.with_name(edited.name + ".sha256").write_text(
        f"{data.sha256sum(edited)}  {edited.name}\n"
    )
    monkeypatch.setenv(data.DATA_DIR_ENV, str(tmp_path / "data"))
    with pytest.raises(jd.JenaFormatError, match="is not the first 154 rows") as err:
        data.find(jd.FIXTURE_FILE, allow_download=False)
    assert str(edited) in str(err.value) and "Delete it" in str(err.value)
