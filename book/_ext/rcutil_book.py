"""Sphinx extension of the book: math typeset at build time (:mod:`rcutil_math`), icons
from a font cut to the glyphs the pages draw, scripts deferred and each loaded once, a
description per page, launch buttons and a download button that give the chapter as a
ready-to-run notebook, and boxes that show when they scroll sideways. Website tooling
only: it never imports ``rcutil`` or torch.

The theme's icons come from Font Awesome's web fonts, which the theme ships, instead of
its 1.5 MB JavaScript; the build cuts the fonts to the glyphs the pages use (the icons
named in the pages and every icon that the theme's style sheets draw, such as the
admonitions' lightbulb) and removes the theme's own ``@font-face`` rules, so that no
page loads the complete fonts.
"""

from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import rcutil_math  # noqa: E402  (beside this file)

ROOT = Path(__file__).resolve().parents[2]
#: Font Awesome's fonts (in the theme) and the subsets the pages load, in ``_static``.
ICON_FONTS = {
    "fa-solid-900.ttf": "icons/fa-solid.woff",
    "fa-brands-400.ttf": "icons/fa-brands.woff",
}
#: ``.fa-name:before{content:"\f002"}``: the rules of Font Awesome's style sheet that
#: name an icon's glyph (the theme bundles that sheet in its own).
FA_CLASS_RULE = re.compile(
    r'((?:\.fa-[\w-]+::?before\s*,?\s*)+)\{\s*content:\s*"(\\[0-9a-fA-F]{1,6}|[^"])"\s*;?\s*\}'
)
#: A glyph in a ``content`` or a ``--pst-icon-*`` property: an escape or the character.
_GLYPH = r'"(\\[0-9a-fA-F]{4,6}|[\ue000-\uf8ff])"'


def _code_point(value: str) -> int:
    return int(value[1:], 16) if value.startswith("\\") else ord(value)


def icon_code_points(css: list[str], pages: list[str]) -> list[int]:
    """The glyphs that a page can draw from the icon fonts: the icons that the pages
    name by class (``fa-rocket``) and every glyph that the style sheets put in a
    ``content`` or an icon variable outside Font Awesome's list of classes (the
    admonitions' icons, the theme's chevrons)."""
    by_class: dict[str, int] = {}
    drawn: set[int] = set()
    for sheet in css:
        for m in FA_CLASS_RULE.finditer(sheet):
            for name in re.findall(r"\.(fa-[\w-]+)", m[1]):
                by_class[name] = _code_point(m[2])
        rest = FA_CLASS_RULE.sub("", sheet)
        for v in re.findall(rf"(?:content|--pst-icon-[\w-]+)\s*:\s*{_GLYPH}", rest):
            drawn.add(_code_point(v))
    for page in pages:
        for classes in re.findall(r'class="([^"]*)"', page):
            drawn.update(by_class[c] for c in classes.split() if c in by_class)
    return sorted(p for p in drawn if 0xE000 <= p <= 0xF8FF)


def _theme_fonts() -> Path:
    import pydata_sphinx_theme

    return (
        Path(pydata_sphinx_theme.__file__).parent
        / "theme"
        / "pydata_sphinx_theme"
        / "static"
        / "vendor"
        / "fontawesome"
        / "webfonts"
    )


#: The theme's ``@font-face`` rules of Font Awesome (the complete fonts).
THEME_FONT_FACE = re.compile(r"@font-face\s*\{[^}]*Font Awesome[^}]*\}")


