"""The book's Sphinx extension is website tooling: loading it imports neither rcutil nor
torch."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_extension_loads_without_torch_or_rcutil():
    code = (
        "import sys; sys.path.insert(0, 'book/_ext'); import rcutil_book; "
        "assert callable(rcutil_book.setup); "
        "bad = [m for m in ('torch', 'rcutil') if m in sys.modules]; "
        "assert not bad, bad"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr


def _ext():
    sys.path.insert(0, str(ROOT / "book" / "_ext"))
    import rcutil_book
    import rcutil_math

    return rcutil_book, rcutil_math


def test_a_wide_inline_formula_breaks_after_its_relations_as_tex_does():
    _, m = _ext()
    assert m.break_points(r"a \le b + c = d") == [r"a \le{}", " b +{}", " c ={}", " d"]
    # never inside a group, parentheses, bars or \left ... \right; nor after a sign
    for whole in (
        r"\frac{a=b}{2}",
        r"f(a = b)",
        r"|a - b|",
        r"\|a - b\|",
        r"\left(a = b\right)",
        r"-a",
        r"a = -b",
    ):
        assert "".join(m.break_points(whole)).replace("{}", "") == whole
    assert len(m.break_points(r"\left(a = b\right)")) == 1
    assert m.break_points(r"a = -b") == ["a ={}", " -b"]
    # a piece still too wide may break inside parentheses, as TeX would
    assert m.break_points(r"f(a + b)", fences=False) == ["f(a +{}", " b)"]
    assert m.break_points(r"\left(a + b\right)", fences=False) == [
        r"\left(a + b\right)"
    ]


def test_the_typesetter_gives_mathjax_html_with_mathml_and_reports_tex_errors():
    _, m = _ext()
    typeset = m.Typesetter()
    try:
        f = typeset(r"x_1 \le \|A\|_2", display=False)
        assert f.html.startswith("<mjx-container") and "<math" in f.html
        assert 2 < f.width < 6 and f.height > 0
        wide = typeset(r"\sum_{i=1}^n x_i = y", display=True)
        assert 'display="true"' in wide.html
        with pytest.raises(m.TypesetError, match=r"\\undefinedmacro"):
            typeset(r"\undefinedmacro x", display=False)
        css = typeset.stylesheet()
        assert "MJX-TEX" in css and "font-display: swap" in css
        # no line moves when the fonts arrive: the zero-metrics font in the sheet,
        # and a fallback with the line metrics of MathJax's fonts
        assert "data:font/woff;base64," in css and "MJXZERO, MJXTEX, MJXFALLBACK" in css
    finally:
        typeset.close()


def test_a_display_is_wrapped_as_sphinx_wraps_it():
    from docutils import nodes

    _, m = _ext()
    one = nodes.math_block("a = b", "a = b", nowrap=False, number=None)
    assert m.display_tex(one) == "a = b"
    rows = nodes.math_block("", r"a \\ b", nowrap=False, number=None)
    assert m.display_tex(rows) == r"\begin{split}a \\ b\end{split}"
    two = nodes.math_block("", "a\n\nb", nowrap=False, number=None)
    assert m.display_tex(two) == r"\begin{aligned}a\\b\end{aligned}"


THEME_CSS = (
    '.fa-magnifying-glass:before,.fa-search:before{content:"\\f002"}'
    '.fa-rocket:before{content:"\\f135"}.fa-anchor:before{content:"\\f13d"}'
    ':root{--pst-icon-lightbulb:"\uf0eb";--pst-icon-admonition-tip:'
    "var(--pst-icon-lightbulb)}"
    '.onthispage:after{content:"\\f107";font-family:Font Awesome\\ 6 Free}'
)


def test_the_icon_font_holds_the_icons_pages_name_and_the_theme_draws():
    book, _ = _ext()
    pages = ['<i class="fa-solid fa-rocket"></i><span class="fa-search"></span>']
    points = book.icon_code_points([THEME_CSS], pages)
    assert points == sorted([0xF002, 0xF135, 0xF0EB, 0xF107])  # not the anchor
    assert 0xF13D not in book.icon_code_points([THEME_CSS], [])


def test_the_theme_font_faces_of_font_awesome_are_found():
    book, _ = _ext()
    css = (
        "@font-face{font-family:Font Awesome\\ 6 Free;src:url(x.woff2)}"
        "@font-face{font-family:Lato;src:url(l.woff2)}"
    )
    assert book.THEME_FONT_FACE.sub("", css) == (
        "@font-face{font-family:Lato;src:url(l.woff2)}"
    )


def test_an_svg_figure_gets_its_size_in_css_pixels(tmp_path):
    book, _ = _ext()
    (tmp_path / "_images").mkdir()
    (tmp_path / "_images" / "f.svg").write_text(
        '<svg xmlns="http://www.w3.org/2000/svg" width="360pt" height="180pt" '
        'viewBox="0 0 360 180"></svg>'
    )
    page = tmp_path / "book" / "p.html"
    html = '<p><img alt="a figure" src="../_images/f.svg" /></p>'
    assert 'width="480" height="240"' in book._sized_images(html, page)
    sized = '<img width="10" src="../_images/f.svg" />'
    assert book._sized_images(sized, page) == sized


def test_a_formula_keeps_the_punctuation_that_follows_it_on_its_line():
    from docutils import nodes

    book, _ = _ext()
    para = nodes.paragraph()
    para += nodes.Text("the larger ")
    para += nodes.math("", r"\beta")
    para += nodes.Text(", the faster")
    para += nodes.math("", "x")
    para += nodes.Text(" and more")
    doc = nodes.document(None, None)
    doc += para
    book._tie_punctuation(None, doc, "page")
    tie = para[1]
    assert "rc-tie" in tie["classes"] and tie.astext() == r"\beta,"
    assert para[2].astext() == " the faster"
    assert isinstance(para[3], nodes.math)  # no punctuation after it: left alone


def test_the_tie_takes_the_full_stop_after_its_formula_and_no_other():
    """Two equal text nodes in one paragraph (a full stop after a pasted number, one
    after a formula): the formula's own is tied, the other stays where it is."""
    from docutils import nodes

    book, _ = _ext()
    para = nodes.paragraph()
    para += nodes.inline("9e-06", "9e-06", classes=["pasted-text"])
    para += nodes.Text(".")
    para += nodes.Text("\n")
    para += nodes.Text("the constant ")
    para += nodes.math("", "C")
    para += nodes.Text(".")
    doc = nodes.document(None, None)
    doc += para
    book._tie_punctuation(None, doc, "page")
    assert para.astext() == "9e-06.\nthe constant C."
    assert para[1].astext() == "." and para[-1].astext() == "C."
    assert all(child.parent is para for child in para.children)


