/* A box that scrolls sideways (a wide equation, a wide table: class rc-scroll around
   the box that scrolls; a code block: div.highlight around its pre) shows a shadow at
   each edge beyond which there is more to see, and is a tab stop, so that a keyboard
   can scroll it (the theme's tab-stop pass, which measured every box of the page at
   once, is taken out of its script by the build: rcutil_book.py). The box's wrapper
   gets data-more="left", "right" or both; rcutil.css draws the shadows above the
   content, so that a table's rows cannot cover them. The shadows are absolutely
   placed: nothing moves when they appear. A box is measured only once it comes near
   the window (IntersectionObserver), or at a keyboard's first Tab, then whenever its
   size changes (ResizeObserver, which reports sizes after the browser has laid the
   page out); all sizes are read before any attribute is written, so that the page is
   laid out once, not once per box. */
(() => {
  const WRAPS = ".rc-scroll, div.highlight";
  const measure = (wrap) => {
    const box = wrap.firstElementChild;
    const more = [];
    if (box.scrollLeft > 1) more.push("left");
    if (box.scrollLeft + box.clientWidth < box.scrollWidth - 1) more.push("right");
    const scrolls =
      box.scrollWidth > box.clientWidth + 1 || box.scrollHeight > box.clientHeight + 1;
    return { wrap, box, more: more.join(" "), stop: scrolls ? 0 : -1 };
  };
  const write = ({ wrap, box, more, stop }) => {
    if (box.tabIndex !== stop) box.tabIndex = stop;
    if ((wrap.dataset.more || "") === more) return;
    if (more) wrap.dataset.more = more;
    else delete wrap.dataset.more;
  };
  const update = (wraps) => {
    const found = Array.from(wraps, measure); // read all ...
    for (const f of found) write(f); // ... then write
  };
  const start = () => {
    const resized = new ResizeObserver((entries) =>
      update(new Set(entries.map((e) => e.target.closest(WRAPS)).filter(Boolean))),
    );
    const waiting = new Set();
    // from now on the box is measured whenever it scrolls or its size changes
    const watch = (wrap) => {
      if (!waiting.delete(wrap)) return;
      near.unobserve(wrap);
      const box = wrap.firstElementChild;
      box.addEventListener("scroll", () => write(measure(wrap)), { passive: true });
      resized.observe(box);
      if (box.firstElementChild) resized.observe(box.firstElementChild);
    };
    const near = new IntersectionObserver(
      (entries) => {
        for (const entry of entries) if (entry.isIntersecting) watch(entry.target);
      },
      { rootMargin: "400px 0px" },
    );
    for (const wrap of document.querySelectorAll(WRAPS)) {
      if (!wrap.firstElementChild) continue;
      waiting.add(wrap);
      near.observe(wrap);
    }
    // a keyboard's first Tab: every box not measured yet is measured now (one layout of
    // the page, when the reader asks for it), so that Tab stops at every box that
    // scrolls, near the window or not
    const firstTab = (event) => {
      if (event.key !== "Tab") return;
      document.removeEventListener("keydown", firstTab, true);
      const rest = Array.from(waiting);
      update(rest);
      for (const wrap of rest) watch(wrap);
    };
    document.addEventListener("keydown", firstTab, true);
  };
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();

/* A chapter's figures load after its text has shown (loading="lazy", set by the build:
   rcutil_book.py), then all of them as soon as the page has loaded and the browser is
   idle, so that a reader who scrolls fast, prints or goes offline finds them there. */
(() => {
  const all = () => {
    for (const img of document.querySelectorAll('img[loading="lazy"]')) img.loading = "eager";
  };
  const idle = window.requestIdleCallback || ((f) => setTimeout(f, 200));
  const start = () => idle(all, { timeout: 2000 });
  if (document.readyState === "complete") start();
  else window.addEventListener("load", start, { once: true });
  window.addEventListener("beforeprint", all); // printed before the page was idle
})();

/* A printed claim shows its folded paper, rule and reason: the cards' dropdowns open
   before printing and fold again after (rcutil.css does it where the browser styles
   ::details-content). */
(() => {
  let opened = [];
  window.addEventListener("beforeprint", () => {
    opened = Array.from(document.querySelectorAll(".rc-claim details:not([open])"));
    for (const d of opened) d.open = true;
  });
  window.addEventListener("afterprint", () => {
    for (const d of opened) d.open = false;
    opened = [];
  });
})();
