"""Write every chapter of the book as a Jupyter notebook that runs as it is, for the
website's download button, Colab and Binder.

    python scripts/build_notebooks.py --out DIR [--commit SHA] [--executed CACHE]

(this module, beside the book's Sphinx extension that uses it, is that script's code)

Each MyST chapter ``book/NAME.md`` becomes ``DIR/book/NAME.ipynb``. Its first cell
installs the book's package ``rcutil`` at the commit the notebooks were built from
(``--commit``, by default the checkout's ``HEAD``) when the kernel lacks it, as on
Colab. Its Markdown is plain Markdown that Jupyter, Colab and GitHub render: MyST's
directives, roles and labels become what they show on the website (equation and figure
numbers, chapter titles, cited authors, the code an ``{literalinclude}`` shows). With
``--executed`` (the jupyter-cache of a book build) a glued number becomes its value in
that build and every code cell carries the outputs it had there.

The book build itself writes these notebooks where the website's download button
points (``_sources/book/NAME.ipynb``, see ``rcutil_book.py``), from its own
executed chapters; the publish workflow copies those very files to the ``notebooks``
branch, which the Binder and Colab buttons open.
"""

from __future__ import annotations

import argparse
import ast
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import jupytext
import nbformat
import yaml

ROOT = Path(__file__).resolve().parents[2]

SETUP = """\
# Set-up for Colab and other fresh kernels: this chapter needs the book's package
# rcutil, at the commit the notebook was built from, and myst-nb (for glue); each is
# installed once, when it is missing. numpy's OpenBLAS runs on one thread, as in the
# book's own runs (set before numpy loads; a kernel that loaded it already keeps its
# threads).
import importlib.util, os, subprocess, sys
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
need = {{"rcutil": "rcutil @ git+{repo}@{commit}", "myst_nb": "myst-nb"}}
missing = [req for module, req in need.items()
           if importlib.util.find_spec(module) is None]
if missing:
    subprocess.check_call([sys.executable, "-m", "pip", "install", "-q", *missing])"""

NOTE = (
    "*This notebook is a chapter of the book \u201c{title}\u201d, built from commit "
    "`{short}`. The "
    "numbers quoted in the text are those of the published book (profile `book`); the "
    "cells compute them again for the profile you choose (`RCUTIL_PROFILE`, default "
    "`ci`).*"
)


def chapters(book: Path = ROOT / "book") -> list[Path]:
    """The chapters that are notebooks (MyST with jupytext front matter), in the order
    of ``_toc.yml`` (chapters not in it last)."""
    found = [p for p in book.glob("*.md") if "format_name: myst" in p.read_text()[:500]]
    order = {Path(f).name: i for i, f in enumerate(toc_files(book.parent))}
    return sorted(found, key=lambda p: (order.get(p.stem, len(order)), p.stem))


def toc_files(root: Path) -> list[str]:
    toc = yaml.safe_load((root / "_toc.yml").read_text())
    files = [toc["root"]]
    for part in toc.get("parts", []):
        files += [c["file"] for c in part.get("chapters", [])]
    return files


# --------------------------------------------------------------------------- what the
# book knows
@dataclass
class Book:
    """What a chapter's Markdown refers to across the book: chapter titles by label,
    figure numbers (numbered through the book, as on the website), theorem-like blocks
    by label, cited works, and glued values by name."""

    titles: dict[str, str] = field(default_factory=dict)
    figures: dict[str, int] = field(default_factory=dict)
    blocks: dict[str, str] = field(default_factory=dict)
    citations: dict[str, tuple[str, str]] = field(default_factory=dict)
    glue: dict[str, dict[str, str]] = field(default_factory=dict)


LABEL = re.compile(r"^\(([\w-]+)\)=\s*$", re.M)
PRF = re.compile(r"^:::\{prf:(\w+)\}[ \t]*(.*)\n(?::label:[ \t]*([\w-]+))?", re.M)


