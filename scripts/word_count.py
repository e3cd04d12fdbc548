"""Print each chapter's rendered prose word count.

    python scripts/word_count.py                 # every chapter of _toc.yml
    python scripts/word_count.py book/jena.md    # some chapters
    python scripts/word_count.py --max 2500 book/lipschitz.md book/convergence.md

What counts is the text a reader reads on the page, measured from the MyST source:

* **counted**: paragraphs, headings, list items, Markdown tables written in the prose,
  and the bodies of directives (admonitions, ``prf:`` lemmas and proofs, figures);
* **not counted**: the front matter, code cells (their source, whether shown, folded
  or removed, and their outputs, which the source does not hold), other fenced code
  (``literalinclude``, ``bash``), indented code blocks, directive fences and option
  lines (``:label:``, ``:class:``), label lines ``(name)=``, comments (``%`` lines and
  ``<!-- -->``), display math (``$$ ... $$``) and URLs;
* **one word each**: an inline formula ``$...$`` and a role (``{glue:text}`x```,
  ``{eq}`x```, ``{cite}`x```, ``{numref}`x```, ...), since each renders as one unit;
  a role with an explicit text, ``{ref}`some words <label>```, counts the words of its
  text; a Markdown link ``[text](url)`` counts its text;
* **a word** is a whitespace-separated token holding at least one letter or digit
  (a lone dash or bar is not a word).

Figure captions live in the code cell that draws the figure (``:mystnb: figure:
caption:``); they are rendered prose, so they are counted too, in their own column,
and the total is prose plus captions. Alt texts are not shown on the page and are not
counted.
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from rcutil.experiments import toc_files

ROOT = Path(__file__).resolve().parents[1]

_FENCE = re.compile(r"^(\s*)(`{3,}|:{3,})(.*)$")
_ROLE = re.compile(r"\{[\w:.-]+\}`([^`]*)`")
_EXPLICIT = re.compile(r"^(.*?)\s*<[^<>]+>\s*$", re.S)
_INLINE_MATH = re.compile(r"(?<![\\$])\$(?!\$)((?:[^$\n]|\n(?!\s*\n))+?)(?<!\\)\$")
_LINK = re.compile(r"!?\[([^\]]*)\]\([^)]*\)")
_URL = re.compile(r"<?https?://\S+>?")
_LABEL = re.compile(r"^\s*\([\w:.-]+\)=\s*$")
_OPTION = re.compile(r"^\s*:[\w-]+:")
_WORD = re.compile(r"[^\W_]", re.UNICODE)
_DISPLAY_INLINE = re.compile(r"\$\$[^$]+\$\$")
_TOKEN = "\x00w\x00"  # one rendered unit (formula, role)
_CODE_DIRECTIVES = ("{code-cell}", "{literalinclude}", "{code-block}", "{code}")
_SKIPPED_DIRECTIVES = ("{math}", "{bibliography}", "{glue:figure}", "{tableofcontents}")


@dataclass(frozen=True)
class Count:
    """Words of one chapter: ``prose`` outside code cells, ``captions`` of figures."""

    prose: int
    captions: int

    @property
    def total(self) -> int:
        return self.prose + self.captions


def _strip_front_matter(lines: list[str]) -> list[str]:
    if lines and lines[0].strip() == "---":
        for i, line in enumerate(lines[1:], 1):
            if line.strip() == "---":
                return lines[i + 1 :]
    return lines


def _role(match: re.Match) -> str:
    text = match.group(1)
    explicit = _EXPLICIT.match(text)
    if explicit and explicit.group(1).strip():
        return explicit.group(1)
    return _TOKEN


def words(text: str) -> int:
    """Words of a piece of rendered prose (roles and inline math already one unit
    each, see the module docstring)."""
    text = re.sub(r"<!--.*?-->", " ", text, flags=re.S)
    text = _ROLE.sub(_role, text)
    text = _DISPLAY_INLINE.sub(_TOKEN, text)
    text = _INLINE_MATH.sub(_TOKEN, text)
    text = _LINK.sub(lambda m: m.group(1), text)
    text = _URL.sub(" ", text)
    return sum(1 for token in text.split() if token == _TOKEN or _WORD.search(token))


def _captions(header: list[str]) -> str:
    """The figure caption in a code cell's ``:mystnb:`` option lines."""
    out, inside, indent = [], False, None
    for line in header:
        body = line.lstrip(":").rstrip("\n")
        stripped = body.strip()
        if inside:
            depth = len(body) - len(body.lstrip())
            if stripped and indent is not None and depth <= indent:
                inside = False
            else:
                out.append(stripped)
                continue
        if stripped.startswith("caption:"):
            rest = stripped[len("caption:") :].strip()
            inside, indent = True, len(body) - len(body.lstrip())
            if rest not in ("|", ">", "|-", ">-"):
                out.append(rest)  # a plain scalar, perhaps continued below
    return "\n".join(out)