def _icon_fonts(out: Path) -> None:
    """Font Awesome's fonts cut to the glyphs the site draws (a few kB instead of 275
    kB), the theme's rules that load the complete fonts removed, and those fonts left
    out of the site."""
    from fontTools import subset  # a dependency of matplotlib

    static = out / "_static"
    sheets = sorted(static.rglob("*.css"))
    css = [p.read_text(encoding="utf-8", errors="replace") for p in sheets]
    pages = [
        p.read_text(encoding="utf-8", errors="replace")
        for p in out.rglob("*.html")
        if "_static" not in p.parts
    ]
    points = icon_code_points(css, pages)
    fonts = _theme_fonts()
    for name, target in ICON_FONTS.items():
        if not (fonts / name).exists():
            raise FileNotFoundError(
                f"Font Awesome's {name} is not in {fonts}: reinstall "
                f"pydata-sphinx-theme"
            )
        options = subset.Options()
        options.flavor = "woff"
        options.ignore_missing_unicodes = True
        font = subset.load_font(str(fonts / name), options)
        subsetter = subset.Subsetter(options)
        subsetter.populate(unicodes=points)
        subsetter.subset(font)
        (static / target).parent.mkdir(parents=True, exist_ok=True)
        subset.save_font(font, str(static / target), options)
    keep = set(points)
    for path, text in zip(sheets, css):
        if path.name == "rcutil.css":
            continue
        # no complete fonts, and no rule for an icon that no page draws (the theme
        # bundles Font Awesome's 2,000 of them in a style sheet every page waits for)
        lighter = THEME_FONT_FACE.sub("", text)
        lighter = FA_CLASS_RULE.sub(
            lambda m: m[0] if _code_point(m[2]) in keep else "", lighter
        )
        if lighter != text:
            path.write_text(lighter, encoding="utf-8")
    shutil.rmtree(static / "vendor" / "fontawesome" / "webfonts", ignore_errors=True)


def _stage(app) -> None:
    """MathJax's fonts into a folder that the build adds to its static files."""
    app.config.html_static_path.append(str(rcutil_math.stage(app)))


def _dedupe_scripts(app, pagename, templatename, context, doctree) -> None:
    """Drop repeated ``<script>`` entries (sphinx-thebe registers its inline config
    twice under Jupyter Book, and the second ``const THEBE_JS_URL`` is a JavaScript
    error)."""
    seen, unique = set(), []
    for script in context.get("script_files", []):
        key = (
            getattr(script, "filename", None) or "",  # inline scripts: None or ""
            repr(sorted(getattr(script, "attributes", {}).items())),
        )
        if key not in seen:
            seen.add(key)
            unique.append(script)
    # in place: later handlers (MathJax's) append to this same list through add_js_file
    context["script_files"][:] = unique


#: The branch that the publish workflow fills with the chapters as ``.ipynb`` notebooks.
NOTEBOOK_BRANCH = "notebooks"


def _launch_notebooks(app, pagename, templatename, context, doctree) -> None:
    """Point the Binder and Colab buttons at the published notebook of the page.

    Colab cannot open a MyST ``.md`` chapter, and Jupyter opens it as text unless
    jupytext is set up; the publish workflow writes every chapter as ``.ipynb`` to the
    branch :data:`NOTEBOOK_BRANCH`, and the buttons open that file.
    """
    branch = app.config.html_theme_options.get("repository_branch") or "main"
    for group in context.get("header_buttons", []):
        if group.get("label") != "launch-buttons":
            continue
        for button in group.get("buttons", []):
            url = button["url"]
            url = url.replace(f"/blob/{branch}/", f"/blob/{NOTEBOOK_BRANCH}/")
            url = url.replace(f"/{branch}?", f"/{NOTEBOOK_BRANCH}?")
            url = url.replace(
                "/./", "/"
            )  # path_to_book "." gives ".../tree/./book/..."
            button["url"] = re.sub(r"\.md(?=$|[&#])", ".ipynb", url)


#: The script whose global the pages' inline scripts use at once: loaded, not deferred.
IN_ORDER = ("documentation_options.js",)
#: Scripts of the theme's template (not in ``script_files``) that only search needs; the
#: build defers them on the search page (deferred scripts still run in the order of the
#: page) and leaves them out of every other (the search box sends its words to the
#: search page).
SEARCH_SCRIPTS = re.compile(
    r'<script src="([^"]*(?:searchtools|language_data|searchindex)\.js)"></script>'
)
SEARCH_PAGE = "search.html"
#: The one script that every page waits for (its inline scripts read its global).
OPTIONS_SCRIPT = re.compile(
    r'<script src="[^"]*documentation_options\.js[^"]*"></script>'
)


