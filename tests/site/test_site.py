"""The built website, as a reader's browser sees it: headless Chrome or Chromium over
every page.

Runs after ``jupyter-book build`` (the test command's last stage). The site in
``_build/html`` (or ``$RCUTIL_SITE_DIR``) is served on 127.0.0.1 and each page is
checked for: no console errors; math typeset when the book was built (MathJax's output
in the page, no typesetting script, no raw ``$$`` left); no TeX source (``\\to``,
``_{``, ``$``, ...) in the text outside typeset math and code, in the page or in its
title; printed outputs no wider than the column; images that load, with alt text that
says what they show (not a file path); internal links whose page and anchor exist;
numbered references (figures, equations, theorems) that resolve; figures that load
after the text and then, all of them, without the reader scrolling; code lines of at most
88 characters; no template or code text in the prose (``seed(s)``, ``{a/b}``, ``:
True``, a backticked constant name, an equation's label where its number belongs); a
description for search engines; icons drawn from the cut icon fonts only, each glyph in
them, and no request for Font Awesome's complete fonts; a download button whose notebook
installs the package in its first cell and carries the build's outputs. Each page is
loaded at 1366 px and again at 390 px (a phone): its cumulative layout shift, as Chrome
measures it, is at most :data:`MAX_CLS` at each width. At both widths and in print:
nothing wider than the page, and every equation, table or code block wider than its
column scrolls in a box that shows it does (a shadow at the edge beyond which there is
more) and is a tab stop (a keyboard can scroll it; in print nothing may be wider than
the column); at every width, no table cell squeezed to a
character or two per line, and every claim's verdict on screen; in print, every claim's
folded paper, rule and reason shown. On the phone, every figure's tick labels are at
least :data:`MIN_TICK_PX` CSS px. A screenshot of every page at 1366 and at 390 px goes
to ``_build/screenshots``. The browser and its driver are the ones :mod:`chrome` finds
(``tests/site/chrome.py``).
"""

from __future__ import annotations

import base64
import functools
import http.server
import json
import os
import re
import sys
import threading
import time
import urllib.parse
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[2]
SITE = Path(os.environ.get("RCUTIL_SITE_DIR", ROOT / "_build" / "html"))
SHOTS = ROOT / "_build" / "screenshots"
#: Pages also saved as printed on A4 (``<page>-A4.pdf`` beside the screenshots).
PRINTED = ("book/model.html", "book/jena.html", "book/report.html")


REDIRECT = re.compile(r'<meta http-equiv="Refresh" content="0; url=([^"]+)"', re.I)


def site_pages() -> list[str]:
    """Every content page of the site (redirect stubs such as index.html are tested
    apart)."""
    if not (SITE / "index.html").is_file():
        return []
    pages = []
    for p in sorted(SITE.rglob("*.html")):
        if "_static" in p.parts or "_sources" in p.parts:
            continue
        if REDIRECT.search(p.read_text(errors="replace")[:2000]):
            continue
        pages.append(str(p.relative_to(SITE)))
    return pages


PAGES = site_pages()


#: Fonts and figures arrive this many seconds late, as on a slow network, so that a
#: page that moves when they arrive is caught by the layout-shift check.
LATE = {".woff": 0.3, ".woff2": 0.3, ".svg": 0.3}


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def send_head(self):
        time.sleep(LATE.get(Path(urllib.parse.urlsplit(self.path).path).suffix, 0))
        return super().send_head()

    def log_message(self, *args):
        pass


class _QuietServer(http.server.ThreadingHTTPServer):
    def handle_error(self, request, client_address):
        """A page the browser leaves before a late font arrives closes the connection:
        not an error of the site."""
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


@pytest.fixture(scope="module")
def server():
    handler = functools.partial(_QuietHandler, directory=str(SITE))
    httpd = _QuietServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/"
    httpd.shutdown()


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    from chrome import BrowserNotFound, find_chrome  # tests/site/chrome.py
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    try:
        binary, chromedriver = find_chrome()
    except BrowserNotFound as exc:
        pytest.fail(str(exc), pytrace=False)
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-dev-shm-usage",
        "--window-size=1366,1600",
        f"--user-data-dir={tmp_path_factory.mktemp('chromium')}",
    ):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(chromedriver), options=options)
    driver.set_page_load_timeout(60)
    driver.set_script_timeout(60)
    yield driver
    driver.quit()


def test_site_was_built():
    assert (SITE / "index.html").is_file(), (
        f"no built site in {SITE}: run `make build-ci` first"
    )
    assert len(PAGES) >= 3, PAGES


def test_landing_page_redirects_to_the_intro(server, browser):
    browser.get(server + "index.html")
    browser.implicitly_wait(0)
    target = REDIRECT.search((SITE / "index.html").read_text()).group(1)
    assert (SITE / target).is_file(), target
    for _ in range(50):
        if browser.current_url.endswith(target):
            break
        browser.execute_async_script("setTimeout(arguments[0], 100)")
    assert browser.current_url.endswith(target), browser.current_url


#: At most this many bytes of script per page (the theme's and search's scripts).
SCRIPT_BYTES = 600_000
SCRIPT_SIZES = """
return performance.getEntriesByType('resource')
  .filter(r => r.initiatorType === 'script' || r.name.split('?')[0].endsWith('.js'))
  .map(r => [r.name.split('?')[0].split('/').pop(), r.decodedBodySize]);
"""