def extract(text: str) -> tuple[str, str]:
    """``(prose, captions)``: the rendered text of a MyST chapter's source, before
    words are counted (see the module docstring for what is kept)."""
    lines = _strip_front_matter(text.splitlines())
    prose: list[str] = []
    captions: list[str] = []
    open_directives: list[str] = []  # backtick fences of prose directives
    in_math = previous_blank = False
    previous_blank = True
    i = 0
    while i < len(lines):
        line = lines[i]
        stripped = line.strip()
        i += 1
        if in_math:
            in_math = not (stripped.startswith("$$") or stripped.endswith("$$"))
            continue
        fence = _FENCE.match(line)
        if fence:
            marker, info = fence.group(2), fence.group(3).strip()
            if not info and open_directives and open_directives[-1] == marker:
                open_directives.pop()  # the end of a prose directive
                continue
            directive = info.split("}")[0] + "}" if info.startswith("{") else ""
            code = marker.startswith("`") and (
                not directive or directive in _CODE_DIRECTIVES
            )
            if code or directive in _SKIPPED_DIRECTIVES:
                header = []
                while i < len(lines) and not lines[i].strip().startswith(marker):
                    if lines[i].lstrip().startswith(":"):
                        header.append(lines[i])
                    i += 1
                i += 1  # the closing fence
                if directive == "{code-cell}":
                    captions.append(_captions(header))
                previous_blank = True
                continue
            if directive and marker.startswith("`"):
                open_directives.append(marker)
            if "}" in info:
                prose.append(info.split("}", 1)[1])  # the directive's title
            continue
        if stripped.startswith("$$"):
            in_math = "$$" not in stripped[2:]
            continue
        indented_code = line.startswith("    ") and previous_blank and bool(stripped)
        if (
            indented_code
            or _LABEL.match(line)
            or _OPTION.match(line)
            or stripped.startswith("%")
        ):
            previous_blank = indented_code or previous_blank
            continue
        prose.append(line)
        previous_blank = not stripped
    return "\n".join(prose), "\n".join(captions)


def count(text: str) -> Count:
    """The :class:`Count` of a MyST chapter's source ``text``."""
    prose, captions = extract(text)
    return Count(words(prose), words(captions))


def chapters(root: Path = ROOT) -> list[Path]:
    """The chapter files of ``_toc.yml``, in the book's order."""
    return [root / f"{f}.md" for f in toc_files(root)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="*", type=Path, help="chapters (default: all)")
    parser.add_argument(
        "--show",
        action="store_true",
        help="print the text that is counted, chapter by chapter, then the counts",
    )
    parser.add_argument(
        "--max",
        type=int,
        default=None,
        help="exit with status 1 if a chapter's prose (without captions) exceeds this",
    )
    args = parser.parse_args(argv)
    files = args.files or chapters()
    missing = [str(f) for f in files if not f.is_file()]
    if missing:
        parser.error(f"no such chapter file: {', '.join(missing)}")
    if args.show:
        for path in files:
            prose, captions = extract(path.read_text())
            print(f"===== {path.stem}: prose\n{prose}\n===== {path.stem}: captions")
            print(captions)
    print(f"{'chapter':<22}{'prose':>8}{'captions':>10}{'total':>8}")
    over = []
    sums = [0, 0]
    for path in files:
        c = count(path.read_text())
        sums[0] += c.prose
        sums[1] += c.captions
        print(f"{path.stem:<22}{c.prose:>8,}{c.captions:>10,}{c.total:>8,}")
        if args.max is not None and c.prose > args.max:
            over.append(path.stem)
    print(f"{'all':<22}{sums[0]:>8,}{sums[1]:>10,}{sum(sums):>8,}")
    if over:
        print(f"above {args.max:,} words of prose: {', '.join(over)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