def _lighter_scripts(app, pagename, templatename, context, doctree) -> None:
    """Drop the theme's Font Awesome JavaScript (its icons come from web fonts, see
    ``_static/rcutil.css``) and defer every external script that no inline script needs
    at once, so that the page renders before they run."""
    scripts = context.get("script_files", [])
    scripts[:] = [
        s for s in scripts if "fontawesome" not in (getattr(s, "filename", "") or "")
    ]
    for script in scripts:
        name = getattr(script, "filename", "") or ""
        attributes = getattr(script, "attributes", None)
        if (
            name
            and attributes is not None
            and not name.endswith(IN_ORDER)
            and "async" not in attributes
        ):
            attributes.setdefault("defer", "defer")


#: what the theme's template still loads in place of Font Awesome's 1.4 MB script
FONT_AWESOME_STUB = (
    "/* The icons are drawn by Font Awesome's web fonts: see rcutil.css. */\n"
)


def _lighter_template(app, exception) -> None:
    """What the theme's template writes on every page, outside ``script_files`` (so
    :func:`_lighter_scripts` cannot reach it): the Font Awesome script becomes a comment
    (the icons come from web fonts; the script cost each page 1.4 MB), the search
    scripts are deferred on the search page and left out elsewhere, the short script of
    Sphinx's options is written into the page, figures get their size, and components
    a page does not use are left out of it, so that the page renders sooner."""
    if exception is not None or app.builder.format != "html":
        return
    out = Path(app.outdir)
    target = out / "_static" / "scripts" / "fontawesome.js"
    if target.exists():
        target.write_text(FONT_AWESOME_STUB)
    options_js = out / "_static" / "documentation_options.js"
    options = options_js.read_text(encoding="utf-8") if options_js.is_file() else ""
    if "</" in options:
        options = ""
    for page in out.rglob("*.html"):
        html = page.read_text(encoding="utf-8")
        lighter = SEARCH_SCRIPTS.sub(
            r'<script defer src="\1"></script>' if page.name == SEARCH_PAGE else "",
            html,
        )
        lighter = _figures_after_text(_sized_images(lighter, page))
        lighter = drop_unused_assets(lighter)
        if options:  # in the page: a request less before it shows
            lighter = OPTIONS_SCRIPT.sub(
                lambda m: f"<script>{options}</script>", lighter, count=1
            )
        if lighter != html:
            page.write_text(lighter, encoding="utf-8")
    _icon_fonts(out)
    _flat_theme_css(out)
    _tab_stops_when_seen(out)


def _download_notebooks(app, exception) -> None:
    """The download button's notebooks (``_sources/book/NAME.ipynb``): each chapter as
    it runs in Jupyter or Colab, with the install cell, plain Markdown, the glued
    numbers and the outputs of this build (``rcutil_notebooks.py``), in place of
    the MyST source the theme would offer. The publish workflow copies these files to
    the branch that the Binder and Colab buttons open."""
    import subprocess

    import rcutil_notebooks as convert  # beside this file
    from sphinx.util import logging

    if exception is not None or app.builder.format != "html":
        return
    sources = Path(app.outdir) / "_sources"
    stems = {p.stem for p in (sources / "book").glob("*.ipynb")}
    if not stems:
        return
    try:
        commit = convert.head_commit(ROOT)
    except (OSError, subprocess.CalledProcessError):
        commit = app.config.html_theme_options.get("repository_branch") or "main"
        logging.getLogger(__name__).info(
            f"not a git checkout: the notebooks install rcutil from branch {commit}"
        )
    cache = Path(app.env.mystnb_config.execution_cache_path)
    try:
        convert.write(sources, commit, cache, ROOT, only=stems)
    except convert.NotExecuted as exc:
        logging.getLogger(__name__).warning(str(exc), type="rcutil", subtype="notebook")


def _visit_table(self, node) -> None:
    """A table sits in a box that shows when it scrolls sideways (``rc-scroll``, around
    the theme's scrolling container; see ``_static/rcutil.js``)."""
    self.body.append('<div class="rc-scroll">')
    type(self).visit_table(self, node)


def _depart_table(self, node) -> None:
    type(self).depart_table(self, node)
    self.body.append("</div>\n")


_IMG = re.compile(r'<img\b[^>]*\bsrc="([^"]+\.svg)"[^>]*>')
_SVG_SIZE = re.compile(
    r'<svg\b[^>]*?\bwidth="([\d.]+)(pt|px)?"[^>]*?\bheight="([\d.]+)(pt|px)?"', re.S
)