def test_a_page_loads_no_heavy_script(server, browser):
    """The pages load the theme's scripts, not Font Awesome's 1.4 MB of JavaScript nor
    MathJax (the math is typeset when the book is built)."""
    page = next((p for p in PAGES if p.endswith("model.html")), PAGES[0])
    browser.get(server + page)
    browser.execute_async_script(WAIT_FOR_PAGE)
    sizes = dict(browser.execute_script(SCRIPT_SIZES))
    typesetting = [n for n in sizes if "mathjax" in n.lower() or n.startswith("tex-")]
    assert not typesetting, f"{page} loads a typesetting script: {typesetting}"
    assert browser.execute_script("return typeof window.MathJax") == "undefined"
    assert sizes, "no script was measured"
    heavy = {name: size for name, size in sizes.items() if size > 400_000}
    assert not heavy, f"scripts over 400 kB: {heavy}"
    assert sum(sizes.values()) <= SCRIPT_BYTES, sizes


FIND_RESULTS = """
const done = arguments[arguments.length - 1];
const start = Date.now();
(function poll() {
  const hits = document.querySelectorAll('ul.search li');
  if (hits.length) done(hits.length);
  else if (Date.now() - start > 20000) done(0);
  else setTimeout(poll, 100);
})();
"""


def test_search_finds_a_word_of_the_book(server, browser):
    """The search page loads its index (its scripts are deferred) and lists pages."""
    browser.get_log("browser")
    browser.get(server + "search.html?q=residual")
    assert browser.execute_async_script(FIND_RESULTS) > 0, "search found nothing"
    errors = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    assert not errors, errors


WAIT_FOR_PAGE = """
const done = arguments[arguments.length - 1];
const loaded = document.readyState === 'complete' ? Promise.resolve()
  : new Promise(r => addEventListener('load', r, {once: true}));
// figures load after the text (loading="lazy"), then all of them once the page has
// loaded (rcutil.js): wait until every image has arrived or failed, up to 10 s
const images = () => new Promise(resolve => {
  const start = Date.now();
  (function poll() {
    if (Array.from(document.images).every(i => i.complete) || Date.now() - start > 10000)
      resolve();
    else setTimeout(poll, 50);
  })();
});
loaded.then(() => document.fonts.ready).then(images)
  .then(() => requestAnimationFrame(() => setTimeout(() => done(true), 100)))
  .catch(e => done('the page did not load: ' + e));
"""

#: Chrome's cumulative layout shift of a page while it loads, at most (Lighthouse's
#: "good" band ends at 0.1).
MAX_CLS = 0.1
#: Every shift while the page loads (none follows an input: the test only loads it).
LAYOUT_SHIFT = """
const done = arguments[arguments.length - 1];
const shifts = [];
new PerformanceObserver(list => {
  for (const e of list.getEntries()) {
    if (e.hadRecentInput) continue;
    shifts.push({value: e.value, what: (e.sources || []).map(s => s.node
      ? (s.node.nodeName + '.' + (s.node.className || '') + ' ' +
         (s.node.textContent || '').trim().slice(0, 40)) : '?')});
  }
}).observe({type: 'layout-shift', buffered: true});
setTimeout(() => done(shifts), 200);
"""


#: Up to this width a page is seen as on a phone: a viewport of exactly that many CSS
#: px, with scroll bars drawn over the content (Chrome's device emulation).
PHONE = 600


def resize(browser, width: int, media: str = "screen") -> None:
    """A viewport ``width`` CSS px wide: a phone's up to :data:`PHONE` px, else a
    desktop window's."""
    browser.execute_cdp_cmd("Emulation.setEmulatedMedia", {"media": media})
    if width <= PHONE and media == "screen":
        browser.execute_cdp_cmd(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": 844, "deviceScaleFactor": 1, "mobile": True},
        )
    else:
        browser.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
        browser.set_window_size(width, 1600)
        for _ in range(50):  # the window takes its size before a page is loaded in it
            if browser.execute_script("return window.outerWidth") == width:
                break
            time.sleep(0.02)


def load(browser, url: str, width: int) -> list[dict]:
    """Load ``url`` ``width`` px wide; the layout shifts while it loaded."""
    resize(browser, width)
    browser.get(url)
    state = browser.execute_async_script(WAIT_FOR_PAGE)
    assert state is True, f"{url}: {state}"
    return browser.execute_async_script(LAYOUT_SHIFT)


def print_a4(browser, path: Path) -> None:
    """The page as Chrome prints it on A4, saved to ``path`` (a PDF)."""
    from selenium.webdriver.common.print_page_options import PrintOptions

    a4 = PrintOptions()
    a4.page_width, a4.page_height = 21.0, 29.7
    path.write_bytes(base64.b64decode(browser.print_page(a4)))


def cls_of(shifts: list[dict]) -> float:
    return sum(s["value"] for s in shifts)


#: TeX source that a reader must never see as text: a command (``\\to``, ``\\infty``), a
#: braced sub- or superscript (``d_{QK}``), a dollar sign (unparsed inline math).
TEX_SOURCE = re.compile(r"\\[A-Za-z]+|[_^]\{|\$")
#: Where the text may hold TeX legitimately: code, scripts, and math that MathJax
#: typeset.
NOT_PROSE = "pre, code, kbd, samp, script, style, noscript, textarea, mjx-container"

