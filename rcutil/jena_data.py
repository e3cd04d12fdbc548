"""The Jena Climate weather series: reading, validation, cleaning, windows and
normalisation.

The file ``jena_climate_2009_2016.csv`` (Max Planck Institute for Biogeochemistry, Jena,
2009-2016) has a quoted header ``"Date Time"`` + 14 features and 420,551 rows, one every
ten minutes; dates are written ``%d.%m.%Y %H:%M:%S``. The book's pipeline (chapter
:ref:`jena`):

1. :func:`read_csv` parses the file (vectorised: a few seconds for the full file) and
   checks it: the header, 15 fields on every row, real dates, finite numbers, and every
   value inside the physical range of its column (:data:`RANGES`); the only value
   allowed outside is the missing-value marker ``-9999.0`` of the two wind-speed
   columns. A violation raises :class:`JenaFormatError` naming the line and the column.
2. :func:`clean` applies the documented cleaning rules and counts what each one did:

   * rows out of time order are put back in order (a stable sort by timestamp);
   * of rows that repeat a timestamp, the first in the file is kept;
   * the ``-9999.0`` wind speeds are set to ``0.0`` (the fix of the TensorFlow/Keras
     time-series tutorial, :func:`clean_sentinels`);
   * gaps (steps longer than ten minutes) are reported, not filled.

   Sorting and de-duplication are for a few stray rows: when more than
   :data:`MAX_DISORDER_FRACTION` of the rows (and more than :data:`MAX_DISORDER_ROWS`)
   are out of order or repeated, the file is not the canonical one and
   :class:`JenaFormatError` says so.
3. the first ``train_fraction`` of the cleaned rows is the training part;
   :func:`normalisation` takes mean and standard deviation from that part only;
4. :func:`make_windows` samples the series (every ``sampling``-th row), cuts ``N``
   windows of ``2 n`` steps evenly spread over the training part, and returns the first
   ``n`` steps (all 14 features) as ``X`` and the temperature of the next ``n`` steps as
   ``Y``.

:func:`load` runs the whole pipeline on a file found through :mod:`rcutil.data`.

This module registers two files with :mod:`rcutil.data`: the full file (downloaded,
checked by :func:`check_structure`, then, in the user cache, by the sha256 recorded when
it was first verified there) and the 154-row excerpt the ``ci`` profile reads, which is
*derived* from the full file (:func:`derive_fixture`) and verified by a pinned digest of
its parsed values (:func:`check_fixture`) on every use. A full-size synthetic file for
tests and timing is written by ``benchmarks/synthetic_jena.py``.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from . import data as _data
from .data import DataError

#: The 14 features, in the file's column order.
FEATURES = (
    "p (mbar)",
    "T (degC)",
    "Tpot (K)",
    "Tdew (degC)",
    "rh (%)",
    "VPmax (mbar)",
    "VPact (mbar)",
    "VPdef (mbar)",
    "sh (g/kg)",
    "H2OC (mmol/mol)",
    "rho (g/m**3)",
    "wv (m/s)",
    "max. wv (m/s)",
    "wd (deg)",
)
HEADER = ("Date Time",) + FEATURES
#: Data rows of the canonical file.
N_ROWS = 420_551
DATE_FORMAT = "%d.%m.%Y %H:%M:%S"
#: The recording interval.
STEP = np.timedelta64(600, "s")
#: The missing-value marker of the wind-speed columns.
SENTINEL = -9999.0
WIND_COLUMNS = ("wv (m/s)", "max. wv (m/s)")
TARGET = "T (degC)"

#: Physical range of every column, inclusive. Generous bounds for a surface station in
#: central Europe (the file's own values lie well inside them): a value outside is a
#: damaged file, not weather. The wind-speed columns may also hold :data:`SENTINEL`.
RANGES = {
    "p (mbar)": (850.0, 1100.0),
    "T (degC)": (-60.0, 60.0),
    "Tpot (K)": (200.0, 350.0),
    "Tdew (degC)": (-80.0, 60.0),
    "rh (%)": (0.0, 100.0),
    "VPmax (mbar)": (0.0, 200.0),
    "VPact (mbar)": (0.0, 200.0),
    "VPdef (mbar)": (0.0, 200.0),
    "sh (g/kg)": (0.0, 100.0),
    "H2OC (mmol/mol)": (0.0, 200.0),
    "rho (g/m**3)": (800.0, 1600.0),
    "wv (m/s)": (0.0, 120.0),
    "max. wv (m/s)": (0.0, 120.0),
    "wd (deg)": (0.0, 360.0),
}
#: At most this share of the rows (and in any case :data:`MAX_DISORDER_ROWS` rows) may
#: be out of time order or repeat a timestamp; they are then sorted and de-duplicated
#: (see :func:`clean`). More is an error: the file is not the canonical one.
MAX_DISORDER_FRACTION = 0.01
MAX_DISORDER_ROWS = 10

#: The full file (in a zip archive, as TensorFlow publishes it) and the ``ci``
#: profile's excerpt, made from it; both are registered with :mod:`rcutil.data` below.
URL = (
    "https://storage.googleapis.com/tensorflow/tf-keras-datasets/"
    "jena_climate_2009_2016.csv.zip"
)
FULL_FILE = "jena_climate/jena_climate_2009_2016.csv"
FIXTURE_FILE = "jena_climate/jena_climate_2009_2016_head154.csv"
#: The excerpt: the first rows of the full file, with LF line endings.
FIXTURE_ROWS = 154
#: sha256 of the excerpt's bytes (header and 154 rows, LF line endings).
FIXTURE_BYTES_SHA256 = (
    "bae0e06bb539ea67bbe06c593f7c7e760d5043bf472031d5cac8d29b939a6e3e"
)
#: sha256 of the excerpt's parsed values (:func:`values_digest`): what identifies it,
#: whatever its line endings.
FIXTURE_VALUES_SHA256 = (
    "cfd4c0b733e8331497512987beea50bf396a9bcd9f42d4e3923908d788e4b3ae"
)

_RESTORE = (
    "Restore the original file: delete it and run again to download a fresh copy into "
    "the "
    f"cache, or put the original in the folder that ${_data.DATA_DIR_ENV} names."
)


class JenaFormatError(DataError, ValueError):
    """The file is not in the format of ``jena_climate_2009_2016.csv``; the message says
    where."""


@dataclass
class JenaTable:
    """The parsed file: ``times`` (datetime64[s]), ``values`` (rows x 14, float64) and
    ``lines``, the line of the file each row came from (the header is line 1)."""

    path: Path
    times: np.ndarray
    values: np.ndarray
    lines: np.ndarray | None = None
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
            f"{path} has the wrong header ({problem}). Line 1 must be the quoted "
            "header "
            f"{', '.join(repr(h) for h in HEADER)}. Is this jena_climate_2009_2016.csv?"
        )


def _split_lines(path: Path) -> list[bytes]:
    raw = path.read_bytes().replace(b"\r\n", b"\n")
    lines = raw.split(b"\n")
    while lines and not lines[-1].strip():
        lines.pop()
    return lines


_DIGITS = np.array([0, 1, 3, 4, 6, 7, 8, 9, 11, 12, 14, 15, 17, 18])
_PUNCT = {
    2: ord("."),
    5: ord("."),
    10: ord(" "),
    13: ord(":"),
    16: ord(":"),
    19: ord(","),
}


def _parse_dates(rows: list[bytes], path: Path) -> np.ndarray:
    """The date field of every row (``%d.%m.%Y %H:%M:%S``), parsed and checked without a
    loop."""
    head = np.array([r[:20] for r in rows], dtype="S20")
    chars = head.view(np.uint8).reshape(len(rows), 20)
    ok = ((chars[:, _DIGITS] >= ord("0")) & (chars[:, _DIGITS] <= ord("9"))).all(axis=1)
    for col, ch in _PUNCT.items():
        ok &= chars[:, col] == ch
    digits = chars.astype(np.int64) - ord("0")

    def number(a, b):
        out = np.zeros(len(rows), dtype=np.int64)
        for c in range(a, b):
            out = out * 10 + digits[:, c]
        return out

    day, month, year = number(0, 2), number(3, 5), number(6, 10)
    hour, minute, second = number(11, 13), number(14, 16), number(17, 19)
    ok &= (
        (month >= 1)
        & (month <= 12)
        & (hour < 24)
        & (minute < 60)
        & (second < 60)
        & (day >= 1)
    )
    month_start = (np.clip(year, 1, 9999) - 1970).astype("M8[Y]") + (
        np.clip(month, 1, 12) - 1
    ).astype("m8[M]")
    days_in_month = (
        (month_start + np.timedelta64(1, "M")).astype("M8[D]")
        - month_start.astype("M8[D]")
    ).astype(np.int64)
    ok &= day <= days_in_month
    if not ok.all():
        i = int(np.flatnonzero(~ok)[0])
        date = rows[i].split(b",")[0].decode("utf-8", "replace")
        raise JenaFormatError(
            f"{path}, line {i + 2}: the date {date!r} is not a date in the format "
            f"{DATE_FORMAT}. " + _RESTORE
        )
    seconds = hour * 3600 + minute * 60 + second
    return (month_start.astype("M8[D]") + (day - 1).astype("m8[D]")).astype(
        "M8[s]"
    ) + seconds.astype("m8[s]")


def _first_bad_number(rows: list[bytes], path: Path) -> JenaFormatError:
    """Find the first field that is not a finite number and describe it (the slow path,
    taken only when the vectorised parse has failed)."""
    for i, line in enumerate(rows, start=2):
        for name, f in zip(FEATURES, line.decode("utf-8", "replace").split(",")[1:]):
            try:
                v = float(f)
            except ValueError:
                v = float("nan")
            if not np.isfinite(v):
                return JenaFormatError(
                    f"{path}, line {i}, column {name!r}: {f!r} is not a finite number. "
                    + _RESTORE
                )
    return JenaFormatError(
        f"{path}: the data lines could not be parsed as numbers. " + _RESTORE
    )


def _check_ranges(values: np.ndarray, path: Path) -> None:
    """Every value inside :data:`RANGES` (the wind-speed :data:`SENTINEL` excepted)."""
    low = np.array([RANGES[c][0] for c in FEATURES])
    high = np.array([RANGES[c][1] for c in FEATURES])
    bad = (values < low) | (values > high)
    for name in WIND_COLUMNS:
        j = FEATURES.index(name)
        bad[:, j] &= values[:, j] != SENTINEL
    if bad.any():
        i, j = (int(k[0]) for k in np.nonzero(bad))
        name = FEATURES[j]
        more = int(bad.sum()) - 1
        allowed = (
            f" (besides the missing-value marker {SENTINEL:g})"
            if name in WIND_COLUMNS
            else f"; only {' and '.join(repr(c) for c in WIND_COLUMNS)} may hold the "
            f"missing-value marker {SENTINEL:g}"
        )
        raise JenaFormatError(
            f"{path}, line {i + 2}, column {name!r}: {values[i, j]:g} is outside the "
            "physical "
            f"range [{RANGES[name][0]:g}, {RANGES[name][1]:g}]{allowed}"
            + (f"; {more:,} more values are out of range" if more else "")
            + ". "
            + _RESTORE
        )


def read_csv(path, *, min_rows: int = 1) -> JenaTable:
    """Parse a file in the format of ``jena_climate_2009_2016.csv`` and check it.

    Raises :class:`FileNotFoundError` for a missing file and :class:`JenaFormatError`
    (a ``ValueError``) for a wrong header, fewer than ``min_rows`` data rows, a row with
    the wrong number of fields, a date not in ``%d.%m.%Y %H:%M:%S``, a field that is not
    a finite number or a value outside the physical range of its column
    (:data:`RANGES`); the message gives the line and the column. Rows are returned in
    file order (see :func:`clean`).
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(
            f"the Jena Climate file {path} does not exist. Set {_data.DATA_DIR_ENV} to "
            f"the folder that holds {FULL_FILE}, or let rcutil.data download it into "
            f"the cache."
        )
    table = _parse(path)
    if table.n_rows < min_rows:
        raise JenaFormatError(
            f"{path} is too short: {table.n_rows:,} data rows, at least {min_rows:,} "
            f"are needed (the full file has {N_ROWS:,}). Use the full "
            f"jena_climate_2009_2016.csv or a smaller profile."
        )
    return table


