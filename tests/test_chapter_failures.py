"""A cell that raises, put into a chapter, makes the test command fail (both of its book stages)."""
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BAD_CHAPTER = """---
jupytext:
  text_representation:
    extension: .md
    format_name: myst
kernelspec:
  display_name: Python 3
  language: python
  name: python3
---

# A chapter with a failing check

```{code-cell} ipython3
x = 1
```

```{code-cell} ipython3
assert x == 2, "this check fails on purpose"
```
"""


@pytest.fixture
def bad_book(tmp_path):
    book = tmp_path / "book"
    (book / "book").mkdir(parents=True)
    shutil.copy(ROOT / "_config.yml", book / "_config.yml")
    shutil.copy(ROOT / "book" / "references.bib", book / "book" / "references.bib")
    (book / "book" / "bad.md").write_text(BAD_CHAPTER)
    (book / "_toc.yml").write_text("format: jb-book\nroot: book/bad\n")
    return book


def make(*args):
    return subprocess.run(["make", "-s", "-C", str(ROOT), *args], capture_output=True, text=True,
                          timeout=600)


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_raising_cell_fails_nbval_stage(bad_book, tmp_path):
    proc = make("nbval", f"CHAPTERS={bad_book / 'book' / 'bad.md'}", f"NBDIR={tmp_path / 'nb'}")
    assert proc.returncode != 0, proc.stdout + proc.stderr
    assert "this check fails on purpose" in proc.stdout + proc.stderr


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_raising_cell_fails_book_build_stage(bad_book):
    proc = make("build-ci", f"BOOK_ROOT={bad_book}")
    assert proc.returncode != 0, proc.stdout + proc.stderr
    assert "this check fails on purpose" in proc.stdout + proc.stderr
