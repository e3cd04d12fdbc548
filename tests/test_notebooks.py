"""The notebooks that the launch buttons open are built from every chapter."""
import importlib.util
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("build_notebooks", ROOT / "scripts" / "build_notebooks.py")
build_notebooks = importlib.util.module_from_spec(spec)
spec.loader.exec_module(build_notebooks)


def test_every_chapter_becomes_a_notebook_with_setup_cell(tmp_path):
    assert build_notebooks.main(["--out", str(tmp_path)]) == 0
    chapters = build_notebooks.chapters()
    assert {p.stem for p in chapters} >= {"model"}
    for md in chapters:
        nb = nbformat.read(tmp_path / "book" / f"{md.stem}.ipynb", as_version=4)
        nbformat.validate(nb)
        first = nb.cells[0]
        assert first.cell_type == "code" and "pip" in first.source and "rcutil" in first.source
        assert any("import rcutil" in c.source for c in nb.cells[1:] if c.cell_type == "code")
        setup_code = compile(first.source, "setup", "exec")  # valid Python
        assert setup_code is not None