def _parse(path: Path) -> JenaTable:
    lines = _split_lines(path)
    if not lines:
        raise JenaFormatError(
            f"{path} is empty: expected a header and {N_ROWS:,} data rows"
        )
    _check_header(lines[0].decode("utf-8", "replace"), path)
    rows = lines[1:]
    if not rows:
        return JenaTable(
            path,
            np.array([], dtype="M8[s]"),
            np.empty((0, len(FEATURES))),
            np.array([], dtype=np.int64),
        )
    counts = np.fromiter((r.count(b",") for r in rows), dtype=np.int64, count=len(rows))
    if (counts != len(HEADER) - 1).any():
        i = int(np.flatnonzero(counts != len(HEADER) - 1)[0])
        raise JenaFormatError(
            f"{path}, line {i + 2}: {counts[i] + 1} fields, expected {len(HEADER)} "
            f"(a date and 14 numbers): {rows[i][:80].decode('utf-8', 'replace')!r}. "
            + _RESTORE
        )
    times = _parse_dates(rows, path)
    try:
        values = np.loadtxt(
            rows,
            delimiter=",",
            usecols=range(1, len(HEADER)),
            dtype=np.float64,
            ndmin=2,
            encoding="utf-8",
        )
    except ValueError:
        raise _first_bad_number(rows, path) from None
    if not np.isfinite(values).all():
        raise _first_bad_number(rows, path)
    _check_ranges(values, path)
    return JenaTable(
        path=path, times=times, values=values, lines=np.arange(2, len(rows) + 2)
    )


