/* A box that scrolls sideways (a wide equation, a wide table: class rc-scroll around
   the box that scrolls; a code block: div.highlight around its pre) shows a shadow at
   each edge beyond which there is more to see, and is a tab stop, so that a keyboard
   can scroll it (the theme's tab-stop pass, which measured every box of the page at
   once, is taken out of its script by the build: rcutil_book.py). The box's wrapper
   gets data-more="left", "right" or both; rcutil.css draws the shadows above the
   content, so that a table's rows cannot cover them. The shadows are absolutely
   placed: nothing moves when they appear. A box is measured only once it comes near
   the window (IntersectionObserver), then whenever its size changes (ResizeObserver,
   which reports sizes after the browser has laid the page out); all sizes are read
   before any attribute is written, so that the page is laid out once, not once per
   box. */
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
  const start = () => {
    const resized = new ResizeObserver((entries) => {
      const wraps = new Set(entries.map((e) => e.target.closest(WRAPS)).filter(Boolean));
      const found = Array.from(wraps, measure); // read all ...
      for (const f of found) write(f); // ... then write
    });
    const near = new IntersectionObserver(
      (entries) => {
        for (const entry of entries) {
          if (!entry.isIntersecting) continue;
          const wrap = entry.target;
          near.unobserve(wrap);
          const box = wrap.firstElementChild;
          box.addEventListener("scroll", () => write(measure(wrap)), { passive: true });
          resized.observe(box);
          if (box.firstElementChild) resized.observe(box.firstElementChild);
        }
      },
      { rootMargin: "400px 0px" },
    );
    for (const wrap of document.querySelectorAll(WRAPS)) {
      if (wrap.firstElementChild) near.observe(wrap);
    }
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
