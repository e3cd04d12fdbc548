"""rcutil.plotting: the same figure gives the same SVG bytes, saved or shown inline in a
chapter (no date, stable clip-path ids)."""

import matplotlib
import numpy as np
import pytest

from rcutil import plotting


def _figure():
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    ax.plot([1, 2, 3], [1, 4, 2], label="a")
    ax.fill_between([1, 2, 3], [0, 1, 1], [2, 3, 3])  # clipped: carries a clip-path id
    ax.legend()
    return fig


def test_the_same_figure_gives_the_same_svg_bytes(tmp_path):
    matplotlib.use("Agg")
    a = plotting.save(_figure(), tmp_path / "a.svg").read_bytes()
    b = plotting.save(_figure(), tmp_path / "b.svg").read_bytes()
    assert b"clip-path" in a and b"dc:date" not in a
    assert a == b


def test_figures_rendered_inline_in_a_chapter_are_reproducible():
    from IPython.core.interactiveshell import InteractiveShell

    matplotlib.use("Agg")
    shell = InteractiveShell.instance()
    try:
        with matplotlib.rc_context():
            plotting.setup()
            render = shell.display_formatter.formatters["image/svg+xml"]
            a, b = render(_figure()), render(_figure())
    finally:
        InteractiveShell.clear_instance()
    assert "clip-path" in a and "dc:date" not in a
    assert a == b


def _band_edges(ax):
    (poly,) = ax.collections
    y = poly.get_paths()[0].vertices[:, 1]
    return y.min(), y.max()


def test_a_band_is_one_standard_error_of_the_mean_or_one_deviation():
    import matplotlib.pyplot as plt

    matplotlib.use("Agg")
    runs = np.array([[1.0], [2.0], [3.0], [6.0]])  # four seeds at one x
    sd = runs.std(ddof=1)
    for spread, width in (("se", sd / 2), ("sd", sd)):
        fig, ax = plt.subplots()
        line = plotting.band(ax, [0.0], runs, color="k", spread=spread)
        assert line.get_ydata()[0] == 3.0
        assert np.allclose(_band_edges(ax), (3.0 - width, 3.0 + width))
        plt.close(fig)
    fig, ax = plt.subplots()
    logs = np.log10([[1.0], [100.0]])
    plotting.band(ax, [0.0], 10**logs, color="k", log=True)
    half = logs.std(ddof=1) / np.sqrt(2)
    assert np.allclose(_band_edges(ax), (10 ** (1 - half), 10 ** (1 + half)))
    assert ax.lines[0].get_ydata()[0] == 10.0  # the geometric mean
    plt.close(fig)


@pytest.mark.parametrize("n", [1, 2, 399, 400, 401, 1200, 100_000])
def test_thin_keeps_at_most_the_page_s_points_with_both_ends(n):
    keep = plotting.thin(n)
    assert len(keep) <= plotting.MAX_POINTS
    assert keep[0] == 0 and keep[-1] == n - 1
    assert np.all(np.diff(keep) > 0)
    if n <= plotting.MAX_POINTS:
        assert np.array_equal(keep, np.arange(n))


@pytest.mark.parametrize("log_x", [False, True])
def test_a_thinned_curve_keeps_its_shape_on_a_linear_and_a_log_axis(log_x):
    """A loss curve of 5,000 steps drawn through the kept points departs from the full
    curve by under 1 % anywhere (as the axis shows it: in log x on a log axis)."""
    t = np.arange(1, 5001, dtype=float)
    loss = 1e-3 + np.exp(-t / 40) + 0.1 * np.exp(-t / 2000)
    keep = plotting.thin(len(t))
    x = np.log(t) if log_x else t
    drawn = np.interp(x, x[keep], loss[keep])
    assert np.max(np.abs(drawn / loss - 1)) < 0.01
    # evenly spaced points alone miss the early fall on a log axis
    even = np.linspace(0, len(t) - 1, plotting.MAX_POINTS).round().astype(int)
    if log_x:
        assert np.max(np.abs(np.interp(x, x[even], loss[even]) / loss - 1)) > 0.01


def test_a_long_band_is_drawn_through_the_thinned_points():
    import matplotlib.pyplot as plt

    matplotlib.use("Agg")
    rng = np.random.default_rng(0)
    runs = 1 + rng.random((3, 1200))
    fig, ax = plt.subplots()
    line = plotting.band(ax, np.arange(1200), runs, color="k")
    keep = plotting.thin(1200)
    assert np.array_equal(line.get_xdata(), keep)
    assert np.allclose(line.get_ydata(), runs.mean(axis=0)[keep])
    (poly,) = ax.collections
    assert len(poly.get_paths()[0].vertices) <= 2 * plotting.MAX_POINTS + 3
    plt.close(fig)


def test_compact_rounds_path_coordinates_to_a_hundredth_of_a_point():
    import re

    import matplotlib.pyplot as plt

    matplotlib.use("Agg")
    fig, ax = plt.subplots()
    ax.plot(np.random.default_rng(0).standard_normal(300).cumsum())  # no smooth run
    from io import StringIO

    buffer = StringIO()
    fig.savefig(buffer, format="svg")
    plt.close(fig)
    full = buffer.getvalue()
    small = plotting.compact(full)
    assert len(small) < len(full)

    def numbers(svg):
        paths = re.findall(r' d="([^"]*)"', svg)
        return [float(x) for d in paths for x in re.findall(r"-?\d+\.?\d*", d)]

    before, after = numbers(full), numbers(small)
    assert len(before) == len(after)
    assert np.max(np.abs(np.subtract(before, after))) < 0.01
    assert not re.search(r' d="[^"]*\.\d{3}', small)
    # outside path data (sizes, text positions) nothing changes
    strip = re.compile(r' d="[^"]*"')
    assert strip.sub("", small) == strip.sub("", full)


def test_one_seed_draws_no_band_and_a_wrong_spread_is_named():
    import matplotlib.pyplot as plt

    matplotlib.use("Agg")
    fig, ax = plt.subplots()
    plotting.band(ax, [0, 1], [1.0, 2.0], color="k")
    assert not ax.collections and len(ax.lines) == 1
    with pytest.raises(ValueError, match="spread must be 'se' or 'sd'"):
        plotting.band(ax, [0, 1], [1.0, 2.0], color="k", spread="ci")
    plt.close(fig)


def test_a_figure_shown_in_a_page_is_at_most_the_page_width():
    import matplotlib.pyplot as plt

    matplotlib.use("Agg")
    wide, _ = plt.subplots(figsize=(9, 3.4))
    narrow, _ = plt.subplots(figsize=(4, 3))
    try:
        assert tuple(plotting.page_width(wide).get_size_inches()) == (
            plotting.PAGE_WIDTH,
            3.4,
        )
        assert tuple(plotting.page_width(narrow).get_size_inches()) == (4, 3)
    finally:
        plt.close(wide)
        plt.close(narrow)
