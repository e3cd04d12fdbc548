"""Write every chapter of the book as a Jupyter notebook, for Colab, Binder and downloads.

    python scripts/build_notebooks.py --out DIR

Each MyST chapter ``book/NAME.md`` becomes ``DIR/book/NAME.ipynb`` (jupytext), with a first
cell that installs ``rcutil`` from the book's repository when it is missing (as on Colab).
The publish workflow commits these files to the ``notebooks`` branch, which the launch
buttons of the website open.
"""
from __future__ import annotations

import argparse
from pathlib import Path

import jupytext
import nbformat
import yaml

ROOT = Path(__file__).resolve().parents[1]

SETUP = """\
# Set-up for Colab and other fresh kernels: install the book's package if it is missing.
import importlib.util, subprocess, sys
if importlib.util.find_spec("rcutil") is None:
    subprocess.check_call([sys.executable, "-m", "pip", "install", "-q", "git+{repo}@{branch}"])"""


def chapters(book: Path = ROOT / "book") -> list[Path]:
    """The chapters that are notebooks (MyST with jupytext front matter)."""
    return sorted(p for p in book.glob("*.md") if "format_name: myst" in p.read_text()[:500])


def convert(md: Path, repo: str, branch: str) -> nbformat.NotebookNode:
    nb = jupytext.read(md)
    cell = nbformat.v4.new_code_cell(SETUP.format(repo=repo, branch=branch))
    cell.metadata["tags"] = ["remove-cell"]
    nb.cells.insert(0, cell)
    return nb


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    repo, branch = config["repository"]["url"], config["repository"].get("branch", "main")
    for md in chapters():
        target = args.out / "book" / (md.stem + ".ipynb")
        target.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(convert(md, repo, branch), target)
        print(f"wrote {target}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
