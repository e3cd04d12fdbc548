"""The anatomy of a chapter (CONTRIBUTING.md): the code that computes is in visible cells;
assertions and glue calls are in removed cells; only figures fold their code away; the first
import is rcutil's."""
import re
from pathlib import Path

import jupytext
import pytest

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = sorted(p for p in (ROOT / "book").glob("*.md") if "format_name: myst" in p.read_text()[:500])
#: Chapters still to be brought to this anatomy; each entry goes when its chapter is.
PENDING: set[str] = set()
CHECK = re.compile(r"^\s*(assert\b|glue\()|assert_(close|allclose)\(", re.M)


def _cells(path: Path):
    return [c for c in jupytext.read(path).cells if c.cell_type == "code"]


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_checks_are_removed_and_only_figures_fold_their_code(path):
    if path.stem in PENDING:
        pytest.skip(f"{path.name} is still to be brought to the anatomy of a chapter")
    wrong = []
    for i, cell in enumerate(_cells(path)):
        tags = cell.metadata.get("tags", [])
        removed = "remove-input" in tags or "remove-cell" in tags
        if CHECK.search(cell.source) and not removed:
            wrong.append(f"cell {i}: an assertion or glue call in a cell the reader sees; move it to a "
                         f"remove-input cell")
        if "hide-input" in tags and "figure" not in cell.metadata.get("mystnb", {}):
            wrong.append(f"cell {i}: hide-input on a cell that draws no figure; show its code")
    assert not wrong, f"{path.name}: " + "; ".join(wrong)


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_the_first_import_is_rcutil(path):
    first = _cells(path)[0].source.lstrip().splitlines()[0]
    assert first.startswith("import rcutil"), f"{path.name}: the first code line is {first!r}"


def test_the_check_pattern_finds_checks():
    for source in ("assert x == 1", "glue('a', 1, display=False)", "torch.testing.assert_close(a, b)",
                   "np.testing.assert_allclose(a, b)"):
        assert CHECK.search(source), source
    for source in ("x = 1", "print('assertion')", "glued = 2"):
        assert not CHECK.search(source), source