def values_digest(table: JenaTable) -> str:
    """sha256 of a table's parsed content (timestamps as int64 seconds, values as
    float64, both little-endian): the same for every spelling of the same rows (line
    endings, quoting)."""
    h = hashlib.sha256()
    h.update(np.ascontiguousarray(table.times.astype("<i8")).tobytes())
    h.update(np.ascontiguousarray(table.values, dtype="<f8").tobytes())
    return h.hexdigest()


def check_structure(path) -> None:
    """The check of the full file (for :class:`rcutil.data.Asset`): everything
    :func:`read_csv` checks (header, fields, dates, numbers, physical ranges) and
    exactly 420,551 data rows. Raises :class:`JenaFormatError`."""
    table = read_csv(path)
    if table.n_rows != N_ROWS:
        raise JenaFormatError(
            f"{path} has {table.n_rows:,} data rows, the canonical file has "
            f"{N_ROWS:,}: "
            f"it is truncated or not jena_climate_2009_2016.csv. " + _RESTORE
        )


def derive_fixture(full: Path, out: Path) -> None:
    """Write the excerpt: the header and the first :data:`FIXTURE_ROWS` data rows of the
    full file ``full``, with LF line endings (for :class:`rcutil.data.Asset`)."""
    with open(full, "rb") as f:
        head = [f.readline() for _ in range(FIXTURE_ROWS + 1)]
    lines = [line.rstrip(b"\r\n") for line in head]
    if len(lines) < FIXTURE_ROWS + 1 or not all(lines):
        raise JenaFormatError(
            f"{full} has fewer than {FIXTURE_ROWS} data rows: cannot derive "
            f"{FIXTURE_FILE} from it. " + _RESTORE
        )
    Path(out).write_bytes(b"\n".join(lines) + b"\n")


