"""The Jena Climate weather series: reading, cleaning, windows and normalisation.

The file ``jena_climate_2009_2016.csv`` (Max Planck Institute for Biogeochemistry, Jena,
2009-2016) has a quoted header ``"Date Time"`` + 14 features and 420,551 rows, one every
ten minutes; dates are written ``%d.%m.%Y %H:%M:%S``. The book's pipeline (chapter
:ref:`jena`):

1. :func:`read_csv` parses the file and checks it (header, column count, numbers);
2. :func:`clean_sentinels` sets the ``-9999.0`` wind-speed sentinels to ``0.0``, the fix of
   the TensorFlow/Keras time-series tutorial;
3. the first ``train_fraction`` of the rows is the training part; :func:`normalisation`
   takes mean and standard deviation from that part only;
4. :func:`make_windows` samples the series (every ``sampling``-th row), cuts ``N`` windows
   of ``2 n`` steps evenly spread over the training part, and returns the first ``n`` steps
   (all 14 features) as ``X`` and the temperature of the next ``n`` steps as ``Y``.

:func:`load` runs the whole pipeline on a file found through :mod:`rcutil.data`.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import numpy as np

from . import data as _data
from .data import Asset, DataError

#: The 14 features, in the file's column order.
FEATURES = (
    "p (mbar)", "T (degC)", "Tpot (K)", "Tdew (degC)", "rh (%)", "VPmax (mbar)",
    "VPact (mbar)", "VPdef (mbar)", "sh (g/kg)", "H2OC (mmol/mol)", "rho (g/m**3)",
    "wv (m/s)", "max. wv (m/s)", "wd (deg)",
)
HEADER = ("Date Time",) + FEATURES
#: Data rows of the canonical file.
N_ROWS = 420_551
DATE_FORMAT = "%d.%m.%Y %H:%M:%S"
#: The missing-value marker of the wind-speed columns.
SENTINEL = -9999.0
WIND_COLUMNS = ("wv (m/s)", "max. wv (m/s)")
TARGET = "T (degC)"

FULL_FILE = "jena_climate/jena_climate_2009_2016.csv"
FIXTURE_FILE = "jena_climate/jena_climate_2009_2016_head154.csv"

_DATE_RE = re.compile(r"^\d\d\.\d\d\.\d{4} \d\d:\d\d:\d\d$")


class JenaFormatError(DataError, ValueError):
    """The file is not in the format of ``jena_climate_2009_2016.csv``; the message says where."""


@dataclass
class JenaTable:
    """The parsed file: ``times`` (datetime64[s]), ``values`` (rows x 14, float64)."""

    path: Path
    times: np.ndarray
    values: np.ndarray
    columns: tuple[str, ...] = FEATURES

    @property
    def n_rows(self) -> int:
        return len(self.values)


# --------------------------------------------------------------------------- reading
def _header_fields(line: str) -> tuple[str, ...]:
    return tuple(f.strip().strip('"') for f in line.rstrip("\r\n").split(","))


def _check_header(line: str, path: Path) -> None:
    got = _header_fields(line)
    if got != HEADER:
        if len(got) != len(HEADER):
            problem = f"it has {len(got)} columns, expected {len(HEADER)}"
        else:
            bad = [(g, e) for g, e in zip(got, HEADER) if g != e]
            problem = f"column {bad[0][0]!r} should be {bad[0][1]!r}"
        raise JenaFormatError(
            f"{path} has the wrong header ({problem}). Line 1 must be the quoted header "
            f"{', '.join(repr(h) for h in HEADER)}. Is this jena_climate_2009_2016.csv?"
        )


def _first_bad_line(lines: list[str], path: Path) -> JenaFormatError:
    """Find the first malformed data line (column count, number, date) and describe it."""
    for i, line in enumerate(lines, start=2):  # line 1 is the header
        fields = line.rstrip("\r").split(",")
        if len(fields) != len(HEADER):
            return JenaFormatError(
                f"{path}, line {i}: {len(fields)} fields, expected {len(HEADER)} "
                f"(a date and 14 numbers): {line[:80]!r}"
            )
        try:
            ok = bool(_DATE_RE.match(fields[0])) and bool(datetime.strptime(fields[0], DATE_FORMAT))
        except ValueError:
            ok = False
        if not ok:
            return JenaFormatError(
                f"{path}, line {i}: the date {fields[0]!r} is not in the format {DATE_FORMAT}"
            )
        for name, f in zip(FEATURES, fields[1:]):
            try:
                v = float(f)
            except ValueError:
                v = None
            if v is None or not math.isfinite(v):
                return JenaFormatError(
                    f"{path}, line {i}, column {name!r}: {f!r} is not a finite number. "
                    f"Fix or delete that line (or restore the original file)."
                )
    return JenaFormatError(f"{path}: the data lines could not be parsed as dates and numbers")


def read_csv(path, *, min_rows: int = 1) -> JenaTable:
    """Parse a file in the format of ``jena_climate_2009_2016.csv`` and check it.

    Raises :class:`FileNotFoundError` for a missing file and :class:`JenaFormatError` (a
    ``ValueError``) for a wrong header, fewer than ``min_rows`` data rows, a row with the wrong
    number of fields, a date not in ``%d.%m.%Y %H:%M:%S`` or a field that is not a finite
    number; the message gives the line number.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(
            f"the Jena Climate file {path} does not exist. Set {_data.DATA_DIR_ENV} to the folder "
            f"that holds {FULL_FILE}, or let rcutil.data download it."
        )
    with open(path, encoding="utf-8", newline="") as f:
        text = f.read()
    lines = text.splitlines()
    while lines and not lines[-1].strip():
        lines.pop()
    if not lines:
        raise JenaFormatError(f"{path} is empty: expected a header and {N_ROWS:,} data rows")
    _check_header(lines[0], path)
    rows = lines[1:]
    if len(rows) < min_rows:
        raise JenaFormatError(
            f"{path} is too short: {len(rows):,} data rows, at least {min_rows:,} are needed "
            f"(the full file has {N_ROWS:,}). Use the full jena_climate_2009_2016.csv or a "
            f"smaller profile."
        )
    try:
        values = np.loadtxt(rows, delimiter=",", usecols=range(1, len(HEADER)),
                            dtype=np.float64, ndmin=2)
        if values.shape != (len(rows), len(FEATURES)) or not np.isfinite(values).all():
            raise ValueError("shape or non-finite")
        # every row must have exactly 15 fields (loadtxt ignores extra trailing columns)
        counts = np.fromiter((r.count(",") for r in rows), dtype=np.int64, count=len(rows))
        if (counts != len(HEADER) - 1).any():
            raise ValueError("field count")
        dates = [r[:19] for r in rows]
        iso = [f"{s[6:10]}-{s[3:5]}-{s[0:2]}T{s[11:19]}" for s in dates]
        if any(r[19:20] != "," for r in rows):
            raise ValueError("date field")
        times = np.array(iso, dtype="datetime64[s]")
    except ValueError:
        raise _first_bad_line(rows, path) from None
    return JenaTable(path=path, times=times, values=values)


