"""Write a synthetic, full-size Jena Climate file and time reading it.

    python benchmarks/synthetic_jena.py --out /tmp/jena-data
    RCUTIL_DATA_DIR=/tmp/jena-data python -m rcutil jena --profile book --out out

The file has the exact format and size of ``jena_climate_2009_2016.csv`` (quoted header,
``%d.%m.%Y %H:%M:%S`` dates, two decimals, 420,551 rows from 01.01.2009 00:10) and
physically consistent values (:func:`synthetic_series`: yearly and daily temperature
cycles, pressure and humidity, the derived vapour pressures, dew point, specific
humidity, potential temperature and density, wind), with the kinds of imperfection the
real file has: a few hundred missing ten-minute steps, two repeated timestamps, one pair
of rows out of order, and a few ``-9999`` wind speeds. It lets the ``book`` profile run,
and be timed, on a machine without the real file; its numbers are not the book's. The
script writes ``<out>/jena_climate/jena_climate_2009_2016.csv``, checks it as a download
is checked and records its sha256 beside it (``.sha256``, as the cache does after a
download), and, when ``--fixture`` names the 154-row excerpt, copies it beside, so that
``--out`` can serve as the whole data folder of the Jena chapter.

The series and the file format are those the tests write their Jena files with
(``tests/synthetic_jena.py``).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path

from rcutil import threads

threads.single_threaded_blas()  # the book's thread policy, before numpy loads

from rcutil import data, jena_data  # noqa: E402
from rcutil.jena_data import N_ROWS  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from synthetic_jena import synthetic_series, write_csv  # noqa: E402


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out", type=Path, required=True, help="data folder to write into"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--fixture",
        type=Path,
        default=None,
        help="the 154-row excerpt, copied beside the synthetic file",
    )
    parser.add_argument(
        "--repeats", type=int, default=3, help="timed reads (best kept)"
    )
    args = parser.parse_args(argv)
    path = args.out / jena_data.FULL_FILE
    start = time.perf_counter()
    # 420,768 ten-minute steps in 2009-2016: 219 missing, 2 repeated, as many rows as
    # the real file
    times, values = synthetic_series(
        N_ROWS, seed=args.seed, gaps=219, duplicates=2, swaps=1, sentinels=3
    )
    write_csv(path, times, values)
    print(
        f"wrote {path} ({path.stat().st_size / 2**20:.1f} MiB, {len(times):,} rows) "
        f"in {time.perf_counter() - start:.1f} s"
    )
    if args.fixture is not None:
        dest = args.out / jena_data.FIXTURE_FILE
        shutil.copyfile(args.fixture, dest)
        print(f"copied {args.fixture} to {dest}")
    best = float("inf")
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        table = jena_data.read_csv(path)
        cleaned, report = jena_data.clean(table)
        best = min(best, time.perf_counter() - t0)
    print(
        f"read and checked (header, fields, dates, numbers, physical ranges), then "
        f"cleaned: {best:.2f} s (best of {args.repeats})"
    )
    print(f"cleaning report: {report}")
    jena_data.check_structure(path)  # what a download is checked by, then
    record = path.with_name(path.name + ".sha256")
    record.write_text(f"{data.sha256sum(path)}  {path.name}\n")
    print(f"recorded its sha256 in {record}: later runs check that, not the structure")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
