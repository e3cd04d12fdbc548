"""rcutil.jena_data on files the tests write: parsing, error paths, cleaning, sentinels,
normalisation, the 154-row excerpt, and the ``book``-profile pipeline end to end on a
generated file of the canonical size."""
import hashlib
import re

import numpy as np
import pytest

import rcutil  # noqa: F401
from rcutil import data
from rcutil import jena_data as jd
from rcutil.experiments import jena
from rcutil.profiles import settings_for

HEADER_LINE = ",".join(f'"{h}"' for h in jd.HEADER)


def write_csv(path, rows: int, *, seed=0, sentinels=(), header=None, newline="\n"):
    """A file in the canonical format with physically consistent values (see
    rcutil.jena_data.synthetic_series); ``sentinels``: (row, column) set to -9999."""
    times, vals = jd.synthetic_series(rows, seed=seed)
    for r, c in sentinels:
        vals[r, c] = jd.SENTINEL
    jd.write_csv(path, times, vals, newline=newline)
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
    assert str(t.times[0]) == "2009-01-01T00:10:00" and str(t.times[-1]) == "2009-01-02T01:40:00"
    assert t.values[0, 0] == 996.52 and t.values[-1, -1] == 185.00
    assert data.sha256sum(path) == jd.FIXTURE_BYTES_SHA256
    assert jd.values_digest(t) == jd.FIXTURE_VALUES_SHA256
    cleaned, report = jd.clean(t)
    assert report["rows_kept"] == 154 and report["gaps"] == 0 and report["duplicates"] == 0


def test_derived_excerpt_is_byte_identical_whatever_the_line_endings(tmp_path):
    """A full file that starts with the excerpt's rows, written with CRLF, gives back the
    excerpt byte for byte."""
    fixture = fixture_path().read_bytes()
    more = jd.write_csv(tmp_path / "more.csv", *jd.synthetic_series(50, start="2009-01-02T01:50:00"))
    full = tmp_path / "full.csv"
    full.write_bytes((fixture + more.read_bytes().split(b"\n", 1)[1]).replace(b"\n", b"\r\n"))
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
    times, v = jd.synthetic_series(5000, seed=3)
    col = {c: v[:, j] for j, c in enumerate(jd.FEATURES)}
    for c, (lo, hi) in jd.RANGES.items():
        assert lo <= col[c].min() and col[c].max() <= hi, c
    np.testing.assert_allclose(col["VPdef (mbar)"], col["VPmax (mbar)"] - col["VPact (mbar)"], atol=0.02)
    assert (col["Tdew (degC)"] <= col["T (degC)"] + 0.01).all()
    assert (col["max. wv (m/s)"] >= col["wv (m/s)"] - 0.01).all()
    assert -15 < col["T (degC)"].mean() < 10 and 950 < col["p (mbar)"].mean() < 1030   # January


def test_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        jd.read_csv(tmp_path / "nope.csv")


def test_wrong_header(tmp_path):
    p = tmp_path / "j.csv"
    write_csv(p, 5, header=HEADER_LINE.replace("T (degC)", "Temp"))
    with pytest.raises(jd.JenaFormatError, match=r"wrong header.*'Temp'.*'T \(degC\)'"):
        jd.read_csv(p)
    write_csv(p, 5, header=HEADER_LINE.rsplit(",", 1)[0])
    with pytest.raises(ValueError, match="14 columns, expected 15"):
        jd.read_csv(p)


def test_short_file(tmp_path):
    p = tmp_path / "j.csv"
    write_csv(p, 10)
    with pytest.raises(jd.JenaFormatError, match="too short: 10 data rows, at least 20"):
        jd.read_csv(p, min_rows=20)
    with pytest.raises(jd.JenaFormatError, match="10 data rows, the canonical file has 420,551"):
        jd.check_structure(p)
    # a window that does not fit in the training part is also a short file
    with pytest.raises(jd.JenaFormatError, match="training part is too short"):
        jd.load(jd.FULL_FILE, path=p, sampling=1, train_fraction=0.7, n=8, n_windows=2)
    (tmp_path / "e.csv").write_text("")
    with pytest.raises(jd.JenaFormatError, match="empty"):
        jd.read_csv(tmp_path / "e.csv")


@pytest.mark.parametrize("bad, match", [
    ("abc", r"line 5, column 'rh \(%\)': 'abc' is not a finite number"),
    ("", r"line 5, column 'rh \(%\)': '' is not a finite number"),
    ("nan", r"line 5, column 'rh \(%\)': 'nan' is not a finite number"),
])
def test_non_numeric_field_names_line_and_column(tmp_path, bad, match):
    p = tmp_path / "j.csv"
    write_csv(p, 10)

    def edit(line):
        fields = line.split(",")
        fields[5] = bad                    # column 'rh (%)'
        return ",".join(fields)

    edit_line(p, 4, edit)                  # file line 5 = the 4th data row
    with pytest.raises(jd.JenaFormatError, match=match):
        jd.read_csv(p)