PAGE_FACTS = """
const [texSource, notProse] = [new RegExp(arguments[0]), arguments[1]];
const rawTex = [];
const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
while (walker.nextNode()) {
  const node = walker.currentNode;
  if (!node.parentElement || node.parentElement.closest(notProse)) continue;
  if (texSource.test(node.textContent)) rawTex.push(node.textContent.replace(/\\s+/g, ' ').trim());
}
const text = (() => {
  const clone = document.querySelector('main, article, body').cloneNode(true);
  clone.querySelectorAll('pre, code, script, style, mjx-container').forEach(e => e.remove());
  return clone.textContent;
})();
return {
  mathSource: document.querySelectorAll('div.math').length,
  mathTypeset: document.querySelectorAll('div.math mjx-container').length,
  rawDisplayMath: text.includes('$$'),
  rawTex: rawTex,
  footer: Array.from(document.querySelectorAll('footer')).map(f => f.textContent).join(' ').replace(/\\s+/g, ' '),
  title: document.title,
  // printed outputs (stream and text) that do not fit the column; hidden ones measure 0
  wideOutputs: Array.from(document.querySelectorAll('.cell_output pre')).filter(
      p => p.scrollWidth > p.clientWidth + 1).map(
      p => `${p.scrollWidth} px > ${p.clientWidth} px: ${p.textContent.split('\\n').find(
        l => l.length > 60) || p.textContent.slice(0, 80)}`),
  images: Array.from(document.images).map(i => ({src: i.currentSrc || i.src, alt: i.alt,
      inArticle: !!i.closest('.bd-article'), ok: i.complete && i.naturalWidth > 0})),
  longCode: Array.from(document.querySelectorAll('.bd-article div.highlight pre')).flatMap(
      p => p.textContent.split('\\n').filter(l => l.length > 88)).map(l => l.slice(0, 100)),
  prose: (() => {
    const out = [];
    const w = document.createTreeWalker(document.querySelector('.bd-article') || document.body,
                                        NodeFilter.SHOW_TEXT);
    while (w.nextNode()) {
      const n = w.currentNode;
      if (n.parentElement && !n.parentElement.closest(notProse)) out.push(n.textContent);
    }
    return out.join(' ').replace(/\\s+/g, ' ');
  })(),
  constants: Array.from(document.querySelectorAll('.bd-article p code.literal, .bd-article li code.literal'))
      .map(c => c.textContent.trim())
      .filter(t => /^[A-Z][A-Z0-9_]{2,}$/.test(t) && !/^RCUTIL_/.test(t)),   // not a variable to set
  description: (document.querySelector('meta[name="description"]') || {}).content || '',
  links: Array.from(document.querySelectorAll('a[href]')).map(a => ({
      href: a.href, cls: a.className, text: a.textContent.trim()})),
  numrefs: Array.from(document.querySelectorAll('a.reference.internal')).filter(
      a => /^(Fig\\.|Figure|Table|Theorem|Lemma|Corollary|Assumption|Definition|Equation|\\()/
        .test(a.textContent.trim())
  ).map(a => ({href: a.href, text: a.textContent.trim()})),
};
"""


def test_tex_source_pattern():
    """The pattern of the raw-TeX check finds what a reader must not see, and only
    that."""
    for raw in (
        "Rank collapse as d_{QK} \\to \\infty, with",
        "\\sigma_{\\min}(Z)",
        "cost $5",
        "x^{2}",
    ):
        assert TEX_SOURCE.search(raw), raw
    for prose in (
        "Rank collapse as d_QK grows",
        "σ_min(Z) at β = 0.5",
        "Φ(θ_t) ≤ (1 − μα) Φ(θ_0)",
        "e^x",
    ):
        assert not TEX_SOURCE.search(prose), prose


def _target_exists(url: str, page_cache: dict) -> bool:
    parts = urllib.parse.urlsplit(url)
    path = urllib.parse.unquote(parts.path).lstrip("/") or "index.html"
    target = SITE / path
    if target.is_dir():
        target = target / "index.html"
    if not target.is_file():
        return False
    if not parts.fragment or target.suffix != ".html":
        return True
    if target not in page_cache:
        page_cache[target] = target.read_text(errors="replace")
    frag = urllib.parse.unquote(parts.fragment)
    return f'id="{frag}"' in page_cache[target] or f"id='{frag}'" in page_cache[target]


#: Template or code text that must not reach the prose: "seed(s)", "{0.0001/0.0003}",
#: "...: True", an equation's label where its number belongs ("eq. model-z").
TEMPLATE_TEXT = re.compile(
    r"\b\w+\(s\)|\{[^{}\s]*/[^{}\s]*\}|:\s(?:True|False)\b|"
    r"\beqs?\.\s+[a-z]+(?:-[a-z0-9]+)+\b"
)
#: An alt text that is a file name or path, not a description.
PATH_LIKE = re.compile(r"^\S*[/\\]\S*$|\.(svg|png|jpe?g|gif)$", re.I)