def read_book(paths: list[Path], bib: Path) -> Book:
    book = Book(citations=read_bib(bib))
    n_figure = 0
    for path in paths:
        text = path.read_text()
        heading = re.search(r"^# (.+)$", text, re.M)
        for label in LABEL.findall(text):
            book.titles.setdefault(label, heading[1].strip() if heading else label)
        for cell in jupytext.read(path).cells:
            name = cell.metadata.get("mystnb", {}).get("figure", {}).get("name")
            if cell.cell_type == "code" and name:
                n_figure += 1
                book.figures[name] = n_figure
        for kind, title, label in PRF.findall(text):
            if label:
                name = kind.capitalize()
                book.blocks[label] = (
                    f"{name} ({title.strip()})" if title.strip() else name
                )
    return book


def read_bib(path: Path) -> dict[str, tuple[str, str]]:
    """key -> (authors as cited, year) from a BibTeX file: "Qin et al.", "Qin and Zhou",
    or a corporate author whole ("Max Planck Institute for Biogeochemistry")."""
    from pybtex.database import parse_file  # with sphinxcontrib-bibtex
    from pybtex.richtext import Text

    out = {}
    for key, entry in parse_file(str(path)).entries.items():
        people = entry.persons.get("author", [])
        names = [
            str(Text.from_latex(" ".join(p.last_names)))
            for p in people
            if str(p) != "others"
        ] or ["Anonymous"]
        etal = len(names) > 2 or len(names) < len(people)
        cited = f"{names[0]} et al." if etal else " and ".join(names)
        out[key] = (cited, entry.fields.get("year", ""))
    return out


#: Outputs that only record a glued value for the website (their value is in the text).
GLUE_MIME = "application/papermill.record/"


def read_glue(cache: Path) -> dict[str, dict[str, str]]:
    """chapter stem -> glued name -> value as text, from a build's jupyter-cache."""
    from jupyter_cache import get_cache

    out: dict[str, dict[str, str]] = {}
    store = get_cache(str(cache))
    for record in store.list_cache_records():
        nb = store.get_cache_bundle(record.pk).nb
        values = {}
        for cell in nb.cells:
            for o in cell.get("outputs", []):
                meta = o.get("metadata", {}).get("scrapbook")
                text = o.get("data", {}).get(GLUE_MIME + "text/plain")
                if meta and text is not None:
                    values[meta["name"]] = text
        out[Path(record.uri).stem] = values
    return out


def reader_outputs(outputs: list) -> list:
    """A cell's outputs as a reader's Jupyter shows them: no progress bars (stderr, as
    on the website) and no glue records (their values are in the text)."""
    kept = []
    for o in outputs:
        if o.get("output_type") == "stream" and o.get("name") == "stderr":
            continue
        if "data" in o:
            data = {k: v for k, v in o["data"].items() if not k.startswith(GLUE_MIME)}
            if not data:
                continue
            o = nbformat.from_dict({**o, "data": data})
        kept.append(o)
    return kept


class NotExecuted(LookupError):
    """A chapter whose code has no executed twin in the jupyter-cache."""


def add_outputs(nb: nbformat.NotebookNode, cache: Path, name: str) -> None:
    """Give the code cells of ``nb`` the outputs of its executed twin in a build's
    jupyter-cache (matched on the code itself)."""
    from jupyter_cache import get_cache

    try:
        _, executed = get_cache(str(cache)).merge_match_into_notebook(nb)
    except KeyError:
        raise NotExecuted(
            f"{name}: no executed notebook with this code in {cache}: execute the "
            "chapters first (make execute)"
        ) from None
    nb.cells = executed.cells
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs = reader_outputs(cell.get("outputs", []))


# --------------------------------------------------------------------------- MyST ->
# Markdown
def glue_value(raw: str, fmt: str) -> str:
    """A glued value (its ``repr``) in the format of the ``{glue:text}`` role."""
    try:
        value = ast.literal_eval(raw)
    except (ValueError, SyntaxError):
        return raw.strip("'\"")
    try:
        return format(value, fmt) if fmt else str(value)
    except (TypeError, ValueError):
        return str(value)


