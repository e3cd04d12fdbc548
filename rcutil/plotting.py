"""One matplotlib style for the whole book: colour-blind-safe, readable on a phone,
SVG.

Chapters call :func:`setup` once, then draw with the usual matplotlib calls. Colours are
the Okabe & Ito (2008) palette, which stays distinguishable under the common
colour-vision deficiencies; line plots are rendered as SVG in the pages.

Readable on a phone: a page scales a figure to its column, 358 CSS px on a 390 px
phone. Tick labels are 12 pt and a figure shown in a page is at most :data:`PAGE_WIDTH`
inches wide (a wider one is narrowed to it when shown, its height kept), so that a tick
label is at least 9 CSS px there (12 pt x 358 px / 469 pt, the saved width of a 6.4 in
figure, is 9.2 px; the site test measures it).

Figures are reproducible: the same commit gives byte-identical SVG files, in the pages
and from the CLI. Matplotlib's random clip-path ids are replaced by ids hashed with a
fixed salt (``svg.hashsalt``) and the date metadata is left out (:data:`SVG_METADATA`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

import matplotlib as mpl
import numpy as np

#: Okabe & Ito colour-blind-safe palette (black last, for reference lines).
OKABE_ITO = [
    "#0072B2",
    "#E69F00",
    "#009E73",
    "#D55E00",
    "#CC79A7",
    "#56B4E9",
    "#F0E442",
    "#000000",
]

STYLE = {
    "axes.prop_cycle": mpl.cycler(color=OKABE_ITO),
    "figure.figsize": (6.4, 3.8),
    "figure.dpi": 110,
    "savefig.dpi": 150,
    "font.size": 12,
    "axes.titlesize": 12,
    "axes.labelsize": 12,
    "legend.fontsize": 11,
    "legend.frameon": False,
    "xtick.labelsize": 12,
    "ytick.labelsize": 12,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "lines.linewidth": 1.8,
    "svg.fonttype": "none",
    # reproducible SVG: element ids hashed with a fixed salt instead of a random one
    "svg.hashsalt": "rcutil",
}
#: Metadata of every saved figure: no creation date, so the same figure gives the same
#: bytes.
SVG_METADATA = {"Date": None}
#: The widest figure a page shows, in inches (the default width).
PAGE_WIDTH = STYLE["figure.figsize"][0]
#: Points a band draws at most: a page-wide figure is about 600 device px on a desktop,
#: so more points draw nothing new and only weigh on the page (:func:`thin`).
MAX_POINTS = 200


def page_width(fig):
    """``fig`` at most :data:`PAGE_WIDTH` inches wide, its height kept."""
    width, height = fig.get_size_inches()
    if width > PAGE_WIDTH:
        fig.set_size_inches(PAGE_WIDTH, height)
    return fig


_PATH_DATA = re.compile(r' d="[^"]*"')
_LONG_DECIMAL = re.compile(r"(\d\.\d\d)\d+")


def compact(svg: str) -> str:
    """``svg`` with the coordinates of its paths rounded to 1/100 pt (matplotlib writes
    six decimals): the same drawing to well under a pixel; a figure of long curves
    weighs a quarter less, a third less compressed."""
    return _PATH_DATA.sub(lambda m: _LONG_DECIMAL.sub(r"\1", m.group(0)), svg)


def _svg(fig) -> str:
    from IPython.core.pylabtools import print_figure

    return compact(
        print_figure(page_width(fig), "svg", bbox_inches="tight", metadata=SVG_METADATA)
    )


def setup(svg: bool = True) -> None:
    """Apply the book's style; inside IPython also render figures as SVG, at most
    :data:`PAGE_WIDTH` wide."""
    mpl.rcParams.update(STYLE)
    if svg:
        try:
            from IPython import get_ipython

            shell = get_ipython()
            if shell is not None:
                from matplotlib.figure import Figure
                from matplotlib_inline.backend_inline import set_matplotlib_formats

                set_matplotlib_formats("svg", metadata=SVG_METADATA)
                formatter = shell.display_formatter.formatters["image/svg+xml"]
                formatter.for_type(Figure, _svg)
        except ImportError:  # plain Python: nothing to configure
            pass


def colors(k: int) -> list[str]:
    """``k`` colours of the palette, in order (cycled if ``k`` exceeds it)."""
    return [OKABE_ITO[i % len(OKABE_ITO)] for i in range(k)]


def thin(n: int, most: int = MAX_POINTS) -> np.ndarray:
    """The indices of at most ``most`` of ``n`` points along a curve, first and last
    included: half spread evenly over the indices, half evenly over their logarithm, so
    that a curve keeps its shape on a linear and on a log x-axis alike."""
    if n <= most:
        return np.arange(n)
    even = np.linspace(0, n - 1, most // 2)
    geometric = np.geomspace(1, n, most - most // 2) - 1
    return np.unique(np.concatenate([even, geometric]).round().astype(int))


def band(
    ax,
    x: Sequence[float],
    runs,
    *,
    color: str,
    label: str | None = None,
    log: bool = False,
    spread: str = "se",
    alpha: float = 0.25,
    **line,
):
    """Plot the mean of ``runs`` over its rows (seeds, or random draws) against ``x``,
    with a band of one standard error of that mean (``spread="se"``) or one standard
    deviation of the rows (``spread="sd"``) above and below; ``line`` goes to the line
    (``ls``, ``marker``, ...).

    With ``log=True`` mean and spread are taken of ``log10`` values (a geometric mean
    and band), which is what a log-scale axis shows honestly. A single row draws the
    line alone. Past :data:`MAX_POINTS` values of ``x``, line and band go through the
    points :func:`thin` keeps.
    """
    if spread not in ("se", "sd"):
        raise ValueError(f"spread must be 'se' or 'sd', got {spread!r}")
    runs = np.asarray(runs, dtype=float)
    if runs.ndim == 1:
        runs = runs[None, :]
    keep = thin(runs.shape[1])
    x, runs = np.asarray(x)[keep], runs[:, keep]
    vals = np.log10(runs) if log else runs
    mid = vals.mean(axis=0)
    (drawn,) = ax.plot(x, 10**mid if log else mid, color=color, label=label, **line)
    if len(vals) > 1:
        width = vals.std(axis=0, ddof=1)
        if spread == "se":
            width = width / np.sqrt(len(vals))
        lo, hi = mid - width, mid + width
        if log:
            lo, hi = 10**lo, 10**hi
        ax.fill_between(x, lo, hi, color=color, alpha=alpha, linewidth=0)
    return drawn


def save(fig, path) -> Path:
    """Save a figure for the CLI (SVG, vector, for line plots), without a date
    (reproducible).

    The book's style (with its fixed ``svg.hashsalt``) applies while saving, whether or
    not :func:`setup` was called.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    metadata = SVG_METADATA if path.suffix.lower() == ".svg" else None
    with mpl.rc_context({"svg.hashsalt": STYLE["svg.hashsalt"]}):
        fig.savefig(path, bbox_inches="tight", metadata=metadata)
    if metadata is not None:
        path.write_text(compact(path.read_text(encoding="utf-8")), encoding="utf-8")
    return path