LAYOUT_FACTS = """
const print = arguments[0];
const done = arguments[arguments.length - 1];
const frame = () => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)));
const column = document.querySelector('.bd-article') || document.body;
const main = document.querySelector('.bd-main') || column;
// a box that shows it scrolls: a shadow (rcutil.css) drawn at one of its edges
const cued = wrap => ['::before', '::after'].some(p => {
  const s = getComputedStyle(wrap, p);
  return s.display !== 'none' && s.content !== 'none' && Number(s.opacity) > 0.5;
});
const name = el => {
  const m = el.closest('div.math');
  const eqno = m && m.querySelector('.eqno');
  const text = (el.textContent || '').trim().replace(/\\s+/g, ' ').slice(0, 60);
  return el.tagName.toLowerCase() + (eqno ? ' ' + eqno.textContent.trim() : '') + ': ' + text;
};
const cut = [], hidden = [];
// display equations, tables, code blocks, and inline formulas outside the others
const items = Array.from(column.querySelectorAll(
  'div.math, table, div.highlight, mjx-container')).filter(
  el => el.tagName !== 'MJX-CONTAINER' || !el.closest('div.math, table'));
for (const el of items) {
  if (!el.checkVisibility()) continue;             // folded away (a closed toggle)
  // a cell tagged full-width may use the margin beside the column
  const limit = (el.closest('[class*="full-width"]') ? main : column).getBoundingClientRect().right + 1;
  const wrap = el.matches('div.math') ? el.querySelector(':scope > .rc-scroll')
    : el.matches('div.highlight') ? el : el.closest('.rc-scroll');
  if (wrap && wrap.firstElementChild) {
    const box = wrap.firstElementChild;
    if (wrap.getBoundingClientRect().right > limit)
      cut.push('scroll box wider than the column: ' + name(el));
    if (box.scrollWidth > box.clientWidth + 1) {
      if (print) cut.push(name(el));
      else if (!cued(wrap) || box.tabIndex < 0) hidden.push([el, wrap, box]);
    }
  } else if (el.scrollWidth > el.clientWidth + 1 || el.getBoundingClientRect().right > limit) {
    cut.push(name(el));
  }
}
// a box is measured once it comes near the window: go to each box that shows no cue
// yet; a box that scrolls must also be a tab stop, so that a keyboard can scroll it
(async () => {
  const uncued = [], unreachable = [];
  for (const [el, wrap, box] of hidden) {
    wrap.scrollIntoView({block: 'center'});
    for (let i = 0; i < 30 && !(cued(wrap) && box.tabIndex >= 0); i++) await frame();
    const what = `${name(el)} (${box.scrollWidth} px in ${box.clientWidth} px)`;
    if (!cued(wrap)) uncued.push(what);
    else if (box.tabIndex < 0) unreachable.push(what);
  }
  window.scrollTo(0, 0);
  done({pageWidth: document.documentElement.scrollWidth, windowWidth: window.innerWidth,
        cut: cut, uncued: uncued, unreachable: unreachable});
})();
"""


RENDER_ALL = """
const done = arguments[arguments.length - 1];
if (!document.getElementById('rc-render-all')) {
  const style = document.createElement('style');
  style.id = 'rc-render-all';
  style.textContent = 'section { content-visibility: visible !important; }';
  document.head.append(style);
}
requestAnimationFrame(() => requestAnimationFrame(() => setTimeout(done, 150)));
"""


def layout(browser, width: int, page: str, media: str = "screen") -> dict:
    """Nothing wider than the page at ``width`` px; an equation, table or formula wider
    than its column scrolls in a box that shows it (on a screen) or is not there (in
    print)."""
    resize(browser, width, media)
    # every section laid out, as each is once a reader scrolls to it (off screen, the
    # browser skips them: content-visibility)
    browser.execute_async_script(RENDER_ALL)
    facts = browser.execute_async_script(LAYOUT_FACTS, media == "print")
    where = f"{page} at {width} px ({media})"
    assert facts["pageWidth"] <= facts["windowWidth"] + 1, (
        f"{where}: the page scrolls sideways ({facts['pageWidth']} px)"
    )
    assert not facts["cut"], f"{where}: wider than the column and cut: {facts['cut']}"
    assert not facts["uncued"], (
        f"{where}: wider than the column, with no sign that it scrolls: "
        f"{facts['uncued']}"
    )
    assert not facts["unreachable"], (
        f"{where}: scrolls sideways but is no tab stop (a keyboard cannot scroll it): "
        f"{facts['unreachable']}"
    )
    return facts


#: Table cells squeezed until their text wraps a character or two per line, and verdicts
#: of the claims (rcutil/report.py: render) that a reader cannot see without scrolling
#: sideways.
READING_FACTS = """
const out = {squeezed: [], hidden: []};
for (const cell of document.querySelectorAll('.bd-article td, .bd-article th')) {
  if (cell.offsetParent === null) continue;          // folded away
  const text = cell.textContent.replace(/\\s+/g, ' ').trim();
  const s = getComputedStyle(cell);
  const inner = cell.clientWidth - parseFloat(s.paddingLeft) - parseFloat(s.paddingRight);
  const perLine = inner / (0.55 * parseFloat(s.fontSize));  // characters a line holds
  if (text.length >= 4 && perLine < 3)
    out.squeezed.push(`${Math.round(inner)} px: ${text.slice(0, 40)}`);
}
const verdicts = '.rc-verdict strong, .rc-line > p > strong:first-child';
for (const v of document.querySelectorAll(verdicts)) {
  if (v.offsetParent === null) continue;
  const r = v.getBoundingClientRect();
  let seen = r.width > 0 && r.left >= -1 && r.right <= window.innerWidth + 1;
  for (let box = v.parentElement; box && seen; box = box.parentElement) {
    if (getComputedStyle(box).overflowX === 'visible') continue;
    const b = box.getBoundingClientRect();      // a box that scrolls or clips
    seen = r.left >= b.left - 1 && r.right <= b.right + 1;
  }
  if (!seen) out.hidden.push(v.textContent.trim());
}
return out;
"""