def python_source(path: Path, options: dict[str, str]) -> str:
    """The code a ``{literalinclude}`` shows: a ``:pyobject:`` (``name`` or
    ``Class.method``), cut by ``:start-at:``/``:end-before:``/``:end-at:``,
    ``:dedent:``."""
    text = path.read_text()
    if "pyobject" in options:
        tree = ast.parse(text)
        node = tree
        for part in options["pyobject"].split("."):
            node = next(n for n in node.body if getattr(n, "name", None) == part)
        lines = text.splitlines()
        start = min(
            [node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])]
        )
        text = "\n".join(lines[start - 1 : node.end_lineno])
    if "start-at" in options:
        i = text.index(options["start-at"])
        text = text[text.rfind("\n", 0, i) + 1 :]  # from the start of that line
    if "end-before" in options:
        text = text[: text.index(options["end-before"])]
    if "end-at" in options:
        i = text.index(options["end-at"])
        text = text[: text.find("\n", i) if "\n" in text[i:] else len(text)]
    lines = text.rstrip().splitlines()
    if "dedent" in options or "start-at" in options:
        indent = min((len(s) - len(s.lstrip()) for s in lines if s.strip()), default=0)
        lines = [s[indent:] for s in lines]
    return "\n".join(lines)


ROLE = re.compile(r"\{([\w:-]+)\}`([^`]*)`")
DISPLAY = re.compile(r"^\$\$\n(.*?)\n\$\$[ \t]*(?:\(([\w-]+)\))?[ \t]*$", re.S | re.M)
FENCE = re.compile(r"^(?P<fence>`{3,}|:{3,})\{(?P<name>[\w:-]+)\}[ \t]*(?P<arg>.*)$")


class Converter:
    """MyST Markdown of one chapter as plain Markdown."""

    def __init__(self, path: Path, book: Book, glue: dict[str, str]):
        self.path, self.book, self.glue = path, book, glue
        self.equations: dict[str, int] = {}

    # ------------------------------------------------------------ roles
    def role(self, m: re.Match) -> str:
        name, arg = m.group(1), m.group(2)
        text, target = (
            re.match(r"(.*?)\s*<([^>]+)>$", arg).groups()
            if re.match(r".*<[^>]+>$", arg)
            else (None, arg)
        )
        if name == "eq":
            return f"({self.equations.get(target, target)})"
        if name == "numref":
            return f"Fig. {self.book.figures.get(target, target)}"
        if name in ("ref", "doc"):
            return text or self.book.titles.get(target, target)
        if name == "prf:ref":
            return text or self.book.blocks.get(target, target)
        if name.startswith("cite"):
            works = [
                self.book.citations.get(k.strip(), (k.strip(), ""))
                for k in arg.split(",")
            ]
            if name == "cite:t":
                return "; ".join(f"{a} ({y})" for a, y in works)
            return "(" + "; ".join(f"{a}, {y}" for a, y in works) + ")"
        if name in ("glue:text", "glue"):
            key, _, fmt = target.partition(":")
            raw = self.glue.get(key)
            return glue_value(raw, fmt) if raw is not None else f"`{key}`"
        if name == "math":
            return f"${arg}$"
        if name == "sub":
            return f"<sub>{arg}</sub>"
        if name == "sup":
            return f"<sup>{arg}</sup>"
        return text or arg

    # ------------------------------------------------------------ blocks
    def directive(self, name: str, arg: str, body: str) -> str:
        options, rest = {}, []
        lines = body.split("\n")
        while lines and re.match(r"^:([\w-]+):(.*)$", lines[0]):
            key, value = re.match(r"^:([\w-]+):(.*)$", lines[0]).groups()
            options[key] = value.strip()
            lines.pop(0)
        rest = self.convert("\n".join(lines).strip("\n"))
        if name == "literalinclude":
            code = python_source((self.path.parent / arg.strip()).resolve(), options)
            caption = (
                self.inline(options["caption"].strip('"'))
                if "caption" in options
                else f"`{Path(arg.strip()).name}`"
            )
            return f"*{caption}:*\n\n```python\n{code}\n```"
        if name == "admonition":
            quoted = "\n".join(f"> {s}" if s else ">" for s in rest.split("\n"))
            return f"> **{self.inline(arg)}**\n>\n{quoted}"
        if name.startswith("prf:"):
            kind = name[4:]
            if kind == "proof":
                return f"*Proof.* {rest} $\\square$"
            title = f" ({self.inline(arg)})" if arg.strip() else ""
            return f"**{kind.capitalize()}{title}.** {rest}"
        if name == "bibliography":
            return ""
        return rest

    def inline(self, text: str) -> str:
        return ROLE.sub(self.role, text)

    def convert(self, text: str) -> str:
        out, lines, i = [], text.split("\n"), 0
        while i < len(lines):
            m = FENCE.match(lines[i])
            if not m:
                out.append(lines[i])
                i += 1
                continue
            fence, body = m["fence"], []
            i += 1
            while i < len(lines) and lines[i].rstrip() != fence:
                body.append(lines[i])
                i += 1
            i += 1
            out.append(self.directive(m["name"], m["arg"], "\n".join(body)))
        text = "\n".join(out)
        text = LABEL.sub(lambda m: f'<a id="{m[1]}"></a>', text)
        text = DISPLAY.sub(self.display, text)
        return self.inline(text)

    def display(self, m: re.Match) -> str:
        body, label = m.group(1), m.group(2)
        if label is None:
            return f"$$\n{body}\n$$"
        return f"$$\n{body}\n\\tag{{{self.equations[label]}}}\n$$"

    def number_equations(self, cells) -> None:
        """Equation numbers in order of the chapter, as on the website."""
        for cell in cells:
            if cell.cell_type == "markdown":
                for m in DISPLAY.finditer(cell.source):
                    if m.group(2):
                        self.equations[m.group(2)] = len(self.equations) + 1