def test_a_number_is_kept_whole_in_its_own_text_node():
    """The same number in two text nodes of a paragraph: each is wrapped where it is."""
    from docutils import nodes

    book, _ = _ext()
    para = nodes.paragraph()
    para += nodes.Text("3e-07")
    para += nodes.math("", "x")
    para += nodes.Text("3e-07")
    doc = nodes.document(None, None)
    doc += para
    book._keep_numbers_whole(None, doc, "page")
    assert [type(c).__name__ for c in para.children] == ["inline", "math", "inline"]
    assert para.astext() == "3e-07x3e-07"


def test_a_figure_loads_after_the_text_and_other_images_as_before():
    book, _ = _ext()
    html = (
        '<img alt="a figure" src="../_images/f.svg" width="4" />'
        '<img alt="Binder logo" src="../_static/images/logo_binder.svg">'
        '<img loading="eager" src="../_images/g.svg">'
    )
    assert book._figures_after_text(html) == (
        '<img loading="lazy" alt="a figure" src="../_images/f.svg" width="4" />'
        '<img alt="Binder logo" src="../_static/images/logo_binder.svg">'
        '<img loading="eager" src="../_images/g.svg">'
    )


def _theme_script() -> str:
    import pydata_sphinx_theme

    root = Path(pydata_sphinx_theme.__file__).parent
    return (
        root
        / "theme"
        / "pydata_sphinx_theme"
        / "static"
        / "scripts"
        / "pydata-sphinx-theme.js"
    ).read_text(encoding="utf-8")


def test_the_theme_script_loses_its_load_time_tab_stop_pass_and_nothing_else(
    tmp_path,
):
    """The installed theme's script holds the pass where the build looks for it; the
    build removes that call only, and what remains is JavaScript that parses."""
    book, math = _ext()
    script = _theme_script()
    lighter = book.without_load_tab_stops(script)
    assert lighter is not None, "the theme's script changed: see THEME_TAB_STOPS"
    assert 'addEventListener("load"' in script
    assert 'addEventListener("load"' not in lighter
    assert "sourceMappingURL" not in lighter
    assert lighter.count("scrollWidth") == script.count("scrollWidth")
    assert len(script) - len(lighter) < 200
    path = tmp_path / "theme.js"
    path.write_text(lighter)
    check = subprocess.run(
        [str(math.node_executable()), "--check", str(path)], capture_output=True
    )
    assert check.returncode == 0, check.stderr


def test_a_load_listener_that_sets_no_tab_stops_is_left_alone():
    book, _ = _ext()
    other = (
        'function I(){document.title="x"}'
        ',"complete"===document.readyState?I():window.addEventListener("load",I)'
    )
    assert book.without_load_tab_stops(other) is None
    tab_stops = other.replace(
        'document.title="x"', "e.tabIndex=e.scrollWidth>e.clientWidth?0:-1"
    )
    assert book.without_load_tab_stops(tab_stops) == (
        "function I(){e.tabIndex=e.scrollWidth>e.clientWidth?0:-1}"
        + book.TAB_STOPS_REMOVED
    )
