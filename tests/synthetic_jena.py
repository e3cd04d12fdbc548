"""A synthetic Jena Climate series and its file, in the exact format of
``jena_climate_2009_2016.csv``: the files the tests of :mod:`rcutil.jena_data` read, and
the full-size file ``benchmarks/synthetic_jena.py`` writes and times."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from rcutil.jena_data import FEATURES, HEADER, N_ROWS, SENTINEL, STEP, WIND_COLUMNS


def synthetic_series(
    rows: int = N_ROWS,
    *,
    seed: int = 0,
    start="2009-01-01T00:10:00",
    gaps: int = 0,
    duplicates: int = 0,
    swaps: int = 0,
    sentinels: int = 0,
) -> tuple[np.ndarray, np.ndarray]:
    """A physically consistent stand-in for the Jena series, for tests and timing.

    ``rows`` rows of ten-minute data from ``start``: temperature with a yearly and a
    daily cycle and slow weather noise, pressure, relative humidity, and the quantities
    the station derives from them (Magnus formula for the saturation vapour pressure,
    dew point, specific humidity, water vapour concentration, potential temperature, air
    density), wind speed, gusts and direction, rounded to two decimals like the file.
    Imperfections like the real file's can be asked for: ``gaps`` missing steps,
    ``duplicates`` repeated rows, ``swaps`` pairs of adjacent rows exchanged,
    ``sentinels`` wind speeds set to ``SENTINEL``; the row count stays ``rows``.
    Returns ``(times, values)``.
    """
    rng = np.random.default_rng(seed)
    grid = np.datetime64(start, "s") + np.arange(rows + gaps - duplicates) * STEP
    if gaps:
        keep = np.ones(len(grid), dtype=bool)
        keep[rng.choice(np.arange(1, len(grid) - 1), size=gaps, replace=False)] = False
        grid = grid[keep]
    if duplicates:
        at = rng.choice(np.arange(1, len(grid)), size=duplicates, replace=False)
        at = np.sort(at)
        grid = np.insert(grid, at, grid[at - 1])
    n = len(grid)
    hours = (grid - grid[0]).astype(np.int64) / 3600.0

    def weather(std, hours_scale):
        """An AR(1) process with the given standard deviation and correlation time."""
        a = np.exp(-1.0 / (6 * hours_scale))
        noise = rng.normal(scale=std * np.sqrt(1 - a * a), size=n)
        out = np.empty(n)
        out[0] = rng.normal(scale=std)
        for k in range(0, n, 256):  # a recurrence, vectorised in short blocks
            block = noise[k : k + 256]
            powers = a ** np.arange(1, len(block) + 1)
            prev = out[k - 1] if k else out[0] / a
            out[k : k + len(block)] = powers * (prev + np.cumsum(block / powers))
        return out

    day = hours / 24.0
    T = (
        9.4
        - 8.5 * np.cos(2 * np.pi * (day - 15) / 365.25)
        - 3.5 * np.cos(2 * np.pi * (hours - 3) / 24.0)
        + weather(3.5, 48)
    )
    p = 989.0 + weather(8.0, 60)
    rh = np.clip(
        76 + 12 * np.cos(2 * np.pi * (hours - 3) / 24.0) + weather(10.0, 12), 13, 100
    )
    VPmax = 6.1078 * np.exp(17.27 * T / (T + 237.3))
    VPact = rh / 100 * VPmax
    VPdef = VPmax - VPact
    g = np.log(VPact / 6.1078)
    Tdew = 237.3 * g / (17.27 - g)
    sh = 622.0 * VPact / (p - 0.378 * VPact)
    H2OC = 1000.0 * VPact / p
    Tpot = (T + 273.15) * (1000.0 / p) ** 0.286
    rho = 100.0 * p / (287.05 * (T + 273.15)) * 1000.0
    wv = np.abs(2.2 + weather(1.6, 6))
    max_wv = wv * (1.4 + 0.3 * np.abs(rng.normal(size=n)))
    wd = np.mod(180 + weather(90.0, 8), 360.0)
    columns = [p, T, Tpot, Tdew, rh, VPmax, VPact, VPdef, sh, H2OC, rho, wv, max_wv, wd]
    values = np.round(np.stack(columns, axis=1), 2)
    vpdef = FEATURES.index("VPdef (mbar)")
    values[:, vpdef] = np.maximum(values[:, vpdef], 0)
    if swaps:
        for i in rng.choice(np.arange(1, n - 2), size=swaps, replace=False):
            grid[[i, i + 1]] = grid[[i + 1, i]]
            values[[i, i + 1]] = values[[i + 1, i]]
    if sentinels:
        rows_ = rng.choice(n, size=sentinels, replace=False)
        cols = rng.choice([FEATURES.index(c) for c in WIND_COLUMNS], size=sentinels)
        values[rows_, cols] = SENTINEL
    return grid, values


def write_csv(
    path, times: np.ndarray, values: np.ndarray, *, newline: str = "\n"
) -> Path:
    """Write rows in the exact format of ``jena_climate_2009_2016.csv`` (quoted header,
    dates ``%d.%m.%Y %H:%M:%S``, two decimals), atomically."""
    path = Path(path)
    iso = np.asarray(times).astype("M8[s]").astype(str)
    dates = [f"{s[8:10]}.{s[5:7]}.{s[0:4]} {s[11:19]}" for s in iso.tolist()]
    fmt = ",".join(["%s"] + ["%.2f"] * len(FEATURES))
    lines = [",".join(f'"{h}"' for h in HEADER)]
    lines += [fmt % (d, *v) for d, v in zip(dates, np.asarray(values).tolist())]
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8", newline="") as f:
            f.write(newline.join(lines) + newline)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path