def convert(
    md: Path,
    repo: str,
    commit: str,
    book: Book | None = None,
    title: str = "",
    executed: Path | None = None,
) -> nbformat.NotebookNode:
    """The notebook of chapter ``md``: the install cell, a note, then the chapter with
    its Markdown made plain and every figure's caption written under it; with
    ``executed`` (a build's jupyter-cache), the outputs of that build."""
    paths = chapters(md.parent)
    book = book or read_book(paths, md.parent / "references.bib")
    nb = jupytext.read(md)
    if executed is not None:
        add_outputs(nb, executed, md.name)
    conv = Converter(md, book, book.glue.get(md.stem, {}))
    conv.number_equations(nb.cells)
    cells = [
        nbformat.v4.new_code_cell(SETUP.format(repo=repo, commit=commit)),
        nbformat.v4.new_markdown_cell(NOTE.format(title=title, short=commit[:12])),
    ]
    cells[0].metadata["tags"] = ["remove-cell"]
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            cell.source = conv.convert(cell.source)
            cells.append(cell)
            continue
        cells.append(cell)
        figure = cell.metadata.get("mystnb", {}).get("figure")
        if cell.cell_type == "code" and figure and figure.get("caption"):
            caption = " ".join(conv.convert(str(figure["caption"])).split())
            cells.append(
                nbformat.v4.new_markdown_cell(
                    f"**Fig. {book.figures.get(figure.get('name'), '')}.** {caption}"
                )
            )
    nb.cells = cells
    return nb


def head_commit(root: Path = ROOT) -> str:
    return subprocess.run(
        ["git", "rev-parse", "HEAD"],
        cwd=root,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()


def write(
    out: Path,
    commit: str,
    executed: Path | None = None,
    root: Path = ROOT,
    only: set[str] | None = None,
) -> list[Path]:
    """Every chapter of the book in ``root`` (or those named in ``only``) as
    ``out/book/NAME.ipynb``."""
    config = yaml.safe_load((root / "_config.yml").read_text())
    paths = chapters(root / "book")
    book = read_book(paths, root / "book" / "references.bib")
    if executed is not None:
        book.glue = read_glue(executed)
    written = []
    for md in paths:
        if only is not None and md.stem not in only:
            continue
        target = out / "book" / (md.stem + ".ipynb")
        target.parent.mkdir(parents=True, exist_ok=True)
        nb = convert(
            md,
            config["repository"]["url"],
            commit,
            book,
            config.get("title", ""),
            executed,
        )
        nbformat.write(nb, target)
        written.append(target)
    return written


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--commit", default=None, help="default: git rev-parse HEAD")
    parser.add_argument(
        "--executed",
        type=Path,
        default=None,
        help="the jupyter-cache of a book build, for the glued values and the outputs",
    )
    args = parser.parse_args(argv)
    if args.executed is not None and not args.executed.is_dir():
        parser.error(f"--executed {args.executed} is not a folder: run make execute")
    try:
        written = write(args.out, args.commit or head_commit(), args.executed)
    except NotExecuted as exc:
        parser.exit(1, f"{exc}\n")
    for target in written:
        print(f"wrote {target}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