@pytest.mark.parametrize("index, edit, message", [
    (7, lambda line: line + ",1.00", "line 8: 16 fields, expected 15"),
    (2, lambda line: "2009-01-01 00:30:00" + line[19:], "line 3: the date '2009-01-01 00:30:00'"),
    (6, lambda line: "31.02.2009" + line[10:], "line 7: the date '31.02.2009 01:00:00'"),
    (3, lambda line: "01.01.2009 24:00:00" + line[19:], "line 4: the date '01.01.2009 24:00:00'"),
], ids=["field-count", "date-format", "impossible-date", "impossible-hour"])
def test_bad_field_count_and_date(tmp_path, index, edit, message):
    p = tmp_path / "j.csv"
    write_csv(p, 10)
    edit_line(p, index, edit)
    with pytest.raises(jd.JenaFormatError, match=message):
        jd.read_csv(p)


@pytest.mark.parametrize("column", jd.FEATURES)
def test_every_column_has_a_physical_range(tmp_path, column):
    """A value just outside the range fails, one just inside passes, for every column."""
    p = tmp_path / "j.csv"
    times, vals = jd.synthetic_series(12)
    j = jd.FEATURES.index(column)
    lo, hi = jd.RANGES[column]
    vals[3, j] = lo
    vals[4, j] = hi
    jd.write_csv(p, times, vals)
    jd.read_csv(p)
    vals[6, j] = hi + 0.01
    jd.write_csv(p, times, vals)
    with pytest.raises(jd.JenaFormatError, match=rf"line 8, column '{re.escape(column)}'.*outside the physical"):
        jd.read_csv(p)


def test_cleaning_sorts_deduplicates_and_reports_gaps(tmp_path):
    p = tmp_path / "j.csv"
    times, vals = jd.synthetic_series(200, seed=1)
    keep = np.ones(200, dtype=bool)
    keep[[50, 51, 52, 120]] = False                        # two gaps: 3 steps and 1 step
    times, vals = times[keep], vals[keep]
    repeat = vals[9].copy()
    repeat[0] += 0.5                                       # same timestamp, other pressure
    times, vals = np.insert(times, 10, times[9]), np.insert(vals, 10, repeat, axis=0)
    order = np.arange(len(times))
    order[[30, 31]] = order[[31, 30]]                      # one pair out of order
    jd.write_csv(p, times[order], vals[order])
    table = jd.read_csv(p)
    assert table.times[30] > table.times[31]
    cleaned, report = jd.clean(table)
    assert report["rows_read"] == 197 and report["rows_kept"] == 196
    assert report["out_of_order"] == 1 and report["duplicates"] == 1
    assert report["duplicates_differing"] == 1             # the repeated row had other values
    assert report["gaps"] == 2 and report["missing_steps"] == 4 and report["longest_gap_steps"] == 3
    assert report["expected_rows"] == 200 and report["irregular_steps"] == 0
    assert (np.diff(cleaned.times) > np.timedelta64(0, "s")).all()
    np.testing.assert_array_equal(cleaned.values[9], vals[9])           # the first one is kept
    i = int(np.flatnonzero(cleaned.times == times[31])[0])
    np.testing.assert_array_equal(cleaned.values[i], vals[31])
    assert cleaned.lines[i] == 2 + 30                     # the line it came from


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
    assert (t.values == jd.SENTINEL).sum() == 3   # the input is not modified
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


def test_parse_is_kept_per_file_version(tmp_path):
    p = tmp_path / "j.csv"
    write_csv(p, 20)
    a = jd.read_csv(p)
    assert jd.read_csv(p) is a and not a.values.flags.writeable
    write_csv(p, 21)                              # a new version of the file is parsed again
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
    assert data.ASSETS[jd.FULL_FILE].validate is jd.check_structure
    monkeypatch.setitem(jena.SETTINGS, "book",
                        dict(jena.SETTINGS["book"], steps=2, lanczos_steps=2, spectra_every=1))
    result = jena.run(settings_for(jena.SETTINGS, "book"), progress=False)
    s = jena.SETTINGS["book"]
    assert result["shape"] == {"N": s["n_windows"], "n": s["n"], "d": 14}
    info = result["data"]
    assert info["rows_in_file"] == jd.N_ROWS
    assert info["rows_train"] == int(jd.N_ROWS * s["train_fraction"])
    assert info["checksum"] == "sha256:" + data.sha256sum(p)
    assert info["sentinels_replaced"] == {"wv (m/s)": 2, "max. wv (m/s)": 0}
    assert info["cleaning"]["rows_kept"] == jd.N_ROWS and info["cleaning"]["gaps"] == 0
    assert max(info["window_starts"]) + 2 * s["n"] * s["sampling"] <= info["rows_train"] + s["sampling"]
    assert [r["beta"] for r in result["runs"]] == list(s["betas"])
    for r in result["runs"]:
        assert len(r["loss_history"]) == 3 and np.isfinite(r["loss_history"]).all()
