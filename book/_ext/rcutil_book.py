"""Sphinx extension of the book: a light MathJax served from the site, icons as a font,
scripts deferred and each loaded once, a description per page, and launch buttons that
open the published notebooks. Website tooling only: it never imports ``rcutil`` or
torch.

MathJax 3 is served from the site itself instead of a CDN: the pages then typeset their
equations without any network, which is what a reader who opens the built site offline,
and the browser test of the site, need. MathJax's files come from the
``django-static-mathjax`` wheel (plain MathJax 3.2.2, no dependencies). Instead of a
combined bundle (``tex-svg.js``, 2 MB), a page loads only the components the book uses
(:data:`MATHJAX_COMPONENTS`: TeX input with the AMS macros, HTML-CSS output with its web
fonts, lazy typesetting of equations off screen, and hidden MathML for screen readers),
about a third of the bytes. The theme's icons come from Font Awesome's web fonts, which
the theme ships, through ``_static/rcutil.css``, instead of its 1.5 MB JavaScript.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

#: The script the pages load, relative to ``_static``: MathJax's loader, which then
#: loads the components below from the same folder.
MATHJAX_PATH = "mathjax/startup.js"
#: The MathJax components the book's equations need (TeX macros of base and AMS).
MATHJAX_COMPONENTS = [
    "core",
    "input/tex-base",
    "[tex]/ams",
    "[tex]/noundefined",
    "output/chtml",
    "ui/lazy",
    "a11y/assistive-mml",
]
#: The files of those components, relative to MathJax's ``es5`` folder.
MATHJAX_FILES = [
    "startup.js",
    "core.js",
    "input/tex-base.js",
    "input/tex/extensions/ams.js",
    "input/tex/extensions/noundefined.js",
    "output/chtml.js",
    "output/chtml/fonts/tex.js",
    "output/chtml/fonts/woff-v2",
    "ui/lazy.js",
    "a11y/assistive-mml.js",
]


def mathjax_es5_dir() -> Path:
    import mathjax  # the django-static-mathjax wheel

    path = Path(mathjax.__file__).parent / "static" / "mathjax" / "es5"
    missing = [f for f in MATHJAX_FILES if not (path / f).exists()]
    if missing:
        raise FileNotFoundError(
            f"MathJax's {missing} are not in {path}: reinstall django-static-mathjax"
        )
    return path


#: The book's stylesheet, which names every icon the pages show by its code point.
STYLESHEET = Path(__file__).resolve().parents[1] / "_static" / "rcutil.css"
#: Font Awesome's fonts (in the theme) and the subsets the pages load, in ``_static``.
ICON_FONTS = {
    "fa-solid-900.ttf": "icons/fa-solid.woff",
    "fa-brands-400.ttf": "icons/fa-brands.woff",
}


def icon_code_points(css: str) -> list[int]:
    """The code points of the icons that ``rcutil.css`` draws (``content:
    "\\f104"``)."""
    return sorted(
        {int(h, 16) for h in re.findall(r'content:\s*"\\([0-9a-f]{4})"', css)}
    )


def _icon_fonts(staging: Path) -> None:
    """Font Awesome's two fonts cut to the icons the pages show: a few kB instead of
    275 kB that every page would load first."""
    from fontTools import subset  # a dependency of matplotlib
    import pydata_sphinx_theme

    fonts = (
        Path(pydata_sphinx_theme.__file__).parent
        / "theme"
        / "pydata_sphinx_theme"
        / "static"
        / "vendor"
        / "fontawesome"
        / "webfonts"
    )
    points = icon_code_points(STYLESHEET.read_text())
    for name, target in ICON_FONTS.items():
        if not (fonts / name).exists():
            raise FileNotFoundError(
                f"Font Awesome's {name} is not in {fonts}: reinstall "
                f"pydata-sphinx-theme"
            )
        options = subset.Options()
        options.flavor = "woff"
        font = subset.load_font(str(fonts / name), options)
        subsetter = subset.Subsetter(options)
        subsetter.populate(unicodes=points)
        subsetter.subset(font)
        (staging / target).parent.mkdir(parents=True, exist_ok=True)
        subset.save_font(font, str(staging / target), options)


def _stage(app) -> None:
    """Copy the MathJax components, and the icon fonts cut to the book's icons, into a
    folder the build adds to its static files."""
    src = mathjax_es5_dir()
    staging = Path(app.outdir).parent / "mathjax_static"
    dest = staging / "mathjax"
    if not all((dest / f).exists() for f in MATHJAX_FILES):
        shutil.rmtree(staging, ignore_errors=True)
        for f in MATHJAX_FILES:
            (dest / f).parent.mkdir(parents=True, exist_ok=True)
            if (src / f).is_dir():
                shutil.copytree(src / f, dest / f)
            else:
                shutil.copy2(src / f, dest / f)
    _icon_fonts(staging)
    app.config.html_static_path.append(str(staging))
    config = app.config.mathjax3_config = app.config.mathjax3_config or {}
    config.setdefault("loader", {})["load"] = MATHJAX_COMPONENTS
    config.setdefault("tex", {})["packages"] = {"[+]": ["ams", "noundefined"]}


def _configure(app, config) -> None:
    config.mathjax_path = MATHJAX_PATH


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
#: build defers them (deferred scripts still run in the order of the page).
SEARCH_SCRIPTS = re.compile(
    r'<script src="([^"]*(?:searchtools|language_data|searchindex)\.js)"></script>'
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
    (the icons come from web fonts; the script cost each page 1.4 MB), and the search
    scripts are deferred, so that the page renders before they load."""
    if exception is not None or app.builder.format != "html":
        return
    out = Path(app.outdir)
    target = out / "_static" / "scripts" / "fontawesome.js"
    if target.exists():
        target.write_text(FONT_AWESOME_STUB)
    for page in out.rglob("*.html"):
        html = page.read_text(encoding="utf-8")
        lighter = SEARCH_SCRIPTS.sub(r'<script defer src="\1"></script>', html)
        if lighter != html:
            page.write_text(lighter, encoding="utf-8")


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
            parent.replace(
                text, [p for p in parts if not (isinstance(p, nodes.Text) and not p)]
            )


def setup(app):
    app.connect("config-inited", _configure)
    app.connect("doctree-resolved", _keep_numbers_whole)
    app.connect("builder-inited", _stage)
    # before the theme handlers: emit_firstresult stops at the first handler that
    # returns a template
    app.connect("html-page-context", _dedupe_scripts, priority=100)
    # after every handler that adds scripts (MathJax's runs at the default priority,
    # 500)
    app.connect("html-page-context", _lighter_scripts, priority=900)
    app.connect("html-page-context", _describe_page)
    app.connect("build-finished", _lighter_template)
    app.add_css_file("rcutil.css")
    # after sphinx-book-theme's add_launch_buttons (priority 501)
    app.connect("html-page-context", _launch_notebooks, priority=510)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