def check_fixture(path) -> None:
    """The check of the excerpt: its bytes are the pinned ones
    (:data:`FIXTURE_BYTES_SHA256`), or else its parsed values are
    (:data:`FIXTURE_VALUES_SHA256`)."""
    path = Path(path)
    if _data.sha256sum(path) == FIXTURE_BYTES_SHA256:
        return
    try:
        table = read_csv(path)
        digest = values_digest(table)
    except JenaFormatError as exc:
        digest = f"unreadable ({exc})"
    if digest != FIXTURE_VALUES_SHA256:
        raise JenaFormatError(
            f"{path} is not the first {FIXTURE_ROWS} rows of "
            "jena_climate_2009_2016.csv: the "
            f"sha256 of its values is {digest}, expected {FIXTURE_VALUES_SHA256}. "
            "Delete it and "
            f"run again: it is derived again from the full file {FULL_FILE} (found in "
            f"${_data.DATA_DIR_ENV} or the cache, or downloaded from {URL})."
        )


#: The registry entries of the two files. The full file has no published checksum:
#: its structure is checked, and the checksum of the first verified copy in the user
#: cache is recorded. The excerpt is checked by the digests pinned above, always.
FULL_ASSET = _data.register(
    _data.Asset(
        FULL_FILE,
        URL,
        member="jena_climate_2009_2016.csv",
        validate=check_structure,
        record=True,
    )
)
FIXTURE_ASSET = _data.register(
    _data.Asset(
        FIXTURE_FILE,
        None,
        validate=check_fixture,
        source=FULL_FILE,
        derive=derive_fixture,
        pinned=True,
    )
)


# --------------------------------------------------------------------------- cleaning
def clean_sentinels(values: np.ndarray) -> tuple[np.ndarray, dict[str, int]]:
    """Return a copy of ``values`` with the ``-9999.0`` wind speeds set to ``0.0``, and
    the number replaced per column (the fix of the TensorFlow/Keras tutorial)."""
    values = np.array(values, dtype=np.float64, copy=True)
    counts = {}
    for name in WIND_COLUMNS:
        j = FEATURES.index(name)
        bad = values[:, j] == SENTINEL
        counts[name] = int(bad.sum())
        values[bad, j] = 0.0
    return values, counts


