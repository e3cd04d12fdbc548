"""Lighthouse scores of the built site, served as a static host serves it.

    .venv/bin/python benchmarks/lighthouse.py _build/book/_build/html

serves the folder on a local port with gzip for text files (as GitHub Pages serves the
published site), runs Lighthouse (``$LIGHTHOUSE``, else ``npx lighthouse``; Chrome from
``$CHROME_PATH``) on the intro, model and SST-2 pages with its mobile and desktop
settings, and prints performance, accessibility, best practices and SEO with the largest
contentful paint and the bytes of each page. Needs Node.js; nothing here is a test.
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

PAGES = ("book/intro.html", "book/model.html", "book/sst2.html")
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


def lighthouse(url: str, preset: str, out: Path) -> dict:
    command = shlex.split(os.environ.get("LIGHTHOUSE", "npx --yes lighthouse"))
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
        "kB": round(audits["total-byte-weight"]["numericValue"] / 1024),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("site", type=Path, help="the built site, e.g. _build/html")
    parser.add_argument("--presets", nargs="*", default=["mobile", "desktop"])
    args = parser.parse_args(argv)
    missing = [p for p in PAGES if not (args.site / p).is_file()]
    if missing:
        sys.exit(f"{args.site} lacks {missing}: build the site first (make book)")
    server, root = serve(args.site)
    try:
        load = os.getloadavg()[0]
        print(f"load average {load:.2f}; site {args.site}, served with gzip")
        print(
            f"{'page':<18}{'preset':<9}"
            + "".join(f"{c[:4]:>6}" for c in CATEGORIES)
            + f"{'LCP':>9}{'kB':>7}"
        )
        with tempfile.TemporaryDirectory() as tmp:
            for page in PAGES:
                for preset in args.presets:
                    s = lighthouse(root + page, preset, Path(tmp) / "report.json")
                    print(
                        f"{page:<18}{preset:<9}"
                        + "".join(f"{s[c]:>6}" for c in CATEGORIES)
                        + f"{s['LCP']:>9}{s['kB']:>7}"
                    )
    finally:
        server.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
