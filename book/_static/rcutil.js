/* A box that scrolls sideways (a wide equation, a wide table: class rc-scroll around
   the box that scrolls; a code block: div.highlight around its pre) shows a shadow at
   each edge beyond which there is more to see.
   The box's wrapper gets data-more="left", "right" or both; rcutil.css draws the
   shadows above the content, so that a table's rows cannot cover them. The shadows are
   absolutely placed: nothing moves when they appear. */
(() => {
  const update = (wrap) => {
    const box = wrap.firstElementChild;
    if (!box) return;
    const more = [];
    if (box.scrollLeft > 1) more.push("left");
    if (box.scrollLeft + box.clientWidth < box.scrollWidth - 1) more.push("right");
    const value = more.join(" ");
    if ((wrap.dataset.more || "") !== value) {
      if (value) wrap.dataset.more = value;
      else delete wrap.dataset.more;
    }
  };
  const start = () => {
    const wraps = document.querySelectorAll(".rc-scroll, div.highlight");
    const resized = new ResizeObserver((entries) => {
      for (const entry of entries) update(entry.target.closest(".rc-scroll, div.highlight"));
    });
    for (const wrap of wraps) {
      const box = wrap.firstElementChild;
      if (!box) continue;
      box.addEventListener("scroll", () => update(wrap), { passive: true });
      resized.observe(box);
      if (box.firstElementChild) resized.observe(box.firstElementChild);
      update(wrap);
    }
  };
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