def _sized_images(html: str, page: Path) -> str:
    """Every SVG figure with its width and height, so that the browser keeps its place
    before it loads (no layout shift); CSS scales it to the column."""

    def size(m: re.Match) -> str:
        tag = m.group(0)
        if re.search(r"\s(width|height)=", tag):
            return tag
        svg = (page.parent / m.group(1)).resolve()
        if not svg.is_file():
            return tag
        head = svg.read_text(encoding="utf-8", errors="replace")[:4000]
        found = _SVG_SIZE.search(head)
        if not found:
            return tag
        scale = 4 / 3 if found.group(2) in (None, "pt") else 1.0
        w, h = (round(float(found.group(i)) * scale) for i in (1, 3))
        return tag[:-1].rstrip("/ ") + f' width="{w}" height="{h}" />'

    return _IMG.sub(size, html)


_FIGURE = re.compile(r'<img\b(?![^>]*\bloading=)(?=[^>]*\bsrc="(?:\.\./)*_images/)')


def _figures_after_text(html: str) -> str:
    """Every figure of a chapter (``_images/``) loads after the text has shown
    (``loading="lazy"``): a chapter's figures, requested with its style sheets, delay
    its first paint on a slow network. ``rcutil.js`` loads them all once the page has
    loaded, so that a reader who scrolls or prints finds them there."""
    return _FIGURE.sub('<img loading="lazy"', html)


#: The theme's tab-stop pass (``addTabStopsToScrollableElements`` of
#: pydata-sphinx-theme), called when the page has loaded: it reads the width of every
#: code block and output of the page at once, which lays out the whole chapter,
#: sections off screen included (``content-visibility`` in ``rcutil.css``), in one long
#: task before the page answers. The build removes that call; ``rcutil.js`` sets the
#: same tab stops box by box, as each box comes near the window.
THEME_TAB_STOPS = re.compile(
    r',"complete"===document\.readyState\?(\w+)\(\):'
    r'window\.addEventListener\("load",\1\)'
)

#: What the build writes in place of that call.
TAB_STOPS_REMOVED = "/* tab stops: rcutil.js */"


def without_load_tab_stops(script: str) -> str | None:
    """The theme's script ``script`` without its load-time tab-stop pass
    (:data:`THEME_TAB_STOPS`) and without the name of its source map, which no longer
    matches; ``None`` when the script does not hold that pass as this build expects."""
    call = THEME_TAB_STOPS.search(script)
    body = call and re.search(
        rf"function {re.escape(call.group(1))}\(\)\{{(.{{0,300}})", script, re.S
    )
    if not (body and "scrollWidth" in body.group(1) and "tabIndex" in body.group(1)):
        return None
    script = script[: call.start()] + TAB_STOPS_REMOVED + script[call.end() :]
    return re.sub(r"\n//# sourceMappingURL=\S+\s*$", "\n", script)


def _tab_stops_when_seen(out: Path) -> None:
    """The built theme script without its load-time tab-stop pass; a warning when it
    no longer holds that pass as this build expects."""
    from sphinx.util import logging

    path = out / "_static" / "scripts" / "pydata-sphinx-theme.js"
    if not path.is_file():
        return
    script = path.read_text(encoding="utf-8")
    if TAB_STOPS_REMOVED in script:  # a build into the same folder
        return
    lighter = without_load_tab_stops(script)
    if lighter is None:
        logging.getLogger(__name__).warning(
            f"{path.name}: no load-time tab-stop pass found where "
            "rcutil_book.THEME_TAB_STOPS expects it; the theme's script changed: "
            "update THEME_TAB_STOPS, or pin the pydata-sphinx-theme that it matches",
            type="rcutil",
            subtype="theme",
        )
        return
    path.write_text(lighter, encoding="utf-8")


