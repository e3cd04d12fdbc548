"""rcutil.jena_data on files the tests write: error paths, sentinels, normalisation, and the
``book``-profile pipeline end to end on a generated file of the canonical size."""
import numpy as np
import pytest

import rcutil  # noqa: F401
from rcutil import data
from rcutil import jena_data as jd
from rcutil.experiments import jena

HEADER_LINE = ",".join(f'"{h}"' for h in jd.HEADER)


def write_csv(path, rows: int, *, seed=0, start="2009-01-01T00:10:00", sentinels=(),
              header=HEADER_LINE, newline="\n"):
    """A file in the canonical format: quoted header, dates %d.%m.%Y %H:%M:%S, 2 decimals."""
    rng = np.random.default_rng(seed)
    times = np.datetime64(start) + np.arange(rows) * np.timedelta64(10, "m")
    dates = [f"{x[8:10]}.{x[5:7]}.{x[0:4]} {x[11:19]}" for x in times.astype(str).tolist()]
    vals = np.round(rng.normal(size=(rows, 14)) * 3 + np.arange(14) * 10.0, 2)
    for r, c in sentinels:
        vals[r, c] = jd.SENTINEL
    fmt = ",".join(["%s"] + ["%.2f"] * 14)
    lines = [fmt % (d, *v) for d, v in zip(dates, vals.tolist())]
    path.write_text(newline.join([header] + lines) + newline)
    return vals


def test_fixture_parses():
    try:
        path = data.find(jd.FIXTURE_FILE, allow_download=False)
    except data.DataError as exc:
        pytest.skip(f"the 154-row fixture is not available here: {exc}")
    t = jd.read_csv(path)
    assert t.values.shape == (154, 14)
    assert str(t.times[0]) == "2009-01-01T00:10:00" and str(t.times[-1]) == "2009-01-02T01:40:00"
    assert t.values[0, 0] == 996.52 and t.values[-1, -1] == 185.00


def test_roundtrip_and_crlf(tmp_path):
    p = tmp_path / "j.csv"
    vals = write_csv(p, 50, newline="\r\n")
    t = jd.read_csv(p)
    np.testing.assert_array_equal(t.values, vals)
    assert (np.diff(t.times) == np.timedelta64(600, "s")).all()


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
    lines = p.read_text().splitlines()
    fields = lines[4].split(",")          # file line 5 = the 4th data row
    fields[5] = bad                        # column 'rh (%)'
    lines[4] = ",".join(fields)
    p.write_text("\n".join(lines) + "\n")
    with pytest.raises(jd.JenaFormatError, match=match):
        jd.read_csv(p)


@pytest.mark.parametrize("index, edit, message", [
    (7, lambda line: line + ",1.00", "line 8: 16 fields, expected 15"),
    (2, lambda line: "2009-01-01 00:30:00" + line[19:], "line 3: the date '2009-01-01 00:30:00'"),
    (6, lambda line: "31.02.2009" + line[10:], "line 7: the date '31.02.2009 01:00:00'"),
], ids=["field-count", "date-format", "impossible-date"])
def test_bad_field_count_and_date(tmp_path, index, edit, message):
    p = tmp_path / "j.csv"
    write_csv(p, 10)
    lines = p.read_text().splitlines()
    lines[index] = edit(lines[index])
    p.write_text("\n".join(lines) + "\n")
    with pytest.raises(jd.JenaFormatError, match=message):
        jd.read_csv(p)


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


def test_normalisation_uses_training_rows_only(tmp_path):
    p = tmp_path / "j.csv"
    vals = write_csv(p, 100)
    a = jd.load(jd.FULL_FILE, path=p, sampling=1, train_fraction=0.7, n=4, n_windows=5)
    # change only the held-out part: nothing about the training windows may change
    lines = p.read_text().splitlines()
    for i in range(71, 101):
        f = lines[i].split(",")
        lines[i] = ",".join([f[0]] + ["%.2f" % (float(x) * 3 + 50) for x in f[1:]])
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


def test_book_pipeline_end_to_end_on_full_size_file(tmp_path, monkeypatch):
    """The ``book`` data settings on a generated file of 420,551 rows, found through
    rcutil.data (structure check included), then two GD steps of the whole sweep."""
    root = tmp_path / "data"
    (root / "jena_climate").mkdir(parents=True)
    p = root / jd.FULL_FILE
    wv = jd.FEATURES.index("wv (m/s)")
    write_csv(p, jd.N_ROWS, sentinels=[(1000, wv), (300_000, wv)])
    monkeypatch.setenv(data.DATA_DIR_ENV, str(root))
    monkeypatch.setenv(data.CACHE_DIR_ENV, str(tmp_path / "cache"))
    assert data.ASSETS[jd.FULL_FILE].validate is jd.check_structure
    monkeypatch.setitem(jena.SETTINGS, "book",
                        dict(jena.SETTINGS["book"], steps=2, power_iterations=2))
    result = jena.run("book", progress=False)
    s = jena.SETTINGS["book"]
    assert result["shape"] == {"N": s["n_windows"], "n": s["n"], "d": 14}
    info = result["data"]
    assert info["rows_in_file"] == jd.N_ROWS
    assert info["rows_train"] == int(jd.N_ROWS * s["train_fraction"])
    assert info["checksum"] == "sha256:" + data.sha256sum(p)
    assert info["sentinels_replaced"] == {"wv (m/s)": 2, "max. wv (m/s)": 0}
    assert max(info["window_starts"]) + 2 * s["n"] * s["sampling"] <= info["rows_train"] + s["sampling"]
    assert [r["beta"] for r in result["runs"]] == list(s["betas"])
    for r in result["runs"]:
        assert len(r["loss_history"]) == 3 and np.isfinite(r["loss_history"]).all()