def reading(browser, where: str, verdicts: bool) -> dict:
    """No table cell squeezed to a character or two per line; with ``verdicts``, every
    claim's verdict on screen without scrolling sideways."""
    facts = browser.execute_script(READING_FACTS)
    assert not facts["squeezed"], (
        f"{where}: table cells squeezed to a character or two per line: "
        f"{facts['squeezed']}"
    )
    if verdicts:
        assert not facts["hidden"], (
            f"{where}: verdicts off-screen (the claim's card must fit the page): "
            f"{facts['hidden']}"
        )
    return facts


#: A page with the two faults the reading check must find: a column squeezed to a
#: letter per line, and a claim's card in a box that scrolls it out of sight on a phone.
FAULTY_PAGE = """<!doctype html><html><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1"></head><body>
<div class="bd-article">
<table style="width: 100%"><tr><td style="width: 99%">claim</td>
<td style="width: 1px; word-break: break-all">rule and reason: inconclusive</td></tr></table>
<div style="overflow-x: auto"><div style="width: 2400px; padding-left: 1800px">
<div class="rc-claim"><div class="rc-verdict"><p><strong>✓ reproduced</strong></p></div>
</div></div></div>
<div class="rc-line"><p><strong>✗ not reproduced</strong> · seen</p></div>
</div></body></html>"""


def test_the_reading_check_finds_a_squeezed_cell_and_a_hidden_verdict(
    browser, tmp_path
):
    page = tmp_path / "faulty.html"
    page.write_text(FAULTY_PAGE)
    browser.get(page.as_uri())
    browser.set_window_size(390, 1600)
    facts = browser.execute_script(READING_FACTS)
    assert [f.split(": ", 1)[1] for f in facts["squeezed"]] == [
        "rule and reason: inconclusive"
    ]
    assert facts["hidden"] == ["✓ reproduced"]
    with pytest.raises(AssertionError, match="squeezed"):
        reading(browser, "faulty.html", verdicts=True)
    fixed = FAULTY_PAGE.replace("width: 1px; word-break: break-all", "").replace(
        "width: 2400px; padding-left: 1800px", ""
    )
    page.write_text(fixed)
    browser.get(page.as_uri())
    assert reading(browser, "fixed.html", verdicts=True) == {
        "squeezed": [],
        "hidden": [],
    }
    browser.set_window_size(1280, 1600)


#: A page with two code blocks wider than a phone, one far below the window, and a
#: figure there that loads after the text; the site's style sheet, and its script
#: inlined in {script}.
SCROLL_PAGE = """<!doctype html><html><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="stylesheet" href="{css}"></head><body><div class="bd-article">
<div class="highlight"><pre>{line}</pre></div>
<div style="height: 6000px"></div>
<div class="highlight"><pre>{line}</pre></div>
<img loading="lazy" alt="a figure" src="{svg}" width="40" height="20">
</div><script>{script}</script></body></html>"""
TAB_STOPS = "return Array.from(document.querySelectorAll('pre'), p => p.tabIndex);"


def test_a_box_that_scrolls_must_show_it_and_take_the_keyboard(browser, tmp_path):
    """The layout check finds a code block that scrolls but is no tab stop; the page
    check finds a figure that never loads; the site's script fixes both, and at the
    first Tab makes every box that scrolls a tab stop, far from the window too."""
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.keys import Keys

    script = (ROOT / "book" / "_static" / "rcutil.js").read_text()
    tab_stop = "if (box.tabIndex !== stop) box.tabIndex = stop;"
    eager = 'img.loading = "eager";'
    first_tab = 'document.addEventListener("keydown", firstTab, true);'
    assert tab_stop in script and eager in script and first_tab in script
    svg = tmp_path / "f.svg"
    svg.write_text('<svg xmlns="http://www.w3.org/2000/svg" width="40" height="20"/>')
    page = tmp_path / "scroll.html"

    def open_page(script: str) -> dict:
        page.write_text(
            SCROLL_PAGE.format(
                css=(ROOT / "book" / "_static" / "rcutil.css").as_uri(),
                line="x = 1  # " + "a long comment " * 12,
                svg=svg.as_uri(),
                script=script,
            )
        )
        resize(browser, 390)
        browser.get(page.as_uri())
        assert browser.execute_async_script(WAIT_FOR_PAGE) is True
        return browser.execute_script(PAGE_FACTS, TEX_SOURCE.pattern, NOT_PROSE)

    try:
        facts = open_page(script)
        assert [i["ok"] for i in facts["images"]] == [True]
        assert browser.execute_script(TAB_STOPS) == [0, -1]  # the far one: not yet
        ActionChains(browser).send_keys(Keys.TAB).perform()
        assert browser.execute_script(TAB_STOPS) == [0, 0]
        assert layout(browser, 390, "scroll.html")["unreachable"] == []
        open_page(script.replace(first_tab, ""))
        ActionChains(browser).send_keys(Keys.TAB).perform()
        assert browser.execute_script(TAB_STOPS) == [0, -1]
        with pytest.raises(AssertionError, match="no tab stop"):
            open_page(script.replace(tab_stop, ""))
            layout(browser, 390, "scroll.html")
        # without the eager load (the loop left in place: a script that still runs)
        facts = open_page(script.replace(eager, "void img;"))
        assert [i["ok"] for i in facts["images"]] == [False]
    finally:
        resize(browser, 1366)


#: Claims (rcutil/report.py: render) whose folded paper, rule and reason a reader does
#: not see: on paper, where nothing can be unfolded, every card shows them.
FOLDED_FACTS = """
const out = [];
for (const d of document.querySelectorAll('.rc-claim details')) {
  const body = d.querySelector(':scope > :not(summary)');
  const shown = body && body.checkVisibility() && body.getBoundingClientRect().height > 0;
  if (!shown) {
    const what = d.closest('.rc-claim').querySelector('.rc-what strong');
    out.push(what ? what.textContent.trim() : '?');
  }
}
return out;
"""