#: Assets that Jupyter Book adds to every page, each with what a page must hold to use
#: it; a page without that loads none of them (fewer requests before it shows).
UNUSED_ASSETS = {
    # sphinx-design: its components carry classes sd-...
    r'class="(?:[^"]*\s)?sd-': [
        r'\s*<link[^>]*sphinx-design\.min\.css[^>]*>',
        r'\s*<script[^>]*design-tabs\.js[^>]*></script>',
    ],
    # sphinx-togglebutton: elements of class toggle, dropdown admonitions
    r'class="(?:[^"]*\s)?toggle(?:\s[^"]*)?"|admonition dropdown|dropdown admonition': [
        r'\s*<link[^>]*togglebutton\.css[^>]*>',
        r'\s*<script[^>]*togglebutton\.js[^>]*></script>',
        r"\s*<script>let toggle\w+ = [^<]*</script>",
        r"\s*<script>var togglebuttonSelector = [^<]*</script>",
    ],
    # sphinx-thebe: a live-code button
    r'class="(?:[^"]*\s)?thebe-launch-button': [
        r'\s*<link[^>]*sphinx-thebe\.css[^>]*>',
        r'\s*<script[^>]*sphinx-thebe\.js[^>]*></script>',
        r"\s*<script>const THEBE_JS_URL = [^<]*</script>",
        r'\s*<script type="text/x-thebe-config">.*?</script>',
    ],
}


def drop_unused_assets(html: str) -> str:
    """``html`` without the scripts and style sheets of components it does not use."""
    body = html[html.find("<body") :]
    for used, assets in UNUSED_ASSETS.items():
        if not re.search(used, body):
            for asset in assets:
                html = re.sub(asset, "", html, flags=re.S)
    return html


def _flat_theme_css(out: Path) -> None:
    """The theme's first style sheet imports Sphinx's ``basic.css``, which a browser
    fetches only once it has that sheet: the sheet holds it instead (one request less
    before a page shows)."""
    theme = out / "_static" / "styles" / "theme.css"
    basic = out / "_static" / "basic.css"
    if not (theme.is_file() and basic.is_file()):
        return
    text = theme.read_text(encoding="utf-8")
    if '@import "../basic.css";' not in text:
        return
    css = re.sub(
        r"url\((['\"]?)(?![a-z]+:|/)", r"url(\1../", basic.read_text(encoding="utf-8")
    )
    theme.write_text(text.replace('@import "../basic.css";', css), encoding="utf-8")


_SPACES = re.compile(r"\s+")


def describe(doctree, limit: int = 155) -> str:
    """A page's description for search engines: its first paragraph of prose, as plain
    text, cut at a word boundary before ``limit`` characters."""
    from docutils import nodes

    for para in doctree.findall(nodes.paragraph):
        if any(
            isinstance(
                a,
                (
                    nodes.admonition,
                    nodes.sidebar,
                    nodes.topic,
                    nodes.table,
                    nodes.caption,
                ),
            )
            for a in _ancestors(para)
        ):
            continue
        text = _SPACES.sub(" ", para.astext()).strip()
        if len(text) < 40:
            continue
        if len(text) > limit:
            text = text[:limit].rsplit(" ", 1)[0].rstrip(",;:") + "…"
        return text
    return ""


def _ancestors(node):
    while node.parent is not None:
        node = node.parent
        yield node


def _describe_page(app, pagename, templatename, context, doctree) -> None:
    """A ``<meta name="description">`` for every page, from its first paragraph (or, for
    a page without one, from the book's title)."""
    from html import escape

    text = describe(doctree) if doctree is not None else ""
    text = text or (
        f"{context.get('title', pagename)}: a page of the executable book "
        f"{app.config.project}."
    )
    context["metatags"] = (
        context.get("metatags", "")
        + f'\n<meta name="description" content="{escape(text, quote=True)}" />'
    )


#: A number with a sign, an exponent or a ± in it: each is a place where a browser would
#: break the line, leaving "3.78e-" on one line and "03" on the next.
_NUMBER = r"[-−]?\d[\d,]*(?:\.\d+)?(?:[eE][-+−]?\d+)?"
NUMBER = re.compile(rf"(?<![\w.]){_NUMBER}(?:\s?±\s?{_NUMBER})?(?![\w])")


