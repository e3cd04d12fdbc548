/* A box that scrolls sideways (a wide equation, a wide table: class rc-scroll around
   the box that scrolls; a code block: div.highlight around its pre) shows a shadow at
   each edge beyond which there is more to see. The box's wrapper gets data-more="left",
   "right" or both; rcutil.css draws the shadows above the content, so that a table's
   rows cannot cover them. The shadows are absolutely placed: nothing moves when they
   appear. A box is measured only once it comes near the window (IntersectionObserver),
   then whenever its size changes (ResizeObserver, which reports sizes after the browser
   has laid the page out); all sizes are read before any attribute is written, so that
   the page is laid out once, not once per box. */
(() => {
  const WRAPS = ".rc-scroll, div.highlight";
  const state = (wrap) => {
    const box = wrap.firstElementChild;
    if (!box) return "";
    const more = [];
    if (box.scrollLeft > 1) more.push("left");
    if (box.scrollLeft + box.clientWidth < box.scrollWidth - 1) more.push("right");
    return more.join(" ");
  };
  const write = (wrap, value) => {
    if ((wrap.dataset.more || "") === value) return;
    if (value) wrap.dataset.more = value;
    else delete wrap.dataset.more;
  };
  const start = () => {
    const resized = new ResizeObserver((entries) => {
      const wraps = new Set(entries.map((e) => e.target.closest(WRAPS)).filter(Boolean));
      const values = Array.from(wraps, (wrap) => [wrap, state(wrap)]); // read all ...
      for (const [wrap, value] of values) write(wrap, value); // ... then write
    });
    const near = new IntersectionObserver(
      (entries) => {
        for (const entry of entries) {
          if (!entry.isIntersecting) continue;
          const wrap = entry.target;
          near.unobserve(wrap);
          const box = wrap.firstElementChild;
          box.addEventListener("scroll", () => write(wrap, state(wrap)), { passive: true });
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