def unfolded_in_print(browser, where: str) -> None:
    """In print, every claim's card shows its folded paper, rule and reason."""
    folded = browser.execute_script(FOLDED_FACTS)
    assert not folded, (
        f"{where}: claims printed without their paper, rule and reason: {folded}"
    )


#: A claim's card as the report renders it, with the site's stylesheet or without it.
CARD_PAGE = """<!doctype html><html><head><meta charset="utf-8">{style}</head><body>
<div class="bd-article"><div class="rc-claim rc-reproduced">
<div class="rc-verdict"><p><strong>✓ reproduced</strong></p></div>
<div class="rc-what"><p><strong>The claim</strong></p></div>
<details class="sd-dropdown"><summary>The paper, the rule and the reason</summary>
<div class="sd-summary-content"><p>The rule. every step contracts</p></div></details>
</div></div></body></html>"""


def test_the_print_check_finds_a_claim_printed_folded(browser, tmp_path):
    css = ROOT / "book" / "_static" / "rcutil.css"
    bare = tmp_path / "bare.html"
    bare.write_text(CARD_PAGE.format(style=""))
    styled = tmp_path / "styled.html"
    styled.write_text(
        CARD_PAGE.format(style=f'<link rel="stylesheet" href="{css.as_uri()}">')
    )
    try:
        for page, folded in ((bare, ["The claim"]), (styled, [])):
            browser.get(page.as_uri())
            browser.execute_cdp_cmd("Emulation.setEmulatedMedia", {"media": "print"})
            assert browser.execute_script(FOLDED_FACTS) == folded, page.name
        with pytest.raises(AssertionError, match="without their paper"):
            browser.get(bare.as_uri())
            unfolded_in_print(browser, "bare.html")
        browser.execute_cdp_cmd("Emulation.setEmulatedMedia", {"media": "screen"})
        browser.get(styled.as_uri())  # on a screen the card stays folded
        assert browser.execute_script(FOLDED_FACTS) == ["The claim"]
    finally:
        browser.execute_cdp_cmd("Emulation.setEmulatedMedia", {"media": "screen"})


#: Font Awesome's complete fonts (the theme's), which no page may load.
FULL_ICON_FONT = re.compile(r"fa-(solid-900|regular-400|brands-400)|/webfonts/")
#: The cut fonts of the site (rcutil.css) by the family that draws from them.
ICON_SUBSETS = {
    "Font Awesome 6 Free": "_static/icons/fa-solid.woff",
    "Font Awesome 6 Brands": "_static/icons/fa-brands.woff",
}
ICONS_DRAWN = """
const drawn = [];
for (const el of document.querySelectorAll('body *')) {
  if (el.tagName.startsWith('MJX-')) continue;
  for (const pseudo of ['::before', '::after']) {
    const s = getComputedStyle(el, pseudo);
    if (!/Font Awesome/.test(s.fontFamily) || !s.content.startsWith('"')) continue;
    for (const ch of JSON.parse(s.content)) {
      const cp = ch.codePointAt(0);
      if (cp >= 0xe000 && cp <= 0xf8ff)
        drawn.push({cp: cp, family: s.fontFamily, el: el.tagName + '.' + el.className});
    }
  }
}
return {drawn: drawn,
        requests: performance.getEntriesByType('resource').map(r => r.name)};
"""


@functools.cache
def icon_glyphs(family: str) -> frozenset[int]:
    from fontTools.ttLib import TTFont

    path = SITE / ICON_SUBSETS[family]
    assert path.is_file(), f"no cut icon font {path}"
    return frozenset(TTFont(str(path)).getBestCmap())


def missing_icons(drawn: list[dict]) -> list[str]:
    """The glyphs a page draws from an icon font that its cut font lacks."""
    out = []
    for d in drawn:
        family = next((f for f in ICON_SUBSETS if f in d["family"]), None)
        if family is None or d["cp"] not in icon_glyphs(family):
            out.append(f"U+{d['cp']:04X} ({d['family']}) on {d['el']}")
    return sorted(set(out))


#: A phone's figure: tick labels at least this many CSS px.
MIN_TICK_PX = 9.0
FIGURE_WIDTHS = """
return Array.from(document.querySelectorAll('.bd-article img')).filter(
  i => i.offsetParent !== null && /\\.svg$/.test(new URL(i.currentSrc || i.src).pathname)).map(
  i => ({src: new URL(i.currentSrc || i.src).pathname, width: i.getBoundingClientRect().width}));
"""


@functools.cache
def tick_size(svg: Path) -> tuple[float, float]:
    """``(width of the viewBox, smallest tick label's font size)`` of a matplotlib SVG,
    in its own units (a tick label's size is its largest text: a superscript of
    ``10^{-2}`` is smaller by design)."""
    root = ET.parse(svg).getroot()
    width = float(root.get("viewBox").split()[2])
    sizes = []
    for g in root.iter("{http://www.w3.org/2000/svg}g"):
        if re.fullmatch(r"[xy]tick_\d+", g.get("id") or ""):
            found = [
                float(m)
                for t in g.iter("{http://www.w3.org/2000/svg}text")
                for m in re.findall(r"font-size:\s*([\d.]+)px", t.get("style") or "")
            ]
            if found:
                sizes.append(max(found))
    return width, min(sizes, default=float("inf"))


