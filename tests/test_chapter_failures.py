"""The book's execution stages: a cell that raises fails them; a chapter executes once
per build; and every profile builds from its own execution."""

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FRONT = """---
jupytext:
  text_representation:
    extension: .md
    format_name: myst
kernelspec:
  display_name: Python 3
  language: python
  name: python3
---
"""
BAD_CHAPTER = (
    FRONT
    + """
# A chapter with a failing check

```{code-cell} ipython3
x = 1
```

```{code-cell} ipython3
assert x == 2, "this check fails on purpose"
```
"""
)
PROFILE_CHAPTER = (
    FRONT
    + """
# A chapter that says its profile

```{code-cell} ipython3
import os
from myst_nb import glue
glue("profile", os.environ["RCUTIL_PROFILE"], display=False)
```

Built with the {glue:text}`profile` profile.
"""
)

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed"),
]


def small_book(tmp_path, chapter: str):
    book = tmp_path / "book"
    (book / "book").mkdir(parents=True)
    shutil.copy(ROOT / "_config.yml", book / "_config.yml")
    shutil.copy(ROOT / "book" / "references.bib", book / "book" / "references.bib")
    shutil.copytree(ROOT / "book" / "_ext", book / "book" / "_ext")
    shutil.copytree(ROOT / "book" / "_static", book / "book" / "_static")
    (book / "book" / "page.md").write_text(chapter)
    (book / "_toc.yml").write_text("format: jb-book\nroot: book/page\n")
    return book


def make(*args):
    return subprocess.run(
        ["make", "-s", "-C", str(ROOT), *args],
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_raising_cell_fails_the_execute_stage(tmp_path):
    book = small_book(tmp_path, BAD_CHAPTER)
    proc = make("execute", f"BOOK_ROOT={book}")
    assert proc.returncode != 0, proc.stdout + proc.stderr
    assert "this check fails on purpose" in proc.stderr and "FAILED" in proc.stderr


def test_raising_cell_fails_the_book_build_stage(tmp_path):
    book = small_book(tmp_path, BAD_CHAPTER)
    proc = make("build", f"BOOK_ROOT={book}")
    assert proc.returncode != 0, proc.stdout + proc.stderr
    assert "this check fails on purpose" in proc.stdout + proc.stderr


def test_each_chapter_executes_once_and_each_profile_builds_from_its_own_run(tmp_path):
    book = small_book(tmp_path, PROFILE_CHAPTER)
    for profile in ("ci", "book", "ci"):
        proc = make("execute", "build", f"BOOK_ROOT={book}", f"PROFILE={profile}")
        log = proc.stdout + proc.stderr
        assert proc.returncode == 0, log
        assert "executed" in log and "Executing notebook" not in log, (
            log
        )  # the build reuses the run
        html = (
            book / "_build" / profile / "_build" / "html" / "book" / "page.html"
        ).read_text()
        assert f"with the {profile} profile" in html.replace(
            "<span class=\"pasted-text\">", ""
        ).replace("</span>", "")
