"""rcutil.plotting: the same figure gives the same SVG bytes, saved or shown inline in a
chapter (no date, stable clip-path ids)."""

import matplotlib

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
