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
