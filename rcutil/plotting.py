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


def page_width(fig):
    """``fig`` at most :data:`PAGE_WIDTH` inches wide, its height kept."""
    width, height = fig.get_size_inches()
    if width > PAGE_WIDTH:
        fig.set_size_inches(PAGE_WIDTH, height)
    return fig


def _svg(fig) -> str:
    from IPython.core.pylabtools import print_figure

    return print_figure(
        page_width(fig), "svg", bbox_inches="tight", metadata=SVG_METADATA
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
    line alone.
    """
    if spread not in ("se", "sd"):
        raise ValueError(f"spread must be 'se' or 'sd', got {spread!r}")
    runs = np.asarray(runs, dtype=float)
    if runs.ndim == 1:
        runs = runs[None, :]
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
    return path