def small_ticks(figures: list[dict]) -> list[str]:
    out = []
    for f in figures:
        width, size = tick_size(SITE / urllib.parse.unquote(f["src"]).lstrip("/"))
        px = size * f["width"] / width
        if px < MIN_TICK_PX:
            out.append(f"{Path(f['src']).name}: {px:.1f} px")
    return out


#: MyST that plain Jupyter shows raw: a role, a directive, a label, a labelled display.
MYST = re.compile(
    r"\{[\w:-]+\}`|```\{|:::\{|^\([\w-]+\)=\s*$|\$\$[ \t]*\([\w-]+\)", re.M
)


def notebook_problems(path: Path) -> list[str]:
    """What keeps the downloaded notebook ``path`` from running as it is in Jupyter or
    Colab: a first cell that does not install the book's package, Markdown in MyST, no
    outputs of the build."""
    if not path.is_file():
        return [f"no notebook {path.name} in the site"]
    nb = json.loads(path.read_text())
    cells = nb.get("cells", [])
    if not cells:
        return ["no cell"]
    problems = []
    first = "".join(cells[0].get("source", ""))
    if cells[0].get("cell_type") != "code" or not re.search(
        r"pip.{0,40}install", first, re.S
    ):
        problems.append("its first cell does not install the package")
    elif not re.search(r"rcutil @ git\+\S+@[0-9a-z]", first):
        problems.append("its first cell does not name rcutil's commit")
    code = [c for c in cells if c.get("cell_type") == "code"][1:]
    if code and not any(c.get("outputs") for c in code):
        problems.append("no cell carries the build's outputs")
    myst = [
        m
        for c in cells
        if c.get("cell_type") == "markdown"
        for m in MYST.findall("".join(c.get("source", "")))
    ]
    if myst:
        problems.append(f"MyST left in its Markdown: {myst[:3]}")
    return problems


def test_the_notebook_check_finds_a_notebook_that_would_not_run(tmp_path):
    def write(cells):
        path = tmp_path / "nb.ipynb"
        path.write_text(json.dumps({"cells": cells}))
        return notebook_problems(path)

    install = {
        "cell_type": "code",
        "source": 'need = {"rcutil": "rcutil @ git+https://x/y@0123abc"}\n'
        'subprocess.check_call([sys.executable, "-m", "pip", "install", *need])',
        "outputs": [],
    }
    code = {"cell_type": "code", "source": "1 + 1", "outputs": [{"data": {}}]}
    prose = {"cell_type": "markdown", "source": "See (3) and Fig. 2."}
    assert write([install, prose, code]) == []
    assert write([prose, install, code]) == [
        "its first cell does not install the package"
    ]
    assert write([install, prose, {**code, "outputs": []}]) == [
        "no cell carries the build's outputs"
    ]
    myst = {"cell_type": "markdown", "source": "see {eq}`model-z`"}
    assert "MyST left" in write([install, myst, code])[0]


def test_the_layout_check_finds_what_is_cut_off():
    assert TEMPLATE_TEXT.search("2 seed(s)") and TEMPLATE_TEXT.search(
        "{0.0001/0.0003/0.001}"
    )
    assert TEMPLATE_TEXT.search("holds: True") and TEMPLATE_TEXT.search("(eq. model-z)")
    assert not TEMPLATE_TEXT.search(
        "the seeds (three of them) at eq. (4): true to within 1e-3"
    )
    assert PATH_LIKE.search("_images/abc123.svg") and PATH_LIKE.search("fig.png")
    assert not PATH_LIKE.search("Loss against GD step for each residual strength")