def check_structure(path) -> None:
    """The structure check of the full file (for :class:`rcutil.data.Asset`): the header,
    15 fields on every row and exactly 420,551 data rows. Raises :class:`JenaFormatError`.
    (Numbers and dates are checked when the file is read, by :func:`read_csv`.)"""
    path = Path(path)
    with open(path, encoding="utf-8", newline="") as f:
        lines = f.read().splitlines()
    while lines and not lines[-1].strip():
        lines.pop()
    if not lines:
        raise JenaFormatError(f"{path} is empty: expected a header and {N_ROWS:,} data rows")
    _check_header(lines[0], path)
    if len(lines) - 1 != N_ROWS:
        raise JenaFormatError(
            f"{path} has {len(lines) - 1:,} data rows, the canonical file has {N_ROWS:,}: "
            f"it is truncated or not jena_climate_2009_2016.csv. Delete it and download it again."
        )
    for i, line in enumerate(lines[1:], start=2):
        if line.count(",") != len(HEADER) - 1:
            raise JenaFormatError(
                f"{path}, line {i}: {line.count(',') + 1} fields, expected {len(HEADER)}"
            )


_data.register(Asset(FULL_FILE, _data.JENA_URL, sha256=None,
                     member="jena_climate_2009_2016.csv", validate=check_structure))