def _keep_numbers_whole(app, doctree, docname) -> None:
    """Wrap every number that holds a break opportunity (a sign, an exponent, a ±) in
    ``<span class="nowrap">``, in prose, tables and captions (never in code or math)."""
    from docutils import nodes

    skip = (
        nodes.literal,
        nodes.literal_block,
        nodes.math,
        nodes.math_block,
        nodes.raw,
        nodes.reference,
    )
    for text in list(doctree.findall(nodes.Text)):
        parent = text.parent
        if (
            parent is None
            or isinstance(parent, skip)
            or any(isinstance(a, skip) for a in _ancestors(parent))
        ):
            continue
        source = str(text)
        parts, last = [], 0
        for m in NUMBER.finditer(source):
            if not re.search(r"[-−eE±]", m.group()):
                continue
            parts += [
                nodes.Text(source[last : m.start()]),
                nodes.inline(m.group(), m.group(), classes=["nowrap"]),
            ]
            last = m.end()
        if parts:
            parts.append(nodes.Text(source[last:]))
            _replace(
                parent,
                text,
                [
                    p
                    for p in parts
                    if not (isinstance(p, nodes.Text) and not p.astext())
                ],
            )


def _replace(parent, child, new: list) -> None:
    """Put the nodes ``new`` in place of ``child`` in ``parent``, found by identity:
    docutils finds a child by equality, and a ``Text`` node equals every other ``Text``
    of the same string (two full stops of one paragraph), so its own ``replace`` and
    ``remove`` can act on the wrong one."""
    i = next(k for k, c in enumerate(parent.children) if c is child)
    for node in new:
        node.parent = parent
    parent.children[i : i + 1] = new


#: Punctuation that follows a formula and must not start the next line.
_TRAILING = re.compile(r"^[,.;:!?)\]\u2019\u201d]+")


def _tie_punctuation(app, doctree, docname) -> None:
    """A formula and the punctuation right after it (``$\\beta$,``) in one
    ``<span class="rc-tie">`` that does not break: a browser would otherwise start a
    line with the comma."""
    from docutils import nodes

    for math in list(doctree.findall(nodes.math)):
        parent = math.parent
        i = parent.index(math)
        following = parent[i + 1] if i + 1 < len(parent) else None
        if not isinstance(following, nodes.Text):
            continue
        m = _TRAILING.match(str(following))
        if not m:
            continue
        tie = nodes.inline("", "", classes=["rc-tie"])
        parent.replace(math, tie)
        tie += math
        tie += nodes.Text(m.group())
        rest = str(following)[m.end() :]
        _replace(parent, following, [nodes.Text(rest)] if rest else [])


def _visit_hidden_input(self, node) -> None:
    """A hidden cell's toggle as myst-nb writes it, named by its visible text ("Show
    code cell source") rather than by an aria-label that says something else."""
    from myst_nb.sphinx_ import visit_HideCellInput

    start = len(self.body)
    visit_HideCellInput(self, node)
    self.body[start:] = [
        part.replace(' aria-label="Toggle hidden content"', "")
        for part in self.body[start:]
    ]


def setup(app):
    from docutils import nodes
    from myst_nb.sphinx_ import HideCodeCellNode, depart_HideCellInput

    rcutil_math.setup(app)
    app.connect("doctree-resolved", _keep_numbers_whole)
    app.connect("doctree-resolved", _tie_punctuation)
    app.connect("builder-inited", _stage)
    app.add_node(nodes.table, override=True, html=(_visit_table, _depart_table))
    app.add_node(
        HideCodeCellNode,
        override=True,
        html=(_visit_hidden_input, depart_HideCellInput),
    )
    # before the theme handlers: emit_firstresult stops at the first handler that
    # returns a template
    app.connect("html-page-context", _dedupe_scripts, priority=100)
    # after every handler that adds scripts
    app.connect("html-page-context", _lighter_scripts, priority=900)
    app.connect("html-page-context", _describe_page)
    app.connect("build-finished", _lighter_template)
    app.connect("build-finished", _download_notebooks)
    app.add_css_file("rcutil.css")
    app.add_js_file("rcutil.js", defer="defer")
    # after sphinx-book-theme's add_launch_buttons (priority 501)
    app.connect("html-page-context", _launch_notebooks, priority=510)
    return {"parallel_read_safe": True, "parallel_write_safe": False}