@pytest.mark.parametrize("page", PAGES)
def test_page(page, server, browser):
    browser.get_log("browser")  # drop what earlier pages left
    shifts = load(browser, server + page, 1366)
    assert cls_of(shifts) <= MAX_CLS, (
        f"{page} at 1366 px: layout shift {cls_of(shifts):.3f} > {MAX_CLS}: {shifts}"
    )
    facts = browser.execute_script(PAGE_FACTS, TEX_SOURCE.pattern, NOT_PROSE)
    icons = browser.execute_script(ICONS_DRAWN)

    SHOTS.mkdir(parents=True, exist_ok=True)
    shot = page.replace("/", "__").removesuffix(".html")
    browser.save_screenshot(str(SHOTS / f"{shot}.png"))

    errors = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    assert not errors, f"{page}: console errors {errors}"

    if facts["mathSource"]:
        assert facts["mathTypeset"] == facts["mathSource"], (
            f"{page}: {facts['mathSource'] - facts['mathTypeset']} display equations "
            "were not typeset when the book was built"
        )
    assert not facts["rawDisplayMath"], f"{page}: raw $$ left in the text"
    raw_tex = [t for t in facts["rawTex"] if TEX_SOURCE.search(t)]
    assert not raw_tex, (
        f"{page}: TeX source shown as text (a title with math used as link text? "
        f"give the reference plain link text): {raw_tex}"
    )
    assert not TEX_SOURCE.search(facts["title"]), (
        f"{page}: TeX source in the page title {facts['title']!r}"
    )
    for licence in (
        "BSD 3-Clause",
        "CC BY-SA 4.0",
    ):  # LICENSE and LICENSE-text.md, stated on every page
        assert licence in facts["footer"], (
            f"{page}: the footer does not state the licence {licence}"
        )
    assert not facts["wideOutputs"], (
        f"{page}: printed lines wider than the column (print a "
        f"table or shorter lines): {facts['wideOutputs']}"
    )

    full_fonts = [r for r in icons["requests"] if FULL_ICON_FONT.search(r)]
    assert not full_fonts, f"{page} loads Font Awesome's complete fonts: {full_fonts}"
    missing = missing_icons(icons["drawn"])
    assert not missing, f"{page} draws icons that its cut icon font lacks: {missing}"

    broken_images = [i["src"] for i in facts["images"] if not i["ok"]]
    assert not broken_images, f"{page}: images that do not load: {broken_images}"
    bad_alt = [
        i["src"]
        for i in facts["images"]
        if i["inArticle"]
        and (not i["alt"].strip() or PATH_LIKE.search(i["alt"].strip()))
    ]
    assert not bad_alt, (
        f"{page}: figures whose alt text is empty or a file path: {bad_alt}"
    )
    assert not facts["longCode"], (
        f"{page}: code lines over 88 characters: {facts['longCode'][:3]}"
    )
    template = sorted(set(m.group() for m in TEMPLATE_TEXT.finditer(facts["prose"])))
    assert not template, f"{page}: template or code text in the prose: {template}"
    assert not facts["constants"], (
        f"{page}: constant names in the prose (say the value): {facts['constants']}"
    )
    assert len(facts["description"]) >= 40, f"{page}: no description for search engines"

    cache: dict = {}
    internal = [l for l in facts["links"] if l["href"].startswith(server)]
    broken = sorted(
        {l["href"] for l in internal if not _target_exists(l["href"], cache)}
    )
    assert not broken, f"{page}: internal links without a target: {broken}"

    unresolved = [r for r in facts["numrefs"] if not _target_exists(r["href"], cache)]
    assert not unresolved, f"{page}: references that do not resolve: {unresolved}"

    layout(browser, 1366, page)
    reading(browser, f"{page} at 1366 px", verdicts=True)

    # as on a phone: loaded again at its width (its own layout shift), and in print (an
    # A4 page is about 700 px wide inside its margins)
    shifts = load(browser, server + page, 390)
    assert cls_of(shifts) <= MAX_CLS, (
        f"{page} at 390 px: layout shift {cls_of(shifts):.3f} > {MAX_CLS}: {shifts}"
    )
    layout(browser, 390, page)
    reading(browser, f"{page} at 390 px", verdicts=True)
    small = small_ticks(browser.execute_script(FIGURE_WIDTHS))
    assert not small, f"{page} at 390 px: tick labels under {MIN_TICK_PX} px: {small}"
    browser.save_screenshot(str(SHOTS / f"{shot}-390.png"))
    layout(browser, 700, page, media="print")
    reading(browser, f"{page} in print", verdicts=False)
    unfolded_in_print(browser, page)
    if page in PRINTED:
        print_a4(browser, SHOTS / f"{shot}-A4.pdf")
    resize(browser, 1366)

    # the download button gives the chapter as a notebook that runs as it is; the
    # launch buttons open the published copy of that notebook, never the .md source
    stem = Path(page).stem
    downloads = [
        l["href"]
        for l in facts["links"]
        if l["href"].startswith(server) and l["href"].endswith(".ipynb")
    ]
    for href in downloads:
        path = SITE / urllib.parse.unquote(urllib.parse.urlsplit(href).path).lstrip("/")
        problems = notebook_problems(path)
        assert not problems, f"{page}: the downloaded {path.name}: {problems}"
    for l in facts["links"]:
        if "colab.research.google.com" in l["href"] or "mybinder.org" in l["href"]:
            assert (
                l["href"].endswith(f"book/{stem}.ipynb") and "/notebooks" in l["href"]
            ), l["href"]
            assert (ROOT / "book" / f"{stem}.md").is_file()
            assert downloads, f"{page}: launch buttons but no notebook to download"


def test_references_are_checked_somewhere():
    """The reference checks above are not vacuous: the book has figure, equation and
    theorem refs."""
    patterns = {
        "figure": re.compile(r'class="std std-numref">Fig\. \d+'),
        "equation": re.compile(r'href="[^"]*#equation-[^"]+"'),
        # a link into a theorem, lemma or corollary box (labels *-thm-*, *-lem-*, ...)
        "theorem": re.compile(
            r'class="reference internal" href="[^"]*#([a-z]+-)*'
            r'(thm|lem|cor)-[^"]+"'
        ),
    }
    found = {
        kind
        for page in PAGES
        for kind, pat in patterns.items()
        if pat.search((SITE / page).read_text(errors="replace"))
    }
    assert found == set(patterns), f"no {set(patterns) - found} references in the site"


def test_every_figure_draws_its_text_in_a_font_the_browser_has():
    """SVG figures keep their text as text; a glyph from a font no browser has
    (mathtext's sized radical) is drawn misplaced (tests/test_figures.py)."""
    import sys

    sys.path.insert(0, str(ROOT / "tests"))
    from test_figures import font_families

    figures = (
        sorted((SITE / "_images").glob("*.svg")) if (SITE / "_images").is_dir() else []
    )
    if not figures:
        pytest.skip("no SVG figure in the built site")
    odd = {}
    for path in figures:
        families = font_families(path.read_text())
        bad = sorted(f for f in families if not f.startswith("'DejaVu Sans'"))
        if bad:
            odd[path.name] = bad
    assert not odd, (
        "figures that name fonts a browser lacks (avoid \\sqrt and other sized "
        f"glyphs): {odd}"
    )