def time_order(times: np.ndarray) -> dict:
    """How far ``times`` is from a strictly increasing series: rows earlier than a row
    above them (``out_of_order``), rows that repeat an earlier timestamp
    (``duplicates``), and the index of the first row of either kind (``first``, or
    ``None``)."""
    times = np.asarray(times)
    if len(times) < 2:
        return {"out_of_order": 0, "duplicates": 0, "first": None}
    running_max = np.maximum.accumulate(times)
    late = times[1:] < running_max[:-1]
    ordered = np.sort(times, kind="stable")
    repeats = int((ordered[1:] == ordered[:-1]).sum())
    bad = late | (times[1:] == running_max[:-1])
    first = int(np.flatnonzero(bad)[0]) + 1 if bad.any() else None
    return {"out_of_order": int(late.sum()), "duplicates": repeats, "first": first}


def gaps(times: np.ndarray) -> dict:
    """The gaps of a sorted, de-duplicated series: steps longer than :data:`STEP`, the
    ten-minute steps missing in them, the longest one, and steps that are not a whole
    number of ten-minute intervals (``irregular``)."""
    times = np.asarray(times)
    if len(times) < 2:
        return {
            "gaps": 0,
            "missing_steps": 0,
            "longest_gap_steps": 0,
            "longest_gap_after": None,
            "irregular_steps": 0,
            "expected_rows": int(len(times)),
        }
    step = np.diff(times).astype(np.int64)
    unit = int(STEP.astype(np.int64))
    long = step > unit
    missing = np.where(step % unit == 0, step // unit - 1, step // unit)[long]
    longest = int(np.argmax(step)) if long.any() else None
    span = int((times[-1] - times[0]).astype(np.int64))
    return {
        "gaps": int(long.sum()),
        "missing_steps": int(missing.sum()),
        "longest_gap_steps": int(step[longest] // unit - 1)
        if longest is not None
        else 0,
        "longest_gap_after": str(times[longest]) if longest is not None else None,
        "irregular_steps": int((step % unit != 0).sum()),
        "expected_rows": span // unit + 1,
    }


def clean(table: JenaTable) -> tuple[JenaTable, dict]:
    """The cleaning rules of the module docstring, applied to a table of
    :func:`read_csv`.

    Returns the cleaned table (rows in time order, one per timestamp, sentinels set to
    0.0) and a report of what was done: ``rows_read``, ``rows_kept``, ``out_of_order``
    (rows moved back into order), ``duplicates`` (rows dropped for repeating a
    timestamp) and how many of those differed from the row kept
    (``duplicates_differing``), ``sentinels_replaced`` per column, and the :func:`gaps`
    of the result. Raises :class:`JenaFormatError` when more than
    :data:`MAX_DISORDER_FRACTION` of the rows (and more than :data:`MAX_DISORDER_ROWS`)
    are out of order or repeated.
    """
    times, values = table.times, table.values
    lines = table.lines if table.lines is not None else np.arange(2, len(times) + 2)
    order_report = time_order(times)
    disorder = order_report["out_of_order"] + order_report["duplicates"]
    if disorder > max(MAX_DISORDER_ROWS, MAX_DISORDER_FRACTION * len(times)):
        i = order_report["first"]
        raise JenaFormatError(
            f"{table.path}: {disorder:,} of {len(times):,} rows are out of time order "
            "or repeat a "
            f"timestamp (the cleaning sorts out at most {MAX_DISORDER_FRACTION:.0%} of "
            "the rows, or "
            f"{MAX_DISORDER_ROWS}); "
            f"the first is line {int(lines[i])}, {times[i]} after {times[i - 1]}. The "
            "rows of "
            f"jena_climate_2009_2016.csv run forward in time. " + _RESTORE
        )
    order = np.argsort(times, kind="stable")
    times, values, lines = times[order], values[order], lines[order]
    first = np.ones(len(times), dtype=bool)
    first[1:] = times[1:] != times[:-1]
    # each dropped row is compared with the kept row of its timestamp
    kept_index = np.maximum.accumulate(np.where(first, np.arange(len(times)), 0))
    differing = int((values[~first] != values[kept_index[~first]]).any(axis=1).sum())
    times, values, lines = times[first], values[first], lines[first]
    values, replaced = clean_sentinels(values)
    report = {
        "rows_read": int(table.n_rows),
        "rows_kept": int(len(times)),
        "out_of_order": order_report["out_of_order"],
        "duplicates": int((~first).sum()),
        "duplicates_differing": differing,
        "sentinels_replaced": replaced,
        **gaps(times),
    }
    return JenaTable(path=table.path, times=times, values=values, lines=lines), report


def train_rows(n_rows: int, train_fraction: float) -> int:
    """Number of leading rows that form the training part."""
    if not 0 < train_fraction <= 1:
        raise ValueError(f"train_fraction must be in (0, 1], got {train_fraction!r}")
    return int(n_rows * train_fraction)


def normalisation(train_values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-feature mean and standard deviation of the training rows (and only of
    those)."""
    train_values = np.asarray(train_values, dtype=np.float64)
    mean = train_values.mean(axis=0)
    std = train_values.std(axis=0)
    if (std == 0).any():
        const = [FEATURES[j] for j in np.flatnonzero(std == 0)]
        raise ValueError(
            f"features {const} are constant on the training part: cannot normalise"
        )
    return mean, std


def window_starts(length: int, window: int, count: int) -> np.ndarray:
    """``count`` start indices of windows of ``window`` steps, evenly spread over a
    series of ``length`` steps (first window at 0, last one ending at the end)."""
    if window > length:
        raise JenaFormatError(
            f"the training part is too short: {length} sampled steps, a window needs "
            f"{window}. "
            f"Use a longer file, a smaller window or a smaller sampling step."
        )
    if count < 1:
        raise ValueError(f"the number of windows must be positive, got {count}")
    return np.round(np.linspace(0, length - window, count)).astype(np.int64)


def make_windows(series: np.ndarray, *, n: int, count: int, target: int):
    """Cut ``count`` windows of ``2 n`` steps from ``series`` (steps x features).

    Returns ``X`` (count, n, features): the first ``n`` steps; ``Y`` (count, n, 1):
    column ``target`` of the next ``n`` steps (token ``i`` forecasts ``n`` steps ahead
    of itself); and the start indices.
    """
    starts = window_starts(len(series), 2 * n, count)
    idx = starts[:, None] + np.arange(2 * n)[None, :]
    win = series[idx]
    return win[:, :n, :], win[:, n:, target : target + 1], starts


# --------------------------------------------------------------------------- pipeline
@dataclass
class JenaData:
    """What :func:`load` returns: the training windows and how they were made."""

    X: np.ndarray  #: (N, n, 14), normalised
    Y: np.ndarray  #: (N, n, 1), normalised temperature of the next n steps
    mean: np.ndarray  #: (14,) training-part mean
    std: np.ndarray  #: (14,) training-part standard deviation
    info: dict = field(default_factory=dict)


def load(
    file: str,
    *,
    sampling: int,
    train_fraction: float,
    n: int,
    n_windows: int,
    path=None,
    progress: bool = False,
) -> JenaData:
    """The book's pipeline on data file ``file`` (a name known to :mod:`rcutil.data`),
    or on ``path`` when given: read and check, clean, split, normalise with training
    statistics, window. ``info`` records the file, its checksum and the cleaning
    report."""
    if path is None:
        path = _data.find(file, progress=progress)
    path = Path(path)
    table, report = clean(read_csv(path, min_rows=2))
    values = table.values
    n_train = train_rows(len(values), train_fraction)
    mean, std = normalisation(values[:n_train])
    normed = (values - mean) / std
    series = normed[:n_train:sampling]
    X, Y, starts = make_windows(
        series, n=n, count=n_windows, target=FEATURES.index(TARGET)
    )
    used = np.unique((starts[:, None] + np.arange(2 * n)[None, :]).ravel()) * sampling
    info = {
        "file": file,
        "path": str(path),
        "sha256": _data.sha256sum(path),
        "rows_in_file": int(report["rows_read"]),
        "rows_clean": int(len(values)),
        "rows_train": int(n_train),
        "rows_used": int(len(used)),
        "first_time": str(table.times[0]),
        "last_time": str(table.times[-1]),
        "last_train_time": str(table.times[n_train - 1]),
        "sentinels_replaced": report["sentinels_replaced"],
        "cleaning": report,
        "sampling": int(sampling),
        "train_fraction": float(train_fraction),
        "n_windows": int(n_windows),
        "window_starts": (starts * sampling).tolist(),
        "features": list(FEATURES),
        "target": TARGET,
    }
    return JenaData(X=X, Y=Y, mean=mean, std=std, info=info)