# --------------------------------------------------------------------------- cleaning
def clean_sentinels(values: np.ndarray) -> tuple[np.ndarray, dict[str, int]]:
    """Return a copy of ``values`` with the ``-9999.0`` wind speeds set to ``0.0``, and the
    number replaced per column (the fix of the TensorFlow/Keras tutorial)."""
    values = np.array(values, dtype=np.float64, copy=True)
    counts = {}
    for name in WIND_COLUMNS:
        j = FEATURES.index(name)
        bad = values[:, j] == SENTINEL
        counts[name] = int(bad.sum())
        values[bad, j] = 0.0
    return values, counts


def train_rows(n_rows: int, train_fraction: float) -> int:
    """Number of leading rows that form the training part."""
    if not 0 < train_fraction <= 1:
        raise ValueError(f"train_fraction must be in (0, 1], got {train_fraction!r}")
    return int(n_rows * train_fraction)


def normalisation(train_values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-feature mean and standard deviation of the training rows (and only of those)."""
    train_values = np.asarray(train_values, dtype=np.float64)
    mean = train_values.mean(axis=0)
    std = train_values.std(axis=0)
    if (std == 0).any():
        const = [FEATURES[j] for j in np.flatnonzero(std == 0)]
        raise ValueError(f"features {const} are constant on the training part: cannot normalise")
    return mean, std


def window_starts(length: int, window: int, count: int) -> np.ndarray:
    """``count`` start indices of windows of ``window`` steps, evenly spread over a series of
    ``length`` steps (first window at 0, last one ending at the end)."""
    if window > length:
        raise JenaFormatError(
            f"the training part is too short: {length} sampled steps, a window needs {window}. "
            f"Use a longer file, a smaller window or a smaller sampling step."
        )
    if count < 1:
        raise ValueError(f"the number of windows must be positive, got {count}")
    return np.round(np.linspace(0, length - window, count)).astype(np.int64)


def make_windows(series: np.ndarray, *, n: int, count: int, target: int):
    """Cut ``count`` windows of ``2 n`` steps from ``series`` (steps x features).

    Returns ``X`` (count, n, features): the first ``n`` steps; ``Y`` (count, n, 1): column
    ``target`` of the next ``n`` steps (token ``i`` forecasts ``n`` steps ahead of itself);
    and the start indices.
    """
    starts = window_starts(len(series), 2 * n, count)
    idx = starts[:, None] + np.arange(2 * n)[None, :]
    win = series[idx]
    return win[:, :n, :], win[:, n:, target:target + 1], starts


# --------------------------------------------------------------------------- pipeline
@dataclass
class JenaData:
    """What :func:`load` returns: the training windows and how they were made."""

    X: np.ndarray                 #: (N, n, 14), normalised
    Y: np.ndarray                 #: (N, n, 1), normalised temperature of the next n steps
    mean: np.ndarray              #: (14,) training-part mean
    std: np.ndarray               #: (14,) training-part standard deviation
    info: dict = field(default_factory=dict)


def load(file: str, *, sampling: int, train_fraction: float, n: int, n_windows: int,
         path=None, progress: bool = False) -> JenaData:
    """The book's pipeline on data file ``file`` (a name known to :mod:`rcutil.data`), or on
    ``path`` when given: read, clean, split, normalise with training statistics, window."""
    if path is None:
        path = _data.find(file, progress=progress)
    path = Path(path)
    table = read_csv(path, min_rows=2)
    values, replaced = clean_sentinels(table.values)
    n_train = train_rows(len(values), train_fraction)
    mean, std = normalisation(values[:n_train])
    normed = (values - mean) / std
    series = normed[:n_train:sampling]
    X, Y, starts = make_windows(series, n=n, count=n_windows, target=FEATURES.index(TARGET))
    used = np.unique((starts[:, None] + np.arange(2 * n)[None, :]).ravel()) * sampling
    info = {
        "file": file,
        "path": str(path),
        "sha256": _data.sha256sum(path),
        "rows_in_file": int(len(values)),
        "rows_train": int(n_train),
        "rows_used": int(len(used)),
        "first_time": str(table.times[0]),
        "last_time": str(table.times[-1]),
        "last_train_time": str(table.times[n_train - 1]),
        "sentinels_replaced": replaced,
        "sampling": int(sampling),
        "train_fraction": float(train_fraction),
        "n_windows": int(n_windows),
        "window_starts": (starts * sampling).tolist(),
        "features": list(FEATURES),
        "target": TARGET,
    }
    return JenaData(X=X, Y=Y, mean=mean, std=std, info=info)
