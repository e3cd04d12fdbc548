"""Sphinx extension of the book: MathJax served from the site, each script once, and launch
buttons that open the published notebooks. Website tooling only: it never imports ``rcutil``
or torch.

MathJax 3 is served from the site itself instead of a CDN: the pages then typeset their
equations without any network, which is what a reader who opens the built site offline, and
the browser test of the site, need. MathJax's files come
from the ``django-static-mathjax`` wheel (plain MathJax 3.2.2, no dependencies); the SVG
output is used because it needs no web fonts.
"""
from __future__ import annotations

import re
import shutil
from pathlib import Path

#: The bundle the pages load, relative to ``_static``.
MATHJAX_PATH = "mathjax/tex-svg.js"


def mathjax_es5_dir() -> Path:
    import mathjax  # the django-static-mathjax wheel

    path = Path(mathjax.__file__).parent / "static" / "mathjax" / "es5"
    if not (path / "tex-svg.js").is_file():
        raise FileNotFoundError(f"MathJax's tex-svg.js is not in {path}: reinstall django-static-mathjax")
    return path


def _stage(app) -> None:
    src = mathjax_es5_dir()
    staging = Path(app.outdir).parent / "mathjax_static"
    dest = staging / "mathjax"
    if not (dest / "tex-svg.js").is_file():
        shutil.rmtree(staging, ignore_errors=True)
        dest.mkdir(parents=True)
        shutil.copy2(src / "tex-svg.js", dest / "tex-svg.js")
        for sub in ("a11y", "input", "ui", "adaptors", "sre"):
            if (src / sub).is_dir():
                shutil.copytree(src / sub, dest / sub)
        shutil.copytree(src / "output" / "svg", dest / "output" / "svg")
    app.config.html_static_path.append(str(staging))


def _configure(app, config) -> None:
    config.mathjax_path = MATHJAX_PATH


def _dedupe_scripts(app, pagename, templatename, context, doctree) -> None:
    """Drop repeated ``<script>`` entries (sphinx-thebe registers its inline config twice
    under Jupyter Book, and the second ``const THEBE_JS_URL`` is a JavaScript error)."""
    seen, unique = set(), []
    for script in context.get("script_files", []):
        key = (getattr(script, "filename", None) or "",  # inline scripts: None or ""
               repr(sorted(getattr(script, "attributes", {}).items())))
        if key not in seen:
            seen.add(key)
            unique.append(script)
    # in place: later handlers (MathJax's) append to this same list through add_js_file
    context["script_files"][:] = unique


#: The branch that the publish workflow fills with the chapters as ``.ipynb`` notebooks.
NOTEBOOK_BRANCH = "notebooks"


def _launch_notebooks(app, pagename, templatename, context, doctree) -> None:
    """Point the Binder and Colab buttons at the published notebook of the page.

    Colab cannot open a MyST ``.md`` chapter, and Jupyter opens it as text unless jupytext is
    set up; the publish workflow writes every chapter as ``.ipynb`` to the branch
    :data:`NOTEBOOK_BRANCH`, and the buttons open that file.
    """
    branch = app.config.html_theme_options.get("repository_branch") or "main"
    for group in context.get("header_buttons", []):
        if group.get("label") != "launch-buttons":
            continue
        for button in group.get("buttons", []):
            url = button["url"]
            url = url.replace(f"/blob/{branch}/", f"/blob/{NOTEBOOK_BRANCH}/")
            url = url.replace(f"/{branch}?", f"/{NOTEBOOK_BRANCH}?")
            url = url.replace("/./", "/")  # path_to_book "." gives ".../tree/./book/..."
            button["url"] = re.sub(r"\.md(?=$|[&#])", ".ipynb", url)


def setup(app):
    # chapter titles with math appear in every page's sidebar, so MathJax must load on every
    # page, not only on those whose body has equations (genindex, search, bibliography, ...)
    app.set_html_assets_policy("always")
    app.connect("config-inited", _configure)
    app.connect("builder-inited", _stage)
    # before the theme handlers: emit_firstresult stops at the first handler that returns a template
    app.connect("html-page-context", _dedupe_scripts, priority=100)
    # after sphinx-book-theme's add_launch_buttons (priority 501)
    app.connect("html-page-context", _launch_notebooks, priority=510)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
